"""The recommendations table (``rules.toml``) and its small condition language."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

RULES_PATH = Path(__file__).with_name("rules.toml")


@dataclass(frozen=True)
class ConfigChange:
    """The one config key a recommendation changes: ``key`` (dotted, as in the run's TOML) set to ``value``,
    or to the current value times ``factor`` (rounded up for integers) when the file sets one."""

    key: str
    value: Any = None
    factor: float | None = None

    def path(self) -> tuple[str, ...]:
        return tuple(self.key.split("."))

    def resolve(self, current: Any) -> Any:
        """The new value given the file's current one (None: not set); None when neither works."""
        if self.factor is not None and isinstance(current, (int, float)) and not isinstance(current, bool):
            new = current * self.factor
            return max(current + 1, math.ceil(new)) if isinstance(current, int) else round(new, 6)
        return self.value

    def describe(self, current: Any = None) -> str:
        new = self.resolve(current)
        if new is not None:
            return f"{self.key} = {new!r}".replace("'", '"')
        return f"{self.key} x{self.factor:g}" if self.factor is not None else self.key

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "factor": self.factor}


@dataclass(frozen=True)
class Recommendation:
    id: str
    text: str
    source: str = ""
    change: ConfigChange | None = None


@lru_cache(maxsize=4)
def _load_rules_file(path: str) -> tuple[dict, ...]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
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
    if cond.startswith("no "):
        return variables.get(cond[3:].strip()) is None
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
    return {"==": left == right, ">=": left >= right, "<=": left <= right, ">": left > right, "<": left < right}[op]


def recommend(diagnosis: str, variables: dict[str, Any], rules: Sequence[dict]) -> tuple[Recommendation, ...]:
    shown = _Vars()
    for key, value in variables.items():
        if value is None:
            continue
        if isinstance(value, float):
            shown[key] = (
                f"{value:.1f}"
                if key.endswith("_s") or key in ("running", "waiting")
                else f"{value:g}"
                if key.endswith("_factor")
                else f"{value:.2f}"
            )
        else:
            shown[key] = value
    out = []
    for rule in rules:
        if all(_holds(c, diagnosis, variables) for c in rule.get("when", [])):
            text = " ".join(str(rule.get("text", "")).split())
            out.append(
                Recommendation(
                    str(rule.get("id", "")),
                    text.format_map(shown),
                    str(rule.get("source", "")),
                    _change(rule, variables),
                )
            )
    return tuple(out)


def _change(rule: dict, variables: dict[str, Any]) -> ConfigChange | None:
    """``key`` with ``value`` (a literal, or "{var}" for a measured number) and/or ``factor`` (a variable
    name); None when the rule names no key or none of its numbers was measured."""
    key = rule.get("key")
    if not key:
        return None
    value = rule.get("value")
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        value = variables.get(value[1:-1])
    factor = variables.get(rule["factor"]) if rule.get("factor") else None
    if not isinstance(factor, (int, float)) or isinstance(factor, bool):
        factor = None
    if value is None and factor is None:
        return None
    return ConfigChange(str(key), value, None if factor is None else float(factor))
