"""Checkpoints <-> S3: presigned multipart backup FROM the pod, verify, resume, restore, keep-last-N.

The checkpoint bytes never pass through this process. The app (with the user's boto3 credentials)
creates the multipart uploads and presigns one URL per part, file by file as the agent asks for more;
``services/pod/agent/backup.py`` on the pod reads each file ONCE (sha256 in order, md5 and optional zstd per
part; CRC32 instead of md5 where the store catches a wrong one: store_caps.part_caps) and PUTs the parts
with urllib; the app completes each upload with the part ETags the store returned (checking the object's
composite CRC32 against the parts'), checks every object's size and ETag against the manifest, and only then writes
``step_N/manifest.json`` (the "verified" mark). Resume asks the bucket (list_multipart_uploads +
list_parts, or HEAD for one-part files) which parts are there; the agent sends only parts whose md5
differs, so no local state is needed.

Restore sends presigned GET URLs; the agent downloads into a staging dir, checks every sha256 against
the manifest and renames the staging dir to ``step_N`` only then. A manifest naming an unsafe path is refused
whole when read (services.backup.manifest), and the agent checks the plan again (pod/agent/restore.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shlex
import sys
import time
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from services.backup.bucket import (
    backed_up,
    check_objects,
    list_bucket,
    ours,
    prune_bucket,
    read_manifest,
)
from services.backup.claims import Uploads, claim_step, collision
from services.backup.manifest import (
    BucketCheckpoint,
    FileEntry,
    Manifest,
    PodCheckpoint,
    RunSource,
    TransferProgress,
    source_label,
)
from services.backup.s3 import S3, BackupError, BackupSettings, each_page, hide_credentials, part_size_for
from services.backup.store_caps import composite_crc32, object_crc32, part_caps, store_etags_are_md5
from services.pod import agent, trusted
from services.pod.agent.transfer import check_path
from services.pod.connection import Connection, RemoteProcess
from services.pod.ssh import SSHConnection

# Uploaded together, the agent last (its presence: all are there).
AGENT_PATH, AGENT_FILES = agent.BACKUP, agent.BACKUP_FILES


ProgressFn = Callable[[TransferProgress], None]


@dataclass
class BackupResult:
    manifest: Manifest
    verified: bool
    uploaded_parts: int = 0
    skipped_parts: int = 0  # already in the bucket (resume) with the expected md5
    problems: list[str] = field(default_factory=list)
    pruned: list[int] = field(default_factory=list)


# ------------------------------------------------------------------ the agent on the pod
class PodAgent:
    """Installs ``pod/agent/backup.py`` and pod/agent/common.py on the pod, in a directory named by their content
    hash, and runs it."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.command = ""

    async def install(self) -> str:
        """Make the agent's directory private to the SSH user (or refuse) and upload its files unless each is
        there with its content: one exec when nothing is missing. It then runs only through the guard
        (services/pod/trusted.py), which checks every file's content first. Returns the agent's path."""
        if not isinstance(self.conn, SSHConnection):  # this machine: run it where it is (pod_common beside it)
            self.command = f"{shlex.quote(sys.executable)} {shlex.quote(str(AGENT_PATH))}"
            return str(AGENT_PATH)
        agent_bundle = trusted.pod_bundle(self.conn.pod, AGENT_FILES, "backup-agent")
        await trusted.install_or_refuse(
            self.conn, agent_bundle, BackupError, "cannot install the backup agent on the pod"
        )
        self.command = shlex.join(agent_bundle.run_argv())
        return agent_bundle.script_path

    async def run_json(self, args: list[str], timeout: float = 3600) -> list[dict]:
        try:
            rc, out, err = await self.conn.run(f"{self.command} {' '.join(map(shlex.quote, args))}", timeout=timeout)
        except asyncio.TimeoutError:
            raise BackupError(
                f"the backup agent on the pod did not answer within {timeout:g} s ({args[0]})",
                hint="the pod may be overloaded or its disk stuck; try again",
            ) from None
        events = _events(out)
        _raise_errors(events, err if rc else "")
        return events

    async def start(self, args: list[str]) -> RemoteProcess:
        """The agent started with ``args``, waiting for its stdin (for :meth:`stream`, or ``kill()``)."""
        return await self.conn.start(f"{self.command} {' '.join(map(shlex.quote, args))}")

    async def stream(
        self,
        args: list[str],
        lines: Iterable[str] | AsyncIterable[str],
        on_event: Callable[[dict], None],
        started: RemoteProcess | None = None,
    ) -> int:
        """Run the agent with ``lines`` on stdin (produced as the agent reads them: the pipe's back
        pressure paces an async generator), calling ``on_event`` per stdout event as it comes.
        ``started``: the agent already started with ``args`` (:meth:`start`)."""
        proc = started or await self.start(args)

        async def feed() -> None:
            if isinstance(lines, AsyncIterable):
                async for line in lines:
                    await proc.write(line.encode() + b"\n")
            else:
                for line in lines:
                    await proc.write(line.encode() + b"\n")
            proc.write_eof()

        feeder = asyncio.ensure_future(feed())
        try:
            async for raw in proc:
                with contextlib.suppress(ValueError):
                    on_event(json.loads(raw))
            try:
                await feeder  # raises what the line producer raised (e.g. an S3 error)
            except BackupError:
                raise
            except Exception:  # noqa: BLE001 - the agent went away mid-feed (broken pipe): its exit says why
                pass
            return await proc.wait()
        finally:  # cancelled or failed: stop the agent, leave the finished parts for a resume
            feeder.cancel()
            await proc.kill()


