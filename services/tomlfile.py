"""The one reader of the settings files (pods.toml, settings.toml, backup.toml, the app's state.toml) and
its one error policy: whatever is wrong with such a file is a :class:`SettingsError` naming the file,
the line when there is one, and what to do.

- missing: an empty file (the defaults); a dangling link, a directory, a FIFO or an unreadable file:
  "cannot read PATH: it is a directory, not a file" — never silently the defaults;
- more than ``MAX_BYTES``, not UTF-8, not TOML, or nested deeper than ``MAX_DEPTH``: "cannot read ...";
- an unknown table or key, a value of the wrong type: "PATH, line N: unknown key cache_tll in [offers]
  — did you mean cache_ttl?".

Depth: tomllib recurses a few frames per nested array or inline table, so a kilobyte of ``[[[[…`` ends
in RecursionError, and a 200 KB one takes tree-sitter over a minute to highlight. :func:`too_deep`
finds the nesting in one linear scan that knows TOML's strings and comments, so deep input is refused
before any parser sees it (the prime-rl config validator and the Config pane use it too).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.errors import SettingsError

MAX_DEPTH = 64  # arrays / inline tables / dotted tables inside each other; settings use 3
MAX_BYTES = 1024 * 1024  # a settings file is a few KB; anything this big is a mistake
FIX = "fix the file by hand (the app did not change it)"

_TOKEN = re.compile(r'"""|\'\'\'|["\'#\[\]{}\n]')
_BASIC_END = re.compile(r'\\.|"|\n', re.S)
_ML_BASIC_END = re.compile(r'\\.|"""|\n', re.S)


def too_deep(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The line (1-based) where arrays and inline tables first nest deeper than ``limit``, else None.
    Brackets in strings and comments do not count; one pass, linear in the text."""
    depth, line, pos, end = 0, 1, 0, len(text)
    while pos < end:
        m = _TOKEN.search(text, pos)
        if m is None:
            break
        tok, pos = m.group(), m.end()
        if tok == "\n":
            line += 1
        elif tok in "[{":
            depth += 1
            if depth > limit:
                return line
        elif tok in "]}":
            depth = max(0, depth - 1)
        elif tok == "#":
            nl = text.find("\n", pos)
            pos = end if nl < 0 else nl
        elif tok == "'":
            stop = min((i for i in (text.find("'", pos), text.find("\n", pos)) if i >= 0), default=end)
            if stop < end and text[stop] == "'":
                stop += 1
            pos = stop
        elif tok == "'''":
            stop = text.find("'''", pos)
            stop = end if stop < 0 else stop + 3
            line += text.count("\n", pos, stop)
            pos = stop
        else:  # a basic string, one line or multi-line: backslash escapes the next character
            pattern, closing = (_ML_BASIC_END, '"""') if tok == '"""' else (_BASIC_END, '"')
            while pos < end:
                e = pattern.search(text, pos)
                if e is None:
                    pos = end
                    break
                pos = e.end()
                if "\n" in e.group():
                    line += 1
                    if closing == '"':  # an unterminated one-line string ends at its line (invalid anyway)
                        break
                elif e.group() == closing:
                    break
    return None


def data_depth(data: Any) -> int:
    """How deeply tables and arrays nest in parsed data (iterative: no recursion on hostile input)."""
    deepest, stack = 0, [(data, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def show(name: str) -> str:
    """A key as TOML writes it: bare when it can be, else quoted with escapes (never a raw control
    character or newline in a message); long ones cut."""
    import json

    text = name if _BARE.fullmatch(name) else json.dumps(name)
    return text if len(text) <= 60 else text[:57] + "..."


def show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(name: str, known: Iterable[str], shape: str = "{}") -> str:
    """ " — did you mean X?" for a near miss (difflib), else ""; ``shape`` e.g. "[{}]" for a table."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" — did you mean {shape.format(close[0])}?" if close else ""


def depth_problem(text: str, data: Any = None) -> str | None:
    """What is too deep about ``text`` for any parser or walker of ours, or None: before parsing (``data``
    None) arrays and inline tables, after it (``data`` given) tables inside tables (``[a.a.a…]``)."""
    if data is None:
        line = too_deep(text)
        what = "arrays or inline tables"
    elif data_depth(data) > MAX_DEPTH:
        line = _deep_key_line(text, MAX_DEPTH)
        what = "tables"
    else:
        return None
    if data is None and line is None:
        return None
    return f"{what} nested deeper than {MAX_DEPTH} levels" + (f" (line {line})" if line else "")


def loads(text: str, where: str = "the text", error: type[SettingsError] = SettingsError) -> dict[str, Any]:
    """tomllib.loads under the error policy: too deep, not TOML → ``error`` ("cannot read WHERE: ...")."""
    if (problem := depth_problem(text)) is not None:
        raise error(f"cannot read {where}: {problem}", hint=FIX)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"cannot read {where}: not valid TOML: {exc}", hint=FIX) from None
    except RecursionError:  # too_deep's scan missed a nesting the parser saw (cannot happen on valid TOML)
        raise error(f"cannot read {where}: nested too deeply", hint=FIX) from None
    if (problem := depth_problem(text, data)) is not None:
        raise error(f"cannot read {where}: {problem}", hint=FIX)
    return data


