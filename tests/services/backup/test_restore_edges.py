"""Restore over a half-written step_N, and verification on stores whose ETags are not md5s.

Real parts: moto's S3 server, the real sshd "pod" (a tmp dir), the agent as the pod runs it.
"""

from __future__ import annotations

import hashlib

import pytest

from services.backup.bucket import object_matches, verify_backup
from services.backup.manifest import FileEntry, PartInfo
from services.backup.s3 import S3, BackupError, multipart_etag
from services.backup.store_caps import store_etags_are_md5
from services.backup.transfer import backup_checkpoint, restore_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

pytestmark = pytest.mark.ssh


async def test_restore_moves_an_incomplete_step_aside_and_never_replaces_a_complete_one(pod, s3env, tmp_path):
    src = tmp_path / "a" / "run"
    write_checkpoint(src, 8, shard_bytes=120 * 1024)
    target = tmp_path / "b" / "run"
    half = write_checkpoint(target, 8, shard_bytes=50 * 1024, complete=False)  # the pod died mid-save
    half_shard = (half / "trainer" / "__0_0.distcp").read_bytes()
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        await backup_checkpoint(conn, settings, str(src), 8)
        notes: list[str] = []
        manifest = await restore_checkpoint(conn, settings, str(target), 8, notes=notes)
        assert manifest.step == 8
        # restoring again now fails: step_8 is complete, and it is left exactly as it is
        with pytest.raises(BackupError, match="already exists on the pod and is complete"):
            await restore_checkpoint(conn, settings, str(target), 8)
    restored = target / "checkpoints" / "step_8"
    assert (restored / "trainer" / "__0_0.distcp").read_bytes() == (
        src / "checkpoints/step_8/trainer/__0_0.distcp"
    ).read_bytes()
    assert (restored / "trainer" / ".metadata").is_file()
    aside = [p for p in (target / "checkpoints").iterdir() if p.name != "step_8"]
    assert len(aside) == 1 and aside[0].name.startswith(".step_8.incomplete-")  # hidden from step_N globs
    assert (aside[0] / "trainer" / "__0_0.distcp").read_bytes() == half_shard  # the user's bytes, kept
    assert len(notes) == 2 and str(aside[0]) in notes[1] and "nothing deleted" in notes[1]
    assert notes[0].startswith("step 8 was backed up by another run: testpod:")  # another run dir: said


async def test_a_failed_restore_leaves_the_incomplete_step_where_it_was(pod, s3env, tmp_path):
    src = tmp_path / "a" / "run"
    write_checkpoint(src, 2, shard_bytes=80 * 1024)
    target = tmp_path / "b" / "run"
    half = write_checkpoint(target, 2, shard_bytes=10 * 1024, complete=False)
    before = sorted(p.relative_to(half) for p in half.rglob("*"))
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        await backup_checkpoint(conn, settings, str(src), 2)
        s3env.client.delete_object(Bucket=s3env.bucket, Key="prime-train/run/step_2/trainer/__0_0.distcp")
        with pytest.raises(BackupError):
            await restore_checkpoint(conn, settings, str(target), 2)
    assert sorted(p.relative_to(half) for p in half.rglob("*")) == before
    assert [p.name for p in (target / "checkpoints").iterdir()] == ["step_2"]  # no staging dir, nothing aside


def _entry(parts: list[bytes], store_etag: str = "") -> FileEntry:
    infos, off = [], 0
    for n, b in enumerate(parts, 1):
        infos.append(PartInfo(n, off, len(b), len(b), hashlib.md5(b).hexdigest()))
        off += len(b)
    return FileEntry("f", off, "x", stored_size=off, parts=tuple(infos), store_etag=store_etag)


def test_an_object_matches_by_size_and_md5_etag_or_the_stores_own_etag():
    two = _entry([b"a" * 10, b"b" * 5])
    assert two.etag == multipart_etag([p.md5 for p in two.parts]) and two.etag.endswith("-2")
    assert object_matches({"ContentLength": 15, "ETag": f'"{two.etag}"'}, two)
    assert not object_matches({"ContentLength": 14, "ETag": f'"{two.etag}"'}, two)
    assert not object_matches({"ContentLength": 15, "ETag": '"0123456789abcdef0123456789abcdef"'}, two)
    kms = _entry([b"a" * 10, b"b" * 5], store_etag="f" * 32)  # SSE-KMS: an opaque ETag, recorded at upload
    assert object_matches({"ContentLength": 15, "ETag": f'"{"f" * 32}"'}, kms)
    assert object_matches({"ContentLength": 15, "ETag": f'"{two.etag}"'}, kms)
    assert not object_matches({"ContentLength": 15, "ETag": '"0123456789abcdef0123456789abcdef"'}, kms)
    assert not object_matches({"ContentLength": 15, "ETag": ""}, _entry([b"a" * 10, b"b" * 5]))


async def test_opaque_etags_are_recorded_and_verified_and_md5_stores_catch_a_changed_part(
    pod, s3env, tmp_path, monkeypatch
):
    """moto's ETags are md5s: the probe says so. A store with opaque ETags is simulated by rewriting the
    ETags the pod's PUTs return (what SSE-KMS does): on an md5 store that is a corruption and fails; when
    the probe says the store's ETags are opaque the backup records the store's ETag and verifies."""
    import services.backup.transfer as backup

    run = tmp_path / "run"
    write_checkpoint(run, 3, shard_bytes=200 * 1024)  # a multipart shard + two one-part files
    settings = s3env.settings()
    assert await store_etags_are_md5(S3(settings), "prime-train/run/step_3/")
    assert s3env.keys() == []  # the probe object is gone

    original_stream = backup.PodAgent.stream

    async def lying_stream(self, args, lines, on_event, **kw):
        def rewrite(ev):
            if ev.get("event") == "file":
                for p in ev["parts"]:
                    p["etag"] = "e" * 32  # not the md5 of what was sent
            on_event(ev)

        return await original_stream(self, args, lines, rewrite, **kw)

    monkeypatch.setattr(backup.PodAgent, "stream", lying_stream)
    async with SSHConnection(pod) as conn:
        with pytest.raises(BackupError, match="not the md5 the pod sent"):
            await backup_checkpoint(conn, settings, str(run), 3)
        assert "prime-train/run/step_3/manifest.json" not in s3env.keys()

        # an opaque-ETag store: the real part ETags pass through, the complete's ETag is the store's
        monkeypatch.setattr(backup.PodAgent, "stream", original_stream)
        real_call = backup.S3.call

        async def opaque(self, name, **kw):
            res = await real_call(self, name, **kw)
            if name == "complete_multipart_upload":
                res = {**res, "ETag": '"' + "d" * 32 + '"'}
            if name == "head_object" and int(res.get("ContentLength", 0)) > 100 * 1024:
                res = {**res, "ETag": '"' + "d" * 32 + '"'}
            return res

        monkeypatch.setattr(backup.S3, "call", opaque)
        result = await backup_checkpoint(conn, settings, str(run), 3)
        assert result.verified, result.problems
        shard = next(f for f in result.manifest.files if f.path == "trainer/__0_0.distcp")
        assert shard.store_etag == "d" * 32 and len(shard.parts) > 1
        assert all(not f.store_etag for f in result.manifest.files if f is not shard)  # md5 ETags: none kept
        assert (await verify_backup(settings, str(run), 3)).verified
