"""Where each key of a TOML document is: a one-pass line scanner, no full parse.

tomllib parses fast but keeps no positions, tomlkit keeps them but is ~8x slower, so the validator
parses values with tomllib and takes line/column from :func:`key_positions`. The scanner understands
what real configs use: ``[table]`` and ``[[array]]`` headers, dotted and quoted keys, multi-line
arrays, inline tables and multi-line strings. Keys inside inline tables map to their parent's line.
"""

from __future__ import annotations

import functools
import re

Pos = tuple[int, int]
# Cuts a document before each line that starts a [table] or [[array]] header: its pieces.
TABLE_CUT = re.compile(r"(?m)^(?=[ \t]*\[)")


def _split_key(text: str) -> list[str]:
    """``a."b.c" . d`` → ["a", "b.c", "d"]."""
    if '"' not in text and "'" not in text:
        return [p.strip() for p in text.split(".")]
    parts: list[str] = []
    buf: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                buf.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf).strip())
    return parts


def _find_eq(line: str) -> int:
    eq = line.find("=")
    if eq < 0:
        return -1
    if '"' not in line[:eq] and "'" not in line[:eq] and "#" not in line[:eq]:
        return eq
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "=":
            return i
        elif ch == "#":
            return -1
    return -1


def bracket_delta(text: str) -> tuple[int, str]:
    """Net ``[``/``{`` depth change of a value fragment, ignoring strings and comments.

    Also returns the multi-line string delimiter left open at the end, if any."""
    if not any(c in text for c in "[{]}\"'"):
        return 0, ""
    depth = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            break
        if ch in "\"'":
            triple = text[i : i + 3]
            if triple in ('"""', "'''"):
                end = text.find(triple, i + 3)
                if end < 0:
                    return depth, triple
                i = end + 3
                continue
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if (ch == '"' and text[j] == "\\") else 1
            i = j + 1
            continue
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        i += 1
    return depth, ""


def key_positions(text: str) -> dict[tuple, Pos]:
    """Map every key path (tuples with int indices for array-of-tables elements) to (line, column)."""
    out: dict[tuple, Pos] = {}
    table: tuple = ()
    aot: dict[tuple, int] = {}  # array-of-tables path (without indices) → current element index
    depth = 0
    open_string = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if open_string:
            if open_string in line:
                open_string = ""
            continue
        if depth > 0:
            d, open_string = bracket_delta(line)
            depth = max(0, depth + d)
            continue
        stripped = line.lstrip()
        if not stripped or stripped[0] == "#":
            continue
        col = len(line) - len(stripped) + 1
        if stripped[0] == "[":
            is_aot = stripped.startswith("[[")
            close = stripped.find("]]" if is_aot else "]")
            if close < 0:
                continue
            raw = stripped[2 if is_aot else 1 : close]
            parts = _split_key(raw)
            path = _resolve(parts, aot, is_aot)
            header_col = col + (2 if is_aot else 1)
            for i in range(1, len(path) + 1):
                out.setdefault(path[:i], (lineno, header_col))
            table = path
            continue
        eq = _find_eq(stripped)
        if eq <= 0:
            continue
        parts = _split_key(stripped[:eq])
        full = table + tuple(parts)
        for i in range(len(table) + 1, len(full) + 1):
            out.setdefault(full[:i], (lineno, col))
        d, open_string = bracket_delta(stripped[eq + 1 :])
        depth = max(0, d)
    return out


def _resolve(parts: list[str], aot: dict[tuple, int], is_aot: bool) -> tuple:
    """Header key parts → a path with the current index after every array-of-tables prefix."""
    plain: tuple = ()
    path: tuple = ()
    for i, part in enumerate(parts):
        plain += (part,)
        path += (part,)
        last = i == len(parts) - 1
        if last and is_aot:
            aot[plain] = aot.get(plain, -1) + 1
            # a new element resets the indices of arrays nested inside the previous one
            for key in [k for k in aot if len(k) > len(plain) and k[: len(plain)] == plain]:
                del aot[key]
            path += (aot[plain],)
        elif plain in aot:
            path += (aot[plain],)
    return path


def position(positions: dict[tuple, Pos], path: tuple) -> Pos:
    """The position of ``path`` or of its nearest ancestor that has one; (1, 1) for the file."""
    p = tuple(path)
    while p:
        if p in positions:
            return positions[p]
        p = p[:-1]
    return (1, 1)


class PositionCache:
    """``key_positions`` for an editor: each ``[table]`` piece is scanned once (cached by its text)
    and shifted to its line and array-of-tables element. Only valid for text whose cuts are real
    table headers (the incremental parser tells: see ``IncrementalParser.last_incremental``)."""

    def __init__(self, max_pieces: int = 4096) -> None:
        from collections import OrderedDict

        self._cache: OrderedDict[str, tuple[tuple, dict[tuple, Pos]]] = OrderedDict()
        self._max = max_pieces

    def _scan(self, piece: str) -> tuple[tuple, dict[tuple, Pos]]:
        hit = self._cache.get(piece)
        if hit is None:
            local = key_positions(piece)
            header: tuple = ()
            stripped = piece.lstrip()
            if stripped.startswith("["):
                is_aot = stripped.startswith("[[")
                close = stripped.find("]]" if is_aot else "]")
                if close > 0:
                    header = _resolve(_split_key(stripped[2 if is_aot else 1 : close]), {}, is_aot)
            hit = (header, local)
            self._cache[piece] = hit
            if len(self._cache) > self._max:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(piece)
        return hit

    def positions(self, text: str) -> dict[tuple, Pos]:
        out: dict[tuple, Pos] = {}
        aot: dict[tuple, int] = {}
        line0 = 0
        for piece in TABLE_CUT.split(text):
            if not piece:
                continue
            local_header, local = self._scan(piece)
            stripped = piece.lstrip()
            if local_header:
                is_aot = stripped.startswith("[[")
                close = stripped.find("]]" if is_aot else "]")
                header = _resolve(_split_key(stripped[2 if is_aot else 1 : close]), aot, is_aot)
            else:
                header = ()
            n = len(local_header)
            for path, (line, col) in local.items():
                if n and path[:n] == local_header:
                    full = header + path[n:]
                elif n and len(path) < n:  # a prefix of the header: same line as the header
                    full = header[: len(header) - (n - len(path))] if len(header) >= n else header
                else:
                    full = path
                out.setdefault(full, (line + line0, col))
            line0 += piece.count("\n")
        return out


