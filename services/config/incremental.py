"""Incremental TOML parsing for the editor: after a keystroke only the edited table is re-parsed and
re-merged, and every table the edit did not touch keeps its identity (the validator's caches key on it).

The text is cut before every line that starts with ``[`` (a table header); each piece is parsed on
its own with tomllib (cached by its text). The pieces are then grouped by their header path: the
value of a table is built from the pieces under it, and a group whose pieces are the same objects as
at the last parse is not rebuilt (the same dict is returned). Anything the grouping cannot prove
valid - a table defined twice, a header reaching into a table made by dotted keys or an inline
table, a cut inside a multi-line value - falls back to one full tomllib parse, which gives the exact
data or error. A piece that fails to parse gives its own error (shifted to its line) only when the
pieces before it merge cleanly and the cut after it is real; else the full parse decides. The result
is the same dict tomllib returns (checked against tomllib in the tests). Parts of it are shared with
the cache: callers must not mutate it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from itertools import accumulate
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.config.positions import TABLE_CUT, PieceIndex, PositionCache, key_positions
from services.tomlfile import MAX_DEPTH, data_depth, depth_problem, too_deep

_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


class _Conflict(Exception):
    def __init__(self, why: str, piece: Any = None) -> None:
        super().__init__(why)
        self.piece = piece  # for "defined twice": the second definition


class _Piece:
    """One table's text, parsed once: its header path, its own key/values (``body``) and facts the
    merge and the depth check need."""

    __slots__ = ("text", "kind", "parts", "body", "error", "depth", "nlines", "deep_line", "header", "secrets")

    def __init__(self, text: str) -> None:
        self.text = text
        self.nlines = text.count("\n")
        self.deep_line = too_deep(text)  # exact per piece: every piece before a clean one ends clean
        self.error: tomllib.TOMLDecodeError | None = None
        self.kind, self.body, self.depth = "root", {}, 0
        self.parts: tuple = ()  # the header's dotted key; None (below) for a header that does not parse
        self.header = ""
        self.secrets: list | None = None  # checks.scan_secrets of this piece, on first use
        stripped = text.lstrip()
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            self.error = exc
            parsed = None
        except RecursionError:
            self.error = tomllib.TOMLDecodeError("nested too deeply")
            parsed = None
        if stripped.startswith("["):
            self.header = text.split("\n", 1)[0]
            self.kind = "aot" if stripped.startswith("[[") else "table"
            try:
                self.parts = _header_parts(self.header, self.kind)
            except (tomllib.TOMLDecodeError, _Conflict):
                self.parts = None  # type: ignore[assignment]
        if parsed is None or self.parts is None:
            return
        node: Any = parsed
        for part in self.parts:
            node = node[part]
        self.body = node[-1] if self.kind == "aot" else node
        self.depth = data_depth(self.body)


def _header_parts(line: str, kind: str) -> tuple:
    """The header's key path, as tomllib reads it (quoted keys, spaces, comments)."""
    node: Any = tomllib.loads(line)
    parts: list[str] = []
    while isinstance(node, dict) and len(node) == 1:
        key, node = next(iter(node.items()))
        parts.append(key)
        if isinstance(node, list):
            if kind != "aot" or node != [{}]:
                raise _Conflict(line)
            return tuple(parts)
    if node != {} or kind != "table":
        raise _Conflict(line)
    return tuple(parts)