def _events(out: str) -> list[dict]:
    res = []
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            res.append(json.loads(line))
    return res


def _raise_errors(events: list[dict], stderr: str) -> None:
    errors = [e["message"] for e in events if e.get("event") == "error"]
    if errors:
        raise BackupError(errors[0] + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""))
    if stderr.strip():
        raise BackupError(f"the backup agent failed on the pod: {hide_credentials(stderr.strip().splitlines()[-1])}")


async def pod_checkpoints(conn: Connection, run_dir: str) -> tuple[list[PodCheckpoint], dict | None]:
    agent = PodAgent(conn)
    await agent.install()
    events = await agent.run_json(["list", run_dir], timeout=120)
    found: dict[str, Any] = next((e for e in events if e.get("event") == "list"), {"ckpts": [], "disk": None})
    known = set(PodCheckpoint.__dataclass_fields__)
    return [PodCheckpoint(**{k: v for k, v in c.items() if k in known}) for c in found["ckpts"]], found.get("disk")


def _state_dir(conn: Connection) -> str:
    """Where the pod keeps its registry of runs (the lifecycle agent's state dir)."""
    return trusted.state_dir(conn.pod)


def _source(conn: Connection, found: dict) -> RunSource:
    return RunSource.from_dict(
        {**found, "pod": conn.pod.name, "run_dir": str(found.get("run_dir") or "")}
    ) or RunSource(conn.pod.name, str(found.get("run_dir") or ""))


async def run_source(conn: Connection, run_dir: str) -> RunSource:
    """Which run is in ``run_dir`` on the pod: its absolute path, and the record id (with what it was
    resumed from) when we launched it. Backups count for a run only when their manifest names it."""
    agent = PodAgent(conn)
    await agent.install()
    events = await agent.run_json(["source", run_dir, "--state-dir", _state_dir(conn)], timeout=120)
    found = next((e for e in events if e.get("event") == "source"), None)
    if found is None:
        raise BackupError(f"the backup agent on {conn.pod.name} did not say which run is in {run_dir}")
    return _source(conn, found)


