"""The pod-side action lock: a CLI ``kill`` and the app's ``k`` (two processes) never interleave on one pod;
a lock whose holder died is no obstacle. Over the real sshd, with real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from services.lifecycle.actions import kill, launch
from services.lifecycle.events import LifecycleError
from services.lifecycle.lock import pod_lock
from services.lifecycle.shell import AGENT_PATH
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import make_settings, wait_for, write_config

pytestmark = pytest.mark.ssh

REPO = Path(__file__).resolve().parents[3]


def cli_env(client_home, tmp_path, pod, settings_toml: str) -> dict[str, str]:
    cfg_dir = client_home.home / ".config" / "prime-train-tui"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "pods.toml").write_text(f'[pods.testpod]\ntarget = "testpod"\nprobe_dir = "{pod.probe_dir}"\n')
    (cfg_dir / "settings.toml").write_text(settings_toml)
    env = {
        **os.environ,
        "HOME": str(client_home.home),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(cfg_dir),
        "PRIME_TRAIN_TUI_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("SSH_AUTH_SOCK", None)
    return env


async def test_cli_kill_is_refused_while_the_app_kills_then_runs(pod, tmp_path, client_home):
    # a run that ignores SIGTERM: the app's kill sits in its grace period for seconds
    settings = make_settings(tmp_path, command="sh -c \"trap '' TERM; sleep 600\"", grace_seconds=4.0)
    async with SSHConnection(pod) as conn:
        events = [
            e async for e in launch(conn, write_config(tmp_path), settings=settings, run_dir=str(tmp_path / "run"))
        ]
    assert events[-1].kind == "done", [e.message for e in events]
    env = cli_env(client_home, tmp_path, pod, "[lifecycle]\ngrace_seconds = 1\n")

    def cli_kill() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "kill", "testpod", "--yes"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    async with SSHConnection(pod) as conn:
        app_kill = asyncio.ensure_future(_collect(kill(conn, settings=settings)))
        await asyncio.sleep(1.0)  # the app's kill holds the lock, in its grace period
        assert not app_kill.done()
        refused = await asyncio.to_thread(cli_kill)
        assert not app_kill.done()  # the CLI did not get in between: still the grace period
        kevents = await app_kill
    assert refused.returncode != 0
    assert "kill is already running on testpod" in refused.stderr, refused.stderr
    assert kevents[-1].kind == "done", [e.message for e in kevents]
    assert any("SIGKILL" in e.message for e in kevents)  # the app's kill ran to its end, undisturbed
    after = await asyncio.to_thread(cli_kill)  # lock released: the CLI runs now (nothing left to kill)
    assert after.returncode != 0 and "no active run" in after.stderr, after.stderr


async def _collect(gen):
    return [e async for e in gen]


async def test_lock_held_in_one_process_refuses_another_and_a_dead_holder_is_stale(pod, tmp_path):
    state = tmp_path / "podstate"
    env = {**os.environ, "PTT_STATE_DIR": str(state)}
    holder = subprocess.Popen(
        [sys.executable, str(AGENT_PATH), "lock", "--action", "cleanup", "--owner", "other"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    first = json.loads(holder.stdout.readline())
    assert first["ok"] and first["lock"]["pid"] == holder.pid
    assert json.loads((state / "action.lock").read_text())["action"] == "cleanup"
    async with SSHConnection(pod) as conn:
        with pytest.raises(LifecycleError) as err:
            async with pod_lock(conn, "kill"):
                pass
        assert "cleanup is already running" in str(err.value)
        assert f"pid {holder.pid}" in str(err.value) and "other" in str(err.value)
        # the holder dies without releasing (SIGKILL): its lock goes with it
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert json.loads((state / "action.lock").read_text())["pid"] == holder.pid  # stale file left
        async with pod_lock(conn, "kill") as info:
            assert info["action"] == "kill"
            # held now: a second taker (another connection = another client) is refused
            async with SSHConnection(pod) as conn2:
                with pytest.raises(LifecycleError, match="kill is already running"):
                    async with pod_lock(conn2, "launch"):
                        pass
        # released at the end of the block: the holder process exited
        assert wait_for(
            lambda: (
                not Path(f"/proc/{info['pid']}").exists()
                or Path(f"/proc/{info['pid']}/stat").read_text().split()[2] == "Z"
            ),
            5,
        )
        async with pod_lock(conn, "launch"):
            pass
    holder.stdout.close()
    holder.stdin.close()


async def test_lock_holder_exits_when_the_ssh_session_dies(pod, sshd, tmp_path):
    conn = SSHConnection(pod)
    await conn.connect()
    cm = pod_lock(conn, "resume")
    info = await cm.__aenter__()
    pid = info["pid"]
    assert Path(f"/proc/{pid}").exists()
    sshd.kill()  # the pod's sshd and every session die: the holder sees its stdin close
    assert wait_for(
        lambda: not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", 10
    )
    # the connection is gone: releasing must neither hang nor raise
    assert await asyncio.wait_for(cm.__aexit__(None, None, None), 10) in (None, False)
    await conn.close()
