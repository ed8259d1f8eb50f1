"""A separate checkpoint output dir (prime-rl's ``[ckpt] output_dir``): the
trainer's half of step_N goes to ``X/checkpoints/step_N/trainer`` while the orchestrator's progress.pt stays
in ``<run_dir>/checkpoints/step_N/orchestrator``. A step is complete only with both halves; resume,
cleanup and the pre-flight's size estimate judge it so, over the real sshd."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from services.lifecycle.actions import kill, launch, plan_resume, resume
from services.lifecycle.cleanup import cleanup, plan_cleanup
from services.pod.agent.common import checkpoint_complete
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import make_settings, write_config

SERVICES = Path(__file__).resolve().parents[3] / "services"


def put(root: Path, *files: str, size: int = 1) -> None:
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_bytes(b"x" * size)


def split_layout(tmp_path: Path) -> tuple[Path, Path]:
    """Steps 2 and 4 whole; step 6's trainer half written, its orchestrator half not (the newest)."""
    run_dir, out = tmp_path / "run", tmp_path / "ckpt-volume" / "checkpoints"
    for step in (2, 4, 6):
        put(out, f"step_{step}/trainer/__0_0.distcp", f"step_{step}/trainer/.metadata", size=2048)
    for step in (2, 4):
        put(run_dir / "checkpoints", f"step_{step}/orchestrator/progress.pt")
    put(run_dir / "checkpoints", "step_6/orchestrator/progress.pt.tmp")  # cut short mid-save
    return run_dir, out


async def collect(gen):
    return [ev async for ev in gen]


@pytest.mark.ssh
async def test_resume_never_picks_a_step_with_only_the_trainer_half(pod, tmp_path):
    run_dir = tmp_path / "run"
    settings = make_settings(
        tmp_path, command='sh -c "sleep 60" {run_dir}', ckpt_subdir=str(tmp_path / "ckpt-volume" / "checkpoints")
    )
    async with SSHConnection(pod) as conn:  # a run recorded on the pod, then stopped
        assert (await collect(launch(conn, write_config(tmp_path), settings=settings, run_dir=str(run_dir))))[
            -1
        ].kind == "done"
        assert (await collect(kill(conn, settings=settings)))[-1].kind == "done"
    split_layout(tmp_path)
    async with SSHConnection(pod) as conn:
        plan = await plan_resume(conn, settings)
        assert plan["checkpoint"]["step"] == 4
        assert [c["step"] for c in plan["skipped"]] == [6]
        events = await collect(resume(conn, settings=settings))
        assert events[-1].kind == "done", [e.message for e in events]
        assert events[-1].data["command"].endswith("--seed 4")
        assert any("step_6 is incomplete" in e.message for e in events)
        assert (await collect(kill(conn, settings=settings)))[-1].kind == "done"
        # the orchestrator's half lands: step_6 is whole now and resume takes it
        put(run_dir / "checkpoints", "step_6/orchestrator/progress.pt")
        assert (await plan_resume(conn, settings))["checkpoint"]["step"] == 6


@pytest.mark.ssh
async def test_cleanup_never_counts_a_half_as_a_complete_checkpoint(pod, tmp_path):
    run_dir, out = split_layout(tmp_path)
    settings = make_settings(tmp_path, ckpt_subdir=str(out))
    async with SSHConnection(pod) as conn:
        plan = await plan_cleanup(conn, keep=1, settings=settings, run_dir=str(run_dir))
        assert [c["step"] for c in plan.delete] == [2]
        assert [c["step"] for c in plan.kept] == [4]  # the newest COMPLETE one, not step_6
        assert [c["step"] for c in plan.in_progress] == [6]
        events = await collect(cleanup(conn, plan, settings=settings))
    assert events[-1].kind == "done", [e.message for e in events]
    assert sorted(p.name for p in out.iterdir()) == ["step_4", "step_6"]
    assert not (run_dir / "checkpoints" / "step_2").exists()  # its orchestrator half went with it
    assert (run_dir / "checkpoints" / "step_6" / "orchestrator").is_dir()


def test_the_pre_flight_sizes_the_newest_whole_checkpoint(tmp_path):
    import json
    import subprocess
    import sys

    run_dir, out = split_layout(tmp_path)
    put(out, "step_6/trainer/huge.distcp", size=10**6)  # the half-written newest one is the big one
    res = subprocess.run(
        [
            sys.executable,
            str(SERVICES / "pod/agent/lifecycle.py"),
            "preflight",
            "--run-dir",
            str(run_dir),
            "--ckpt-dir",
            str(out),
            "--expected-ckpts",
            "10",
            "--min-nofile",
            "1",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PTT_STATE_DIR": str(tmp_path / "state")},
    )
    disk = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "free disk")
    assert "0.0 GiB needed" in disk["detail"]  # 10 x step_4's ~4 KiB, not 10 x step_6's 1 MB
    res = subprocess.run(
        [
            sys.executable,
            str(SERVICES / "pod/agent/lifecycle.py"),
            "ckpts",
            "--ckpt-dir",
            str(out),
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        env={"PTT_STATE_DIR": str(tmp_path / "state")},
    )
    assert {c["step"]: c["complete"] for c in json.loads(res.stdout)["ckpts"]} == {2: True, 4: True, 6: False}


def test_a_split_step_is_complete_only_with_both_halves(tmp_path):
    """The one rule every pod script imports (services/pod/agent/common.py; tests/services/pod/test_bundles.py
    checks they run it from the uploaded copy), over every mix of the two halves' files."""
    trainer_parts = ("trainer/__0_0.distcp", "trainer/.metadata", "STABLE")
    orch_parts = ("orchestrator/progress.pt", "orchestrator/progress.pt.tmp")
    verdicts = []
    for n in range(len(trainer_parts) + 1):
        for m in range(len(orch_parts) + 1):
            for tp, op in itertools.product(
                itertools.combinations(trainer_parts, n), itertools.combinations(orch_parts, m)
            ):
                case = tmp_path / str(len(verdicts))
                put(case / "out" / "step_1", *tp)
                put(case / "run" / "step_1", *op)
                (case / "out" / "step_1").mkdir(parents=True, exist_ok=True)
                (case / "run" / "step_1").mkdir(parents=True, exist_ok=True)
                whole = ("trainer/.metadata" in tp or "STABLE" in tp) and "orchestrator/progress.pt" in op
                got = checkpoint_complete(str(case / "out" / "step_1"), str(case / "run" / "step_1"))
                assert got == whole, f"{tp} + {op}"
                verdicts.append(whole)
    assert any(verdicts) and not all(verdicts)
    # one dir holding both halves, judged with itself as the orchestrator's: the same rule
    both = tmp_path / "both" / "step_1"
    put(both, "trainer/.metadata")
    assert not checkpoint_complete(str(both), str(both))  # an RL step without progress.pt
    put(both, "orchestrator/progress.pt")
    assert checkpoint_complete(str(both), str(both))
