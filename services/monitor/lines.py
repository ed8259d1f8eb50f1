"""Whole lines from a probe stream, with a hard limit on one line's size.

A probe line is at most 1 MiB (the probe caps what a sample carries), but the stream comes from a pod we
do not control. The readers under a :class:`~services.pod.connection.ProbeStream` treat a long line each
their own way: asyncssh hands over a line longer than its receive window (2 MiB) in pieces (each without
its newline); asyncio's StreamReader (a local probe) raises ValueError past its ``limit`` and drops what it
buffered. :class:`LineReader` makes both one thing: a line is returned whole when it is at most
``max_line`` bytes, else skipped -- ``None`` -- without ever holding more than ``max_line`` of it.
"""

from __future__ import annotations

from typing import Any

MAX_LINE = 8 * 1024 * 1024  # a line longer than this is skipped (counted as malformed by the monitor)


class LineReader:
    """``await readline()``: a whole line (its newline kept; the last one of the stream may lack it),
    ``None`` for a line over ``max_line`` (skipped), ``b""`` at the end of the stream."""

    def __init__(self, stream: Any, max_line: int = MAX_LINE) -> None:
        self._stream = stream
        self.max_line = max_line
        self._parts: list[bytes] = []
        self._size = 0
        self._dropping = False  # inside a line over the limit: read on to its end, keep nothing
        self.overlong = 0  # lines skipped so far

    async def readline(self) -> bytes | None:
        while True:
            try:
                piece = await self._stream.readline()
            except ValueError as exc:  # asyncio's limit: it dropped the bytes it held
                self._parts, self._size = [], 0
                if "is found" in str(exc):  # "Separator is found, but chunk is longer than limit": line over
                    self._skipped()
                    return None
                self._dropping = True  # "Separator is not found, and chunk exceed the limit": more follows
                continue
            if not piece:  # end of stream: what is held is the last line (without its newline)
                if self._dropping:
                    self._skipped()
                    return None
                line, self._parts, self._size = b"".join(self._parts), [], 0
                return line
            ended = piece.endswith(b"\n")
            if not self._dropping:
                self._size += len(piece)
                if self._size > self.max_line:
                    self._parts, self._size, self._dropping = [], 0, True
                else:
                    self._parts.append(piece)
            if ended:
                if self._dropping:
                    self._skipped()
                    return None
                line, self._parts, self._size = b"".join(self._parts), [], 0
                return line

    def _skipped(self) -> None:
        self._dropping = False
        self.overlong += 1
