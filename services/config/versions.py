"""Named versions of a config file: save (name + notes), list, diff (changed keys old → new), restore.

Versions of one file live in ``<root>/<file name>-<hash of its absolute path>/``: one ``<id>.toml``
per version and ``index.json``; every write is atomic. Restoring first saves the current text as a
version named "before restore" and writes the file with a ``.bak`` of what it replaces.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.atomic import atomic_write_text
from services.config.findings import ConfigError, dotted
from services.config.validate import read_config


@dataclass(frozen=True)
class Version:
    id: str
    name: str
    notes: str
    created: float
    sha256: str
    lines: int


@dataclass(frozen=True)
class Change:
    key: str
    old: Any  # None when added
    new: Any  # None when removed
    kind: str  # "added" | "removed" | "changed"


def store_dir(config: Path, root: Path) -> Path:
    resolved = Path(config).expanduser().resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return Path(root) / f"{resolved.name}-{digest}"


def _index(folder: Path) -> list[Version]:
    try:
        raw = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the version index {folder / 'index.json'} is unreadable: {exc}") from None
    return [Version(**v) for v in raw]


def save(
    config: Path, root: Path, name: str, notes: str = "", *, text: str | None = None, now: float | None = None
) -> Version:
    """Store the file's current text (or ``text``) as a new version."""
    body = read_config(config) if text is None else text
    folder = store_dir(config, root)
    versions = _index(folder)
    created = time.time() if now is None else now
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "version"
    vid = f"{len(versions) + 1:04d}-{slug}"
    version = Version(vid, name, notes, created, hashlib.sha256(body.encode()).hexdigest(), body.count("\n"))
    atomic_write_text(folder / f"{vid}.toml", body)
    atomic_write_text(folder / "index.json", json.dumps([asdict(v) for v in [*versions, version]], indent=1))
    return version


def list_versions(config: Path, root: Path) -> list[Version]:
    return _index(store_dir(config, root))


def find(config: Path, root: Path, ref: str) -> Version:
    """A version by id, by its number ("3"), or by name (the newest with that name)."""
    versions = list_versions(config, root)
    for v in reversed(versions):
        if ref in (v.id, v.name) or (ref.isdigit() and int(ref) == int(v.id.split("-")[0])):
            return v
    raise ConfigError(
        f"no version {ref!r} of {config}",
        hint="see `prime-train-tui config list FILE`" if versions else "save one first",
    )


def text_of(config: Path, root: Path, ref: str) -> str:
    v = find(config, root, ref)
    return (store_dir(config, root) / f"{v.id}.toml").read_text(encoding="utf-8")


def restore(config: Path, root: Path, ref: str) -> Version:
    """Write version ``ref`` back to the file; the current text is kept as a version and a .bak."""
    target = find(config, root, ref)
    body = text_of(config, root, ref)
    if Path(config).exists():
        save(config, root, "before restore", f"automatic, before restoring {target.id}")
    atomic_write_text(Path(config), body, backup=True)
    return target


def _flatten(data: Any, prefix: tuple = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        if not data and prefix:
            out[dotted(prefix)] = {}
        for k, v in data.items():
            out.update(_flatten(v, prefix + (k,)))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            out.update(_flatten(v, prefix + (i,)))
    else:
        out[dotted(prefix)] = data
    return out


def diff(old_text: str, new_text: str) -> list[Change]:
    """Key-level changes between two TOML texts (raises ConfigError if one does not parse)."""
    try:
        old, new = _flatten(tomllib.loads(old_text)), _flatten(tomllib.loads(new_text))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot diff a file that does not parse: {exc}") from None
    changes = []
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            changes.append(Change(key, old[key], None, "removed"))
        elif key not in old:
            changes.append(Change(key, None, new[key], "added"))
        elif old[key] != new[key]:
            changes.append(Change(key, old[key], new[key], "changed"))
    return changes
