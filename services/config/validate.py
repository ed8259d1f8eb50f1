"""Validate a prime-rl TOML config: parse errors, schema, migrations, cross-checks, gotchas, memory
fit and secrets, every finding with its line and column.

Parse path: ``tomllib`` for values (fast) and :mod:`positions` for line/column; tomlkit is only used
to apply fixes (``fixes.py``). A file that does not parse still gets its secret scan, so a half-typed
config never hides a pasted key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from services.config.findings import ConfigError, Edit, Finding, Severity, dotted, make, rule_db
from services.config.positions import Pos, key_positions, position
from services.config.schema import KINDS, ConfigClass, Spec, detect_kind, load_schema
from services.config.suggest import did_you_mean
from services.tomlfile import depth_problem

_TOML_ERR_POS = re.compile(r"\(at line (\d+), column (\d+)\)")
_TOML_ERR_EOF = re.compile(r"\(at end of document\)")


@dataclass(frozen=True)
class Report:
    kind: str
    findings: tuple[Finding, ...]
    data: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    kind_detected: bool = True

    @property
    def errors(self) -> int:
        return sum(f.severity is Severity.ERROR for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity is Severity.WARNING for f in self.findings)

    @property
    def parsed(self) -> bool:
        return self.data is not None

    def to_json(self, file: str) -> dict[str, Any]:
        return {"file": file, "kind": self.kind, "findings": [f.to_json() for f in self.findings],
                "errors": self.errors, "warnings": self.warnings}


class Context:
    """What the checks share while walking one document."""

    def __init__(self, text: str, data: dict[str, Any], kind: str, parser: Any = None) -> None:
        self.text = text
        self.parser = parser
        self.data = data
        self.kind = kind
        self._positions: dict | None = None  # scanned on the first finding: a clean file needs none
        self.findings: list[Finding] = []

    @property
    def positions(self) -> dict:
        if self._positions is None:
            self._positions = (self.parser.positions(self.text) if self.parser is not None
                               else key_positions(self.text))
        return self._positions

    def pos(self, path: tuple) -> Pos:
        return position(self.positions, path)

    def add(self, rule_id: str, key_path: tuple, /, *, edit: Edit | None = None, at: tuple | None = None,
            **fields: Any) -> None:
        pos = self.pos(at if at is not None else key_path)
        self.findings.append(make(rule_id, pos, key_path, edit=edit, **fields))

    def get(self, path: tuple, default: Any = None) -> Any:
        node: Any = self.data
        for part in path:
            if isinstance(node, dict) and not isinstance(part, int) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                return default
        return node


def read_config(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file", hint="check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a TOML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", hint="TOML files must be UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def validate_file(path: Path, **kw: Any) -> Report:
    """Read and validate a file; raises ConfigError when it cannot be read (exit code 2), which includes a
    file nested deeper than any config (services/tomlfile.py: it would exhaust the parsers' recursion)."""
    text = read_config(path)
    problem = depth_problem(text)
    if problem is None:
        try:
            problem = depth_problem(text, tomllib.loads(text))
        except tomllib.TOMLDecodeError:
            pass  # a finding of validate_text, with its line and column
    if problem is not None:
        raise ConfigError(f"{path}: {problem}: not a prime-rl config")
    return validate_text(text, filename=str(path), **kw)


def validate_text(text: str, *, kind: str | None = None, filename: str | None = None,
                  preset: str | None = None, gpus: int | None = None, parser: Any = None) -> Report:
    """Validate TOML text. ``parser`` (an :class:`incremental.IncrementalParser`) makes re-validation
    after a small edit cheap: the editor keeps one per open file."""
    from services.config import checks  # the rule implementations

    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}", hint=f"one of {', '.join(KINDS)}")
    secrets = checks.scan_secrets(text)
    problem = depth_problem(text)  # deeper than any config: the parsers would recurse until they fail
    data = None
    try:
        data = None if problem else parser.loads(text) if parser is not None else tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Report(kind or "unknown", tuple(sorted([_parse_finding(text, exc), *secrets], key=_order)))
    except RecursionError:
        problem = "nested too deeply"
    if data is not None:
        problem = depth_problem(text, data)
    if problem is not None:
        m = re.search(r"\(line (\d+)\)", problem)
        finding = make("toml-syntax", (int(m.group(1)) if m else 1, 1), error=problem)
        return Report(kind or "unknown", tuple(sorted([finding, *secrets], key=_order)))
    sure = True
    if kind is None:
        kind, sure = infer_kind(data, filename)
    ctx = Context(text, data, kind, parser)
    if not sure:
        ctx.findings.append(make("kind-unknown", (1, 1), kind=kind))
    _run_checks(ctx, gpus=gpus, preset=preset)
    findings = _safe_fixes(ctx.findings, data, kind, gpus=gpus, preset=preset)
    return Report(kind, tuple(sorted([*findings, *secrets], key=_order)), data, sure)


