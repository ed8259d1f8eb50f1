"""Reading a provider's answer without trusting it: at most :data:`MAX_BODY` bytes (the caller streams and
stops there) and at most :data:`MAX_DEPTH` arrays/objects inside each other, measured before json parses
a byte. json's C decoder recurses once per level: 100k levels end in RecursionError, and a document just
under the interpreter's limit still breaks whatever recurses over it later (the cache, repr, a test's
comparison). Provider answers nest 3–5 deep."""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_BODY = 20 * 1024 * 1024  # bytes; the largest real listing (Prime, 100 offers a page) is ~200 KB
MAX_DEPTH = 100

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string, escapes included (unrolled: linear)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # read as signed bytes: +1 / -1


class TooDeep(ValueError):
    pass


def depth(data: bytes) -> int:
    """How deep arrays and objects nest in a JSON text (brackets inside strings do not count). Linear and
    mostly in C: strings are cut out by a regex, everything but brackets is deleted, the running sum of
    +1/-1 is taken by ``itertools.accumulate`` over a signed-byte view."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(0, max(accumulate(memoryview(brackets.translate(_SIGNS)).cast("b"))))


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises :class:`TooDeep` (a ValueError) for nesting over ``max_depth`` instead of
    recursing into it; other ValueErrors as json raises them (invalid JSON, a number of 5000 digits)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_depth and depth(raw) > max_depth:  # n bytes nest at most n deep
        raise TooDeep(f"nested deeper than {max_depth} levels")
    return json.loads(data)
