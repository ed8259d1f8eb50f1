"""Cleanup with backup on, when the bucket keeps only its newest verified steps: a pod step older than the
oldest verified step in the bucket is superseded (deletable), never one newer than it without its own
verified backup, never the newest complete. The plan functions, then the cleanup daemon end to end over
the real sshd "pod" and moto's S3 server, with the bucket pruned by the backup itself (keep-last 3)."""

from __future__ import annotations

import pytest

from services.backup.transfer import backup_checkpoint
from services.lifecycle.auto_cleanup import CleanupDaemon
from services.lifecycle.cleanup import deletable, plan_for_disk, plan_keep_last
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint
from tests.services.lifecycle.test_actions import make_settings


def ckpts(*steps: int, incomplete: tuple[int, ...] = ()) -> list[dict]:
    return [
        {"step": s, "path": f"/r/checkpoints/step_{s}", "bytes": 100, "complete": s not in incomplete}
        for s in sorted({*steps, *incomplete})
    ]


def steps(cs) -> list[int]:
    return [c["step"] for c in cs]


def test_steps_older_than_the_oldest_verified_backup_are_superseded():
    plan = plan_keep_last(
        "/r/checkpoints", ckpts(2, 4, 6, 8, 10, 12), 3, verified={8, 10, 12}, backup_where="s3://b/p/"
    )
    assert steps(plan.delete) == [2, 4, 6] and plan.unbacked == () and steps(plan.kept) == [8, 10, 12]
    assert plan.superseded == (2, 4, 6)
    text = "\n".join(plan.preview())
    assert "DELETE step_2" in text and "superseded by verified backup step_8" in text
    assert plan.to_json()["superseded"] == [
        {"step": s, "reason": "superseded by verified backup step_8"} for s in (2, 4, 6)
    ]


def test_a_step_newer_than_the_oldest_verified_one_needs_its_own_backup():
    # bucket {8, 12}: 10 is newer than 8 and not verified -> kept; 9 likewise; 2..6 superseded; 8 verified
    plan = plan_keep_last("/r/checkpoints", ckpts(2, 4, 6, 8, 9, 10, 12), 1, verified={8, 12})
    assert steps(plan.delete) == [2, 4, 6, 8] and steps(plan.unbacked) == [9, 10] and steps(plan.kept) == [12]
    assert plan.superseded == (2, 4, 6)
    assert "not yet verified" in "\n".join(plan.preview())


def test_nothing_verified_means_nothing_deleted_and_the_newest_complete_always_stays():
    plan = plan_keep_last("/r/checkpoints", ckpts(2, 4, 6), 1, verified=set())
    assert plan.delete == () and steps(plan.unbacked) == [2, 4] and plan.superseded == ()
    # the newest complete stays even when every older one is superseded; incomplete ones are not touched
    plan = plan_keep_last("/r/checkpoints", ckpts(2, 4, 6, incomplete=(1, 14)), 1, verified={12})
    assert steps(plan.delete) == [2, 4] and steps(plan.kept) == [6] and steps(plan.in_progress) == [1, 14]
    assert deletable(5, None) and deletable(8, {8}) and deletable(7, {8, 9}) and not deletable(9, {8, 10})
    assert not deletable(3, set())


def test_the_disk_ceiling_also_takes_superseded_steps_but_never_unverified_newer_ones():
    plan = plan_keep_last("/r/checkpoints", ckpts(2, 4, 6, 8, 10), 4, verified={6, 10})
    assert steps(plan.delete) == [2] and steps(plan.kept) == [4, 6, 8, 10]
    full = plan_for_disk(plan, {"used": 990, "total": 1000}, 50.0, verified={6, 10})
    # 4 superseded by step_6, 6 verified; 8 newer than 6 without its own backup; 10 the newest complete
    assert steps(full.delete) == [2, 4, 6] and steps(full.unbacked) == [8] and steps(full.kept) == [10]
    assert full.superseded == (2, 4) and full.for_disk == (4, 6)
    assert "superseded by verified backup step_6" in "\n".join(full.preview())


@pytest.mark.ssh
async def test_the_daemon_deletes_superseded_steps_after_the_bucket_pruned_them(sshd, client_home, s3env, tmp_path):
    client_home.trust()
    run_dir = tmp_path / "run"
    pod = sshd.pod(probe_dir=str(tmp_path / "podstate"), run_dir=str(run_dir))
    backup = s3env.settings(keep_last=1)  # the bucket's own keep-last (1: two backups show its pruning)
    for step in (2, 4, 6, 8):
        write_checkpoint(run_dir, step, shard_bytes=4 * 1024)
    async with SSHConnection(pod) as conn:
        for step in (6, 8):  # the backup of step_8 prunes step_6 from the bucket
            assert (await backup_checkpoint(conn, backup, str(run_dir), step)).verified
    assert sorted({int(k.split("/")[2][5:]) for k in s3env.keys("prime-train/run/")}) == [8]
    settings = make_settings(tmp_path, keep_last=2, disk_threshold_pct=100.0)
    events = []
    daemon = CleanupDaemon(pod, settings, connect=SSHConnection, backup=backup, on_event=events.append, approved=True)
    rnd = await daemon.run_once()
    # 2 was never backed up, 6 was pruned from the bucket: both older than step_8, verified there
    assert not rnd.error and sorted(d["step"] for d in rnd.deleted) == [2, 4], [e.message for e in events]
    assert sorted(int(p.name[5:]) for p in (run_dir / "checkpoints").iterdir()) == [6, 8]
    assert "superseded by verified backup step_8" in "\n".join(rnd.plan.preview())
    log = (tmp_path / "records" / "lifecycle.log").read_text()
    assert all(f"step_{s} (" in log for s in (2, 4))
    assert not (await daemon.run_once()).deleted  # 6 and 8 are the newest 2: nothing more