@functools.lru_cache(maxsize=8192)
def _header_key(line: str) -> tuple[bool, tuple | None]:
    """A header line's (is an array of tables, key parts), as ``key_positions`` reads it."""
    stripped = line.lstrip()
    is_aot = stripped.startswith("[[")
    close = stripped.find("]]" if is_aot else "]")
    return is_aot, None if close < 0 else tuple(_split_key(stripped[2 if is_aot else 1 : close]))


class PieceIndex:
    """Where each piece's table is, for looking up a few keys without scanning the whole text: the
    resolved header path of every piece (array-of-tables indices counted as ``key_positions`` does).
    :meth:`update` follows a change of one plain ``[table]`` header without redoing the others."""

    def __init__(self, headers: tuple) -> None:
        self.headers = headers
        aot: dict[tuple, int] = {}
        self.paths: list[tuple | None] = []  # each piece's resolved header path
        self.states: list[dict] = []  # the array-of-tables counts after each piece
        self.first: dict[tuple, int] = {}  # a header path or its prefix → the first piece naming it
        self.exact: dict[tuple, int] = {}  # a header path → its piece
        for k, header in enumerate(headers):
            path: tuple | None = None
            if not header:
                self.exact.setdefault((), k)
            else:
                is_aot, parts = _header_key(header)
                if parts is not None:
                    if is_aot:
                        aot = dict(aot)
                    path = _resolve(list(parts), aot, is_aot)
                    self.exact.setdefault(path, k)
                    for i in range(1, len(path) + 1):
                        self.first.setdefault(path[:i], k)
            self.paths.append(path)
            self.states.append(aot)

    def update(self, headers: tuple) -> bool:
        """Follow ``headers`` when they differ from ours only in plain table headers, a few of them
        (False: rebuild)."""
        if len(headers) != len(self.headers):
            return False
        changed = [k for k, (a, b) in enumerate(zip(self.headers, headers)) if a is not b and a != b]
        if len(changed) > 4:
            return False
        for k in changed:
            if not self._update(k, headers[k]):
                return False
        self.headers = headers
        return True

    def _update(self, k: int, new: str) -> bool:
        old = self.headers[k]
        if not old or not new or _header_key(old)[0] or _header_key(new)[0] or self.paths[k] is None:
            return False
        parts = _header_key(new)[1]
        if parts is None:
            return False
        path = _resolve(list(parts), dict(self.states[k - 1]) if k else {}, False)
        before = self.paths[k]
        assert before is not None
        if self.exact.get(path, k) != k:
            return False  # two pieces would name one table: not a parse the index is used for
        if self.exact.get(before) == k:
            del self.exact[before]
        self.exact[path] = k
        self.paths[k] = path
        for i in range(1, len(before) + 1):
            q = before[:i]
            if self.first.get(q) == k and path[:i] != q:
                nxt = next(
                    (j for j in range(k + 1, len(self.paths)) if (p := self.paths[j]) is not None and p[:i] == q), None
                )
                if nxt is None:
                    del self.first[q]
                else:
                    self.first[q] = nxt
        for i in range(1, len(path) + 1):
            if self.first.get(path[:i], k + 1) > k:
                self.first[path[:i]] = k
        self.headers = self.headers[:k] + (new,) + self.headers[k + 1 :]
        return True

    def lookup(self, scanner: PositionCache, texts: list[str], line0: list[int]) -> LazyPositions:
        return LazyPositions(self, scanner, texts, line0)


class LazyPositions:
    """``key_positions(text)`` for the keys asked for (``in`` and ``[]``), each found in its piece."""

    def __init__(self, index: PieceIndex, scanner: PositionCache, texts: list[str], line0: list[int]) -> None:
        self._index, self._scanner, self._texts, self._line0 = index, scanner, texts, line0
        self._found: dict[tuple, Pos | None] = {}

    def _find(self, path: tuple) -> Pos | None:
        if path in self._found:
            return self._found[path]
        best: Pos | None = None
        k = self._index.first.get(path)
        if k is not None:
            local_header, local = self._scanner._scan(self._texts[k])
            line, col = local[local_header[:1]] if local_header else (1, 1)
            best = (line + self._line0[k], col)
        for i in range(len(path) - 1, -1, -1):
            k = self._index.exact.get(path[:i])
            if k is None:
                continue
            local_header, local = self._scanner._scan(self._texts[k])
            at = local.get(local_header + path[i:])
            if at is not None:
                here = (at[0] + self._line0[k], at[1])
                best = here if best is None or here < best else best
        self._found[path] = best
        return best

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and self._find(path) is not None

    def __getitem__(self, path: tuple) -> Pos:
        found = self._find(path)
        if found is None:
            raise KeyError(path)
        return found
