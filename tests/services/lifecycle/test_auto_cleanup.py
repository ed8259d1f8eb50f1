"""The cleanup daemon over the real sshd with real files: keep-last N, the volume ceiling, prime-rl's
leftovers (orchestrator halves under a separate ckpt output dir, kept broadcasts), no deletion before the
preview is approved, every deletion logged with its size; plus the pure pieces with an injected clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.lifecycle.auto_cleanup import CleanupDaemon
from services.lifecycle.cleanup import plan_for_disk, plan_keep_last
from services.models import CheckpointInfo, HostSample, PodSnapshot, PodState, PodStatus, Sample
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import make_settings

pytestmark = pytest.mark.ssh


def trainer_ckpt(root: Path, step: int, size: int = 5000, complete: bool = True) -> Path:
    d = root / f"step_{step}" / "trainer"
    d.mkdir(parents=True)
    (d / "shard0.distcp").write_bytes(b"w" * size)
    if complete:
        (d / ".metadata").write_bytes(b"m")
    return d.parent


def orch_ckpt(run: Path, step: int) -> Path:
    d = run / "checkpoints" / f"step_{step}" / "orchestrator"
    d.mkdir(parents=True)
    (d / "progress.pt").write_bytes(b"p" * 100)
    return d.parent


def broadcast(run: Path, step: int) -> Path:
    d = run / "broadcasts" / f"step_{step}"
    d.mkdir(parents=True)
    (d / "model-00001-of-00001.safetensors").write_bytes(b"b" * 3000)
    (d / "STABLE").write_bytes(b"")
    return d


@pytest.fixture
def layout(tmp_path):
    """prime-rl with ``[ckpt] output_dir`` elsewhere: trainer halves in out/, orchestrator halves in run/."""
    run, out = tmp_path / "run", tmp_path / "ckout" / "checkpoints"
    for step in (10, 20, 30, 40):
        trainer_ckpt(out, step)
        orch_ckpt(run, step)
    trainer_ckpt(out, 50, complete=False)  # being written
    orch_ckpt(run, 5)  # its trainer half was pruned long ago (by prime-rl's own keep_last)
    for step in (10, 20, 30, 40, 50):
        broadcast(run, step)
    return run, out


@pytest.fixture
def pod(sshd, client_home, tmp_path):
    client_home.trust()
    return sshd.pod(probe_dir=str(tmp_path / "podstate"), run_dir=str(tmp_path / "run"))


def steps(d: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in d.iterdir()) if d.exists() else []


async def test_daemon_waits_for_approval_then_keeps_n_and_prunes_leftovers(pod, layout, tmp_path):
    run, out = layout
    settings = make_settings(tmp_path, ckpt_subdir=str(out), keep_last=2, keep_broadcasts=2, disk_threshold_pct=100.0)
    events = []
    daemon = CleanupDaemon(pod, settings, connect=SSHConnection, on_event=events.append)
    first = await daemon.run_once()
    assert first.waiting and not first.deleted
    # nothing deleted before approval
    assert steps(out) == [10, 20, 30, 40, 50] and steps(run / "checkpoints") == [5, 10, 20, 30, 40]
    assert steps(run / "broadcasts") == [10, 20, 30, 40, 50]
    text = "\n".join(daemon.preview.preview())
    assert "DELETE step_10" in text and "DELETE step_20" in text and "DELETE step_30" not in text
    assert [c["step"] for c in daemon.preview.delete] == [10, 20]
    kinds = sorted((c["kind"], c["step"]) for c in daemon.preview.leftovers)
    assert kinds == [
        ("broadcast", 10),
        ("broadcast", 20),
        ("broadcast", 30),
        ("orchestrator", 5),
        ("orchestrator", 10),
        ("orchestrator", 20),
    ]
    assert f"{run}/broadcasts/step_10" in text and "old broadcast weights" in text
    assert events and events[-1].data["preview"] == daemon.preview.preview()

    daemon.approve()
    second = await daemon.run_once("approved")
    assert not second.error, second.error
    assert steps(out) == [30, 40, 50]  # newest 2 complete + the one being written
    assert steps(run / "checkpoints") == [30, 40]  # orchestrator halves follow their trainer halves
    assert steps(run / "broadcasts") == [40, 50]
    assert len(second.deleted) == 8
    assert second.freed == 2 * 5001 + 3 * 100 + 3 * 3000
    log = (settings.runs_dir / "lifecycle.log").read_text()
    for path in (out / "step_10", run / "checkpoints" / "step_5", run / "broadcasts" / "step_30"):
        assert f"deleted {path} (" in log
    assert f"deleted {out / 'step_10'} (5001 bytes)" in log
    assert daemon.preview is None
    third = await daemon.run_once()  # nothing left to do
    assert not third.deleted and not third.waiting and third.plan.empty


async def test_over_the_ceiling_deletes_all_but_the_newest_complete(pod, layout, tmp_path):
    run, out = layout
    settings = make_settings(tmp_path, ckpt_subdir=str(out), keep_last=3, disk_threshold_pct=1.0)
    daemon = CleanupDaemon(pod, settings, connect=SSHConnection, approved=True)
    rnd = await daemon.run_once("volume over")
    assert not rnd.error, rnd.error
    assert rnd.plan.for_disk == (20, 30)  # beyond keep-last 3 (which already drops step_10)
    assert any("still over the ceiling" in line for line in rnd.plan.preview())
    assert steps(out) == [40, 50]  # the newest complete is never deleted, nor the one in progress


def test_ceiling_plan_stops_when_under_and_keeps_unverified():
    ckpts = [{"step": s, "complete": True, "bytes": 10, "path": f"p{s}"} for s in (1, 2, 3, 4, 5)]
    plan = plan_keep_last("d", ckpts, 3)
    assert [c["step"] for c in plan.delete] == [1, 2]
    # 100 bytes volume, 85 used, ceiling 60%: keep-last frees 20 (65%), step_3 takes it to 55%
    out = plan_for_disk(plan, {"used": 85, "total": 100}, 60.0)
    assert [c["step"] for c in out.delete] == [1, 2, 3] and out.for_disk == (3,)
    assert [c["step"] for c in out.kept] == [4, 5]
    assert out.pct_after() == pytest.approx(55.0)
    # under the ceiling already: nothing beyond keep-last
    assert plan_for_disk(plan, {"used": 50, "total": 100}, 60.0).for_disk == ()
    # backup on: an unverified one is never deleted, even over the ceiling; the newest never
    verified = {1, 2, 4}
    plan_b = plan_keep_last("d", ckpts, 3, verified, "s3://b/p/")
    out_b = plan_for_disk(plan_b, {"used": 99, "total": 100}, 10.0, verified=verified)
    assert [c["step"] for c in out_b.delete] == [1, 2, 4]
    assert [c["step"] for c in out_b.unbacked] == [3]
    assert [c["step"] for c in out_b.kept] == [5]


def snap(pod, step: int | None, disk_pct: float) -> PodSnapshot:
    ckpts = (CheckpointInfo(step, f"/x/step_{step}", 1, 0.0, True),) if step else ()
    sample = Sample(t=0.0, gpus=(), host=HostSample(disk_used=int(disk_pct * 10), disk_total=1000), ckpts=ckpts)
    return PodSnapshot(pod, PodStatus(PodState.ONLINE), history=(sample,))


def test_observe_triggers_on_a_new_checkpoint_or_a_full_volume_with_a_gap(tmp_path):
    from services.models import Pod

    now = [1000.0]
    pod = Pod("p", run_dir="/r")
    daemon = CleanupDaemon(
        pod, make_settings(tmp_path, disk_threshold_pct=85.0), connect=SSHConnection, clock=lambda: now[0], min_gap=60.0
    )
    assert daemon.observe(snap(pod, 10, 50.0)) is None  # the first one is the baseline
    assert daemon.observe(snap(pod, 10, 50.0)) is None
    assert daemon.observe(snap(pod, 20, 50.0)) == "new checkpoint step_20"
    now[0] += 10
    assert daemon.observe(snap(pod, 30, 90.0)) is None  # within the gap: no second round
    now[0] += 60
    assert daemon.observe(snap(pod, 30, 90.0)) == "volume 90% ≥ 85%"
    now[0] += 61
    assert daemon.observe(snap(pod, 30, 50.0)) is None
    assert daemon.observe(snap(Pod("other"), 99, 99.0)) is None


async def test_run_loop_rounds_on_a_nudge_and_stops_on_cancel(pod, layout, tmp_path):
    run, out = layout
    settings = make_settings(tmp_path, ckpt_subdir=str(out), keep_last=3, disk_threshold_pct=100.0)
    daemon = CleanupDaemon(pod, settings, connect=SSHConnection, approved=True, interval=3600.0, min_gap=0.0)
    task = asyncio.ensure_future(daemon.run())
    try:
        for _ in range(200):
            if daemon.rounds:
                break
            await asyncio.sleep(0.05)
        assert steps(out) == [20, 30, 40, 50]  # the start round
        for step in (60, 70):  # two more, both halves (a trainer half alone is not complete); the monitor sees it
            trainer_ckpt(out, step)
            orch_ckpt(run, step)
        assert daemon.observe(snap(pod, 40, 10.0)) is None and daemon.observe(snap(pod, 70, 10.0))
        for _ in range(200):
            if len(daemon.rounds) >= 2:
                break
            await asyncio.sleep(0.05)
        assert daemon.rounds[-1].reason == "new checkpoint step_70"
        assert steps(out) == [40, 50, 60, 70]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_daemon_leaves_checkpoints_to_prime_rls_own_keep_last(pod, layout, tmp_path):
    """prime-rl deletes old step_N dirs itself when the run's [ckpt] sets keep_last / keep_interval: the daemon
    must not fight it (before, it deleted by its own keep-last too, including a keep_interval step prime-rl keeps
    on purpose). Its leftovers (old broadcasts, orphaned orchestrator halves) are still the daemon's to prune."""
    run, out = layout
    (run / "configs").mkdir()
    (run / "configs" / "trainer.json").write_text('{"ckpt": {"keep_last": 3, "keep_interval": 20}}')
    settings = make_settings(tmp_path, ckpt_subdir=str(out), keep_last=1, keep_broadcasts=2, disk_threshold_pct=100.0)
    events = []
    daemon = CleanupDaemon(pod, settings, connect=SSHConnection, on_event=events.append, approved=True)
    rnd = await daemon.run_once()
    assert not rnd.error, rnd.error
    assert steps(out) == [10, 20, 30, 40, 50]  # every checkpoint left to prime-rl
    assert steps(run / "broadcasts") == [40, 50]  # leftovers still pruned
    assert any(
        "prime-rl prunes this run's checkpoints itself (keep_last = 3, keep_interval = 20)" in e.message for e in events
    )


async def test_a_manual_cleanup_says_prime_rl_prunes_and_keeps_its_keep_interval_steps(pod, layout, tmp_path):
    from services.lifecycle.targets import target_for

    run, out = layout
    (run / "configs").mkdir()
    (run / "configs" / "trainer.json").write_text('{"ckpt": {"keep_last": 3, "keep_interval": 20}}')
    settings = make_settings(tmp_path, ckpt_subdir=str(out), keep_last=1)
    async with SSHConnection(pod) as conn:
        plan = await target_for(pod).plan_cleanup(conn, keep=1, settings=settings)
    assert [c["step"] for c in plan.delete] == [10, 30]  # 20 is a keep_interval step: prime-rl keeps it
    text = "\n".join(plan.preview())
    assert "prime-rl prunes this run's checkpoints itself (keep_last = 3, keep_interval = 20)" in text
    assert plan.to_json()["prunes"] == {"keep_last": 3, "keep_interval": 20}
