"""The manifest of one backed-up checkpoint: every file, its size, sha256 and the parts stored.

It is the last object written for a step (``<prefix>step_N/manifest.json``, after every object was
checked against it), so its presence marks a backup that was verified when written; ``verify`` in
services.backup re-checks the objects against it (size + ETag per object) at any time.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from services.s3 import BackupError, multipart_etag

VERSION = 1


@dataclass(frozen=True)
class PartInfo:
    n: int
    offset: int  # in the original file
    raw: int  # bytes of the original file in this part
    size: int  # bytes stored (== raw unless compressed)
    md5: str  # of the stored bytes: the part's ETag


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

    @property
    def key(self) -> str:
        """Object name under the step's prefix."""
        return self.path + (".zst" if self.encoding == "zstd" else "")

    @property
    def etag(self) -> str:
        return multipart_etag([p.md5 for p in self.parts])

    @classmethod
    def from_dict(cls, d: dict) -> "FileEntry":
        parts = tuple(PartInfo(**{k: p[k] for k in ("n", "offset", "raw", "size", "md5")}) for p in d["parts"])
        return cls(path=d["path"], size=int(d["size"]), sha256=d["sha256"], encoding=d.get("encoding", "none"),
                   level=int(d.get("level", 0)), stored_size=int(d.get("stored_size", d["size"])), parts=parts,
                   store_etag=str(d.get("store_etag", "")))


@dataclass(frozen=True)
class Manifest:
    step: int
    run: str
    files: tuple[FileEntry, ...]
    created: float = field(default_factory=time.time)
    version: int = VERSION

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def stored_bytes(self) -> int:
        return sum(f.stored_size for f in self.files)

    @property
    def parts(self) -> int:
        return sum(len(f.parts) for f in self.files)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        try:
            d = json.loads(text)
            if int(d.get("version", 0)) > VERSION:
                raise BackupError(f"manifest version {d['version']} is newer than this app understands",
                                  hint="upgrade prime-train-tui")
            return cls(step=int(d["step"]), run=str(d.get("run", "")), created=float(d.get("created", 0)),
                       files=tuple(FileEntry.from_dict(f) for f in d["files"]), version=int(d["version"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise BackupError(f"unreadable manifest: {exc}") from None


@dataclass(frozen=True)
class BucketCheckpoint:
    """One step in the bucket: ``verified`` only when every object matches the manifest."""

    step: int
    bytes: int
    stored_bytes: int
    verified: bool
    problems: tuple[str, ...] = ()
    created: float | None = None


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