def source_from_record(
    record: dict, pod: str, abs_run_dir: str, older: Callable[[str], dict | None] = lambda _id: None
) -> RunSource:
    """The source of a run known by its run record (resume on another pod: the pod may have no record
    of it); ``older(id)`` finds the records it was resumed from (services.runs.load_record)."""
    lineage, bounds = RunSource.chain(
        record.get("resume_step"), record.get("resumed_from"), older, str(record.get("id") or "")
    )
    return RunSource(
        pod=str(record.get("pod") or pod),
        run_dir=abs_run_dir,
        run_id=str(record.get("id") or ""),
        lineage=lineage,
        resumed_at=bounds,
    )


async def source_for_record(conn: Connection, record: dict, runs_dir: Any = None) -> RunSource:
    """The run a record names (resume: maybe on another pod than the one that made its backups), with
    what it was resumed from as far as this machine's records and the pod's registry know."""
    from services import runs

    older = (lambda i: runs.load_record(runs_dir, i)) if runs_dir is not None else (lambda _i: None)
    found = await run_source(conn, record.get("run_dir") or ".")
    source = source_from_record(record, conn.pod.name, found.run_dir, older)
    if found.run_id and found.run_id == source.run_id:  # the pod knows this run: its registry too
        source = source.merged(found)
    return source


async def pod_backed_up(
    conn: Connection, settings: BackupSettings, run_dir: str, source: RunSource | None = None
) -> tuple[set[int], int | None, RunSource]:
    """(the steps on the pod whose checkpoint has a verified backup of that very checkpoint by the run in
    ``run_dir``, the oldest step verified for that run in the bucket, the run): see backup_bucket.backed_up."""
    source = source or await run_source(conn, run_dir)
    ckpts, _disk = await pod_checkpoints(conn, run_dir)
    steps, oldest = backed_up(await list_bucket(settings, run_dir), source, ckpts)
    return steps, oldest, source


