"""The recommendations table (``rules.toml``) and its small condition language."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

RULES_PATH = Path(__file__).with_name("rules.toml")


@dataclass(frozen=True)
class Recommendation:
    id: str
    text: str
    source: str = ""


@lru_cache(maxsize=4)
def _load_rules_file(path: str) -> tuple[dict, ...]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return tuple(data.get("rule", []))


def load_rules(path: Path | None = None) -> tuple[dict, ...]:
    return _load_rules_file(str(path or RULES_PATH))


_COND = re.compile(r"^\s*([\w.]+)\s*(==|>=|<=|>|<)\s*([\w.+-]+)\s*$")


class _Vars(dict):
    def __missing__(self, key: str) -> str:
        return "N/A"


def _holds(cond: str, diagnosis: str, variables: dict[str, Any]) -> bool:
    cond = cond.strip()
    if cond.startswith("has "):
        return variables.get(cond[4:].strip()) is not None
    m = _COND.match(cond)
    if m is None:
        raise ValueError(f"bad rule condition: {cond!r}")
    name, op, value = m.groups()
    if name == "diagnosis":
        return op == "==" and diagnosis == value
    left = variables.get(name)
    if left is None or isinstance(left, str):
        return False
    right = float(value)
    return {"==": left == right, ">=": left >= right, "<=": left <= right,
            ">": left > right, "<": left < right}[op]


def recommend(diagnosis: str, variables: dict[str, Any], rules: Sequence[dict]) -> tuple[Recommendation, ...]:
    shown = _Vars()
    for key, value in variables.items():
        if value is None:
            continue
        if isinstance(value, float):
            shown[key] = f"{value:.1f}" if key.endswith("_s") else f"{value:.2f}"
        else:
            shown[key] = value
    out = []
    for rule in rules:
        if all(_holds(c, diagnosis, variables) for c in rule.get("when", [])):
            text = " ".join(str(rule.get("text", "")).split())
            out.append(Recommendation(str(rule.get("id", "")), text.format_map(shown), str(rule.get("source", ""))))
    return tuple(out)
