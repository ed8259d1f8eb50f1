"""Cleanup and resume respect the S3 backup: moto's S3 server (real HTTP) + the real sshd "pod".

Real processes: the backup agent and the lifecycle helper run through sshd; the simulated trainer is
relaunched detached on resume and looked at in /proc.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.backup.transfer import backup_checkpoint
from services.lifecycle.actions import plan_resume, resume
from services.lifecycle.cleanup import cleanup, plan_cleanup
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint
from tests.services.lifecycle.test_actions import _kill, _launch, collect, make_settings, trainer_pids, wait_for

pytestmark = pytest.mark.ssh


async def test_cleanup_keeps_what_the_bucket_has_not_verified(pod, s3env, tmp_path):
    settings = make_settings(tmp_path)
    backup = s3env.settings()
    run_dir = tmp_path / "run"
    ck = run_dir / "checkpoints"
    for step in (2, 4, 6):
        write_checkpoint(run_dir, step, shard_bytes=40 * 1024)
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, backup, str(run_dir), 2)).verified  # 4 is not backed up
        # without a bucket: today's plan (both old ones would go)
        plain = await plan_cleanup(conn, keep=1, settings=settings, run_dir=str(run_dir))
        assert [c["step"] for c in plain.delete] == [2, 4] and plain.unbacked == ()
        assert "backup" not in plain.to_json()
        assert [
            c["step"]
            for c in (
                await plan_cleanup(
                    conn, keep=1, settings=settings, run_dir=str(run_dir), backup=s3env.settings(bucket="")
                )
            ).delete
        ] == [2, 4]
        plan = await plan_cleanup(conn, keep=1, settings=settings, run_dir=str(run_dir), backup=backup)
        assert [c["step"] for c in plan.delete] == [2]
        assert [c["step"] for c in plan.unbacked] == [4]
        assert [c["step"] for c in plan.kept] == [6]
        where = f"s3://{s3env.bucket}/prime-train/run/"
        doc = plan.to_json()
        assert doc["unbacked"][0]["step"] == 4 and doc["unbacked"][0]["reason"] == f"not yet verified in {where}"
        events = await collect(cleanup(conn, plan, settings=settings, backup=backup))
    assert events[-1].kind == "done", [e.message for e in events]
    assert [d["step"] for d in events[-1].data["deleted"]] == [2]
    assert any(e.kind == "warn" and f"kept step_4: not yet verified in {where}" in e.message for e in events)
    assert sorted(p.name for p in ck.iterdir()) == ["step_4", "step_6"]
    assert (ck / "step_4" / "trainer" / ".metadata").is_file()


async def test_cleanup_rechecks_the_bucket_before_deleting(pod, s3env, tmp_path):
    settings = make_settings(tmp_path)
    backup = s3env.settings()
    run_dir = tmp_path / "run"
    for step in (2, 4):
        write_checkpoint(run_dir, step, shard_bytes=8 * 1024)
    async with SSHConnection(pod) as conn:
        await backup_checkpoint(conn, backup, str(run_dir), 2)
        plan = await plan_cleanup(conn, keep=1, settings=settings, run_dir=str(run_dir), backup=backup)
        assert [c["step"] for c in plan.delete] == [2]
        # the verified mark disappears between the plan and the deletion (a prune, a manual delete ...)
        s3env.client.delete_object(Bucket=s3env.bucket, Key="prime-train/run/step_2/manifest.json")
        events = await collect(cleanup(conn, plan, settings=settings, backup=backup))
    assert events[-1].kind == "done" and events[-1].data["deleted"] == []
    assert any("kept step_2: not yet verified" in e.message for e in events)
    assert (run_dir / "checkpoints" / "step_2" / "trainer" / ".metadata").is_file()


async def test_resume_restores_the_verified_backup_when_the_pod_lost_its_checkpoints(pod, s3env, tmp_path):
    settings = make_settings(tmp_path)
    backup = s3env.settings()
    run_dir = tmp_path / "run"
    ck = run_dir / "checkpoints"
    await _launch(pod, tmp_path, settings)
    assert wait_for(lambda: (ck / "step_4" / "orchestrator" / "progress.pt").exists(), 15)
    await _kill(pod, settings)
    k = 4
    saved = {p.relative_to(ck / f"step_{k}"): p.read_bytes() for p in (ck / f"step_{k}").rglob("*") if p.is_file()}
    assert len(saved) >= 2
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, backup, str(run_dir), k)).verified
        shutil.rmtree(ck)  # the pod lost every checkpoint (a new disk, a wiped volume)
        # without a bucket: today's error
        no_bucket = await collect(resume(conn, settings=settings))
        assert no_bucket[-1].kind == "error" and "no complete checkpoint" in no_bucket[-1].message
        plan = await plan_resume(conn, settings, backup)
        assert plan["restore"]["step"] == k and plan["checkpoint"]["step"] == k
        assert not ck.exists() or not any(ck.iterdir())  # planning changes nothing
        events = await collect(resume(conn, settings=settings, backup=backup))
    assert events[-1].kind == "done", [e.message for e in events]
    messages = [e.message for e in events]
    i_restore = next(i for i, m in enumerate(messages) if f"restoring step_{k} from s3://{s3env.bucket}/" in m)
    i_check = next(i for i, e in enumerate(events) if e.check and e.check.name == "checkpoint restored")
    i_start = next(i for i, m in enumerate(messages) if m.startswith("starting detached"))
    assert i_restore < i_check < i_start
    assert events[i_check].check.status == "ok"
    # the restored files are byte-identical to the ones backed up
    for rel, data in saved.items():
        assert (ck / f"step_{k}" / rel).read_bytes() == data, rel
    assert not [p for p in ck.iterdir() if "restoring" in p.name]
    rec = events[-1].data
    assert rec["resume_step"] == k and rec["command"].endswith(f"--seed {k}")
    pids = trainer_pids(run_dir)
    assert len(pids) == 1
    cmd = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
    assert cmd[cmd.index(b"--seed") + 1] == str(k).encode()
    assert "restored step_4" in (settings.runs_dir / "lifecycle.log").read_text()
    await _kill(pod, settings)
    assert not trainer_pids(run_dir)