# ------------------------------------------------------------------ backup
async def backup_checkpoint(
    conn: Connection, settings: BackupSettings, run_dir: str, step: int, on_progress: ProgressFn | None = None
) -> BackupResult:
    """Pod -> bucket in one read of every file: the agent hashes (sha256 per file, md5 per part) while it
    uploads; each file's multipart upload is completed as soon as its last part is in, while the
    others still upload. Then every object is checked against the manifest, which is written last.

    The manifest names the run (:func:`run_source`). A step already in the bucket from another run (or
    from an unknown one) is refused before anything is sent, and so is a step another run is backing up
    right now (services.backup.claims: the earlier claim wins); only this run's own unfinished multipart
    uploads are resumed. An object already complete in the bucket is hashed on the pod and not sent
    again when it matches."""
    s3 = S3(settings)
    started = time.monotonic()
    report = on_progress or (lambda _p: None)
    agent = PodAgent(conn)

    async def scan() -> list[dict]:  # both halves; the agent only reads on the pod
        await agent.install()
        report(TransferProgress("backup", step, "scan", 0, 0, time.monotonic() - started))
        return await agent.run_json(
            [
                "plan",
                run_dir,
                "--step",
                str(step),
                "--compress",
                settings.compression,
                "--level",
                str(settings.level),
                "--state-dir",
                _state_dir(conn),
            ]
        )

    # The store and the pod are asked at once (the first client, HEAD bucket and the agent's start each
    # cost a few hundred ms on a busy machine); the store's error is the clearer one and wins.
    scanning = asyncio.ensure_future(scan())
    try:
        await s3.call("head_bucket", Bucket=s3.bucket)
    except BaseException:
        scanning.cancel()
        await asyncio.gather(scanning, return_exceptions=True)
        raise
    plan = await scanning
    found = next((e for e in plan if e.get("event") == "plan"), None)
    if found is None:
        raise BackupError(f"the backup agent on the pod gave no plan for step {step} (and no error)")
    planned = found["files"]
    for f in planned:  # bucket keys are named after them, and a restore writes them back
        try:
            check_path(f.get("path"))
        except ValueError as exc:
            raise BackupError(f"cannot back up {f.get('full')!r}: its path {f.get('path')!r}: {exc}") from None
    source = _source(conn, found.get("source") or {"run_dir": run_dir})
    base = f"{settings.prefix_for(run_dir)}step_{step}/"
    where = f"s3://{s3.bucket}/{settings.prefix_for(run_dir)}"
    send = [
        "send",
        "--jobs",
        str(settings.jobs),
        "--limit",
        str(settings.max_bandwidth),
        "--min-part",
        str(settings.min_part),
        "--timeout",
        f"{settings.read_timeout:g}",
    ]
    # Whether the store takes per-part CRC32s and catches a wrong one (asked once per store: a small upload
    # of its own) is asked beside the bucket's setup, not when the first large file comes up.
    multipart = any(
        part_size_for(int(f["size"]), settings.part_size, settings.min_part, settings.jobs) < int(f["size"])
        for f in planned
    )
    part_guard = ""
    probe_cleanup: list[asyncio.Task] = []  # the probe's upload or object goes while the backup starts

    async def part_checks() -> tuple[bool, str]:
        """(the store takes each part's CRC32, how it catches a wrong one: store_caps.part_caps)."""
        nonlocal part_guard
        takes, part_guard = await part_caps(s3, base, probe_cleanup)
        return takes, part_guard

    probe = asyncio.ensure_future(part_checks()) if multipart else None
    # The sending agent starts (an interpreter on the pod: ~0.1 s, several times that on a busy pod) while
    # the bucket is set up; it reads nothing but its stdin, so until its first line it sends nothing, and
    # a refusal below stops it.
    sender = asyncio.ensure_future(agent.start(send))
    mine = Uploads(s3, base, source)  # only the multipart uploads this run started are resumed
    present: dict[str, dict] = {}  # key -> the step's objects as listed (ETag, Size)
    try:
        # One listing of the step says what is there: its manifest, the claims, this run's uploads record
        # and the objects already complete (each read or HEADed only when listed).
        present = {str(o["Key"]): o for o in await each_page(s3, "list_objects_v2", "Contents", Prefix=base)}
        there = await read_manifest(s3, base) if base + "manifest.json" in present else None
        if there is not None and not source.owns(there.source, step):
            raise collision(step, source, there.source, where)
        claims = [o for k, o in present.items() if k.startswith(base + "claims/")]
        await claim_step(s3, base, step, source, where, listed=claims)  # before anything is sent: one run per step
        await mine.load(listed=mine.key in present)
    except BaseException:
        ready = (await asyncio.gather(sender, return_exceptions=True))[0]
        if isinstance(ready, RemoteProcess):
            await ready.kill()
        if probe is not None:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
        await asyncio.gather(*probe_cleanup, return_exceptions=True)
        raise
    total = sum(int(f["size"]) for f in planned)
    result = BackupResult(
        manifest=Manifest(step=step, run=Path(run_dir.rstrip("/")).name, files=(), source=source), verified=False
    )
    uploads: dict[str, str] = {}  # key -> multipart UploadId
    existing: dict[str, str] = {}  # key -> ETag of an object already complete in the bucket
    entries: dict[str, FileEntry] = {}
    completing: list[asyncio.Task] = []
    errors: list[str] = []
    done_bytes = 0

    async def lines():
        for f in planned:
            entry = FileEntry(
                path=f["path"],
                size=int(f["size"]),
                sha256="",
                encoding=f["encoding"],
                level=settings.level if f["encoding"] == "zstd" else 0,
            )
            key = base + entry.key
            part = part_size_for(entry.size, settings.part_size, settings.min_part, settings.jobs)
            offsets = list(range(0, entry.size, part)) or [0]
            have: dict[int, str] = {}
            head = present.get(key)
            exists: dict[str, Any] = {}
            if len(offsets) > 1:
                if head is not None:  # complete already (a backup stopped before its manifest, a re-run)
                    existing[key] = str(head.get("ETag", "")).strip('"')
                    exists = {"exists": {"etag": existing[key], "size": int(head.get("Size", -1))}}
                takes, guard = await probe if probe is not None else (False, "")
                uploads[key], have = await mine.resume_or_create(key, "CRC32" if takes else None)
                if mine.checksums.get(key) == "CRC32":
                    exists["crc32"] = True  # (spread into the line beside "exists")
                    if guard:  # the store catches a wrong CRC32: the pod computes no md5 for new parts
                        exists["crc_only"] = True
            elif head is not None:  # one PUT: an object already there with this md5 is not sent again
                have = {1: str(head.get("ETag", "")).strip('"')}
            parts = []
            for n, off in enumerate(offsets, 1):
                url = (
                    s3.presign("upload_part", Key=key, UploadId=uploads[key], PartNumber=n)
                    if key in uploads
                    else s3.presign("put_object", Key=key)
                )
                parts.append(
                    {
                        "n": n,
                        "offset": off,
                        "raw": min(part, entry.size - off),
                        "url": url,
                        **({"have": have[n]} if n in have else {}),
                    }
                )
            yield json.dumps(
                {
                    "path": entry.path,
                    "full": f["full"],
                    "key": key,
                    "size": entry.size,
                    "encoding": entry.encoding,
                    "level": entry.level,
                    "parts": parts,
                    **exists,
                }
            )

    async def complete(key: str, entry: FileEntry, etags: list[str], crcs: list[str], kept: bool) -> None:
        if kept:  # the complete object matched: nothing was sent, its unused upload goes
            if key in uploads:
                await s3.call("abort_multipart_upload", Bucket=s3.bucket, Key=key, UploadId=uploads.pop(key))
            entries[entry.path] = replace(entry, store_etag="" if existing[key] == entry.etag else existing[key])
            return
        bad = [p.n for p, e in zip(entry.parts, etags) if p.md5 and e != p.md5]
        if bad and await store_etags_are_md5(s3, base):
            raise BackupError(
                f"{entry.path}: the store's ETag of part {bad[0]} is not the md5 the pod sent (corrupted on the way?)"
            )
        if key in uploads:
            crc = mine.checksums.get(key) == "CRC32" and all(crcs)
            done = await s3.call(
                "complete_multipart_upload",
                Bucket=s3.bucket,
                Key=key,
                UploadId=uploads[key],
                MultipartUpload={
                    "Parts": [
                        {"PartNumber": p.n, "ETag": f'"{e}"', **({"ChecksumCRC32": c} if crc else {})}
                        for p, e, c in zip(entry.parts, etags, crcs)
                    ]
                },
            )
            store = str(done.get("ETag", "")).strip('"')
            theirs = str(done.get("ChecksumCRC32") or "").split("-")[0]
            if crc and not theirs and not all(p.md5 for p in entry.parts):  # the only check left: ask for it
                theirs = await object_crc32(s3, key, done)
            if crc and theirs and theirs != composite_crc32(crcs):
                raise BackupError(
                    f"{entry.path}: the store's CRC32 of the object is not the one of the parts "
                    "the pod read (corrupted on the way?)"
                )
            if not all(p.md5 for p in entry.parts) and not (crc and (theirs or part_guard == "part")):
                # no md5 to compare the part ETags with: the composite CRC32 is the only check left
                raise BackupError(f"{entry.path}: the store gave no CRC32 of the object to check the parts against")
        else:
            store = etags[0]
        entries[entry.path] = replace(entry, store_etag="" if store == entry.etag else store)

    def on_event(ev: dict) -> None:
        nonlocal done_bytes
        kind = ev.get("event")
        if kind == "part":
            done_bytes += int(ev.get("bytes", 0))
            if ev.get("skipped"):
                result.skipped_parts += 1
            else:
                result.uploaded_parts += 1
            report(TransferProgress("backup", step, "upload", done_bytes, total, time.monotonic() - started))
        elif kind == "file":
            entry = FileEntry.from_dict(ev)
            parts = sorted(ev["parts"], key=lambda p: p["n"])
            etags = [str(p.get("etag") or p["md5"]) for p in parts]
            crcs = [str(p.get("crc32") or "") for p in parts]
            kept = bool(ev.get("existing")) and ev["key"] in existing
            completing.append(asyncio.ensure_future(complete(ev["key"], entry, etags, crcs, kept)))
        elif kind == "error":
            errors.append(hide_credentials(str(ev.get("message"))))

    proc: RemoteProcess | None = None
    try:
        proc = await sender
        await agent.stream(send, lines(), on_event, started=proc)
        for task in completing:
            try:
                await task
            except BackupError as exc:
                errors.append(str(exc))
    finally:
        for task in completing:
            task.cancel()
        if probe is not None:  # its probe upload is aborted before we go on
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
        await asyncio.gather(*probe_cleanup, return_exceptions=True)
        if proc is not None:  # stream() stops it; this covers a failure before stream() took it
            await proc.kill()
    if errors or len(entries) != len(planned):
        raise BackupError(
            f"{len(errors) or 1} file(s) failed to upload: {errors[0] if errors else 'the agent stopped early'}",
            hint="run the backup again: finished parts are not sent twice",
        )
    files = tuple(replace(entries[f["path"]], mtime_ns=int(f.get("mtime_ns") or 0)) for f in planned)
    manifest = Manifest(
        step=step,
        run=result.manifest.run,
        source=source,
        files=files,
        version=2 if any(not p.md5 for f in files for p in f.parts) else 1,  # 1: readable by older apps
    )
    result.manifest = manifest
    report(TransferProgress("backup", step, "verify", done_bytes, total, time.monotonic() - started))
    # the objects are checked while the manifest is read again (another run may have finished the same
    # step meanwhile)
    result.problems, again = await asyncio.gather(check_objects(s3, base, manifest), read_manifest(s3, base))
    if not result.problems:
        if again is not None and not source.owns(again.source, step):
            raise collision(step, source, again.source, where)
        await s3.call(
            "put_object",
            Bucket=s3.bucket,
            Key=base + "manifest.json",
            Body=manifest.to_json().encode(),
            ContentType="application/json",
        )
        result.verified = True
        checked = BucketCheckpoint(
            step,
            manifest.bytes,
            manifest.stored_bytes,
            True,
            (),
            manifest.created,
            manifest.source,
            manifest.fingerprint,
        )
        # every upload of this run is complete: its record goes (its claim stays), beside the prune, which
        # takes this step as just checked
        _, result.pruned = await asyncio.gather(
            mine.done(), prune_bucket(settings, run_dir, settings.keep_last, source, s3, checked)
        )
    report(TransferProgress("backup", step, "done", done_bytes, total, time.monotonic() - started))
    return result


