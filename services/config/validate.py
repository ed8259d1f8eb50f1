"""Validate a prime-rl TOML config: parse errors, schema, migrations, cross-checks, gotchas, memory
fit and secrets, every finding with its line and column.

Parse path: ``tomllib`` for values (fast) and :mod:`positions` for line/column; tomlkit is only used
to apply fixes (``fixes.py``). A file that does not parse still gets its secret scan, so a half-typed
config never hides a pasted key.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.config.findings import ConfigError, Edit, Finding, Severity, make
from services.config.positions import Pos, key_positions, position
from services.config.schema import KINDS, detect_kind, load_schema
from services.config.walk import load_migrations, walk
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
        return {
            "file": file,
            "kind": self.kind,
            "findings": [f.to_json() for f in self.findings],
            "errors": self.errors,
            "warnings": self.warnings,
        }


class Context:
    """What the checks share while walking one document."""

    def __init__(self, text: str, data: dict[str, Any], kind: str, parser: Any = None, cache: Any = None) -> None:
        self.text = text
        self.parser = parser
        self.data = data
        self.kind = kind
        self.cache = cache  # a reuse.ReuseCache: findings carry placeholders until reuse.place
        self._positions: Any = None  # scanned on the first finding: a clean file needs none
        self.findings: list[Finding] = []

    @property
    def positions(self) -> Any:
        if self._positions is None:
            self._positions = (
                self.parser.lazy_positions(self.text) if self.parser is not None else key_positions(self.text)
            )
        return self._positions

    def pos(self, path: tuple) -> Pos:
        if self.cache is not None:
            return self.cache.placeholder(tuple(path))
        return self.placed(path)

    def placed(self, path: tuple) -> Pos:
        return position(self.positions, path)

    def add(
        self, rule_id: str, key_path: tuple, /, *, edit: Edit | None = None, at: tuple | None = None, **fields: Any
    ) -> None:
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


CONFIG_MAX_BYTES = 4 * 1024 * 1024  # real prime-rl configs are a few KB; docs/config.md


def read_config(path: Path) -> str:
    """The config's text; ConfigError (one line) for anything that is not a readable regular UTF-8 file of
    at most CONFIG_MAX_BYTES. Opened non-blocking, so a FIFO cannot stall the open, and refused unless it is a
    regular file (a FIFO, /dev/zero, a socket would hang or never end); the read itself is bounded too, as
    the file may grow after the check."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file", hint="check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path} is a directory, not a TOML file")
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{path} is not a regular file ({_file_kind(mode)}): not a prime-rl config")
        chunks, size = [], 0
        while size <= CONFIG_MAX_BYTES and (chunk := os.read(fd, CONFIG_MAX_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > CONFIG_MAX_BYTES:
        raise ConfigError(f"{path} is larger than {CONFIG_MAX_BYTES // 2**20} MiB: not a prime-rl config")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", hint="TOML files must be UTF-8") from None


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


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


def validate_text(
    text: str,
    *,
    kind: str | None = None,
    filename: str | None = None,
    preset: str | None = None,
    gpus: int | None = None,
    parser: Any = None,
) -> Report:
    """Validate TOML text. ``parser`` (an :class:`incremental.IncrementalParser`) makes re-validation
    after a small edit cheap: the editor keeps one per open file."""
    from services.config import checks  # the rule implementations

    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}", hint=f"one of {', '.join(KINDS)}")
    secrets = parser.scan(text, checks.scan_secrets) if parser is not None else checks.scan_secrets(text)
    deep = parser.depth_problem if parser is not None else depth_problem
    problem = deep(text)  # deeper than any config: the parsers would recurse until they fail
    data = None
    try:
        data = None if problem else parser.loads(text) if parser is not None else tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Report(kind or "unknown", tuple(sorted([_parse_finding(text, exc), *secrets], key=_order)))
    except RecursionError:
        problem = "nested too deeply"
    if data is not None:
        problem = deep(text, data)
    if problem is not None:
        m = re.search(r"\(line (\d+)\)", problem)
        finding = make("toml-syntax", (int(m.group(1)) if m else 1, 1), error=problem)
        return Report(kind or "unknown", tuple(sorted([finding, *secrets], key=_order)))
    assert data is not None  # parsed, or its problem was reported above
    sure = True
    if kind is None:
        kind, sure = infer_kind(data, filename)
    cache = None
    if parser is not None:
        from services.config.reuse import ReuseCache, place

        cache = parser.validation = parser.validation or ReuseCache()
        cache.begin()
    ctx = Context(text, data, kind, parser, cache)
    if not sure:
        ctx.findings.append(make("kind-unknown", (1, 1), kind=kind))
    _run_checks(ctx, gpus=gpus, preset=preset)
    findings = _safe_fixes(ctx.findings, data, kind, gpus=gpus, preset=preset, cache=cache)
    if cache is not None:
        findings = place(findings, cache, ctx.placed)
    return Report(kind, tuple(sorted([*findings, *secrets], key=_order)), data, sure)


# what a file that builds on others (toml_files) may leave to them: judged only on the composed config
OVERRIDE_BLIND = frozenset(
    {"missing-required", "xc-no-train-source", "xc-eval-sources", "xc-model-name", "xc-ckpt-both"}
)


def is_override(data: dict[str, Any]) -> bool:
    """A file that names the files it builds on (older prime-rl's ``toml_files``): an override, not a whole
    config."""
    return "toml_files" in data


def _run_checks(ctx: Context, *, gpus: int | None, preset: str | None) -> None:
    start = len(ctx.findings)
    _all_checks(ctx, gpus=gpus, preset=preset)
    if is_override(ctx.data):
        ctx.findings[start:] = [f for f in ctx.findings[start:] if f.id not in OVERRIDE_BLIND]
        ctx.findings.append(
            make("override-file", ctx.pos(("toml_files",)), ("toml_files",), files=_files(ctx.data["toml_files"]))
        )


def _files(value: Any) -> str:
    names = value if isinstance(value, list) else [value]
    return ", ".join(str(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")


def _all_checks(ctx: Context, *, gpus: int | None, preset: str | None) -> None:
    from services.config import checks

    walk(ctx, ctx.data, load_schema().root(ctx.kind), ())
    if ctx.cache is None:
        checks.cross_checks(ctx)
        checks.gotchas(ctx, gpus=gpus)
    else:
        _reused_rules(ctx, gpus)
    if preset is not None or gpus is not None:
        from services.config.memory import fit_findings

        ctx.findings.extend(fit_findings(ctx, preset=preset, gpus=gpus))


def _reused_rules(ctx: Context, gpus: int | None) -> None:
    """The cross-table rules through the editor's cache: they re-run when what they read changed."""
    from services.config import checks

    cache = ctx.cache

    def run(fn: Any) -> list[Finding]:
        start = len(ctx.findings)
        fn()
        out = ctx.findings[start:]
        del ctx.findings[start:]
        return out

    key = (ctx.kind, gpus, cache.outline(ctx.data))

    def whole_file() -> None:
        checks.cross_checks(ctx)
        checks.gotchas(ctx, gpus=gpus, sources=False)

    ctx.findings.extend(cache.rules(key, lambda: run(whole_file)))
    for i, src in enumerate(checks.train_sources(ctx)):
        ctx.findings.extend(
            cache.source(
                (ctx.kind, i, id(src)), src, lambda i=i, src=src: run(lambda: checks.remote_executor(ctx, i, src))
            )
        )


class _Unplaced(Context):
    """A context for checking a copy of the data: no text, so findings carry no line (with a reuse
    cache they carry placeholders, which nobody places)."""

    def __init__(self, data: dict[str, Any], kind: str, cache: Any = None) -> None:
        super().__init__("", data, kind, cache=cache)

    def placed(self, path: tuple) -> Pos:
        return (0, 0)


# ------------------------------------------------------------------------------------------ safe fixes


def _safe_fixes(
    findings: list[Finding], data: dict[str, Any], kind: str, *, gpus: int | None, preset: str | None, cache: Any = None
) -> list[Finding]:
    """Offer a fix only if it provably helps: applied to a copy of the data, the copy validates with the
    finding gone and no error that was not there before. A refused fix becomes advice to act by hand,
    with the reason."""
    if not any(f.edit is not None for f in findings):
        return findings
    out = []
    for f in findings:
        reason = None if f.edit is None else _refusal(f, findings, data, kind, gpus=gpus, preset=preset, cache=cache)
        if reason is None:
            out.append(f)
        else:
            fix = f"{f.fix} (by hand: {reason})" if f.fix else f"by hand: {reason}"
            out.append(replace(f, edit=None, fix=fix))
    return out


def _refusal(
    finding: Finding,
    findings: list[Finding],
    data: dict[str, Any],
    kind: str,
    *,
    gpus: int | None,
    preset: str | None,
    cache: Any = None,
) -> str | None:
    from collections import Counter

    from services.config.fixcheck import moved, simulate

    edit = finding.edit
    assert edit is not None
    after, why = simulate(data, edit)
    if after is None:
        return why
    ctx = _Unplaced(after, kind, cache)
    _run_checks(ctx, gpus=gpus, preset=preset)
    here = (finding.path, moved(finding.path, edit))
    if any(g.id == finding.id and g.path in here for g in ctx.findings):
        return "the automatic change would not resolve it"
    expected = Counter(
        (f.id, moved(f.path, edit)) for f in findings if f.severity is Severity.ERROR and f is not finding
    )
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
    migrations = load_migrations()

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
            walk(ctx, data, schema.root(k), ())
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