def read_toml(path: Path, error: type[SettingsError] = SettingsError) -> TomlFile:
    """The file parsed (a missing file: empty). Anything else that stops it being read is ``error``."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        if os.path.lexists(path):
            raise error(
                f"cannot read {path}: it is a link to a file that does not exist",
                hint=f"point the link at a file or remove {path}",
            ) from None
        return TomlFile(path, "", {}, exists=False, error=error)
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}", hint=f"check {path} and its folders") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(
            f"cannot read {path}: it is a directory, not a file",
            hint=f"move the directory away; the settings belong in a file named {path.name}",
        )
    if not stat.S_ISREG(st.st_mode):
        raise error(f"cannot read {path}: not a regular file", hint=f"replace {path} with a plain text file")
    if st.st_size > MAX_BYTES:
        raise error(
            f"cannot read {path}: {st.st_size:,} bytes, more than a settings file can be ({MAX_BYTES:,} at most)",
            hint=FIX,
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}", hint=f"check the permissions of {path}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"cannot read {path}: not UTF-8 text (line {line})", hint="save it as UTF-8") from None
    return TomlFile(path, text, loads(text, str(path), error), error=error)


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "an array",
    dict: "a table",
}
_ANNOTATIONS: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "str | None": str,
    "int | None": int,
    "float | None": float,
    "Optional[str]": str,
}


def kinds_of(cls: Any, skip: Iterable[str] = ()) -> dict[str, Any]:
    """A dataclass's fields → the TOML type each takes (None: checked by the caller)."""
    from dataclasses import fields

    return {
        f.name: _ANNOTATIONS.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        for f in fields(cls)
        if f.name not in set(skip)
    }


def type_ok(value: Any, kind: Any) -> bool:
    """``value`` is of ``kind`` (a type; float takes integers too; bool is never a number; numbers finite)."""
    if kind is None:
        return True
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@dataclass(frozen=True)
class TomlFile:
    """A parsed settings file and the errors about it (each with the line of the key it is about)."""

    path: Path
    text: str
    data: dict[str, Any]
    exists: bool = True
    error: type[SettingsError] = field(default=SettingsError, repr=False)

    def line_of(self, *keys: str) -> int | None:
        """The first line that defines ``keys`` (a table header, a key in it, or a dotted key)."""
        return line_of(self.text, keys)

    def fail(self, message: str, *keys: str, hint: str = FIX) -> SettingsError:
        line = self.line_of(*keys) if keys else None
        return self.error(f"{self.path}" + (f", line {line}" if line else "") + f": {message}", hint=hint)

    def only_tables(self, known: Iterable[str], hint: str = "") -> None:
        """Every top-level entry is one of the ``known`` tables."""
        known = list(known)
        names = ", ".join(f"[{k}]" for k in known)
        for name, value in self.data.items():
            if name not in known:
                raise self.fail(
                    f"unknown table [{show(name)}]{did_you_mean(name, known, '[{}]')}",
                    name,
                    hint=hint or f"{self.path.name} has {names}; fix the name or remove the table",
                )
            if not isinstance(value, dict):
                raise self.fail(
                    f"{show(name)} must be a table ([{show(name)}]), not {_TYPE_NAMES.get(type(value), 'a value')}",
                    name,
                )

    def table(self, *names: str, kinds: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The table at ``names`` (missing: empty). With ``kinds`` (key → type, None = any): unknown keys
        and values of the wrong type are errors."""
        node: Any = self.data
        for i, name in enumerate(names):
            node = node.get(name, {}) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                where = ".".join(map(show, names[: i + 1]))
                raise self.fail(f"{where} must be a table ([{where}])", *names[: i + 1])
        if kinds is not None:
            self.check(node, names, kinds)
        return node

    def check(self, table: Mapping[str, Any], names: tuple[str, ...], kinds: Mapping[str, Any]) -> None:
        where = ".".join(map(show, names))
        for key, value in table.items():
            if key not in kinds:
                raise self.fail(
                    f"unknown key {show(key)} in [{where}]{did_you_mean(key, kinds)}",
                    *names,
                    key,
                    hint=f"known keys of [{where}]: {', '.join(sorted(kinds))}",
                )
            if not type_ok(value, kinds[key]):
                raise self.fail(
                    f"{where}.{key} must be {_TYPE_NAMES.get(kinds[key], 'something else')}, not {show_value(value)}",
                    *names,
                    key,
                )


# ------------------------------------------------------------------------------------- lines of keys
_HEADER = re.compile(r"^\s*\[\[?(?P<path>[^\[\]]*)\]\]?\s*(#.*)?$")
_KEYLINE = re.compile(r"^\s*(?P<path>(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|[A-Za-z0-9_\-\s.])+?)\s*=")
_PART = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'([^']*)'|([A-Za-z0-9_\-]+)")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(next(g for g in m.groups() if g is not None) for m in _PART.finditer(dotted))


def _deep_key_line(text: str, limit: int) -> int | None:
    """The first line whose table header or dotted key path is longer than ``limit`` parts."""
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        if (m := _HEADER.match(line)) is not None:
            table = _parts(m.group("path"))
            if len(table) > limit:
                return number
        elif (m := _KEYLINE.match(line)) is not None and len(table) + len(_parts(m.group("path"))) > limit:
            return number
    return None


def line_of(text: str, keys: Iterable[str]) -> int | None:
    """Best effort: the first line whose table header or key path starts with ``keys``."""
    want = tuple(keys)
    if not want:
        return None
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        if (m := _HEADER.match(line)) is not None:
            table = _parts(m.group("path"))
            if table[: len(want)] == want:
                return number
        elif (m := _KEYLINE.match(line)) is not None:
            path = table + _parts(m.group("path"))
            if path[: len(want)] == want:
                return number
    return None


def readable_by_others(path: Path, holds: str) -> str | None:
    """A warning when a file holding secrets (``holds``: "API keys", ...) can be read by the group or other
    users, as ssh warns of a private key; None when it cannot (or does not exist)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & 0o044:
        return None
    who = "group and other users" if mode & 0o044 == 0o044 else "other users" if mode & 0o004 else "its group"
    return (
        f"{path} holds {holds} and can be read by {who} (mode {mode & 0o777:o}): make it readable by you "
        "alone (mode 600)"
    )
