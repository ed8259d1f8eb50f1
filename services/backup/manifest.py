"""The manifest of one backed-up checkpoint: every file, its size, sha256 and the parts stored.

It is the last object written for a step (``<prefix>step_N/manifest.json``, after every object was
checked against it), so its presence marks a backup that was verified when written; ``verify`` in
services.backup.transfer re-checks the objects against it (size + ETag per object) at any time.

Whoever can write to the bucket can write a manifest, and a restore creates the files it names on the pod:
:meth:`Manifest.from_json` takes nothing on trust. Every path must pass the agent's own rule
(services.pod.agent.transfer.check_path: relative, no "..", no empty or "." component, no NUL), no two
entries may name the same file (or a file and a directory), every number must be a whole number and the
parts must cover each file exactly; anything else refuses the whole manifest with a
:class:`ManifestError` naming the entry. The agent on the pod checks the plan again before it writes.
"""

from __future__ import annotations

import builtins
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from services.backup.s3 import BackupError, multipart_etag
from services.pod.agent.transfer import check_path, fingerprint

VERSION = 2  # the newest this app reads; 2: parts checked by their CRC32 may have no md5
_HEX = {32: re.compile(r"[0-9a-f]{32}"), 64: re.compile(r"[0-9a-f]{64}")}
_CRC32 = re.compile(r"[A-Za-z0-9+/]{6}==")  # base64 of 4 bytes


