"""Backups of related runs sharing a bucket prefix: a resume counts its parent's backups only up to the
step it resumed from (a sibling or a descendant never), a relaunch by hand in the same run dir never
counts the old run's backups for its own checkpoints, and two runs backing up the same step at once
never corrupt each other's backup. Over the real sshd "pods" and moto's S3 server, as
tests/services/backup/test_sources.py."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from services.backup import claims as backup_claims
from services.backup.bucket import list_bucket, verify_backup
from services.backup.claims import run_key
from services.backup.manifest import RunSource
from services.backup.s3 import BackupError
from services.backup.transfer import backup_checkpoint, pod_backed_up, restore_checkpoint, run_source
from services.lifecycle.cleanup import cleanup, plan_cleanup
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint
from tests.services.backup.test_sources import etags, pods  # noqa: F401 (fixture)
from tests.services.lifecycle.test_actions import collect, make_settings

pytestmark = pytest.mark.ssh


def record(run_dir: Path, run_id: str, resumed_from: str | None = None, resume_step: int | None = None) -> None:
    (run_dir / ".ptt").mkdir(parents=True, exist_ok=True)
    (run_dir / ".ptt" / "run.json").write_text(
        json.dumps({"id": run_id, "resumed_from": resumed_from, "resume_step": resume_step})
    )


def test_a_run_owns_its_own_backups_and_its_ancestors_up_to_the_resume_step_only():
    a = RunSource("pod1", "/workspace/run", "A")
    b = RunSource("pod2", "/workspace/run", "B", ("A",), (100,))
    c = RunSource("pod3", "/workspace/run", "C", ("A",), (100,))
    d = RunSource("pod4", "/workspace/run", "D", ("B", "A"), (300, 100))
    assert b.owns(a, 100) and b.owns(a, 50) and not b.owns(a, 200)  # the parent's, up to the resume step
    assert not a.owns(b, 100) and not a.owns(b, 300)  # a descendant's: never
    assert not b.owns(c, 100) and not c.owns(b, 200)  # a sibling's: never
    assert d.owns(b, 300) and not d.owns(b, 400) and d.owns(a, 100) and not d.owns(a, 200)
    assert not RunSource("p", "/r", "E", ("A",)).owns(a, 1)  # the resume step unknown: nothing of A's
    assert b.owns(RunSource("elsewhere", "/x", "B"), 10**6) and not b.owns(None, 1)
    assert not b.same_run(a) and not a.same_run(b)
    # the chain of records: each ancestor bounded by the smallest resume step on the way to it
    records = {"B": {"resumed_from": "A", "resume_step": 100}, "A": {}}
    assert RunSource.chain(300, "B", records.get, "D") == (("B", "A"), (300, 100))
    assert RunSource.from_dict(d.to_dict()) == d


async def test_two_resumes_of_one_run_never_count_prune_or_overwrite_each_others_steps(pods, s3env, tmp_path):
    """A is auto-resumed on pod2 as B (from step 100) while pod1 comes back with A still training."""
    pod_a, pod_b = pods
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"  # both: prime-train/run/
    record(run_a, "A")
    for step in (100, 200):
        write_checkpoint(run_a, step, shard_bytes=100 * 1024)
    backup = s3env.settings()
    async with SSHConnection(pod_a) as conn:
        for step in (100, 200):
            assert (await backup_checkpoint(conn, backup, str(run_a), step)).verified
    a_before = etags(s3env, "prime-train/run/step_200/")
    record(run_b, "B", resumed_from="A", resume_step=100)
    async with SSHConnection(pod_b) as conn:
        assert (await run_source(conn, str(run_b))).resumed_at == (100,)
        await restore_checkpoint(conn, backup, str(run_b), 100)  # what resume does on a pod that has none
        for step in (200, 300):
            write_checkpoint(run_b, step, shard_bytes=100 * 1024)
        with pytest.raises(BackupError, match="step 200 .* backed up by another run .*run A"):
            await backup_checkpoint(conn, backup, str(run_b), 200)
        assert etags(s3env, "prime-train/run/step_200/") == a_before  # A's verified backup untouched
        assert (await backup_checkpoint(conn, s3env.settings(keep_last=1), str(run_b), 300)).verified
        plan = await plan_cleanup(conn, keep=1, settings=make_settings(tmp_path), run_dir=str(run_b), backup=backup)
        # A's step 100 is where B comes from: it counts; A's step 200 is not B's step_200
        assert [c["step"] for c in plan.delete] == [100] and [c["step"] for c in plan.unbacked] == [200]
    listing = await list_bucket(backup, str(run_a))
    # B's keep-last-1 pruned nothing of A's (its own 300 is its only backup after A's 100)
    assert [(c.step, c.verified, c.source.run_id) for c in listing] == [
        (100, True, "A"),
        (200, True, "A"),
        (300, True, "B"),
    ]
    async with SSHConnection(pod_a) as conn:
        write_checkpoint(run_a, 300, shard_bytes=100 * 1024)
        plan = await plan_cleanup(conn, keep=1, settings=make_settings(tmp_path), run_dir=str(run_a), backup=backup)
        # B's step 300 says nothing about A's step_300; A's own 100 and 200 may go
        assert [c["step"] for c in plan.delete] == [100, 200] and plan.unbacked == ()
        with pytest.raises(BackupError, match="step 300 .* backed up by another run"):
            await backup_checkpoint(conn, backup, str(run_a), 300)


async def test_a_relaunch_by_hand_in_the_same_run_dir_never_counts_the_old_runs_backups(pods, s3env, tmp_path):
    """No run records (`uv run rl` started by hand twice in /workspace/run): the same pod and run dir, so
    the same run as far as the sources go, but step_100 on the pod is not the checkpoint backed up."""
    pod_a, _ = pods
    run = tmp_path / "a" / "run"
    write_checkpoint(run, 100, shard_bytes=20 * 1024)
    backup = s3env.settings()
    settings = make_settings(tmp_path)
    async with SSHConnection(pod_a) as conn:
        assert (await backup_checkpoint(conn, backup, str(run), 100)).verified
        assert (await pod_backed_up(conn, backup, str(run)))[0] == {100}  # that very checkpoint: counts
        shutil.rmtree(run / "checkpoints")  # the relaunch: a fresh run writes its own steps
        for step in (100, 200, 300):
            write_checkpoint(run, step, shard_bytes=20 * 1024)
        steps, oldest, _ = await pod_backed_up(conn, backup, str(run))
        assert steps == set() and oldest == 100  # what the auto-backup asks: step 100 is sent again
        plan = await plan_cleanup(conn, keep=1, settings=settings, run_dir=str(run), backup=backup)
        assert plan.delete == () and [c["step"] for c in plan.unbacked] == [100, 200]
        forced = plan.__class__(**{**plan.__dict__, "delete": plan.unbacked, "unbacked": ()})
        events = await collect(cleanup(conn, forced, settings=settings, backup=backup))  # its own re-check
        assert not [d for e in events if e.data for d in e.data.get("deleted", [])], [e.message for e in events]
        assert (await backup_checkpoint(conn, backup, str(run), 100)).verified  # the new step_100, same run
        assert (await pod_backed_up(conn, backup, str(run)))[0] == {100}
        # the same manifest as an older version wrote it (no files' mtimes): it counts for no checkpoint
        key = "prime-train/run/step_100/manifest.json"
        doc = json.loads(s3env.get(key))
        for f in doc["files"]:
            f.pop("mtime_ns")
        s3env.client.put_object(Bucket=s3env.bucket, Key=key, Body=json.dumps(doc).encode())
        assert (await pod_backed_up(conn, backup, str(run)))[0] == set()
        plan = await plan_cleanup(conn, keep=1, settings=settings, run_dir=str(run), backup=backup)
        assert plan.delete == () and [c["step"] for c in plan.unbacked] == [100, 200]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_100", "step_200", "step_300"]


async def test_two_runs_backing_up_the_same_step_at_once_never_corrupt_each_others_backup(pods, s3env, tmp_path):
    """Pod A's backup of step 500 is slowed down; pod B (another run, the same prefix) starts the same
    step after A claimed it and before A finished: B refuses before sending anything, A's backup is
    verified. Then B's stale claim (no manifest, older than the limit) is no obstacle for a later run."""
    pod_a, pod_b = pods
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    part = 64 * 1024
    write_checkpoint(run_a, 500, shard_bytes=24 * part)  # 24 parts at 8 parts/s: ~3 s
    write_checkpoint(run_b, 500, shard_bytes=24 * part)
    record(run_a, "A")
    record(run_b, "B")
    slow = s3env.settings(max_bandwidth=8 * part, part_size=part, min_part=part, jobs=2)
    async with SSHConnection(pod_a) as conn_a, SSHConnection(pod_b) as conn_b:
        first = asyncio.ensure_future(backup_checkpoint(conn_a, slow, str(run_a), 500))
        end = time.monotonic() + 20
        while not s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads"):  # A is sending
            assert time.monotonic() < end and not first.done()
            await asyncio.sleep(0.05)
        with pytest.raises(BackupError, match=r"^step 500 .* backed up by another run \(pod-a:.*run A\)"):
            await backup_checkpoint(conn_b, s3env.settings(), str(run_b), 500)
        assert not first.done()  # B's refusal came while A was still sending
        uploads = s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads", [])
        assert len(uploads) == 1  # B started no upload of its own and never touched A's
        result = await first
    assert result.verified and result.manifest.source.run_id == "A"
    checked = await verify_backup(s3env.settings(), str(run_a), 500)
    assert checked.verified and checked.source.run_id == "A", checked.problems
    assert (
        s3env.get("prime-train/run/step_500/trainer/__0_0.distcp")
        == (run_a / "checkpoints/step_500/trainer/__0_0.distcp").read_bytes()
    )
    # the claims are what decides: A's claim is older than B's
    claims = s3env.keys("prime-train/run/step_500/claims/")
    assert len(claims) == 2 and all(k.endswith(".json") for k in claims)


