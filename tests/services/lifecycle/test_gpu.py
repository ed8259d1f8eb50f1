"""The GPUs in launch and kill, with the fake nvidia-smi of services/demo/: a kill whose GPUs stay held is
an error (after the processes are gone); GPU processes nobody of ours started fail "no other run active".

The demo fake answers ``--query-gpu``; the GPU's process table (``--query-compute-apps``) comes from a file
here, through a small wrapper in front of it (the simulated GPU, nothing else). The `local` pod runs the
same helper as an SSH pod, with this process's PATH."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from services.lifecycle.actions import kill, launch
from services.models import Pod, PodKind
from services.pod.local import LocalConnection
from tests.services.lifecycle.test_actions import collect, make_settings, trainer_pids, wait_for

REPO = Path(__file__).resolve().parents[3]
DEMO_SMI = REPO / "services" / "demo" / "bin" / "nvidia-smi"


@pytest.fixture
def gpu_apps(tmp_path, monkeypatch) -> Path:
    """The file the fake GPU lists its compute processes from: lines of ``pid, process_name, used_memory``."""
    bin_dir, apps = tmp_path / "bin", tmp_path / "gpu_apps.csv"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$*" in
  *--query-compute-apps=pid\\ *) test -f {apps} && cut -d, -f1 {apps}; exit 0 ;;
  *--query-compute-apps=*) test -f {apps} && cat {apps}; exit 0 ;;
esac
exec {DEMO_SMI} "$@"
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/local/bin:/usr/bin:/bin")
    monkeypatch.setenv("PTT_FAKE_GPUS", "2")
    yield apps
    for pid in trainer_pids(tmp_path / "run"):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def local_pod(tmp_path: Path) -> Pod:
    return Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(tmp_path / "state"))


def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "rl.toml"
    cfg.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
    return cfg


async def launched(conn, tmp_path: Path, settings) -> list:
    """The simulated trainer launched on the local pod (done), its events."""
    events = await collect(launch(conn, config(tmp_path), settings=settings, run_dir=str(tmp_path / "run")))
    assert events[-1].kind == "done", [e.message for e in events]
    return events


async def test_kill_is_an_error_when_the_gpus_stay_held(tmp_path, gpu_apps):
    settings = make_settings(tmp_path, grace_seconds=2.0)
    async with LocalConnection(local_pod(tmp_path)) as conn:
        events = await launched(conn, tmp_path, settings)
        leader = events[-1].data["pid"]
        assert wait_for(lambda: len(trainer_pids(tmp_path / "run")) == 1)
        # the GPU keeps the run's process in its table after it is gone (a stuck context)
        gpu_apps.write_text(f"{leader}, python3, 30000 MiB\n")
        kevents = await collect(kill(conn, settings=settings))
    checks = {e.check.name: e.check for e in kevents if e.check}
    assert checks["processes gone"].status == "ok"
    assert not trainer_pids(tmp_path / "run")  # the processes ARE gone first
    assert checks["GPUs freed"].status == "fail" and str(leader) in checks["GPUs freed"].detail
    last = kevents[-1]
    assert last.kind == "error" and not any(e.kind == "done" for e in kevents)
    assert "GPUs are not freed" in last.message and str(leader) in last.message
    log = (tmp_path / "records" / "lifecycle.log").read_text()
    assert "GPUs NOT freed" in log


async def test_kill_is_done_when_the_gpus_are_freed(tmp_path, gpu_apps):
    settings = make_settings(tmp_path, grace_seconds=2.0)
    gpu_apps.write_text("")
    async with LocalConnection(local_pod(tmp_path)) as conn:
        await launched(conn, tmp_path, settings)
        kevents = await collect(kill(conn, settings=settings))
    assert kevents[-1].kind == "done", [e.message for e in kevents]
    assert {e.check.name: e.check.status for e in kevents if e.check}["GPUs freed"] == "ok"


async def test_kill_waits_a_moment_for_the_driver_to_let_go(tmp_path, gpu_apps):
    """nvidia-smi may list a pid for a moment while its context is torn down: not an error if it goes."""
    import threading

    settings = make_settings(tmp_path, grace_seconds=2.0)
    async with LocalConnection(local_pod(tmp_path)) as conn:
        events = await launched(conn, tmp_path, settings)
        leader = events[-1].data["pid"]
        gpu_apps.write_text(f"{leader}, python3, 30000 MiB\n")
        clear = threading.Timer(1.0, lambda: gpu_apps.write_text(""))  # the driver lets go after ~1 s
        clear.start()
        try:
            kevents = await collect(kill(conn, settings=settings))
        finally:
            clear.cancel()
    assert kevents[-1].kind == "done", [e.message for e in kevents]
    assert {e.check.name: e.check.status for e in kevents if e.check}["GPUs freed"] == "ok"