class ManifestError(BackupError):
    """A manifest in the bucket that cannot be used: not JSON, wrongly shaped, or naming an unsafe path.
    One line naming the entry; the whole manifest is refused."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:100] + "...'"


def _count(d: dict, key: str, default: object = None) -> int:
    """``d[key]``: a whole number >= 0 (not a bool, not a float, not a string)."""
    value = d.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManifestError(f"{key} is {_show(value)}, not a whole number")
    return value


def _hex(d: dict, key: str, digits: int) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not _HEX[digits].fullmatch(value):
        raise ManifestError(f"{key} is {_show(value)}, not {digits} hex digits")
    return value


@dataclass(frozen=True)
class RunSource:
    """Which run a backup came from: the pod (its name here), the absolute run dir on it and, when the
    run was launched by us, its record id plus the ids it was resumed from (``lineage``, newest first)
    with, for each, the newest of its steps this run took over (``resumed_at``: the step the chain
    resumed from, None when no record says). Several runs may share a bucket prefix (the default one is
    named after the run dir's basename), so a backup counts for a run only when :meth:`owns` says so."""

    pod: str
    run_dir: str
    run_id: str = ""
    lineage: tuple[str, ...] = ()  # resumed_from, its resumed_from, ... as far as the records go
    resumed_at: tuple[int | None, ...] = ()  # per lineage id: the newest of its steps that is ours

    def ids(self) -> set[str]:
        return {i for i in (self.run_id, *self.lineage) if i}

    def same_run(self, other: RunSource | None) -> bool:
        """The very same run: the same record id, or -- without record ids on both sides -- the same pod
        and run dir (one side with an id and the other without: different, the safe side). A run and
        the one it was resumed from are two runs (see :meth:`owns`). Unknown: never."""
        if other is None:
            return False
        if self.run_id or other.run_id:
            return self.run_id == other.run_id
        return (self.pod, self.run_dir.rstrip("/")) == (other.pod, other.run_dir.rstrip("/"))

    def owns(self, other: RunSource | None, step: int) -> bool:
        """Whether a backup of ``step`` made by the run ``other`` counts as this run's: made by this very
        run (:meth:`same_run`), or by a run it descends from (resumed from, possibly on another pod) at
        or before the step this run took over from it. A sibling (another resume of the same parent),
        a descendant, an unknown source or an ancestor's step after the resume: never."""
        if other is None:
            return False
        if self.same_run(other):
            return True
        if not other.run_id or other.run_id not in self.lineage:
            return False
        bound = self.bound(other.run_id)
        return bound is not None and step <= bound

    def bound(self, run_id: str) -> int | None:
        i = self.lineage.index(run_id)
        return self.resumed_at[i] if i < len(self.resumed_at) else None

    @staticmethod
    def chain(
        first_step: object, first_parent: object, record_of: Callable[[str], dict | None], own_id: str = ""
    ) -> tuple[tuple[str, ...], tuple[int | None, ...]]:
        """(lineage, resumed_at) from a run record's ``resumed_from``/``resume_step`` and the records
        ``record_of(id)`` finds: each ancestor's bound is the smallest resume step on the way to it."""
        lineage: list[str] = []
        bounds: list[int | None] = []
        bound, parent, seen = _int(first_step), first_parent, {own_id}
        while parent and str(parent) not in seen and len(seen) < 100:
            lineage.append(str(parent))
            bounds.append(bound)
            seen.add(str(parent))
            rec = record_of(str(parent)) or {}
            nxt = _int(rec.get("resume_step"))
            bound = (
                None
                if bound is None or (nxt is None and rec.get("resumed_from"))
                else (bound if nxt is None else min(bound, nxt))
            )
            parent = rec.get("resumed_from")
        return tuple(lineage), tuple(bounds)

    def merged(self, other: RunSource) -> RunSource:
        """This source with the ancestors ``other`` knows of as well (a known bound wins over None)."""
        known = dict(zip(self.lineage, (*self.resumed_at, *[None] * len(self.lineage))))
        for i, rid in enumerate(other.lineage):
            b = other.bound(rid) if i < len(other.resumed_at) else None
            if known.get(rid) is None:
                known[rid] = b
        return RunSource(self.pod, self.run_dir, self.run_id, tuple(known), tuple(known.values()))

    def label(self) -> str:
        return f"{self.pod}:{self.run_dir}" + (f" (run {self.run_id})" if self.run_id else "")

    def to_dict(self) -> dict:
        return {
            "pod": self.pod,
            "run_dir": self.run_dir,
            "run_id": self.run_id,
            "lineage": list(self.lineage),
            "resumed_at": list(self.resumed_at),
        }

    @classmethod
    def from_dict(cls, d: object) -> RunSource | None:
        """None for a missing or unreadable source (a manifest written before sources were recorded)."""
        if not isinstance(d, dict) or not isinstance(d.get("pod"), str) or not isinstance(d.get("run_dir"), str):
            return None
        raw_lineage, raw_bounds = d.get("lineage"), d.get("resumed_at")
        lineage = [str(i) for i in (raw_lineage if isinstance(raw_lineage, list) else []) if i]
        bounds = raw_bounds if isinstance(raw_bounds, list) else []
        return cls(
            pod=d["pod"],
            run_dir=d["run_dir"],
            run_id=str(d.get("run_id") or ""),
            lineage=tuple(lineage),
            resumed_at=tuple(_int(b) for b in bounds[: len(lineage)]),
        )


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf) from a JSON "Infinity"
        return None


def source_label(source: RunSource | None) -> str:
    return source.label() if source is not None else "an unknown run (backed up before runs were recorded)"


