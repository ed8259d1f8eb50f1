"""Who may back up a step under a shared prefix: claims, and the multipart uploads a run started.

Before anything of step N is uploaded, the run writes ``step_N/claims/<run key>.json`` (its source and
the time) and lists ``step_N/claims/``: when another run's claim (one this run does not own:
:meth:`services.backup.manifest.RunSource.owns`) is older (LastModified, then key: every run computes the same
order), this run refuses with the one-line collision error and sends nothing. A claim older than
``CLAIM_STALE`` (24 h) is stale and ignored (the step never got a manifest: the caller has checked);
this run's own stale claim is written again. S3 is strongly consistent: of two runs claiming at once,
the one listing second sees both and the same winner.

A run resumes only the multipart uploads it started itself: their UploadIds are recorded in
``step_N/uploads/<run key>.json``; another run's unfinished upload of the same key is never used.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import time

from services.backup.manifest import RunSource, source_label
from services.backup.s3 import S3, BackupError, each_page

CLAIM_STALE = 24 * 3600.0


def run_key(source: RunSource) -> str:
    """A stable id of a run: its record id, or (no record) its pod and run dir."""
    ident = source.run_id or f"{source.pod}\n{source.run_dir.rstrip('/')}"
    return hashlib.sha256(ident.encode()).hexdigest()[:20]


def collision(step: int, mine: RunSource, theirs: RunSource | None, where: str) -> BackupError:
    return BackupError(
        f"step {step} in {where} was backed up by another run ({source_label(theirs)}), "
        f"not this one ({mine.label()}): refusing to overwrite it",
        hint="give each run its own prefix: set prefix in backup.toml (or --prefix)",
    )


def _age(obj: dict, now: float) -> float:
    when = obj.get("LastModified")
    return now - when.timestamp() if isinstance(when, dt.datetime) else 0.0


async def claim_step(
    s3: S3,
    base: str,
    step: int,
    source: RunSource,
    where: str,
    stale: float | None = None,
    listed: list[dict] | None = None,
) -> None:
    """Claim step N for the run ``source`` or raise the collision error (nothing uploaded either way).
    ``listed``: the claims as the caller listed them just before (one listing of the whole step)."""
    stale = CLAIM_STALE if stale is None else stale
    prefix, mine = f"{base}claims/", f"{base}claims/{run_key(source)}.json"
    now = time.time()
    claims = listed if listed is not None else await each_page(s3, "list_objects_v2", "Contents", Prefix=prefix)
    own = next((o for o in claims if o["Key"] == mine), None)
    if own is None or _age(own, now) > stale:
        body = json.dumps({"source": source.to_dict(), "time": now}).encode()
        await s3.call("put_object", Bucket=s3.bucket, Key=mine, Body=body, ContentType="application/json")
        claims = await each_page(s3, "list_objects_v2", "Contents", Prefix=prefix)
        own = next((o for o in claims if o["Key"] == mine), None)
    if own is None:
        raise BackupError(f"the claim on step {step} ({mine}) is not in the bucket after writing it")
    order = (own.get("LastModified"), own["Key"])
    for o in sorted(claims, key=lambda o: (o.get("LastModified"), o["Key"])):
        if (o.get("LastModified"), o["Key"]) >= order:
            break
        if _age(o, now) > stale:
            continue
        theirs = await _claim_source(s3, o["Key"])
        if not source.owns(theirs, step):
            raise collision(step, source, theirs, where)


async def _claim_source(s3: S3, key: str) -> RunSource | None:
    try:
        obj = await s3.call("get_object", Bucket=s3.bucket, Key=key)
        return RunSource.from_dict(json.loads(await asyncio.to_thread(obj["Body"].read)).get("source"))
    except (BackupError, ValueError, AttributeError):
        return None  # gone or unreadable: an unknown run's claim (never this run's)


class Uploads:
    """The multipart uploads this run started under one step (key -> UploadId), kept in the bucket."""

    def __init__(self, s3: S3, base: str, source: RunSource) -> None:
        self.s3, self.key = s3, f"{base}uploads/{run_key(source)}.json"
        self.ids: dict[str, str] = {}
        self.checksums: dict[str, str] = {}  # key -> the checksum algorithm its upload names ("" none)

    async def load(self, listed: bool = True) -> None:
        """Read this run's record of its uploads; ``listed`` False: a listing just showed there is none."""
        if not listed:
            self.ids = {}
            return
        try:
            obj = await self.s3.call("get_object", Bucket=self.s3.bucket, Key=self.key)
            data = json.loads(await asyncio.to_thread(obj["Body"].read))
            self.ids = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except BackupError as exc:
            if "NoSuchKey" not in str(exc) and "404" not in str(exc):
                raise
        except ValueError:
            self.ids = {}

    async def resume_or_create(self, key: str, checksum: str | None = None) -> tuple[str, dict[int, str]]:
        """This run's unfinished upload of ``key`` and its parts' md5s, or a new upload (recorded), created
        with the parts' ``checksum`` algorithm when given ("CRC32"). ``checksums[key]``: the algorithm the
        upload names (a resumed one keeps the one it was created with), "" for none."""
        ours = []
        if key in self.ids:  # only an upload this run recorded is resumed: none recorded, nothing to ask
            listing = await self.s3.call("list_multipart_uploads", Bucket=self.s3.bucket, Prefix=key)
            ours = [u for u in listing.get("Uploads", []) or [] if u["Key"] == key and u["UploadId"] == self.ids[key]]
        if ours:
            upload_id = ours[0]["UploadId"]
            self.checksums[key] = str(ours[0].get("ChecksumAlgorithm") or "").upper()
            parts = await each_page(self.s3, "list_parts", "Parts", Key=key, UploadId=upload_id)
            return upload_id, {int(p["PartNumber"]): str(p["ETag"]).strip('"') for p in parts}
        created = await self.s3.call(
            "create_multipart_upload",
            Bucket=self.s3.bucket,
            Key=key,
            **({"ChecksumAlgorithm": checksum} if checksum else {}),
        )
        self.checksums[key] = checksum or ""
        self.ids[key] = created["UploadId"]
        await self.s3.call(
            "put_object",
            Bucket=self.s3.bucket,
            Key=self.key,
            Body=json.dumps(self.ids).encode(),
            ContentType="application/json",
        )
        return created["UploadId"], {}

    async def done(self) -> None:
        """Every upload is complete (the manifest is written): the record goes."""
        if self.ids:
            await self.s3.call("delete_object", Bucket=self.s3.bucket, Key=self.key)
            self.ids = {}