class IncrementalParser:
    """What the editor keeps per open file: the pieces of the last text and the tables built from
    them. ``validation`` is free for the validator's own caches (validate.py)."""

    def __init__(self, max_pieces: int = 4096) -> None:
        self._cache: OrderedDict[str, _Piece] = OrderedDict()
        self._max = max_pieces
        self._memo: dict[tuple, tuple] = {}  # (depth, piece ids) → (pieces, value, depth below)
        self._text: str | None = None
        self._pieces: list[_Piece] = []
        self._starts: list[int] = [0]  # where each piece starts in the text
        self._index: PieceIndex | None = None
        self.full_parses = 0  # how often the fallback ran (for tests and the benchmark)
        self.last_incremental = False  # the last successful parse went piece by piece
        self.positions_cache: PositionCache | None = None
        self.validation: Any = None
        self._depth = 0  # data depth of the last incremental parse
        self._head: _Piece | None = None

    # ------------------------------------------------------------------ pieces

    def _split(self, text: str) -> list[_Piece]:
        old = self._text
        if text is old or text == old:
            return self._pieces
        if old is None or not self._pieces:
            out = [self._lookup(chunk) for chunk in TABLE_CUT.split(text) if chunk]
        else:
            out = self._resplit(old, text)
        self._text, self._pieces = text, out
        self._starts = [0, *accumulate(len(p.text) for p in out)]
        return out

    def _lookup(self, chunk: str) -> _Piece:
        piece = self._cache.get(chunk)
        if piece is None:
            piece = self._cache[chunk] = _Piece(chunk)
            if len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return piece

    def _resplit(self, old: str, text: str) -> list[_Piece]:
        """The pieces of ``text``, re-cutting only the pieces of ``old`` that the edit touched."""
        n = min(len(old), len(text))
        lo, hi = 0, n  # the common prefix: old[:lo] == text[:lo]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if old[:mid] == text[:mid]:
                lo = mid
            else:
                hi = mid - 1
        prefix = lo
        lo, hi = 0, n - prefix  # the common suffix, not overlapping the prefix
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if old[len(old) - mid :] == text[len(text) - mid :]:
                lo = mid
            else:
                hi = mid - 1
        suffix = lo
        starts, pieces = self._starts, self._pieces
        i = max(bisect_right(starts, prefix - 1) - 1, 0)  # the piece holding the last unchanged character
        while i > 0 and not TABLE_CUT.match(text, starts[i]):  # its start must still be a cut
            i -= 1
        first_kept = len(old) - suffix  # the first character of the unchanged end
        j = min(bisect_right(starts, first_kept), len(pieces))  # pieces[j:] lie wholly after it
        delta = len(text) - len(old)
        region = text[starts[i] : starts[j] + delta]
        return pieces[:i] + [self._lookup(c) for c in TABLE_CUT.split(region) if c] + pieces[j:]

    def too_deep(self, text: str) -> int | None:
        """``tomlfile.too_deep(text)``, from the pieces: each is scanned once."""
        line0 = 0
        pieces = self._split(text)
        for k, piece in enumerate(pieces):
            if piece.deep_line is not None:  # every piece before it parsed, so it starts outside any value
                return piece.deep_line + line0
            if piece.error is not None:  # its end may be inside a value: scan the rest as one
                rest = too_deep("".join(p.text for p in pieces[k:]))
                return None if rest is None else rest + line0
            line0 += piece.nlines
        return None

    def depth_problem(self, text: str, data: Any = None) -> str | None:
        """``tomlfile.depth_problem`` for the text (``data`` None) or for the data it parsed to."""
        if data is None:
            if self.too_deep(text) is None:
                return None
            return depth_problem(text)
        if self.last_incremental and text == self._text and self._depth <= MAX_DEPTH:
            return None
        return depth_problem(text, data)

    def scan(self, text: str, scan: Callable[[str], list]) -> list:
        """``scan(text)`` for a scan whose findings each lie on one line (the secret scan), run per
        piece once and moved to the piece's line."""
        from dataclasses import replace

        out = []
        line0 = 0
        for piece in self._split(text):
            if piece.secrets is None:
                piece.secrets = scan(piece.text)
            for f in piece.secrets:
                out.append(replace(f, line=f.line + line0) if line0 else f)
            line0 += piece.nlines
        return out

    # ------------------------------------------------------------------ parse

    def loads(self, text: str) -> dict[str, Any]:
        """Like ``tomllib.loads`` (raises TOMLDecodeError), fast for small edits of a big file."""
        self.last_incremental = False
        try:
            data = self._merged(self._split(text))
        except _Conflict:
            self.full_parses += 1
            return tomllib.loads(text)
        self.last_incremental = True
        return data

    def _merged(self, pieces: list[_Piece]) -> dict[str, Any]:
        for k, piece in enumerate(pieces):
            if piece.error is not None or piece.parts is None:
                raise self._located(pieces, k)
        memo: dict[tuple, tuple] = {}
        try:
            value, depth = self._build(tuple(pieces), 0, memo)
        except _Conflict as exc:
            raise self._redefined(pieces, exc) from None
        self._memo = memo
        self._depth = depth
        return value

    def _located(self, pieces: list[_Piece], k: int) -> Exception:
        """The first failing piece's error at its line in the whole text, when it is surely the error
        the full parse would give: the pieces before it (and its header) merge cleanly, its table is
        new, and its text ends outside any value (so the cut after it is real)."""
        piece = pieces[k]
        exc = piece.error
        m = _AT.search(str(exc)) if exc is not None else None
        if m is None or piece.parts is None or piece.deep_line is not None:
            return _Conflict("unplaced")
        last = len(piece.text.rstrip().splitlines())
        if int(m.group(1)) >= last and not _ends_clean(piece.text):
            return _Conflict("error at the end of a piece")
        head = _Piece.__new__(_Piece)  # the header alone: an empty table at its path
        head.kind, head.parts, head.body, head.depth, head.error = piece.kind, piece.parts, {}, 0, None
        try:
            self._head = head  # _build refuses a table of earlier pieces' keys: the body could clash
            self._build(tuple(pieces[:k]) + (head,), 0, {})
        except _Conflict:
            return _Conflict("the error may be a redefinition")
        finally:
            self._head = None
        line0 = sum(p.nlines for p in pieces[:k])
        return tomllib.TOMLDecodeError(_AT.sub(f"(at line {int(m.group(1)) + line0}, column {m.group(2)})", str(exc)))

    def _redefined(self, pieces: list[_Piece], exc: _Conflict) -> Exception:
        """A table defined twice, as tomllib reports it (the declaration line and column), when it is
        the first thing wrong in the text: the pieces before the second definition merge cleanly."""
        if exc.piece is None or exc.piece.kind != "table":
            return exc
        for k, piece in enumerate(pieces):  # each place the second definition's text stands
            if piece is not exc.piece:
                continue
            try:
                self._build(tuple(pieces[:k]), 0, {})
            except _Conflict:
                return exc  # something before it is wrong already: the full parse tells what
            try:
                self._build(tuple(pieces[: k + 1]), 0, {})
                continue
            except _Conflict as first:
                if first.piece is not piece:
                    return exc
            earlier = next((p for p in pieces[:k] if p.kind == "table" and p.parts == piece.parts), None)
            if earlier is None:
                return exc
            try:
                tomllib.loads(earlier.header + "\n" + piece.header + "\n")
            except tomllib.TOMLDecodeError as err:
                m = _AT.search(str(err))
                if m is None or m.group(1) != "2" or "twice" not in str(err):
                    return exc
                line = sum(p.nlines for p in pieces[:k]) + 1
                return tomllib.TOMLDecodeError(_AT.sub(f"(at line {line}, column {m.group(2)})", str(err)))
            return exc
        return exc

    def _build(self, items: tuple, depth: int, memo: dict) -> tuple[dict[str, Any], int]:
        """The table made by ``items`` (pieces whose header paths share their first ``depth`` parts),
        and how deep its data nests; memoized on the pieces' identities."""
        key = (depth, tuple(map(id, items)))
        hit = memo.get(key) or self._memo.get(key)
        if hit is not None:
            memo[key] = hit
            return hit[1], hit[2]
        own: _Piece | None = None
        groups: dict[str, list] = {}
        order: list = []  # this table's own piece and its children's names, in the order they appear
        for p in items:
            parts = p.parts
            if len(parts) == depth:
                if own is not None:
                    raise _Conflict("defined twice", p)
                own = p
                order.append(p)
                continue
            name = parts[depth]
            group = groups.get(name)
            if group is None:
                groups[name] = [p]
                order.append(name)
            else:
                group.append(p)
        if own is not None and own is self._head and len(items) > 1:
            raise _Conflict("the table already has keys")
        if not groups:  # nothing below: the piece's own dict, shared
            body, below = (own.body, own.depth) if own is not None else ({}, 0)
            memo[key] = (items, body, below)
            return body, below
        node: dict[str, Any] = {}
        deepest = 0
        below_depth = depth + 1
        for entry in order:
            if own is not None and entry is own:
                for k, v in entry.body.items():
                    if k in node or k in groups:
                        raise _Conflict(k)
                    node[k] = v
                deepest = max(deepest, entry.depth)
                continue
            group = groups[entry]
            first = group[0]
            if first.kind == "aot" and len(first.parts) == below_depth:  # [[name]]: one element per head
                elements: list[list] = []
                for p in group:
                    if len(p.parts) == below_depth:
                        if p.kind != "aot":
                            raise _Conflict(entry)
                        elements.append([p])
                    else:
                        elements[-1].append(p)
                value = []
                for element in elements:
                    v, d = self._build(tuple(element), below_depth, memo)
                    value.append(v)
                    deepest = max(deepest, d + 2)
                node[entry] = value
            else:
                if any(p.kind == "aot" and len(p.parts) == below_depth for p in group):
                    raise _Conflict(entry)  # [[name]] after name was made a table
                v, d = self._build(tuple(group), below_depth, memo)
                node[entry] = v
                deepest = max(deepest, d + 1)
        memo[key] = (items, node, deepest)
        return node, deepest

    # ------------------------------------------------------------------ positions

    def positions(self, text: str) -> dict:
        """Key positions of the text last parsed (piece-cached when that parse was incremental)."""
        if not self.last_incremental:
            return key_positions(text)
        if self.positions_cache is None:
            self.positions_cache = PositionCache()
        return self.positions_cache.positions(text)

    def lazy_positions(self, text: str) -> Any:
        """A mapping like :meth:`positions` that looks keys up when asked (a few findings need a few)."""
        if not self.last_incremental or text != self._text:
            return key_positions(text)
        pieces = self._pieces
        headers = tuple(p.header for p in pieces)
        if self._index is None or not self._index.update(headers):
            self._index = PieceIndex(headers)
        if self.positions_cache is None:
            self.positions_cache = PositionCache()
        return self._index.lookup(
            self.positions_cache, [p.text for p in pieces], [0, *accumulate(p.nlines for p in pieces)]
        )


def _ends_clean(text: str) -> bool:
    """The text ends outside any array, inline table or multi-line string (its last line is whole)."""
    from services.config.positions import bracket_delta

    depth = 0
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped[0] == "#":
            continue
        d, open_string = bracket_delta(stripped)
        if open_string:
            return False
        depth += d
    return depth == 0