def _run_checks(ctx: Context, *, gpus: int | None, preset: str | None) -> None:
    from services.config import checks

    _walk(ctx, ctx.data, load_schema().root(ctx.kind), ())
    checks.cross_checks(ctx)
    checks.gotchas(ctx, gpus=gpus)
    if preset is not None or gpus is not None:
        from services.config.memory import fit_findings

        ctx.findings.extend(fit_findings(ctx, preset=preset, gpus=gpus))


class _Unplaced(Context):
    """A context for checking a copy of the data: no text, so findings carry no line."""

    def __init__(self, data: dict[str, Any], kind: str) -> None:
        super().__init__("", data, kind)

    def pos(self, path: tuple) -> Pos:
        return (0, 0)


# ------------------------------------------------------------------------------------------ safe fixes

def _safe_fixes(findings: list[Finding], data: dict[str, Any], kind: str, *, gpus: int | None,
                preset: str | None) -> list[Finding]:
    """Offer a fix only if it provably helps: applied to a copy of the data, the copy validates with the
    finding gone and no error that was not there before. A refused fix becomes advice to act by hand,
    with the reason."""
    if not any(f.edit is not None for f in findings):
        return findings
    out = []
    for f in findings:
        reason = None if f.edit is None else _refusal(f, findings, data, kind, gpus=gpus, preset=preset)
        if reason is None:
            out.append(f)
        else:
            fix = f"{f.fix} (by hand: {reason})" if f.fix else f"by hand: {reason}"
            out.append(replace(f, edit=None, fix=fix))
    return out


def _refusal(finding: Finding, findings: list[Finding], data: dict[str, Any], kind: str, *,
             gpus: int | None, preset: str | None) -> str | None:
    from collections import Counter

    from services.config.fixcheck import moved, simulate

    edit = finding.edit
    assert edit is not None
    after, why = simulate(data, edit)
    if after is None:
        return why
    ctx = _Unplaced(after, kind)
    _run_checks(ctx, gpus=gpus, preset=preset)
    here = (finding.path, moved(finding.path, edit))
    if any(g.id == finding.id and g.path in here for g in ctx.findings):
        return "the automatic change would not resolve it"
    expected = Counter((f.id, moved(f.path, edit)) for f in findings
                       if f.severity is Severity.ERROR and f is not finding)
    for g in ctx.findings:
        if g.severity is not Severity.ERROR:
            continue
        if expected[(g.id, g.path)] > 0:
            expected[(g.id, g.path)] -= 1
        else:
            return f"changing it automatically would give a new error: {g.message}"
    return None


# ------------------------------------------------------------------------------------------ kind

def infer_kind(data: dict[str, Any], filename: str | None = None) -> tuple[str, bool]:
    """Which entry point a parsed file is for, from its content: the kinds whose schema knows every
    top-level key (today's name or an older one), then the fewest schema errors below them; the file
    name only breaks a tie. Returns ``(kind, sure)``; ``sure`` is False when the content fits several."""
    schema = load_schema()
    migrations = _migrations()

    def known(kind: str, key: str) -> bool:
        cls = schema.root(kind)
        return key in cls.keys or (cls.name, key) in migrations or ("*", key) in migrations

    misses = {k: sum(not known(k, key) for key in data) for k in KINDS}
    fewest = min(misses.values())
    best = [k for k in KINDS if misses[k] == fewest]
    if len(best) > 1:
        rejected = {}
        for k in best:
            ctx = _Unplaced(data, k)
            _walk(ctx, data, schema.root(k), ())
            rejected[k] = sum(f.severity is Severity.ERROR and not f.id.startswith("mig-") for f in ctx.findings)
        low = min(rejected.values())
        best = [k for k in best if rejected[k] == low]
    if len(best) == 1:
        return best[0], True
    guess, sure = detect_kind(data, filename, among=best)
    return guess, sure


