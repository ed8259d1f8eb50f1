"""The lifecycle helper's own guards on the pod (issue #6 review): it never starts a run whose config is
not there; it watches the start and reports a run that already ended non-zero with its log's tail; GPU
processes nobody of ours started fail "no other run active" (the fake nvidia-smi, through the wrapper of
test_lifecycle_gpu.py). Over the real sshd, the `local` pod, and the helper run directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from services.lifecycle.actions import kill, launch
from services.lifecycle.shell import AGENT_PATH
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import collect, make_settings, trainer_pids
from tests.services.lifecycle.test_gpu import config, gpu_apps, local_pod  # noqa: F401 (fixture)


def test_the_pods_helper_refuses_to_start_without_its_config(tmp_path):
    """The pod side on its own (an old client, or the copy gone between the check and the start)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    req = {
        "run_dir": str(run_dir),
        "remote_config": str(run_dir / ".ptt" / "config" / "abc" / "rl.toml"),
        "base_command": f"{sys.executable} -c pass",
        "force": True,
        "mode": "setsid",
        "preflight": ["--min-nofile", "64", "--need-bytes", "1"],
        "record": {"id": "r1"},
    }
    p = subprocess.Popen(
        [sys.executable, str(AGENT_PATH), "launch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"], "PTT_STATE_DIR": str(tmp_path / "state")},
    )
    p.stdin.write(json.dumps(req) + "\n")
    p.stdin.flush()  # stdin stays open, as the client's does: closing it would cancel the launch
    try:
        out = p.stdout.read()
        p.wait(timeout=60)
    finally:
        p.stdin.close()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    err = events[-1]
    assert err["event"] == "error" and err.get("missing_config") == req["remote_config"], events
    assert "not on the pod" in err["error"]
    assert not any(e["event"] == "started" for e in events)
    assert not (run_dir / ".ptt" / "run.json").exists()


@pytest.mark.ssh
async def test_a_run_that_ends_at_once_is_an_error_with_its_log_tail(pod, tmp_path):
    settings = make_settings(
        tmp_path,
        command="sh -c 'echo loading {config}; echo no such option: --foo >&2; exit 3'",
        start_watch_seconds=2.0,
    )
    async with SSHConnection(pod) as conn:
        events = await collect(launch(conn, config(tmp_path), settings=settings, run_dir=str(tmp_path / "run")))
    assert events[-1].kind == "error", [e.message for e in events]
    assert "exited with code 3" in events[-1].message and "no such option: --foo" in events[-1].message
    assert any(e.kind == "warn" and "log: loading" in e.message for e in events)
    assert not any(e.kind == "done" for e in events)
    records = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("*.json")]
    assert [(r["state"], r["exit_code"]) for r in records] == [("exited", 3)]


async def test_gpu_processes_started_by_hand_fail_no_other_run_active(tmp_path, gpu_apps):
    gpu_apps.write_text("4242, python train.py, 30000 MiB\n4343, python train.py, 30000 MiB\n")
    settings = make_settings(tmp_path)
    async with LocalConnection(local_pod(tmp_path)) as conn:
        events = await collect(launch(conn, config(tmp_path), settings=settings, run_dir=str(tmp_path / "run")))
    checks = {e.check.name: e.check for e in events if e.check}
    other = checks["no other run active"]
    assert other.status == "fail", other
    assert "4242" in other.detail and "4343" in other.detail and "4242" in other.fix
    assert events[-1].kind == "error" and "no other run active" in events[-1].message
    assert not (tmp_path / "run" / ".ptt" / "run.json").exists() and not trainer_pids(tmp_path / "run")
    # a GPU with no process: the check passes and the run starts
    gpu_apps.write_text("")
    async with LocalConnection(local_pod(tmp_path)) as conn:
        events = await collect(launch(conn, config(tmp_path), settings=settings, run_dir=str(tmp_path / "run")))
        assert events[-1].kind == "done", [e.message for e in events]
        assert {e.check.name: e.check.status for e in events if e.check}["no other run active"] == "ok"
        await collect(kill(conn, settings=settings))
