"""The bucket side of checkpoint backups: objects against their manifest, the listing, keep-last-N.

Several runs may share a prefix (the default one is ``prime-train/<run dir basename>/``: every pod with
run dir ``/workspace/run`` shares ``prime-train/run/``), so every manifest records the run it came from
(:class:`services.backup.manifest.RunSource`) and everything that decides for a run -- "verified for this
run", keep-last in the bucket -- only counts that run's backups. A manifest without a source (written
before sources were recorded) counts for no run: nothing on a pod is deleted because of it and it is
never pruned by us.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from services.backup.manifest import BucketCheckpoint, FileEntry, Manifest, ManifestError, PodCheckpoint, RunSource
from services.backup.s3 import S3, BackupError, BackupSettings, each_page
from services.pod.agent.common import parse_step


async def head_object(s3: S3, key: str) -> dict | None:
    try:
        return await s3.call("head_object", Bucket=s3.bucket, Key=key)
    except BackupError as exc:
        if "404" in str(exc) or "Not Found" in str(exc) or "NoSuchKey" in str(exc):
            return None
        raise


def object_matches(head: dict, f: FileEntry) -> bool:
    """Same size and the ETag S3 derives from our md5s, or (stores whose ETags are not md5s, e.g.
    SSE-KMS) the ETag the store gave when the upload was completed from parts we checked."""
    etag = str(head.get("ETag", "")).strip('"')
    return int(head.get("ContentLength", -1)) == f.stored_size and bool(etag) and etag in {f.etag, f.store_etag}


HEADS = 8  # HEAD requests in flight while a step's objects are checked (botocore's pool holds 10)


async def check_objects(s3: S3, base: str, manifest: Manifest) -> list[str]:
    """What is wrong with the step's objects against its manifest (empty: every object matches). The
    HEADs go out a few at a time: a checkpoint of many shards, checked once after its backup and again
    per step by every listing, no longer costs a round trip per file in turn."""
    gate = asyncio.Semaphore(HEADS)

    async def one(f: FileEntry) -> dict | None:
        async with gate:
            return await head_object(s3, base + f.key)

    heads = await asyncio.gather(*(one(f) for f in manifest.files))
    problems = []
    for f, head in zip(manifest.files, heads):
        if head is None:
            problems.append(f"{f.path}: missing from the bucket")
        elif not object_matches(head, f):
            problems.append(
                f"{f.path}: bucket object differs from the manifest "
                f"({head.get('ContentLength')} bytes, ETag {str(head.get('ETag')).strip(chr(34))}; "
                f"expected {f.stored_size} bytes, ETag {f.store_etag or f.etag})"
            )
    return problems


async def read_manifest(s3: S3, base: str) -> Manifest | None:
    """The manifest of the step at ``base`` (None: there is none); :class:`ManifestError` naming the object
    when it cannot be used (not JSON, wrongly shaped, an unsafe path: services.backup.manifest)."""
    try:
        obj = await s3.call("get_object", Bucket=s3.bucket, Key=base + "manifest.json")
    except BackupError as exc:
        if "NoSuchKey" in str(exc) or "404" in str(exc):
            return None
        raise
    try:
        return Manifest.from_json(await asyncio.to_thread(obj["Body"].read))
    except ManifestError as exc:
        raise ManifestError(
            f"s3://{s3.bucket}/{base}manifest.json: {exc}",
            hint=exc.hint or "someone changed it in the bucket, or an older app wrote it: nothing was restored from it",
        ) from None


async def verify_backup(settings: BackupSettings, run_dir: str, step: int, s3: S3 | None = None) -> BucketCheckpoint:
    """Step ``step``'s backup checked against its manifest. ``s3``: a client for ``settings`` to reuse
    (each new one costs tens of ms)."""
    s3 = s3 or S3(settings)
    base = f"{settings.prefix_for(run_dir)}step_{step}/"
    try:
        manifest = await read_manifest(s3, base)
    except ManifestError as exc:  # that step is not verified, and says why; the other steps are still listed
        return BucketCheckpoint(step, 0, 0, False, (str(exc),))
    if manifest is None:
        return BucketCheckpoint(step, 0, 0, False, ("no manifest: the backup never finished",))
    problems = await check_objects(s3, base, manifest)
    return BucketCheckpoint(
        step,
        manifest.bytes,
        manifest.stored_bytes,
        not problems,
        tuple(problems),
        manifest.created,
        manifest.source,
        manifest.fingerprint,
    )


async def list_bucket(
    settings: BackupSettings, run_dir: str, s3: S3 | None = None, known: BucketCheckpoint | None = None
) -> list[BucketCheckpoint]:
    """Every step under the run's prefix, whichever run it came from (``source``), each verified against
    its manifest (one HEAD per file), all through one client (``s3`` when given). ``known``: a step this
    process has just checked and marked verified (the backup that wrote its manifest), not asked again."""
    s3 = s3 or S3(settings)
    prefix = settings.prefix_for(run_dir)
    objects = await each_page(s3, "list_objects_v2", "Contents", Prefix=prefix)
    sizes: dict[int, int] = {}
    for o in objects:
        step = _step_of(o["Key"], prefix)
        if step is not None:
            sizes[step] = sizes.get(step, 0) + int(o["Size"])
    out = []
    for step in sorted(sizes):
        checked = (
            known if known is not None and known.step == step else await verify_backup(settings, run_dir, step, s3)
        )
        out.append(checked if checked.bytes else BucketCheckpoint(step, 0, sizes[step], False, checked.problems))
    return out


def ours(listing: Iterable[BucketCheckpoint], source: RunSource | None) -> list[BucketCheckpoint]:
    """The listed steps that came from the run ``source`` (none when it is unknown)."""
    return [c for c in listing if source is not None and source.owns(c.source, c.step)]


async def verified_steps(settings: BackupSettings, run_dir: str, source: RunSource | None) -> set[int]:
    """For cleanup and resume: the steps whose backup is verified now AND came from the run ``source``
    (another run's backup under the same prefix, or one of unknown source, never counts)."""
    return {c.step for c in ours(await list_bucket(settings, run_dir), source) if c.verified}


def backed_up(
    listing: Iterable[BucketCheckpoint], source: RunSource | None, pod: Iterable[PodCheckpoint]
) -> tuple[set[int], int | None]:
    """For cleanup and auto-backup: (the pod's steps whose checkpoint has a verified backup of THAT
    checkpoint by the run ``source``, the oldest step verified for that run in the bucket). A backup of
    the same step made from another checkpoint (a run relaunched by hand in the same run dir writes its
    own step_100) or recorded without files' mtimes (an old manifest) counts for no checkpoint."""
    mine = [c for c in ours(listing, source) if c.verified]
    on_pod = {c.step: c for c in pod}
    return {c.step for c in mine if c.of(on_pod.get(c.step))}, min((c.step for c in mine), default=None)


def _step_of(key: str, prefix: str) -> int | None:
    return parse_step(key[len(prefix) :].split("/", 1)[0])  # the pod scripts' parser: step_² is no step


async def prune_bucket(
    settings: BackupSettings,
    run_dir: str,
    keep_last: int,
    source: RunSource | None = None,
    s3: S3 | None = None,
    known: BucketCheckpoint | None = None,
) -> list[int]:
    """Keep the newest ``keep_last`` verified steps of the run ``source`` (its own and those of the runs
    it was resumed from, up to the resume step); delete its own older steps (verified or not). The
    steps of the runs it was resumed from are never deleted (that run may still be alive elsewhere: a
    pod that came back after the resume), nor are another run's steps, steps of unknown source (an old manifest, or no
    manifest: a
    backup that never finished, whoever started it) and steps newer than the oldest kept one are never
    touched."""
    if keep_last <= 0 or source is None:
        return []
    s3 = s3 or S3(settings)
    prefix = settings.prefix_for(run_dir)
    steps = ours(await list_bucket(settings, run_dir, s3, known), source)
    kept = sorted((c.step for c in steps if c.verified), reverse=True)[:keep_last]
    if len(kept) < keep_last:
        return []
    floor = min(kept)
    doomed = sorted(c.step for c in steps if c.step < floor and source.same_run(c.source))  # never an ancestor's
    for step in doomed:
        base = f"{prefix}step_{step}/"
        for o in await each_page(s3, "list_objects_v2", "Contents", Prefix=base):
            await s3.call("delete_object", Bucket=s3.bucket, Key=o["Key"])
        listing = await s3.call("list_multipart_uploads", Bucket=s3.bucket, Prefix=base)
        for u in listing.get("Uploads", []) or []:
            await s3.call("abort_multipart_upload", Bucket=s3.bucket, Key=u["Key"], UploadId=u["UploadId"])
    return doomed
