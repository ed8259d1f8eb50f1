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


async def parts_take_crc32(s3: S3, base: str) -> bool:
    """Whether this store takes a CRC32 per part on a presigned part upload. The pod computes it after
    the URL was signed, so the ``x-amz-checksum-crc32`` header it sends is unsigned: moto and other
    S3-compatible stores take it, and an upload created with CRC32 is then completed from the parts'
    checksums (moto otherwise computes a checksum over the whole object at completion, ~2-3x the time);
    AWS refuses unsigned x-amz-* headers on presigned URLs (HeadersNotSigned), so there the uploads name
    no algorithm and every part is checked by its Content-MD5 alone. Asked once per store and bucket:
    a one-part probe upload from this app, aborted. ``part_checksums = "none"`` in backup.toml skips it."""
    if s3.settings.part_checksums == "none":
        return False
    where = (s3.settings.endpoint or "", s3.bucket)
    if where not in _PART_CRC32:
        key = base + ".checksum-probe"
        try:
            upload = await s3.call("create_multipart_upload", Bucket=s3.bucket, Key=key, ChecksumAlgorithm="CRC32")
        except BackupError:  # the store does not know the parameter
            _PART_CRC32[where] = False
            return False
        try:
            url = s3.presign("upload_part", Key=key, UploadId=upload["UploadId"], PartNumber=1)
            answer = await asyncio.to_thread(_put_probe, url, s3.settings.read_timeout)
            if answer is not None:  # no answer at all: ask again next time
                _PART_CRC32[where] = answer
        finally:
            with contextlib.suppress(BackupError):
                await s3.call("abort_multipart_upload", Bucket=s3.bucket, Key=key, UploadId=upload["UploadId"])
    return _PART_CRC32.get(where, False)


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


_CRC32_GUARD: dict[tuple[str, str], str] = {}  # (endpoint, bucket) -> how a wrong part CRC32 is caught


async def crc32_guard(s3: S3, base: str) -> str:
    """How this store catches a part whose bytes do not match the CRC32 the pod sent with it: "part" (the
    store refuses the PUT, as AWS and MinIO do), "complete" (it takes the part but completes the object
    with a composite CRC32 of the bytes it holds, which then differs from the parts' own: moto), or ""
    (neither: the pod must keep sending each part's md5). Only a store whose :func:`parts_take_crc32` is
    True is asked; once per store and bucket, with a small upload whose CRC32 is deliberately wrong,
    completed and deleted. Where it is caught, the pod's CRC32 is the part's integrity check and its md5
    (the costliest hash per byte) is not computed; the file's sha256 stays for the restore."""
    where = (s3.settings.endpoint or "", s3.bucket)
    if where in _CRC32_GUARD:
        return _CRC32_GUARD[where]
    key = base + ".checksum-guard-probe"
    upload = await s3.call("create_multipart_upload", Bucket=s3.bucket, Key=key, ChecksumAlgorithm="CRC32")
    completed = False
    try:
        url = s3.presign("upload_part", Key=key, UploadId=upload["UploadId"], PartNumber=1)
        body, wrong = b"prime-train-tui part checksum guard probe", _crc32(b"other bytes")
        answer = await asyncio.to_thread(_put_probe, url, s3.settings.read_timeout, body, wrong)
        if answer is None:  # no answer: ask again next time, the md5 stays meanwhile
            return ""
        if answer is False:
            _CRC32_GUARD[where] = "part"
            return "part"
        try:
            done = await s3.call(
                "complete_multipart_upload",
                Bucket=s3.bucket,
                Key=key,
                UploadId=upload["UploadId"],
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": answer_etag(body), "ChecksumCRC32": wrong}]},
            )
        except BackupError:  # refused at completion: caught too, but keep the md5 (no composite to compare)
            _CRC32_GUARD[where] = ""
            return ""
        completed = True
        theirs = await object_crc32(s3, key, done)
        caught = bool(theirs) and theirs == composite_crc32([_crc32(body)]) != composite_crc32([wrong])
        _CRC32_GUARD[where] = "complete" if caught else ""
        return _CRC32_GUARD[where]
    finally:
        with contextlib.suppress(BackupError):
            if completed:
                await s3.call("delete_object", Bucket=s3.bucket, Key=key)
            else:
                await s3.call("abort_multipart_upload", Bucket=s3.bucket, Key=key, UploadId=upload["UploadId"])


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
