"""Where each key of a TOML document is: a one-pass line scanner, no full parse.

tomllib parses fast but keeps no positions, tomlkit keeps them but is ~8x slower, so the validator
parses values with tomllib and takes line/column from :func:`key_positions`. The scanner understands
what real configs use: ``[table]`` and ``[[array]]`` headers, dotted and quoted keys, multi-line
arrays, inline tables and multi-line strings. Keys inside inline tables map to their parent's line.
"""

from __future__ import annotations

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


def _bracket_delta(text: str) -> tuple[int, str]:
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
            triple = text[i:i + 3]
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
            d, open_string = _bracket_delta(line)
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
            raw = stripped[2 if is_aot else 1:close]
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
        d, open_string = _bracket_delta(stripped[eq + 1:])
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
            for key in [k for k in aot if len(k) > len(plain) and k[:len(plain)] == plain]:
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
                    header = _resolve(_split_key(stripped[2 if is_aot else 1:close]), {}, is_aot)
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
                header = _resolve(_split_key(stripped[2 if is_aot else 1:close]), aot, is_aot)
            else:
                header = ()
            n = len(local_header)
            for path, (line, col) in local.items():
                if n and path[:n] == local_header:
                    full = header + path[n:]
                elif n and len(path) < n:  # a prefix of the header: same line as the header
                    full = header[:len(header) - (n - len(path))] if len(header) >= n else header
                else:
                    full = path
                out.setdefault(full, (line + line0, col))
            line0 += piece.count("\n")
        return out
