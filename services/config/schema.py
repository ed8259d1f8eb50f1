"""prime-rl's config schema, loaded from ``schema.toml`` and compiled once into :class:`ConfigClass`es.

A type spec is a string of alternatives separated by ``|`` (see the header of schema.toml); each
alternative compiles to an :class:`Alt`. Checking a value returns the first alternative it fits.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

KINDS = ("rl", "trainer", "orchestrator", "inference", "sft", "evals")
_RANGE = re.compile(r"^(int|float)([\[(])([^,]*),([^\])]*)([\])])$")


@dataclass(frozen=True)
class Alt:
    kind: str  # str int float bool path list dict any none literal class aot map
    literal: str | None = None
    item: Spec | None = None  # a map's value type: {str} = a table of strings
    cls: str | None = None
    # a union table that must name its variant: prime-rl's loader fills the tag only for a field whose
    # default is a model carrying one (pydantic_config's _default_discriminator_types), not for one that
    # defaults to None or to a factory; there a table without the tag is rejected
    tagged: bool = False
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False

    def describe(self) -> str:
        if self.kind == "literal":
            return f'"{self.literal}"'
        if self.kind == "class":
            return "a table"
        if self.kind == "aot":
            return "an array of tables"
        if self.kind == "none":
            return '"None"'
        if self.kind == "map" and self.item is not None:
            return f"a table of {self.item.describe().replace('a ', '', 1)}s"
        return {
            "str": "a string",
            "path": "a path string",
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
            "list": "an array",
            "dict": "a table",
            "any": "anything",
        }[self.kind]

    def bound(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_num(self.high)}")
        return " and ".join(parts)

    def in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True


@dataclass(frozen=True)
class Spec:
    alts: tuple[Alt, ...]

    @property
    def nullable(self) -> bool:
        return any(a.kind == "none" for a in self.alts)

    def classes(self) -> list[str]:
        return [a.cls for a in self.alts if a.cls] + [c for a in self.alts if a.item for c in a.item.classes()]

    def describe(self) -> str:
        names = [a.describe() for a in self.alts if a.kind != "none"]
        return " or ".join(dict.fromkeys(names)) or '"None"'


@dataclass(frozen=True)
class ConfigClass:
    name: str
    keys: dict[str, Spec]
    extra: str = "forbid"  # or "allow"
    union: str | None = None  # discriminator key
    default_variant: str | None = None
    variants: dict[str, frozenset[str]] = field(default_factory=dict)
    doc: str = ""
    required: tuple[str, ...] = ()
    # a plugin union (verifiers' harness ids): a discriminator value outside ``variants`` names a
    # plugin the validator does not know, whose own keys pass through
    open: bool = False
    # a class whose unknown keys may be roles (verifiers' env: a taskset's env declares its seats):
    # an unknown key holding a table with keys of this class is checked as one
    roles: str | None = None
    variant_required: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a variant's keys without a default

    @functools.cached_property
    def variant_only(self) -> frozenset[str]:
        """Keys that belong to some variants only (computed once: every table of the class asks)."""
        out: set[str] = set()
        for keys in self.variants.values():
            out |= keys
        return frozenset(out)


@dataclass(frozen=True)
class Schema:
    classes: dict[str, ConfigClass]
    entrypoints: dict[str, str]

    def root(self, kind: str) -> ConfigClass:
        return self.classes[self.entrypoints[kind]]

    def spec_at(self, kind: str, path: tuple[str, ...]) -> Spec | None:
        """The type spec of the key at ``path`` in a ``kind`` file (through each table's first class), or None."""
        cls: ConfigClass | None = self.root(kind)
        for i, key in enumerate(path):
            spec = cls.keys.get(key) if cls is not None else None
            if spec is None or i == len(path) - 1:
                return spec
            names = spec.classes()
            cls = self.classes.get(names[0]) if names else None
        return None


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def parse_spec(text: str) -> Spec:
    alts = []
    for raw in text.split("|"):
        part = raw.strip()
        if part.startswith("{") and part.endswith("}"):
            alts.append(Alt("map", item=parse_spec(part[1:-1])))
        elif part.startswith("'") and part.endswith("'"):
            alts.append(Alt("literal", literal=part[1:-1]))
        elif part.startswith("[@") and part.endswith("]"):
            alts.append(Alt("aot", cls=part[2:-1]))
        elif part.startswith("@") and part.endswith("!"):
            alts.append(Alt("class", cls=part[1:-1], tagged=True))
        elif part.startswith("@"):
            alts.append(Alt("class", cls=part[1:]))
        elif m := _RANGE.match(part):
            kind, lo_b, lo, hi, hi_b = m.groups()
            alts.append(
                Alt(
                    kind,
                    low=float(lo) if lo else None,
                    low_open=lo_b == "(",
                    high=float(hi) if hi else None,
                    high_open=hi_b == ")",
                )
            )
        elif part in ("str", "int", "float", "bool", "path", "list", "dict", "any", "none"):
            alts.append(Alt(part))
        else:
            raise ValueError(f"bad type spec {text!r}")
    return Spec(tuple(alts))


@functools.cache
def load_schema() -> Schema:
    text = resources.files("services.config").joinpath("schema.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    classes = {}
    for name, table in data["classes"].items():
        keys = {k: parse_spec(v) for k, v in table.items() if not k.startswith("__")}
        variants = {v: frozenset(ks) for v, ks in table.get("__variants__", {}).items()}
        classes[name] = ConfigClass(
            name,
            keys,
            table.get("__extra__", "forbid"),
            table.get("__union__"),
            table.get("__default__"),
            variants,
            table.get("__doc__", ""),
            tuple(table.get("__required__", ())),
            table.get("__open__", False),
            table.get("__roles__"),
            {v: tuple(ks) for v, ks in table.get("__variant_required__", {}).items()},
        )
    for cls in classes.values():  # every referenced class exists (a typo in schema.toml fails loudly)
        for ref in [r for spec in cls.keys.values() for r in spec.classes()] + ([cls.roles] if cls.roles else []):
            if ref not in classes:
                raise ValueError(f"schema.toml: {cls.name} refers to unknown class {ref}")
    return Schema(classes, dict(data["entrypoints"]))


@dataclass(frozen=True)
class PrimeRlSource:
    """The prime-rl release schema.toml is checked against (``prime_rl_fields.json``'s header, written by
    scripts/update_schema.py from prime-rl's own config models)."""

    version: str | None  # prime-rl's own version
    commit: str
    date: str
    configs_version: str | None  # the prime-rl-configs package the fields came from

    def describe(self) -> str:
        release = f"prime-rl {self.version}" if self.version else "prime-rl"
        return f"{release} (commit {self.commit[:8]}, {self.date})"

    def to_json(self) -> dict[str, str | None]:
        return {
            "version": self.version,
            "commit": self.commit,
            "date": self.date,
            "configs_version": self.configs_version,
        }


@functools.cache
def prime_rl_source() -> PrimeRlSource | None:
    try:
        text = resources.files("services.config").joinpath("prime_rl_fields.json").read_text(encoding="utf-8")
        header = json.loads(text)["header"]
        return PrimeRlSource(
            header.get("prime_rl_version"),
            header["prime_rl_commit"],
            header["prime_rl_commit_date"],
            header.get("package_version"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def detect_kind(data: dict[str, Any], filename: str | None = None, among: Any = KINDS) -> tuple[str, bool]:
    """A tie-breaker between the entry points ``among`` whose schema fits the file equally well
    (``validate.infer_kind`` decides from the content first): telling keys, then the file name.

    Returns ``(kind, sure)``; ``sure`` is False when only the file name (or nothing) decided.
    """
    keys = set(data)
    name = (filename or "").lower().replace("\\", "/").rsplit("/", 1)[-1]
    data_table = data.get("data")
    guesses: list[tuple[str, bool]] = []
    if keys & {"trainer", "orchestrator"}:
        guesses.append(("rl", True))
    if keys & {"vllm", "server", "router", "kv_cache_offload", "use_deep_gemm", "backend_port"}:
        guesses.append(("inference", True))
    if isinstance(data.get("model"), str) or "online" in keys:
        guesses.append(("evals", True))
    if keys & {"train", "batch_size", "group_size", "token_batch_size", "algo", "concurrency"}:
        guesses.append(("orchestrator", True))
    if isinstance(data_table, dict) and set(data_table) - {"fake"}:
        guesses.append(("sft", True))
    if keys & {"val", "eval", "deployment"} and "data" in keys:
        guesses.append(("sft", True))
    for hint, kind in (
        ("infer", "inference"),
        ("orch", "orchestrator"),
        ("sft", "sft"),
        ("train", "trainer"),
        ("rl", "rl"),
    ):
        if hint in name:
            guesses.append((kind, False))
    if keys & {"data", "loss", "optim", "scheduler"}:
        guesses.append(("sft" if "data" in keys and "fake" not in (data_table or {}) else "trainer", False))
    for kind, sure in guesses:
        if kind in among:
            return kind, sure
    return ("rl" if "rl" in among else next(iter(among), "rl")), False