# ------------------------------------------------------------------ restore
async def restore_checkpoint(
    conn: Connection,
    settings: BackupSettings,
    run_dir: str,
    step: int | None = None,
    on_progress: ProgressFn | None = None,
    ckpt_root: str | None = None,
    notes: list[str] | None = None,
    placed: list[str] | None = None,
    source: RunSource | None = None,
) -> Manifest:
    """Bucket -> the pod (newest verified when no step): each half where it belongs for that run -- the
    trainer half into ``ckpt_root`` when given and not <run_dir>/checkpoints, else where the run's
    resolved configs put it ([ckpt] output_dir), the orchestrator half into <run_dir>/checkpoints.

    The files land in staging dirs and are checked against the manifest first. A complete step_N on
    the pod is never overwritten (error); an incomplete one or half (a save cut short) is moved aside to
    ``.step_N.incomplete-<time>`` in the same dir and a sentence saying where is appended to ``notes``;
    the step dirs written (one, or one per half) are appended to ``placed``.

    Without ``step``: the newest verified backup of THIS run (``source``, default the run in ``run_dir``
    on the pod: :func:`run_source`); another run's backups under the same prefix are named in the error.
    An explicit ``step`` from another run is restored, and ``notes`` says whose it is."""
    s3 = S3(settings)
    report = on_progress or (lambda _p: None)
    started = time.monotonic()
    if source is None:
        source = await run_source(conn, run_dir)
    if step is None:
        listing = [c for c in await list_bucket(settings, run_dir, s3) if c.verified]
        verified = [c.step for c in ours(listing, source)]
        if not verified:
            others = sorted(c.step for c in listing)
            raise BackupError(
                f"no verified backup of this run ({source.label()}) under "
                f"s3://{s3.bucket}/{settings.prefix_for(run_dir)}"
                + (f"; other runs' steps there: {', '.join(map(str, others[-5:]))}" if others else ""),
                hint="pass --step N to restore another run's backup" if others else "",
            )
        step = max(verified)
    base = f"{settings.prefix_for(run_dir)}step_{step}/"
    manifest = await read_manifest(s3, base)
    if manifest is None:
        raise BackupError(f"step {step} has no verified backup (no manifest) in s3://{s3.bucket}/{base}")
    if not source.owns(manifest.source, step) and notes is not None:
        notes.append(
            f"step {step} was backed up by another run: {source_label(manifest.source)} (this is {source.label()})"
        )
    problems = await check_objects(s3, base, manifest)
    if problems:
        raise BackupError(f"the backup of step {step} does not match its manifest: {problems[0]}")
    agent = PodAgent(conn)
    await agent.install()
    own = f"{run_dir.rstrip('/')}/checkpoints"
    root = ckpt_root.rstrip("/") if ckpt_root and ckpt_root.rstrip("/") != own else None
    plan = {
        "run_dir": run_dir,
        "step": step,
        "tag": secrets.token_hex(4),
        **({"trainer_root": root} if root else {}),
        "files": [
            {
                "path": f.path,
                "size": f.size,
                "sha256": f.sha256,
                "encoding": f.encoding,
                "mtime_ns": f.mtime_ns,
                "url": s3.presign("get_object", Key=base + f.key),
                "parts": [p.__dict__ for p in f.parts],
            }
            for f in manifest.files
        ],
    }
    done, errors = 0, []

    def on_event(ev: dict) -> None:
        nonlocal done
        if ev.get("event") == "part":
            done += int(ev.get("bytes", 0))
            report(TransferProgress("restore", step, "download", done, manifest.bytes, time.monotonic() - started))
        elif ev.get("event") == "error":
            errors.append(hide_credentials(str(ev.get("message"))))
        elif ev.get("event") == "done" and placed is not None:
            placed.extend(ev.get("paths") or [ev.get("path")])
        if ev.get("event") == "done" and ev.get("moved_aside") and notes is not None:
            aside = ev["moved_aside"]
            notes.append(
                f"the incomplete step_{step} that was on the pod was moved aside to "
                f"{aside if isinstance(aside, str) else ' and '.join(aside)} (nothing deleted)"
            )

    rc = await agent.stream(
        ["download", "--jobs", str(settings.jobs), "--timeout", f"{settings.read_timeout:g}"],
        [json.dumps(plan)],
        on_event,
    )
    if errors or rc != 0:
        raise BackupError(
            f"restore of step {step} failed: {errors[0] if errors else f'agent exit {rc}'}",
            hint="nothing was marked complete on the pod; run the restore again",
        )
    report(TransferProgress("restore", step, "done", manifest.bytes, manifest.bytes, time.monotonic() - started))
    return manifest
