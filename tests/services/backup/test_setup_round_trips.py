"""What a backup asks the store before its first byte moves (moto's S3 server, the real sshd "pod").

Measured on 256 MiB (tests/benchmarks/backup_throughput.py): ~0.45 s of the backup went by in round trips
one after the other before the large file's first part could go: the manifest read, two claim listings, the
uploads record read, a HEAD per file, a listing of multipart uploads per large file, and the store's two
CRC32 questions as two probe uploads (create, PUT, abort; create, PUT, complete, HEAD, delete) that started
only after the claim. Now one listing of the step says what is there (the manifest, the claims, the uploads
record and the objects already complete are read only when listed), a large file with no upload recorded by
this run gets a new one without listing, and one probe upload answers both CRC32 questions beside the claim
(its two PUTs at once, its removal not waited for). What must hold: the same answers per kind of store, no
probe left behind, and an object already in the bucket still found (test_sources.py covers the re-send).
"""

from __future__ import annotations

import base64
import http.server
import threading
import zlib

import pytest

from services.backup import store_caps
from services.backup.s3 import S3
from services.backup.transfer import backup_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import StoreProxy, write_checkpoint

pytestmark = pytest.mark.ssh


@pytest.fixture
def fresh_caps(monkeypatch):
    monkeypatch.setattr(store_caps, "_PART_CRC32", {})
    monkeypatch.setattr(store_caps, "_CRC32_GUARD", {})


def record_calls(monkeypatch) -> list[tuple[str, str]]:
    """(operation, key) of every S3 call this process makes, in the order they go out."""
    calls: list[tuple[str, str]] = []
    real = S3._sync

    def wrapped(self, name, kw):
        calls.append((name, str(kw.get("Key", ""))))
        return real(self, name, kw)

    monkeypatch.setattr(S3, "_sync", wrapped)
    return calls


async def test_a_new_step_is_listed_once_and_its_large_file_gets_an_upload_at_once(
    pod, s3env, tmp_path, monkeypatch, fresh_caps
):
    run = tmp_path / "run"
    write_checkpoint(run, 2, shard_bytes=300 * 1024)
    calls = record_calls(monkeypatch)
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, s3env.settings(), str(run), 2)
    assert result.verified
    first = next(i for i, (name, key) in enumerate(calls) if name == "create_multipart_upload" and "distcp" in key)
    before = calls[:first]
    asked = [
        c for c in before if c[0] in ("head_object", "get_object", "list_multipart_uploads") and "probe" not in c[1]
    ]
    assert not asked, asked
    assert [c[0] for c in before].count("list_objects_v2") == 2  # the step, and the claims after the claim
    probes = [c for c in calls if c[0] == "create_multipart_upload" and "probe" in c[1]]
    assert len(probes) == 1, probes  # one upload answers both CRC32 questions
    assert not [k for k in s3env.keys() if "probe" in k]
    assert not s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads")


class _Store(StoreProxy):
    """Forwards to moto; ``mode`` "checks": refuses a part whose x-amz-checksum-crc32 is not its bytes'
    (as AWS and MinIO do), "unsigned": refuses any request carrying that header (AWS: HeadersNotSigned)."""

    mode = ""

    def alter(self, body: bytes) -> bytes | None:
        crc = self.headers.get("x-amz-checksum-crc32")
        if crc and self.command == "PUT":
            mine = base64.b64encode((zlib.crc32(body) & 0xFFFFFFFF).to_bytes(4, "big")).decode()
            if self.mode == "unsigned" or (self.mode == "checks" and crc != mine):
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
        return body


@pytest.mark.parametrize(
    ("mode", "answer"), [("", (True, "complete")), ("checks", (True, "part")), ("unsigned", (False, ""))]
)
async def test_one_probe_upload_tells_each_kind_of_store(s3env, fresh_caps, monkeypatch, mode, answer):
    handler = type("H", (_Store,), {"upstream": s3env.endpoint, "mode": mode})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        s3 = S3(s3env.settings(endpoint=f"http://127.0.0.1:{server.server_address[1]}"))
        calls = record_calls(monkeypatch)
        assert await store_caps.part_caps(s3, "probe-test/") == answer
        assert [c[0] for c in calls].count("create_multipart_upload") == 1
        assert await store_caps.part_caps(s3, "probe-test/") == answer  # asked once per store
        assert [c[0] for c in calls].count("create_multipart_upload") == 1
    finally:
        server.shutdown()
        server.server_close()
    assert not [k for k in s3env.keys() if "probe" in k]
    assert not s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads")
