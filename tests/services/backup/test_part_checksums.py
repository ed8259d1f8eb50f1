"""Per-part CRC32 on the presigned part uploads (moto's S3 server, the real sshd "pod").

moto takes the pod's unsigned ``x-amz-checksum-crc32`` and, for an upload created with CRC32, completes
the object from the parts' checksums (COMPOSITE) instead of a whole-object checksum. moto does not check
a part's checksum or Content-MD5 against its bytes (AWS and MinIO do); our own check of every part's
ETag against the md5 the pod computed stays.
"""

from __future__ import annotations

import base64
import zlib

import pytest

from services.backup import store_caps
from services.backup.manifest import Manifest
from services.backup.store_caps import composite_crc32
from services.backup.transfer import backup_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

pytestmark = pytest.mark.ssh


def crc(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


async def test_parts_carry_their_crc32_and_the_store_keeps_the_composite(pod, s3env, tmp_path, monkeypatch):
    monkeypatch.setattr(store_caps, "_PART_CRC32", {})
    run = tmp_path / "run"
    step_dir = write_checkpoint(run, 3, shard_bytes=300 * 1024)
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, settings, str(run), 3)
    assert result.verified
    assert store_caps._PART_CRC32 == {(s3env.endpoint, s3env.bucket): True}
    shard = next(f for f in result.manifest.files if f.path.endswith("__0_0.distcp"))
    assert len(shard.parts) > 1
    data = (step_dir / "trainer" / "__0_0.distcp").read_bytes()
    want = composite_crc32([crc(data[p.offset : p.offset + p.raw]) for p in shard.parts])
    key = f"{settings.prefix_for(str(run))}step_3/{shard.key}"
    head = s3env.client.head_object(Bucket=s3env.bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"].split("-")[0] == want
    assert Manifest.from_json(s3env.get(f"{settings.prefix_for(str(run))}step_3/manifest.json")).files
    assert not [k for k in s3env.keys() if "checksum-probe" in k]  # the probe upload was aborted
    assert not s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads")


async def test_part_checksums_none_names_no_algorithm(pod, s3env, tmp_path, monkeypatch):
    monkeypatch.setattr(store_caps, "_PART_CRC32", {})
    run = tmp_path / "run"
    write_checkpoint(run, 4, shard_bytes=300 * 1024)
    settings = s3env.settings(part_checksums="none")
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, settings, str(run), 4)
    assert result.verified and store_caps._PART_CRC32 == {}
    shard = next(f for f in result.manifest.files if f.path.endswith("__0_0.distcp"))
    key = f"{settings.prefix_for(str(run))}step_4/{shard.key}"
    head = s3env.client.head_object(Bucket=s3env.bucket, Key=key, ChecksumMode="ENABLED")
    assert "ChecksumCRC32" not in head  # moto made its own whole-object checksum


def test_a_store_that_refuses_unsigned_part_checksums_gets_none(s3env, monkeypatch):
    """The probe's own PUT: a URL whose signature does not cover the request (as AWS judges an unsigned
    x-amz-checksum-crc32: HeadersNotSigned) is a refusal, not a crash."""
    assert (
        store_caps._put_probe(f"{s3env.endpoint}/{s3env.bucket}/no-such-upload?uploadId=nope&partNumber=1", 5.0)
        is False
    )


def test_composite_crc32_is_the_crc_of_the_parts_crcs():
    a, b = b"x" * 1000, b"y" * 10
    joined = base64.b64decode(crc(a)) + base64.b64decode(crc(b))
    assert composite_crc32([crc(a), crc(b)]) == crc(joined)