def _order(f: Finding) -> tuple:
    return (f.line, f.column, f.severity.rank, f.id)


def _parse_finding(text: str, exc: Exception) -> Finding:
    message = str(exc)
    m = _TOML_ERR_POS.search(message)
    if m:
        line, col = int(m.group(1)), int(m.group(2))
    elif _TOML_ERR_EOF.search(message):
        lines = text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
    else:
        line, col = 1, 1
    error = _TOML_ERR_POS.sub("", _TOML_ERR_EOF.sub("", message)).strip()
    return make("toml-syntax", (line, col), error=error)


# ------------------------------------------------------------------------------------------ schema walk

def _walk(ctx: Context, table: dict[str, Any], cls: ConfigClass, path: tuple) -> None:
    variant = None
    plugin = False  # an open union's value names a plugin we do not know: its own keys pass
    if cls.union:
        variant = table.get(cls.union, cls.default_variant)
        if cls.open and isinstance(variant, str):
            variant = plugin_id(variant)
            if variant not in cls.variants:
                plugin = True
                _unknown_plugin(ctx, cls, variant, path + (cls.union,), table)
        if variant not in cls.variants:
            variant = None  # a wrong type value is reported by the type check below
    only = cls.variant_only
    for key in cls.required:
        if key not in table:
            ctx.add("missing-required", path + (key,), at=path, path=dotted(path + (key,)))
    for key, value in table.items():
        here = path + (key,)
        spec = cls.keys.get(key)
        if plugin and (spec is None or key in only):
            continue
        if spec is None:
            if cls.roles is not None:
                _role(ctx, cls, key, value, here, table)
            elif cls.extra == "allow":
                _passthrough(ctx, cls, key, here, table)
            else:
                _unknown(ctx, cls, key, value, here, table)
            continue
        if variant is not None and key in only and key not in cls.variants[variant]:
            owners = " or ".join(f'"{v}"' for v, ks in cls.variants.items() if key in ks)
            ctx.add("variant-key", here, path=dotted(here), key=key, where=dotted(path) or "the file",
                    variant=variant, owners=owners)
            continue
        _check(ctx, value, spec, here)


