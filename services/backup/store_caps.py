"""What a bucket's store takes, asked once per store: per-part CRC32s on presigned part uploads, md5 ETags.

Split from services.backup.transfer (the backup itself); it asks through :class:`S3` and a plain
urllib PUT on a presigned URL, the way the pod's agent will send its parts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import urllib.error
import urllib.request
import zlib

from services.backup.s3 import S3, BackupError


def composite_crc32(crcs: list[str]) -> str:
    """The CRC32 a store gives a multipart object uploaded with per-part CRC32s (COMPOSITE): the CRC32 of
    the parts' big-endian CRC32s, base64 (S3 adds "-<parts>")."""
    joined = b"".join(base64.b64decode(c) for c in crcs)
    return base64.b64encode((zlib.crc32(joined) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


_PART_CRC32: dict[tuple[str, str], bool] = {}  # (endpoint, bucket) -> parts may carry their CRC32
_CRC32_GUARD: dict[tuple[str, str], str] = {}  # (endpoint, bucket) -> how a wrong part CRC32 is caught


async def part_caps(s3: S3, base: str, later: list[asyncio.Task] | None = None) -> tuple[bool, str]:
    """(whether this store takes a CRC32 per part on a presigned part upload, how it catches a part whose
    bytes do not match the CRC32 sent with it), asked once per store and bucket with ONE small upload.

    Takes: the pod computes each CRC32 after the URL was signed, so the ``x-amz-checksum-crc32`` header it
    sends is unsigned: moto and other S3-compatible stores take it, and an upload created with CRC32 is then
    completed from the parts' checksums (moto otherwise computes a checksum over the whole object at
    completion, ~2-3x the time); AWS refuses unsigned x-amz-* headers on presigned URLs (HeadersNotSigned),
    so there the uploads name no algorithm and every part is checked by its Content-MD5 alone.

    Caught: "part" (the store refuses the PUT, as AWS and MinIO do), "complete" (it takes the part but
    completes the object with a composite CRC32 of the bytes it holds, which then differs from the parts'
    own: moto), or "" (neither, or not asked: the pod must keep sending each part's md5). Where it is
    caught, the pod's CRC32 is the part's integrity check and its md5 (the costliest hash per byte) is not
    computed; the file's sha256 stays for the restore.

    The probe: one upload created with CRC32; part 1 with its own CRC32 and part 2 with a wrong one go at
    once (part 1 refused: not taken; part 2 refused: "part"); when both are taken the upload is completed
    with part 2 alone and the object's CRC32 tells "complete" from "". The object or upload is removed:
    given ``later``, by a task appended to it (the caller awaits it; the answer does not wait for it).
    ``part_checksums = "none"`` in backup.toml skips it. A store that does not answer is asked again next
    time (meanwhile: no CRC32s, the md5 stays)."""
    if s3.settings.part_checksums == "none":
        return False, ""
    where = (s3.settings.endpoint or "", s3.bucket)
    if where in _PART_CRC32 and (where in _CRC32_GUARD or not _PART_CRC32[where]):
        return _PART_CRC32[where], _CRC32_GUARD.get(where, "")
    key = base + ".checksum-probe"
    try:
        upload = await s3.call("create_multipart_upload", Bucket=s3.bucket, Key=key, ChecksumAlgorithm="CRC32")
    except BackupError:  # the store does not know the parameter
        _PART_CRC32[where] = False
        return False, ""
    completed = False
    try:
        right = b"prime-train-tui part checksum probe"
        body, wrong = b"prime-train-tui part checksum guard probe", _crc32(b"other bytes")
        urls = [s3.presign("upload_part", Key=key, UploadId=upload["UploadId"], PartNumber=n) for n in (1, 2)]
        takes, refuses_wrong = await asyncio.gather(
            asyncio.to_thread(_put_probe, urls[0], s3.settings.read_timeout, right),
            asyncio.to_thread(_put_probe, urls[1], s3.settings.read_timeout, body, wrong),
        )
        if takes is None:  # no answer at all: ask again next time
            return False, ""
        _PART_CRC32[where] = takes
        if not takes or refuses_wrong is None:  # not taken; or no answer: the md5 stays, asked again next time
            return takes, ""
        if refuses_wrong is False:
            _CRC32_GUARD[where] = "part"
            return True, "part"
        try:
            done = await s3.call(
                "complete_multipart_upload",
                Bucket=s3.bucket,
                Key=key,
                UploadId=upload["UploadId"],
                MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": answer_etag(body), "ChecksumCRC32": wrong}]},
            )
        except BackupError:  # refused at completion: caught too, but keep the md5 (no composite to compare)
            _CRC32_GUARD[where] = ""
            return True, ""
        completed = True
        theirs = await object_crc32(s3, key, done)
        caught = bool(theirs) and theirs == composite_crc32([_crc32(body)]) != composite_crc32([wrong])
        _CRC32_GUARD[where] = "complete" if caught else ""
        return True, _CRC32_GUARD[where]
    finally:
        cleanup = _remove_probe(s3, key, None if completed else upload["UploadId"])
        if later is None:
            await cleanup
        else:
            later.append(asyncio.ensure_future(cleanup))


async def _remove_probe(s3: S3, key: str, upload_id: str | None) -> None:
    with contextlib.suppress(BackupError):
        if upload_id is None:
            await s3.call("delete_object", Bucket=s3.bucket, Key=key)
        else:
            await s3.call("abort_multipart_upload", Bucket=s3.bucket, Key=key, UploadId=upload_id)


def _put_probe(
    url: str, timeout: float, body: bytes = b"prime-train-tui part checksum probe", crc: str = ""
) -> bool | None:
    """PUT a small part with a CRC32 (its own unless ``crc``) and its Content-MD5, unsigned: True when the
    store takes it, False when it refuses, None when it does not answer."""
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode(),
        "x-amz-checksum-crc32": crc or _crc32(body),
    }
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=body, method="PUT", headers=headers), timeout=timeout
        ) as resp:
            return 200 <= resp.status < 300
    except urllib.error.HTTPError:
        return False
    except OSError:
        return None


async def object_crc32(s3: S3, key: str, completed: dict) -> str:
    """The store's CRC32 of a completed object (without the "-<parts>"): from the complete's answer, else
    (moto says it only there) from a HEAD asking for checksums; "" when the store says none."""
    theirs = str(completed.get("ChecksumCRC32") or "")
    if not theirs:
        head = await s3.call("head_object", Bucket=s3.bucket, Key=key, ChecksumMode="ENABLED")
        theirs = str(head.get("ChecksumCRC32") or "")
    return theirs.split("-")[0]


def answer_etag(body: bytes) -> str:
    return '"%s"' % hashlib.md5(body).hexdigest()


def _crc32(data: bytes) -> str:
    return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


async def store_etags_are_md5(s3: S3, base: str) -> bool:
    """Whether this bucket's ETags are md5s (AWS without SSE-KMS/SSE-C, moto, MinIO...): a tiny probe
    object tells. Asked only when a part's ETag is not the md5 we sent: either the store's ETags are
    opaque (we then keep the store's ETag in the manifest) or the bytes were changed on the way."""
    body = b"prime-train-tui etag probe"
    key = base + ".etag-probe"
    put = await s3.call("put_object", Bucket=s3.bucket, Key=key, Body=body)
    await s3.call("delete_object", Bucket=s3.bucket, Key=key)
    return str(put.get("ETag", "")).strip('"') == hashlib.md5(body).hexdigest()