@dataclass(frozen=True)
class PartInfo:
    n: int
    offset: int  # in the original file
    raw: int  # bytes of the original file in this part
    size: int  # bytes stored (== raw unless compressed)
    md5: str  # of the stored bytes: the part's ETag; "" where the store checked the part by its CRC32 alone
    crc32: str = ""  # of the stored bytes, base64 (uploads created with CRC32; "" otherwise)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to step_N/
    size: int
    sha256: str
    encoding: str = "none"  # "none" | "zstd" (independent frame per part)
    level: int = 0
    stored_size: int = 0
    parts: tuple[PartInfo, ...] = ()
    store_etag: str = ""  # the store's ETag when it is not the md5-derived one (SSE-KMS, some stores)
    mtime_ns: int = 0  # the file's on the pod when backed up (0: an old manifest)

    @property
    def key(self) -> str:
        """Object name under the step's prefix."""
        return self.path + (".zst" if self.encoding == "zstd" else "")

    @property
    def etag(self) -> str:
        """The ETag an md5 store gives the object ("" when a part has no md5: only ``store_etag`` says)."""
        if not all(p.md5 for p in self.parts):
            return ""
        return multipart_etag([p.md5 for p in self.parts])

    @classmethod
    def from_dict(cls, d: Any) -> FileEntry:
        """One file of a manifest, or of the agent's "file" event. :class:`ManifestError` for an unsafe
        path (services.pod.agent.transfer.check_path) or anything not of its kind."""
        if not isinstance(d, dict):
            raise ManifestError(f"not an object: {_show(d)}")
        try:
            check_path(d.get("path"))
        except ValueError as exc:
            raise ManifestError(f"unsafe path {_show(d.get('path'))}: {exc}") from None
        size, sha256 = _count(d, "size"), _hex(d, "sha256", 64)
        encoding, store_etag = d.get("encoding", "none"), d.get("store_etag", "")
        if encoding not in ("none", "zstd") or not isinstance(store_etag, str):
            raise ManifestError(f"encoding {_show(encoding)} or store_etag {_show(store_etag)} is not valid")
        raw_parts = d.get("parts")
        if not isinstance(raw_parts, list):
            raise ManifestError(f"parts is {_show(raw_parts)}, not a list")
        parts: list[PartInfo] = []
        for p in raw_parts:
            if not isinstance(p, dict):
                raise ManifestError(f"a part is {_show(p)}, not an object")
            crc32 = p.get("crc32") or ""
            if not isinstance(crc32, str) or (crc32 and not _CRC32.fullmatch(crc32)):
                raise ManifestError(f"crc32 is {_show(crc32)}, not a base64 CRC32")
            parts.append(
                PartInfo(
                    n=_count(p, "n"),
                    offset=_count(p, "offset"),
                    raw=_count(p, "raw"),
                    size=_count(p, "size"),
                    md5="" if crc32 and p.get("md5") == "" else _hex(p, "md5", 32),
                    crc32=crc32,
                )
            )
        stored = _count(d, "stored_size", size)
        offset = 0
        for n, part in enumerate(parts, 1):
            if part.n != n or part.offset != offset:
                raise ManifestError(f"part {part.n} is out of order (expected part {n} at offset {offset})")
            offset += part.raw
        if offset != size or sum(p.size for p in parts) != stored:
            raise ManifestError(
                f"its parts hold {offset} bytes ({sum(p.size for p in parts)} stored), "
                f"not its size {size} ({stored} stored)"
            )
        return cls(
            path=d["path"],
            size=size,
            sha256=sha256,
            encoding=encoding,
            level=_count(d, "level", 0),
            stored_size=stored,
            parts=tuple(parts),
            store_etag=store_etag,
            mtime_ns=_count(d, "mtime_ns", 0) if d.get("mtime_ns") is not None else 0,
        )