def _check(ctx: Context, value: Any, spec: Spec, path: tuple, *, in_map: bool = False) -> None:
    if value == "None":
        if spec.nullable or any(a.kind in ("str", "path", "any") for a in spec.alts):
            return
        ctx.add("not-nullable", path, path=dotted(path))
        return
    schema = load_schema()
    range_miss = None
    for alt in spec.alts:
        k = alt.kind
        if k == "any":
            return
        if k == "class" and isinstance(value, dict):
            _walk(ctx, value, schema.classes[alt.cls], path)
            return
        if k == "aot" and isinstance(value, list) and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                _walk(ctx, item, schema.classes[alt.cls], path + (i,))
            return
        if k == "literal" and value == alt.literal:
            return
        if k in ("str", "path") and isinstance(value, str):
            return
        if k == "bool" and isinstance(value, bool):
            return
        if k == "list" and isinstance(value, list):
            return
        if k == "dict" and isinstance(value, dict):
            return
        if k == "map" and isinstance(value, dict) and alt.item is not None:
            for name, item in value.items():
                _check(ctx, item, alt.item, path + (name,), in_map=True)
            return
        if k in ("int", "float") and isinstance(value, (int, float)) and not isinstance(value, bool):
            if k == "int" and not isinstance(value, int):
                continue
            if alt.in_range(value):
                return
            range_miss = alt
    if range_miss is not None:
        ctx.add("out-of-range", path, path=dotted(path), value=value, bound=range_miss.bound())
        return
    literals = [a.literal for a in spec.alts if a.kind == "literal"]
    edit = None
    suggestion = ""
    if literals and isinstance(value, str):
        close = difflib.get_close_matches(value, literals, n=1, cutoff=0.6)
        if close:
            edit = Edit("set", path, value=close[0])
            suggestion = f' (did you mean "{close[0]}"?)'
    expected = spec.describe()
    if in_map and edit is None and isinstance(value, (int, float)) and any(a.kind == "str" for a in spec.alts):
        # an environment variable is text: 1 means "1" (the launcher exports strings only)
        edit = Edit("set", path, value=_show(value))
    f = make("wrong-type", ctx.pos(path), path, edit=edit, path=dotted(path), expected=expected,
             got=_show(value))
    if edit is not None and not suggestion:
        f = replace(f, fix=f'write it as a string: {dotted(path)} = "{edit.value}"')
    if suggestion:
        f = Finding(f.id, f.severity, f.line, f.column, f.message + suggestion,
                    f'set {dotted(path)} = "{close[0]}"', f.source, f.path, edit)
    ctx.findings.append(f)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if len(value) < 40 else f'"{value[:37]}..."'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def _passthrough(ctx: Context, cls: ConfigClass, key: str, path: tuple, table: dict[str, Any]) -> None:
    """[inference.vllm] passes unknown keys to vLLM; only a near miss of a typed field is reported."""
    norm = key.replace("-", "_")
    if norm in cls.keys:
        return
    close = did_you_mean(norm, cls.keys, table)
    if close and cls.name != "Vllm":  # a taskset's own settings: named, not vLLM's
        ctx.add("extra-key-typo", path, key=key, close=close, where=dotted(path[:-1]),
                edit=Edit("rename", path, path[:-1] + (close,)))
    elif close:
        f = make("vllm-passthrough", ctx.pos(path), path, key=key,
                 edit=Edit("rename", path, path[:-1] + (close,)))
        ctx.findings.append(Finding(f.id, Severity.WARNING, f.line, f.column,
                                    f"{f.message} — did you mean '{close}'?", f"rename it to {close}",
                                    f.source, f.path, f.edit))


def plugin_id(value: str) -> str:
    """A plugin id as verifiers imports it: a hub id's owner and version dropped, '-' as '_'."""
    return value.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def _unknown_plugin(ctx: Context, cls: ConfigClass, value: str, path: tuple, table: dict[str, Any]) -> None:
    """An id outside the built-ins is a package the pod must have installed; a near miss of a built-in
    is almost surely a typo."""
    close = did_you_mean(value, cls.variants, {})
    if close is None:
        return
    shown = close.replace("_", "-") if "-" in str(table.get(cls.union, "")) else close
    ctx.add("plugin-typo", path, path=dotted(path), value=table.get(cls.union), close=shown,
            edit=Edit("set", path, value=shown))


def _role(ctx: Context, cls: ConfigClass, key: str, value: Any, path: tuple, table: dict[str, Any]) -> None:
    """An unknown key of an environment is a seat only the taskset's own env knows of: checked as a seat
    when it holds one's keys; a misspelt known key is named (a seat could bear that name, so a warning)."""
    roles = load_schema().classes[cls.roles or ""]
    if key == "harness":  # verifiers refuses it (EnvConfig._refuse_env_level_harness): it is a seat's
        seat = path[:-1] + ("agent", "harness")
        ctx.add("env-harness", path, where=dotted(path[:-1]), edit=Edit("rename", path, seat))
        return
    if isinstance(value, dict) and set(value) & set(roles.keys):
        _walk(ctx, value, roles, path)
    close = did_you_mean(key, cls.keys, table)
    if close is not None:
        ctx.add("env-key-typo", path, key=key, close=close, where=dotted(path[:-1]),
                edit=Edit("rename", path, path[:-1] + (close,)))


# ------------------------------------------------------------------------------------------ migrations

