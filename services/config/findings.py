"""What the validator reports: a :class:`Finding` per problem, with where it is and how to fix it."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.errors import PrimeTrainError

Path_ = tuple  # a key path inside the TOML document: ("orchestrator", "train", "source", 0, "name")


class ConfigError(PrimeTrainError):
    """A config file that cannot be read, or a request the config services cannot satisfy."""


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Edit:
    """A machine-applicable fix. ``op``: "rename" (path → new_path), "set" (path = value), "delete"."""

    op: str
    path: Path_
    new_path: Path_ | None = None
    value: Any = None


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    line: int  # 1-based; 0 = the file as a whole
    column: int  # 1-based
    message: str
    fix: str = ""  # what to change, for people
    source: str = ""
    path: str = ""  # dotted key path, "" for the whole file
    edit: Edit | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity.value,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "fix": self.fix or None,
            "path": self.path,
            "source": self.source,
        }


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if part.replace("_", "").replace("-", "").isalnum() else f'"{part}"'
            out += f".{text}" if out else text
    return out


@functools.cache
def rule_db() -> dict[str, Any]:
    """rules.toml, parsed once."""
    text = resources.files("services.config").joinpath("rules.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def rule(rule_id: str) -> dict[str, Any]:
    return rule_db()["rules"][rule_id]


def make(
    rule_id: str,
    pos: tuple[int, int],
    key_path: Path_ = (),
    /,
    *,
    edit: Edit | None = None,
    severity: Severity | None = None,
    **fields: Any,
) -> Finding:
    """A finding from the rule database: message and recommendation are its templates, filled in."""
    spec = rule(rule_id)
    safe = _Defaulting(fields)
    message = spec["message"].format_map(safe)
    fix = spec.get("recommendation", "").format_map(safe)
    return Finding(
        rule_id,
        severity or Severity(spec["severity"]),
        pos[0],
        pos[1],
        message,
        fix,
        spec.get("source", ""),
        dotted(key_path),
        edit,
    )


class _Defaulting(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def is_set(value: Any) -> bool:
    """A value the user gave (not absent, not prime-rl's "None" string)."""
    return value is not None and value != "None"


def as_table(value: Any) -> dict | None:
    return value if isinstance(value, dict) else None
