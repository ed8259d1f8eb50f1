"""Incremental TOML parsing for the editor: re-parse only the sections a keystroke touched.

The text is cut before every line that starts with ``[`` (a table header); each piece is parsed on
its own with tomllib (cached by its text) and the results are merged with TOML's rules (a header
below an array of tables refers to its last element). A cut inside a multi-line string or array
leaves the piece before it unterminated, so that piece fails to parse; any failure, duplicate key or
redefined table falls back to one full tomllib parse, which gives the exact error. The result is the
same dict tomllib returns (checked against tomllib over every fixture in the tests). Parts of it are
shared with the cache: callers must not mutate the result.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from services.config.positions import TABLE_CUT, PositionCache, key_positions

_HEADER = re.compile(r"^[ \t]*(\[\[?)([^\]\n#]*)")


class _Conflict(Exception):
    pass


class IncrementalParser:
    def __init__(self, max_pieces: int = 4096) -> None:
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._max = max_pieces
        self.full_parses = 0  # how often the fallback ran (for tests and the benchmark)
        self.last_incremental = False  # the last successful parse went piece by piece
        self.positions_cache = None  # a positions.PositionCache, made on first use

    def loads(self, text: str) -> dict[str, Any]:
        """Like ``tomllib.loads`` (raises TOMLDecodeError), fast for small edits of a big file."""
        self.last_incremental = False
        try:
            data = self._merged(text)
        except (tomllib.TOMLDecodeError, _Conflict):
            self.full_parses += 1
            return tomllib.loads(text)
        self.last_incremental = True
        return data

    def positions(self, text: str) -> dict:
        """Key positions of the text last parsed (piece-cached when that parse was incremental)."""
        if not self.last_incremental:
            return key_positions(text)
        if self.positions_cache is None:
            self.positions_cache = PositionCache()
        return self.positions_cache.positions(text)

    def _piece(self, piece: str) -> dict[str, Any]:
        hit = self._cache.get(piece)
        if hit is not None:
            self._cache.move_to_end(piece)
            return hit
        parsed = tomllib.loads(piece)
        self._cache[piece] = parsed
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return parsed

    def _merged(self, text: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        owned = {id(out)}  # containers built here; the rest are shared with the cache (copy on write)
        headers: set[tuple] = set()
        aot_gen: dict[str, int] = {}  # [[name]] → how many elements so far
        line0 = 0  # lines before this piece
        for piece in TABLE_CUT.split(text):
            if not piece:
                continue
            try:
                parsed = self._piece(piece)
            except tomllib.TOMLDecodeError as exc:
                raise _located(exc, piece, line0) from None
            m = _HEADER.match(piece)
            if m:
                name = re.sub(r"\s+", "", m.group(2))
                if m.group(1) == "[[":
                    aot_gen[name] = aot_gen.get(name, 0) + 1
                else:  # a plain table may be defined once per enclosing array element
                    parts = name.split(".")
                    ctx = tuple(aot_gen.get(".".join(parts[:i]), 0) for i in range(1, len(parts)))
                    if (name, ctx) in headers:
                        raise _Conflict(name)
                    headers.add((name, ctx))
            _merge(out, parsed, owned)
            line0 += piece.count("\n")
        return out


def _own_dict(parent: Any, key: Any, value: dict, owned: set[int]) -> dict:
    if id(value) in owned:
        return value
    mine = dict(value)
    owned.add(id(mine))
    parent[key] = mine
    return mine


def _merge(into: dict[str, Any], src: dict[str, Any], owned: set[int]) -> None:
    for key, value in src.items():
        if key not in into:
            into[key] = value  # shared with the cache until something merges into it
            continue
        have = into[key]
        if isinstance(have, dict) and isinstance(value, dict):
            _merge(_own_dict(into, key, have, owned), value, owned)
        elif isinstance(have, list) and have and isinstance(have[-1], dict) and isinstance(value, list) \
                and value and all(isinstance(v, dict) for v in value):
            if id(have) not in owned:  # [[a]] ... [[a]]
                have = into[key] = list(have)
                owned.add(id(have))
            have.extend(value)
        elif isinstance(have, list) and have and isinstance(have[-1], dict) and isinstance(value, dict):
            if id(have) not in owned:  # [a.b] below [[a]] belongs to the last element
                have = into[key] = list(have)
                owned.add(id(have))
            _merge(_own_dict(have, -1, have[-1], owned), value, owned)
        else:
            raise _Conflict(key)


_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def _located(exc: tomllib.TOMLDecodeError, piece: str, line0: int) -> Exception:
    """The piece's error at its line in the whole text, when it cannot be an artefact of the cut.

    Every earlier piece parsed, so the cut before this piece is real; an error on the piece's last
    line (or at its end) may come from a multi-line value cut short, so the full parse decides."""
    m = _AT.search(str(exc))
    last = len(piece.rstrip().splitlines())
    if m is None or int(m.group(1)) >= last:
        return _Conflict("error at the end of a piece")
    return tomllib.TOMLDecodeError(_AT.sub(f"(at line {int(m.group(1)) + line0}, column {m.group(2)})", str(exc)))
