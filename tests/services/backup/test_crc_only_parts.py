"""Parts checked by their CRC32 alone (moto's S3 server, the real sshd "pod").

The pod hashed every byte twice (sha256 per file, md5 per part) where boto3 computes one CRC32, and md5
is the costliest of its hashes: most of the backup's CPU on a busy pod. Where the store catches a part
whose bytes do not match its CRC32 (store_caps.part_caps: moto recomputes the composite at completion,
AWS/MinIO refuse the PUT), new parts now carry only their CRC32; what must still hold: a part corrupted
on the way between the pod and the store fails the backup (no manifest), an object changed in the
bucket afterwards fails verification, and the restore gives back the very bytes, checked by sha256.
"""

from __future__ import annotations

import http.server
import threading
import urllib.parse

import pytest

from services.backup import store_caps
from services.backup.bucket import verify_backup
from services.backup.manifest import Manifest, ManifestError
from services.backup.s3 import BackupError
from services.backup.transfer import backup_checkpoint, restore_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import StoreProxy, write_checkpoint

pytestmark = pytest.mark.ssh


@pytest.fixture
def fresh_caps(monkeypatch):
    monkeypatch.setattr(store_caps, "_PART_CRC32", {})
    monkeypatch.setattr(store_caps, "_CRC32_GUARD", {})


async def test_parts_carry_only_their_crc32_and_the_restore_gives_back_the_bytes(pod, s3env, tmp_path, fresh_caps):
    run = tmp_path / "run"
    step_dir = write_checkpoint(run, 3, shard_bytes=300 * 1024)
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, settings, str(run), 3)
        assert result.verified
        assert store_caps._CRC32_GUARD == {(s3env.endpoint, s3env.bucket): "complete"}
        assert not [k for k in s3env.keys() if "probe" in k]  # the guard's probe object is gone
        shard = next(f for f in result.manifest.files if f.path == "trainer/__0_0.distcp")
        assert len(shard.parts) > 1
        assert all(p.md5 == "" and p.crc32 for p in shard.parts)  # no md5 computed for them
        assert shard.store_etag and not shard.etag
        small = [f for f in result.manifest.files if f is not shard]
        assert all(p.md5 for f in small for p in f.parts)  # one-PUT files keep their Content-MD5
        stored = Manifest.from_json(s3env.get(f"{settings.prefix_for(str(run))}step_3/manifest.json"))
        assert stored.version == 2 and stored.files == result.manifest.files
        assert (await verify_backup(settings, str(run), 3)).verified

        fresh = tmp_path / "fresh" / "run"
        fresh.mkdir(parents=True)
        await restore_checkpoint(conn, settings, str(fresh), 3, source=result.manifest.source)
    for rel in ("trainer/__0_0.distcp", "trainer/.metadata", "orchestrator/progress.pt"):
        assert (fresh / "checkpoints" / "step_3" / rel).read_bytes() == (step_dir / rel).read_bytes()


class _Corrupting(StoreProxy):
    """Forwards every request to moto; flips one byte in the body of the first part upload numbered 2."""

    flipped: list[str] = []

    def alter(self, body: bytes) -> bytes | None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if self.command == "PUT" and query.get("partNumber") == ["2"] and not self.flipped and len(body) > 100:
            body = body[:50] + bytes([body[50] ^ 0xFF]) + body[51:]
            self.flipped.append(self.path.split("?")[0])
        return body


async def test_a_part_corrupted_on_the_way_fails_the_backup(pod, s3env, tmp_path, fresh_caps):
    handler = type("H", (_Corrupting,), {"upstream": s3env.endpoint, "flipped": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = tmp_path / "run"
        write_checkpoint(run, 5, shard_bytes=300 * 1024)
        settings = s3env.settings(endpoint=f"http://127.0.0.1:{server.server_address[1]}")
        async with SSHConnection(pod) as conn:
            with pytest.raises(BackupError, match="corrupted on the way"):
                await backup_checkpoint(conn, settings, str(run), 5)
        assert handler.flipped and handler.flipped[0].endswith("__0_0.distcp")  # a real part was changed
        assert store_caps._CRC32_GUARD == {(settings.endpoint, s3env.bucket): "complete"}  # the CRC32-only path
        assert not [k for k in s3env.keys() if k.endswith("manifest.json")]
    finally:
        server.shutdown()
        server.server_close()


async def test_an_object_changed_in_the_bucket_after_a_crc_only_backup_fails_verification(
    pod, s3env, tmp_path, fresh_caps
):
    run = tmp_path / "run"
    write_checkpoint(run, 6, shard_bytes=300 * 1024)
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, settings, str(run), 6)
    shard = next(f for f in result.manifest.files if f.path == "trainer/__0_0.distcp")
    assert not shard.etag  # checked by the store's ETag alone
    key = f"{settings.prefix_for(str(run))}step_6/{shard.key}"
    body = bytearray(s3env.get(key))
    body[1000] ^= 1
    s3env.client.put_object(Bucket=s3env.bucket, Key=key, Body=bytes(body))
    check = await verify_backup(settings, str(run), 6)
    assert not check.verified and any("__0_0.distcp" in p for p in check.problems)


def test_a_manifest_part_without_md5_needs_a_crc32_and_a_store_etag():
    part = {"n": 1, "offset": 0, "raw": 4, "size": 4, "md5": "", "crc32": "DUoRhQ=="}
    entry = {"path": "a", "size": 4, "sha256": "0" * 64, "parts": [part]}
    doc = {"version": 2, "step": 1, "run": "r", "created": 1.0, "files": [entry]}
    import json

    with pytest.raises(ManifestError, match="no store ETag"):
        Manifest.from_json(json.dumps(doc))
    entry["store_etag"] = "f" * 32
    assert Manifest.from_json(json.dumps(doc)).files[0].parts[0].crc32 == "DUoRhQ=="
    part["crc32"] = ""
    with pytest.raises(ManifestError, match="md5"):
        Manifest.from_json(json.dumps(doc))
    part["crc32"] = "not base64!"
    with pytest.raises(ManifestError, match="crc32"):
        Manifest.from_json(json.dumps(doc))
