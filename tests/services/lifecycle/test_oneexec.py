"""Launch and kill in ONE exec of the pod-side helper, over the real sshd: round trips counted, a cancel
before the start never starts the run, the pod's lock refuses a launch, the helper is (re)installed in
the same flow, two clients installing it at once both succeed, and the remembered interpreter falls back
to python3 when it is gone."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

import pytest

from services.lifecycle.actions import kill, launch, plan_kill
from services.lifecycle.lock import pod_lock
from services.lifecycle.preflight import UserCheck
from services.lifecycle.shell import AGENT_FILES, PodShell
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import make_settings, trainer_pids, wait_for, write_config

pytestmark = pytest.mark.ssh


class Counting(SSHConnection):
    """The real SSH connection, counting what goes over it."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.calls: list[str] = []

    async def run(self, command, timeout=30.0, input=None):
        self.calls.append("run")
        return await super().run(command, timeout, input)

    async def start(self, command):
        self.calls.append("start")
        return await super().start(command)

    async def put_files(self, files):
        self.calls.append("sftp")
        return await super().put_files(files)

    async def exists(self, remote):
        self.calls.append("sftp")
        return await super().exists(remote)


async def collect(gen):
    return [ev async for ev in gen]


async def test_launch_and_kill_are_one_exec_each_once_the_helper_is_there(pod, tmp_path):
    settings = make_settings(tmp_path)
    run_dir = tmp_path / "run"
    async with Counting(pod) as conn:
        first = await collect(launch(conn, write_config(tmp_path), settings=settings, run_dir=str(run_dir)))
        assert first[-1].kind == "done", [e.message for e in first]
        # a fresh pod: the one exec answered "untrusted" (nothing there), the private directory was made (one
        # exec), the helper uploaded (one SFTP session), retried
        assert conn.calls == ["start", "run", "sftp", "start"]
        assert trainer_pids(run_dir)
        conn.calls.clear()
        kevents = await collect(kill(conn, settings=settings))
        assert kevents[-1].kind == "done", [e.message for e in kevents]
        assert conn.calls == ["start"]  # lock, SIGTERM, wait, GPU check: one exec
        assert not trainer_pids(run_dir)
    # another connection (another process, the app's next modal) finds the helper: nothing uploaded
    async with Counting(pod) as conn:
        # {config} and {run_dir} are rendered on the pod, with the paths the helper made absolute there
        events = await collect(
            launch(
                conn,
                write_config(tmp_path),
                settings=settings,
                run_dir=str(run_dir),
                command="cp {config} {run_dir}/seen.toml && exec sleep 60",
            )
        )
        assert events[-1].kind == "done", [e.message for e in events]
        assert conn.calls == ["start"]
        checks = [e.check.name for e in events if e.check]
        assert checks[0] == "config validates" and "no other run active" in checks
        messages = [e.message for e in events]
        assert messages.index(next(m for m in messages if m.startswith("starting detached"))) < len(messages) - 1
        plan = await plan_kill(conn)
        assert plan is not None and plan["id"] == events[-1].data["id"]
        conn.calls.clear()
        assert (await collect(kill(conn, settings=settings)))[-1].kind == "done"
        assert conn.calls == ["start"]
    # the config travelled with the request and is on the pod where the command says
    rec = events[-1].data
    assert Path(rec["config"]).read_bytes() == write_config(tmp_path).read_bytes()
    assert rec["config"] in rec["command"] and rec["command"] == rec["base_command"]
    assert (run_dir / "seen.toml").read_bytes() == write_config(tmp_path).read_bytes()


