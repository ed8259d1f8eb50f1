"""Launch / kill / resume / cleanup over the real sshd, with the simulated trainer as the "trainer".

Real processes: the trainer is started detached on the "pod" (this machine, through sshd), the SSH
connection is closed and re-opened, and the tests look at /proc and the disk themselves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from services.lifecycle.actions import kill, launch, plan_resume, resume
from services.lifecycle.cleanup import cleanup, plan_cleanup, plan_keep_last
from services.lifecycle.events import Event
from services.lifecycle.preflight import LifecycleSettings
from services.pod.ssh import SSHConnection

pytestmark = pytest.mark.ssh

REPO = Path(__file__).resolve().parents[3]
TRAINER = REPO / "services" / "demo" / "trainer.py"
SECRET = "wandb-secret-" + os.urandom(6).hex()


def make_settings(tmp_path: Path, **kw) -> LifecycleSettings:
    base = dict(
        command=f"python3 {TRAINER} --run-dir {{run_dir}} --max-steps 0 --step-seconds 0.2 --ckpt-interval 2",
        resume_args="--seed {step}",  # the simulated trainer has no --resume.step: the seed shows the step
        min_nofile=1024,
        min_free_bytes=1,
        cuda_check=False,
        tmux="setsid",
        grace_seconds=3.0,
        runs_dir=tmp_path / "records",
        secrets=("WANDB_API_KEY",),  # listed: nothing goes to a pod by default
        start_watch_seconds=0.3,  # the helper's watch after the start (default 2 s): short, tests launch a lot
    )
    base.update(kw)
    return LifecycleSettings(**base)


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "rl.toml"
    cfg.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
    return cfg


async def collect(gen) -> list[Event]:
    return [ev async for ev in gen]


def trainer_pids(run_dir: Path) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and str(TRAINER).encode() in cmd and str(run_dir).encode() in cmd:
            pids.append(int(name))
    return pids


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


async def _launch(pod, tmp_path, settings, **kw):
    async with SSHConnection(pod) as conn:
        events = await collect(
            launch(conn, write_config(tmp_path), settings=settings, run_dir=str(tmp_path / "run"), **kw)
        )
    assert events[-1].kind == "done", [e.message for e in events]
    return events


async def _kill(pod, settings):
    async with SSHConnection(pod) as conn:
        return await collect(kill(conn, settings=settings))


@pytest.mark.parametrize(
    "mode",
    [
        "setsid",
        pytest.param("tmux", marks=pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux on this machine")),
    ],
)
async def test_launch_detached_survives_ssh_then_kill_removes_the_group(pod, tmp_path, mode):
    settings = make_settings(tmp_path, tmux=mode)
    marker = tmp_path / "marker"
    marker.write_text("")
    time.sleep(0.01)
    events = await _launch(pod, tmp_path, settings, environ={"WANDB_API_KEY": SECRET, "PATH": "/bin"})
    record = events[-1].data
    assert record["method"] == mode
    assert record["secret_names"] == ["WANDB_API_KEY"]
    run_dir = tmp_path / "run"
    # the SSH connection is closed now: the run lives on, writing its log
    assert wait_for(
        lambda: (
            (run_dir / "logs" / "trainer.log").exists() and "Step 2" in (run_dir / "logs" / "trainer.log").read_text()
        ),
        15,
    )
    pids = trainer_pids(run_dir)
    assert len(pids) == 1
    # the secret is in the trainer's environment ...
    assert f"WANDB_API_KEY={SECRET}".encode() in Path(f"/proc/{pids[0]}/environ").read_bytes()
    assert b"PYTHONUNBUFFERED=1" in Path(f"/proc/{pids[0]}/environ").read_bytes()
    # ... but in no file on the pod: the run dir, the helper's state, anything new in $HOME or /tmp
    suspects = [p for p in (run_dir, tmp_path / "podstate") for p in p.rglob("*") if p.is_file()]
    found = subprocess.run(
        ["find", "/root", "/tmp", str(Path.home()), "-xdev", "-type", "f", "-newer", str(marker)],
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    suspects += [Path(f) for f in found if f]
    assert len(suspects) > 3
    for p in suspects:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        assert SECRET.encode() not in data, p
    assert not any(SECRET in e.message for e in events)
    # the pod-side record exists (names only) and a second launch is refused
    assert (run_dir / ".ptt" / "run.json").exists()
    async with SSHConnection(pod) as conn:
        again = await collect(launch(conn, write_config(tmp_path), settings=settings, run_dir=str(tmp_path / "run2")))
    assert again[-1].kind == "error"
    assert "no other run active" in again[-1].message
    # kill: every process of the group gone
    leader = record["pid"]
    sid = record["sid"]
    kevents = await _kill(pod, settings)
    assert kevents[-1].kind == "done", [e.message for e in kevents]
    assert not trainer_pids(run_dir)
    assert not Path(f"/proc/{leader}").exists() or "Z" in Path(f"/proc/{leader}/stat").read_text().split()[2]
    in_session = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            in_session.append(name)
    assert in_session == []
    checks = {e.check.name: e.check.status for e in kevents if e.check}
    assert checks["processes gone"] == "ok"
    if mode == "tmux":
        assert (
            subprocess.run(["tmux", "has-session", "-t", record["tmux_session"]], capture_output=True).returncode != 0
        )


async def test_resume_skips_a_half_written_newest_checkpoint(pod, tmp_path):
    settings = make_settings(tmp_path)
    await _launch(pod, tmp_path, settings)
    run_dir = tmp_path / "run"
    ck = run_dir / "checkpoints"
    assert wait_for(lambda: (ck / "step_4" / "orchestrator" / "progress.pt").exists(), 15)
    await _kill(pod, settings)
    steps = sorted(int(p.name[5:]) for p in ck.iterdir())
    last = steps[-1]
    # a half-written newest one: trainer shards without .metadata, as after a preemption mid-save
    half = ck / f"step_{last + 2}" / "trainer"
    half.mkdir(parents=True)
    (half / "model.bin").write_bytes(b"x" * 100)
    async with SSHConnection(pod) as conn:
        plan = await plan_resume(conn, settings)
        assert plan["checkpoint"]["step"] == last
        events = await collect(resume(conn, settings=settings))
    assert events[-1].kind == "done", [e.message for e in events]
    rec = events[-1].data
    assert rec["command"].endswith(f"--seed {last}")
    assert rec["resume_step"] == last
    assert any("half-written" in e.message for e in events)
    pids = trainer_pids(run_dir)
    assert len(pids) == 1
    cmd = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
    assert cmd[cmd.index(b"--seed") + 1] == str(last).encode()
    await _kill(pod, settings)


async def test_cleanup_keeps_the_newest_complete_and_in_progress(pod, tmp_path):
    settings = make_settings(tmp_path)
    run_dir = tmp_path / "run"
    ck = run_dir / "checkpoints"
    import sys

    sys.path.insert(0, str(REPO))
    from services.demo.trainer import write_checkpoint

    for step in (2, 4, 6, 8, 10):
        write_checkpoint(str(run_dir), step, 0)
    (ck / "step_12" / "trainer").mkdir(parents=True)  # in progress
    (ck / "step_12" / "trainer" / "shard.bin").write_bytes(b"y" * 10)
    broken = ck / "step_5"  # an old incomplete one is not ours to judge: left alone
    (broken / "orchestrator").mkdir(parents=True)
    async with SSHConnection(pod) as conn:
        plan = await plan_cleanup(conn, keep=2, settings=settings, run_dir=str(run_dir))
        assert [c["step"] for c in plan.delete] == [2, 4, 6]
        assert [c["step"] for c in plan.kept] == [8, 10]
        assert sorted(c["step"] for c in plan.in_progress) == [5, 12]
        expected = plan.bytes
        assert expected > 3 * 4096
        events = await collect(cleanup(conn, plan, settings=settings))
    assert events[-1].kind == "done"
    assert events[-1].data["bytes"] == expected
    assert sorted(p.name for p in ck.iterdir()) == ["step_10", "step_12", "step_5", "step_8"]
    log = (settings.runs_dir / "lifecycle.log").read_text()
    assert "step_2" in log and "bytes" in log


def test_keep_last_never_deletes_the_newest_complete():
    ckpts = [
        {"step": 1, "complete": True, "bytes": 1, "path": "a"},
        {"step": 2, "complete": False, "bytes": 1, "path": "b"},
    ]
    plan = plan_keep_last("d", ckpts, 0)  # keep 0 is treated as 1
    assert plan.delete == ()
    assert [c["step"] for c in plan.kept] == [1]


async def test_kill_without_a_run_is_an_error(pod, tmp_path):
    events = await _kill(pod, make_settings(tmp_path))
    assert events[-1].kind == "error"
    assert "no active run" in events[-1].message
