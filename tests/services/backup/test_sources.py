"""Runs sharing a bucket prefix (the default is prime-train/<run dir basename>/): every manifest names the
run it came from, and only that run's verified backups count for cleanup, "already backed up", restore
and the bucket's keep-last. A backup never overwrites another run's step. Over the real sshd "pod" and
moto's S3 server; two pods are two pod names on the same sshd, as two rented pods with run dir
/workspace/run would be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.backup.bucket import list_bucket
from services.backup.manifest import Manifest, RunSource
from services.backup.s3 import BackupError
from services.backup.transfer import backup_checkpoint, restore_checkpoint, run_source
from services.lifecycle.cleanup import cleanup, plan_cleanup
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint
from tests.services.lifecycle.test_actions import collect, make_settings

pytestmark = pytest.mark.ssh


def record(run_dir: Path, run_id: str, resumed_from: str | None = None) -> None:
    """The run record our launch leaves in the run dir (<run_dir>/.ptt/run.json)."""
    (run_dir / ".ptt").mkdir(parents=True, exist_ok=True)
    (run_dir / ".ptt" / "run.json").write_text(json.dumps({"id": run_id, "resumed_from": resumed_from}))


def etags(s3env, prefix: str) -> dict[str, str]:
    res = s3env.client.list_objects_v2(Bucket=s3env.bucket, Prefix=prefix)
    return {o["Key"]: o["ETag"] for o in res.get("Contents", [])}


@pytest.fixture
def pods(sshd, client_home, tmp_path):
    client_home.trust()
    return (
        sshd.pod(name="pod-a", probe_dir=str(tmp_path / "state-a")),
        sshd.pod(name="pod-b", probe_dir=str(tmp_path / "state-b")),
    )


def test_same_run_by_record_ids_and_lineage_else_pod_and_dir_and_unknown_never():
    a = RunSource("a", "/workspace/run", "r1")
    resumed = RunSource("b", "/elsewhere", "r2", ("r1",), (100,))  # resumed from r1's step 100 on another pod
    assert resumed.owns(a, 100) and not resumed.owns(a, 101) and not a.owns(resumed, 100)  # one direction only
    assert not a.same_run(resumed)  # (test_backup_runs.py: siblings, descendants, the chain)
    assert not a.same_run(RunSource("a", "/workspace/run", "r3"))  # a fresh launch in the same dir
    assert not a.same_run(RunSource("a", "/workspace/run"))  # one side without a record: different
    assert RunSource("a", "/w/run/").same_run(RunSource("a", "/w/run"))
    assert not RunSource("a", "/w/run").same_run(RunSource("b", "/w/run"))
    assert not a.same_run(None)
    # an old manifest (no source) reads back as unknown; a new one round-trips its source
    old = Manifest.from_json('{"version": 1, "step": 3, "run": "run", "files": []}')
    assert old.source is None
    new = Manifest(step=3, run="run", files=(), source=RunSource("a", "/w/run", "r1", ("r0",)))
    assert Manifest.from_json(new.to_json()).source == new.source


async def test_cleanup_never_deletes_a_checkpoint_another_run_backed_up_under_the_same_prefix(pods, s3env, tmp_path):
    pod_a, pod_b = pods
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"  # both: prime-train/run/
    settings = make_settings(tmp_path)
    backup = s3env.settings()
    for step in (4000, 5000):
        write_checkpoint(run_a, step, shard_bytes=2048)
    for step in range(100, 1000, 100):
        write_checkpoint(run_b, step, shard_bytes=2048)
    async with SSHConnection(pod_a) as conn:
        for step in (4000, 5000):
            assert (await backup_checkpoint(conn, backup, str(run_a), step)).verified
    async with SSHConnection(pod_b) as conn:
        plan = await plan_cleanup(conn, keep=3, settings=settings, run_dir=str(run_b), backup=backup)
        # pod A's 4000/5000 say nothing about pod B's run: none of B's steps was ever uploaded
        assert plan.delete == () and plan.superseded == ()
        assert [c["step"] for c in plan.unbacked] == [100, 200, 300, 400, 500, 600]
        events = await collect(cleanup(conn, plan, settings=settings, backup=backup))
        # the cleanup's own re-check of the bucket counts only B's backups too
        forced = plan.__class__(**{**plan.__dict__, "delete": plan.unbacked, "unbacked": ()})
        events += await collect(cleanup(conn, forced, settings=settings, backup=backup))
    assert not [d for e in events if e.data for d in e.data.get("deleted", [])], [e.message for e in events]
    assert sorted(int(p.name[5:]) for p in (run_b / "checkpoints").iterdir()) == list(range(100, 1000, 100))
    listing = await list_bucket(backup, str(run_b))
    assert [(c.step, c.source.pod) for c in listing] == [(4000, "pod-a"), (5000, "pod-a")]


async def test_a_backup_never_overwrites_another_runs_step_and_says_how_to_fix_it(pods, s3env, tmp_path):
    pod_a, pod_b = pods
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    write_checkpoint(run_a, 500, shard_bytes=200 * 1024)
    write_checkpoint(run_b, 500, shard_bytes=200 * 1024)
    backup = s3env.settings()
    async with SSHConnection(pod_a) as conn:
        assert (await backup_checkpoint(conn, backup, str(run_a), 500)).verified
    before = etags(s3env, "prime-train/run/")
    async with SSHConnection(pod_b) as conn:
        with pytest.raises(BackupError) as err:
            await backup_checkpoint(conn, backup, str(run_b), 500)
        # the same pod, a fresh launch in the same run dir (a new run record): another run as well
        record(run_a, "20250101-000000-aaaaaa")
    text = str(err.value) + " " + str(err.value.hint)
    assert f"pod-a:{run_a}" in text and f"pod-b:{run_b}" in text and "set prefix in backup.toml" in text
    assert "\n" not in str(err.value)
    async with SSHConnection(pod_a) as conn:
        with pytest.raises(BackupError, match="backed up by another run"):
            await backup_checkpoint(conn, backup, str(run_a), 500)
    assert etags(s3env, "prime-train/run/") == before  # nothing sent, nothing overwritten
    assert s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads", []) == []
    # with its own prefix, B's backup goes through
    async with SSHConnection(pod_b) as conn:
        assert (await backup_checkpoint(conn, s3env.settings(prefix="runs/b/"), str(run_b), 500)).verified


async def test_keep_last_prunes_only_this_runs_backups_and_an_old_manifest_counts_for_no_run(pods, s3env, tmp_path):
    pod_a, pod_b = pods
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    for step in (2, 3, 4, 5, 6):
        write_checkpoint(run_a, step, shard_bytes=2048)
    for step in (6, 8, 10):
        write_checkpoint(run_b, step, shard_bytes=2048)
    async with SSHConnection(pod_a) as conn:
        for step in (2, 4):
            assert (await backup_checkpoint(conn, s3env.settings(), str(run_a), step)).verified
    # step 4's manifest as an older version wrote it: no source
    key = "prime-train/run/step_4/manifest.json"
    doc = json.loads(s3env.get(key))
    doc.pop("source")
    s3env.client.put_object(Bucket=s3env.bucket, Key=key, Body=json.dumps(doc).encode())
    async with SSHConnection(pod_b) as conn:
        for step in (6, 8, 10):
            res = await backup_checkpoint(conn, s3env.settings(keep_last=1), str(run_b), step)
            assert res.verified
        assert res.pruned == [8]  # 6 was pruned by the backup of 8; A's 2 and the unknown 4 untouched
        mine = await run_source(conn, str(run_b))
        assert mine == RunSource("pod-b", str(run_b))
    listing = await list_bucket(s3env.settings(), str(run_b))
    assert [(c.step, c.verified, c.source.pod if c.source else None) for c in listing] == [
        (2, True, "pod-a"),
        (4, True, None),
        (10, True, "pod-b"),
    ]
    async with SSHConnection(pod_a) as conn:
        # the unknown-source step 4 is not "already backed up" for A, never overwritten, never a reason to delete
        with pytest.raises(BackupError, match="an unknown run"):
            await backup_checkpoint(conn, s3env.settings(), str(run_a), 4)
        plan = await plan_cleanup(
            conn, keep=1, settings=make_settings(tmp_path), run_dir=str(run_a), backup=s3env.settings()
        )
        # A's own verified 2 may go; the unknown-source 4 counts neither as verified nor as superseding 3
        assert [c["step"] for c in plan.delete] == [2] and [c["step"] for c in plan.unbacked] == [3, 4, 5]
    async with SSHConnection(pod_a) as conn:
        fresh = tmp_path / "a2" / "run"  # another dir: another run, with no backup of its own
        with pytest.raises(BackupError, match="no verified backup of this run .*other runs' steps there: 2, 4, 10"):
            await restore_checkpoint(conn, s3env.settings(), str(fresh))
        # restore for run A (as resume does from A's record): A's newest (2), not B's 10 nor the unknown 4
        got = await restore_checkpoint(conn, s3env.settings(), str(fresh), source=RunSource("pod-a", str(run_a)))
    assert got.step == 2 and (fresh / "checkpoints/step_2/trainer/.metadata").is_file()


async def test_an_object_already_complete_in_the_bucket_is_not_sent_again(pods, s3env, tmp_path):
    pod_a, _ = pods
    run = tmp_path / "a" / "run"
    write_checkpoint(run, 7, shard_bytes=300 * 1024)  # 5 parts of 64 KiB
    backup = s3env.settings()
    async with SSHConnection(pod_a) as conn:
        first = await backup_checkpoint(conn, backup, str(run), 7)
        assert first.verified and first.uploaded_parts >= 5
        # stopped after the objects were completed but before the manifest (or simply backed up again)
        s3env.client.delete_object(Bucket=s3env.bucket, Key="prime-train/run/step_7/manifest.json")
        before = etags(s3env, "prime-train/run/step_7/")
        again = await backup_checkpoint(conn, backup, str(run), 7)
        assert again.verified and again.uploaded_parts == 0 and again.skipped_parts == first.uploaded_parts
        assert etags(s3env, "prime-train/run/step_7/") == {
            **before,
            **{k: v for k, v in etags(s3env, "prime-train/run/step_7/").items() if k.endswith("manifest.json")},
        }
        assert s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads", []) == []
        # the pod's file changed (same size): the object no longer matches and is sent again, verified
        shard = run / "checkpoints/step_7/trainer/__0_0.distcp"
        shard.write_bytes(bytes(300 * 1024))
        third = await backup_checkpoint(conn, backup, str(run), 7)
        assert third.verified and third.uploaded_parts == 5
    assert s3env.get("prime-train/run/step_7/trainer/__0_0.distcp") == bytes(300 * 1024)