async def test_cancelled_during_the_pre_flight_never_starts_the_run(pod, tmp_path):
    # a slow user check: the cancel arrives while the helper is still checking
    settings = make_settings(tmp_path, checks=(UserCheck("slow", "sleep 1.5"),))
    run_dir = tmp_path / "run"
    async with SSHConnection(pod) as conn:
        gen = launch(conn, write_config(tmp_path), settings=settings, run_dir=str(run_dir))
        async for ev in gen:
            if ev.check is not None and ev.check.name == "no other run active":
                break  # the next check is the slow one
        await gen.aclose()  # what cancelling the modal's worker does
        await asyncio.sleep(3.0)  # past the slow check: the helper would have started the run by now
    assert not (run_dir / ".ptt" / "run.json").exists()
    assert not trainer_pids(run_dir)
    # and the lock went with the helper: the next launch runs
    async with SSHConnection(pod) as conn:
        events = await collect(
            launch(conn, write_config(tmp_path), settings=make_settings(tmp_path), run_dir=str(run_dir))
        )
        assert events[-1].kind == "done", [e.message for e in events]
        assert (await collect(kill(conn, settings=settings)))[-1].kind == "done"


async def test_a_launch_is_refused_while_another_action_holds_the_pods_lock(pod, tmp_path):
    settings = make_settings(tmp_path)
    async with SSHConnection(pod) as conn, SSHConnection(pod) as other:
        async with pod_lock(other, "cleanup"):
            events = await collect(
                launch(conn, write_config(tmp_path), settings=settings, run_dir=str(tmp_path / "run"))
            )
            kevents = await collect(kill(conn, settings=settings))
    assert events[-1].kind == "error"
    assert "cleanup is already running on testpod" in events[-1].message
    assert not [e for e in events if e.check and e.check.name != "config validates"]  # refused before checking
    assert not (tmp_path / "run" / ".ptt").exists()
    assert kevents[-1].kind == "error" and "cleanup is already running" in kevents[-1].message


async def test_two_clients_installing_the_helper_at_once_both_succeed(pod, tmp_path):
    async with SSHConnection(pod) as a, SSHConnection(pod) as b:
        shells = [PodShell(a), PodShell(b), PodShell(a), PodShell(b)]
        where = Path(await shells[0].agent_path()).parent
        for _ in range(3):  # several rounds: each replaces the files while the others do the same
            await asyncio.gather(*(s.install_agent() for s in shells[:2]))
            for conn in (a, b):
                conn._ptt_lifecycle_agent = None  # forget: install again
        answers = await asyncio.gather(*(s.agent("status") for s in shells))
    assert all(ans == {"runs": []} for ans in answers)
    names = sorted(p.name for p in where.iterdir())
    assert names == sorted(f.name for f in AGENT_FILES)  # no temp file left behind
    for f in AGENT_FILES:
        assert (where / f.name).read_bytes() == f.read_bytes()


async def test_a_streamed_helper_that_dies_is_reported_not_hung(pod, tmp_path):
    async with SSHConnection(pod) as conn:
        shell = PodShell(conn)
        from services.lifecycle.events import LifecycleError

        with pytest.raises(LifecycleError, match="helper stopped"):
            async for _ in shell.stream(["launch"], {"run_dir": 42}):  # not a path: the helper raises
                pass
        with pytest.raises(LifecycleError, match="helper stopped"):
            async for _ in shell.stream(["no-such-command"], {}):
                pass


@pytest.mark.parametrize(
    "mode",
    [
        "setsid",
        pytest.param("tmux", marks=pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux on this machine")),
    ],
)
async def test_the_run_gets_default_signal_dispositions_except_sighup(pod, tmp_path, mode):
    """python ignores SIGPIPE, and an ignored signal survives exec: the run must not inherit that
    (a `cmd | head` in the user's script would then never end); SIGHUP stays ignored (nohup)."""
    settings = make_settings(tmp_path, tmux=mode)
    run_dir = tmp_path / "run"
    async with SSHConnection(pod) as conn:
        events = await collect(
            launch(
                conn,
                write_config(tmp_path),
                settings=settings,
                run_dir=str(run_dir),
                command="grep SigIgn /proc/self/status > {run_dir}/sig.txt",
            )
        )
    assert events[-1].kind == "done", [e.message for e in events]
    out = run_dir / "sig.txt"
    assert wait_for(lambda: out.exists() and out.read_text().strip(), 10)
    ignored = int(out.read_text().split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)), hex(ignored)
    assert not ignored & (1 << (signal.SIGXFSZ - 1)), hex(ignored)
    if mode == "setsid":
        assert ignored & (1 << (signal.SIGHUP - 1)), hex(ignored)