def _migrations() -> dict[tuple[str, str], dict[str, Any]]:
    cached = getattr(_migrations, "_cache", None)
    if cached is None:
        cached = {}
        for entry in rule_db().get("migrations", []):
            classes = entry["class"] if isinstance(entry["class"], list) else [entry["class"]]
            olds = entry["old"] if isinstance(entry["old"], list) else [entry["old"]]
            for c in classes:
                for old in olds:
                    cached[(c, old.split(".")[0])] = {**entry, "old": old}
        _migrations._cache = cached  # type: ignore[attr-defined]
    return cached


def _unknown(ctx: Context, cls: ConfigClass, key: str, value: Any, path: tuple, table: dict[str, Any]) -> None:
    migrations = _migrations()
    mig = migrations.get((cls.name, key)) or migrations.get(("*", key))
    if mig is not None and _migration(ctx, mig, value, path):
        return
    close = did_you_mean(key, cls.keys, table)
    suggestion = f" — did you mean '{close}'?" if close else ""
    edit = Edit("rename", path, path[:-1] + (close,)) if close else None
    where = f"[{dotted(path[:-1])}]" if path[:-1] else "the top level"
    f = make("unknown-key", ctx.pos(path), path, edit=edit, key=key, where=where, suggestion=suggestion)
    fix = (f"rename '{key}' to '{close}'" if close
           else f"remove '{key}'; valid keys here: {', '.join(sorted(cls.keys))}")
    f = Finding(f.id, f.severity, f.line, f.column, f.message, fix, f.source, f.path, edit)
    ctx.findings.append(f)


def _migration(ctx: Context, mig: dict[str, Any], value: Any, path: tuple) -> bool:
    old_parts = mig["old"].split(".")
    rest = old_parts[1:]
    node = value
    for part in rest:  # a dotted old key matches only when the nested table is really there
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    old_path = path + tuple(rest)
    base = path[:-1]
    new = mig["new"].format(key=old_parts[-1])
    changed = mig["changed"]
    source = f"prime-rl config history; changed {changed}"
    if new:
        up = 0
        while new.startswith("../"):
            new, up = new[3:], up + 1
        target_base = base[:len(base) - up] if up else base
        new_path = target_base + tuple(new.split("."))
        override = None
        manual = mig.get("manual", False)
        note = ""
        if mig["id"] == "mig-resume-step" and node == -1:
            new_path, override = target_base + ("resume",), {}
        divisor = mig.get("divide_by")
        if divisor and not manual:  # a total became a count per replica: total ÷ replicas
            replicas = ctx.get(old_path[:-1] + (divisor,), 1)
            if isinstance(node, int) and isinstance(replicas, int) and replicas > 0 and node % replicas == 0:
                override = node // replicas if replicas != 1 else None
                note = f" = {node // replicas} ({node} ÷ {divisor} = {replicas})" if replicas != 1 else ""
            else:
                manual = True
        edit = None if manual else Edit("rename", old_path, new_path, override)
        message = f"'{dotted(old_path)}' was renamed: it is now '{dotted(new_path)}' (changed {changed})"
        if divisor and manual:
            fix = f"set {dotted(new_path)} = {dotted(old_path)} ÷ {divisor} by hand"
        elif manual:
            fix = f"move it to [{dotted(new_path)}] by hand (the shape changed)"
        else:
            fix = (f"rename to {dotted(new_path)}{note}"
                   + (" (an empty [resume] = latest)" if override == {} else ""))
    elif mig.get("replaced_by"):
        edit = None if mig.get("manual") else Edit("delete", old_path)
        message = (f"'{dotted(old_path)}' was removed from prime-rl; {mig['replaced_by']} replaces it "
                   f"(changed {changed})")
        fix = f"use {mig['replaced_by']} instead and delete {dotted(old_path)}"
    else:
        edit = None if mig.get("manual") else Edit("delete", old_path)
        message = f"'{dotted(old_path)}' was removed in prime-rl, no replacement (changed {changed})"
        fix = f"delete {dotted(old_path)}: it has no replacement"
    pos = ctx.pos(old_path)
    ctx.findings.append(Finding(mig["id"], Severity.ERROR, pos[0], pos[1], message, fix, source,
                                dotted(old_path), edit))
    as_class = mig.get("as_class")
    if as_class and isinstance(node, dict):
        _walk(ctx, node, load_schema().classes[as_class], old_path)
    return True