@dataclass(frozen=True)
class Manifest:
    step: int
    run: str
    files: tuple[FileEntry, ...]
    created: float = field(default_factory=time.time)
    version: int = 1  # 2 when a part has no md5 (older apps then say "upgrade" instead of misreading it)
    source: RunSource | None = None  # None: an old manifest, "unknown source"

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def stored_bytes(self) -> int:
        return sum(f.stored_size for f in self.files)

    @property
    def parts(self) -> int:
        return sum(len(f.parts) for f in self.files)

    @property
    def fingerprint(self) -> str:
        """Which checkpoint was backed up (services.pod.agent.transfer.fingerprint: paths, sizes, mtimes),
        compared with the pod's before the backup counts for a checkpoint there; "" for a manifest
        written before files' mtimes were recorded: it counts for no checkpoint on a pod."""
        if not self.files or any(f.mtime_ns <= 0 for f in self.files):
            return ""
        return fingerprint((f.path, f.size, f.mtime_ns) for f in self.files)

    def to_json(self) -> str:
        d = asdict(self)
        d["source"] = self.source.to_dict() if self.source is not None else None
        return json.dumps(d, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | builtins.bytes) -> Manifest:  # (plain ``bytes`` here is the property)
        """The manifest in ``text`` (what the bucket returned), or :class:`ManifestError` -- never another
        exception, never a manifest with an unsafe path (see the module's docstring)."""
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ManifestError(f"unreadable manifest: not JSON ({str(exc).splitlines()[0][:200]})") from None
        if not isinstance(d, dict):
            raise ManifestError(f"unreadable manifest: a JSON {type(d).__name__}, not an object")
        version = d.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
            raise ManifestError(
                f"manifest version {version} is newer than this app understands", hint="upgrade prime-train-tui"
            )
        try:
            version, step = _count(d, "version"), _count(d, "step")
        except ManifestError as exc:
            raise ManifestError(f"unreadable manifest: {exc}") from None
        run, created, files = d.get("run", ""), d.get("created", 0), d.get("files")
        try:  # a number, finite as a float (an int of 400 digits is not)
            number = isinstance(created, (int, float)) and not isinstance(created, bool)
            created = float(created) if number else math.nan
        except OverflowError:
            created = math.nan
        if not isinstance(run, str) or not math.isfinite(created) or not isinstance(files, list):
            raise ManifestError("unreadable manifest: run, created or files is not of its kind")
        entries: list[FileEntry] = []
        names: set[str] = set()
        dirs: set[str] = set()
        for i, f in enumerate(files, 1):
            try:
                entry = FileEntry.from_dict(f)
            except ManifestError as exc:
                raise ManifestError(f"manifest entry {i}: {exc} (the whole manifest is refused)") from None
            if not entry.etag and not entry.store_etag:
                raise ManifestError(
                    f"manifest entry {i}: {_show(entry.path)} has parts without md5 and no store ETag to check "
                    "the object against (the whole manifest is refused)"
                )
            parents = {entry.path.rsplit("/", n)[0] for n in range(1, entry.path.count("/") + 1)}
            if entry.path in names or entry.path in dirs or parents & names:
                raise ManifestError(
                    f"manifest entry {i}: {_show(entry.path)} clashes with another entry "
                    "(the same file, or a file and a directory of one name)"
                )
            names.add(entry.path)
            dirs |= parents
            entries.append(entry)
        return cls(
            step=step,
            run=run,
            created=created,
            files=tuple(entries),
            version=version,
            source=RunSource.from_dict(d.get("source")),
        )


@dataclass(frozen=True)
class BucketCheckpoint:
    """One step in the bucket: ``verified`` only when every object matches the manifest."""

    step: int
    bytes: int
    stored_bytes: int
    verified: bool
    problems: tuple[str, ...] = ()
    created: float | None = None
    source: RunSource | None = None  # the run it came from (None: unknown: no manifest, or an old one)
    fingerprint: str = ""  # which checkpoint (Manifest.fingerprint; "": an old manifest)

    def of(self, pod: PodCheckpoint | None) -> bool:
        """A verified backup of THAT checkpoint on the pod (not of another one with the same step)."""
        return self.verified and pod is not None and bool(self.fingerprint) and self.fingerprint == pod.fingerprint


@dataclass(frozen=True)
class PodCheckpoint:
    step: int
    path: str  # the trainer half's step_N (or the orchestrator's when that is all there is)
    bytes: int  # both halves
    mtime: float | None
    complete: bool  # both halves whole, wherever each lives
    trainer_bytes: int = 0
    orch_bytes: int = 0
    orch_path: str = ""  # the orchestrator half's step_N (== path unless the trainer's lives elsewhere)
    fingerprint: str = ""  # which checkpoint (services.pod.agent.transfer.fingerprint)


@dataclass(frozen=True)
class TransferProgress:
    action: str  # "backup" | "restore"
    step: int
    phase: str  # "scan" | "upload" | "verify" | "download" | "done"
    done: int  # bytes (of the original files)
    total: int
    elapsed: float

    @property
    def rate(self) -> float:
        """Bytes per second so far (0 before the first part)."""
        return self.done / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 and self.total >= self.done else None