async def test_a_stale_claim_is_ignored_and_another_runs_unfinished_upload_never_resumed(
    pods, s3env, tmp_path, monkeypatch
):
    pod_a, _ = pods
    run = tmp_path / "a" / "run"
    write_checkpoint(run, 9, shard_bytes=200 * 1024)
    record(run, "A")
    base = "prime-train/run/step_9/"
    key = base + "trainer/__0_0.distcp"
    # another run's claim, never finished (no manifest), and its unfinished upload
    other = RunSource("pod-x", "/workspace/run", "X")
    s3env.client.put_object(
        Bucket=s3env.bucket,
        Key=base + "claims/" + run_key(other) + ".json",
        Body=json.dumps({"source": other.to_dict(), "time": 0}).encode(),
    )
    theirs = s3env.client.create_multipart_upload(Bucket=s3env.bucket, Key=key)["UploadId"]
    s3env.client.upload_part(Bucket=s3env.bucket, Key=key, UploadId=theirs, PartNumber=1, Body=b"x" * 64 * 1024)
    async with SSHConnection(pod_a) as conn:
        with pytest.raises(BackupError, match=r"backed up by another run \(pod-x:/workspace/run \(run X\)\)"):
            await backup_checkpoint(conn, s3env.settings(), str(run), 9)  # a fresh claim of X: it wins
        monkeypatch.setattr(backup_claims, "CLAIM_STALE", 0.5)  # instead of waiting 24 h
        await asyncio.sleep(0.8)
        res = await backup_checkpoint(conn, s3env.settings(), str(run), 9)
    assert res.verified and res.skipped_parts == 0
    ids = [u["UploadId"] for u in s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads", [])]
    assert ids == [theirs]  # X's upload is X's: neither used nor aborted by A
