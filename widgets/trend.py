"""One-line histories drawn on a FIXED scale, with gaps left blank (the Monitor pane's GPU graphs, the
Bottleneck pane's and the alerts' small graphs).

Textual's Sparkline scales each window to its own min and max, so a GPU going 87 % → 92 % looks like
a full swing from idle to saturated: on a monitoring screen that is a lie. These graphs draw every
value against ``low..high`` (0–100 % for utilisation, 0–total for memory), and a missing value (a
gap in the history, or N/A from the pod) as a blank cell rather than as a zero.

:class:`History` keeps a graph's points with running sums beside them, so fitting 600 points to the visible
width costs one subtraction per cell, not a pass over the history (widgets/monitor_rows.py draws them).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

BARS = "▁▂▃▄▅▆▇█"


def mean(values: Sequence[float]) -> float:
    """The mean of finite values rounded once (``math.fsum``), so a running exact sum gives the very same float;
    a non-finite value makes it what plain float addition makes it (inf, nan)."""
    if all(map(math.isfinite, values)):
        return math.fsum(values) / len(values)
    return sum(values) / len(values)


def downsample(values: Sequence[float | None], width: int) -> list[float | None]:
    """At most ``width`` points: consecutive values averaged into buckets anchored at the newest, so the
    whole history (10 min at 1 Hz) fits the widget. A bucket of only gaps / N/A stays None (blank)."""
    n = len(values)
    if width <= 0:
        return []
    if n <= width:
        return list(values)
    size = -(-n // width)  # ceil: never more than width buckets
    out: list[float | None] = []
    end = n
    while end > 0 and len(out) < width:
        chunk = [v for v in values[max(0, end - size) : end] if v is not None]
        out.append(mean(chunk) if chunk else None)
        end -= size
    out.reverse()
    return out


def clock_buckets(values: Sequence[float | None], width: int, end: int) -> list[float | None]:
    """At most ``width`` points, as :func:`downsample`, but the buckets anchored to the clock rather than to the
    newest value: the values sit at positions ``end - len(values)`` to ``end - 1`` (one a second), bucket ``k``
    holds those at positions ``k * size`` to ``(k + 1) * size - 1``, ``size`` the fewest that fit them all in
    ``width`` (the oldest bucket may hold only its newer part); the newest ``width`` buckets. A new value changes
    the newest bucket alone, or starts the next: the older buckets stay as they were, one column further left."""
    n = len(values)
    if width <= 0 or not n:
        return []
    if n <= width:
        return list(values)
    size = -(-n // width)
    out: list[float | None] = []
    chunk: list[float] = []
    bucket = (end - n) // size
    for position, value in enumerate(values, end - n):
        if position // size != bucket:
            out.append(mean(chunk) if chunk else None)
            chunk, bucket = [], position // size
        if value is not None:
            chunk.append(value)
    out.append(mean(chunk) if chunk else None)
    return out[-width:]


def bar_cells(values: Sequence[float | None], low: float, high: float, width: int) -> str:
    """The last ``width`` values as block characters; right-aligned, None → blank."""
    span = high - low
    cells = []
    for value in list(values)[-width:] if width > 0 else []:
        if value is None or span <= 0:
            cells.append(" ")
            continue
        frac = min(1.0, max(0.0, (value - low) / span))
        cells.append(BARS[min(len(BARS) - 1, int(frac * len(BARS)))])
    return "".join(cells).rjust(max(width, 0))


def peak(values: Iterable[float | None]) -> float | None:
    """The largest value, None when there is none."""
    return max((v for v in values if v is not None), default=None)


class History:
    """The last ``limit`` points (None: a gap or N/A) with exact running sums, so ``downsample`` of them for
    any width costs O(width): each point is added as an exact integer (the float times 2**scale), and a
    bucket's sum is the difference of two running totals, rounded once like ``math.fsum``. Equal to
    ``downsample(list(points), width)`` value for value."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.clear()

    def clear(self, start: int = 0) -> None:
        """No points; the next one at position ``start`` (the graph's buckets are anchored to positions:
        :func:`clock_buckets`)."""
        limit = self.limit
        self.points: deque[float | None] = deque(maxlen=limit)
        # running totals before each point and after the last, from index ``_off`` on (lists: indexed per cell):
        # the exact sum, the values, the non-finite values
        self._sums: list[int] = [0]
        self._counts: list[int] = [0]
        self._odd: list[int] = [0]
        self._off = 0
        self._scale = 64  # bits after the binary point; grows when a point needs more
        self._peaks: deque[tuple[int, float]] = deque()  # (position, value), values decreasing: the window's max
        self._seq = start  # position of the next point (one a second: the clock's second when drawn afresh)
        # the last bars drawn: (width, size, low, high, first bucket, first position, end position, cells)
        self._bars: tuple[int, int, float, float, int, int, int, str] | None = None

    def append(self, value: float | None) -> None:
        exact = self._exact(value) if value is not None and math.isfinite(value) else 0  # may rescale the totals
        total, count, odd = self._sums[-1], self._counts[-1], self._odd[-1]
        if value is not None:
            count += 1
            if math.isfinite(value):
                total += exact
                peaks = self._peaks
                while peaks and peaks[-1][1] <= value:
                    peaks.pop()
                peaks.append((self._seq, value))
            else:
                odd += 1
        full = len(self.points) == self.limit
        self.points.append(value)
        self._sums.append(total)
        self._counts.append(count)
        self._odd.append(odd)
        if full:
            self._off += 1
            if self._off > self.limit:  # drop the totals of points gone, now and then
                for totals in (self._sums, self._counts, self._odd):
                    del totals[: self._off]
                self._off = 0
        self._seq += 1
        first = self._seq - len(self.points)
        while self._peaks and self._peaks[0][0] < first:
            self._peaks.popleft()

    def extend(self, values: Iterable[float | None]) -> None:
        for value in values:
            self.append(value)

    def _exact(self, value: float) -> int:
        top, bottom = value.as_integer_ratio()  # bottom: a power of two
        bits = bottom.bit_length() - 1
        if bits > self._scale:  # finer than any point so far: rescale the running totals once
            shift = bits - self._scale
            self._sums = [s << shift for s in self._sums]
            self._scale = bits
        return top << (self._scale - bits)

    def peak(self) -> float | None:
        """The largest point (as ``peak(points)``)."""
        if self._odd[-1] != self._odd[self._off]:  # nan and inf compare oddly: the plain way
            return peak(self.points)
        return self._peaks[0][1] if self._peaks else None

    def downsample(self, width: int) -> list[float | None]:
        """``clock_buckets(list(points), width, end)``, ``end`` the position after the newest point."""
        n = len(self.points)
        if width <= 0:
            return []
        if n <= width:
            return list(self.points)
        size = -(-n // width)
        end = self._seq
        start = end - n
        first = max(start // size, (end - 1) // size - width + 1)
        return [self._bucket(k, size, start, end) for k in range(first, (end - 1) // size + 1)]

    def _bucket(self, k: int, size: int, start: int, end: int) -> float | None:
        """The mean of bucket ``k``'s points (positions ``k * size`` on, within ``start``..``end``); None: none."""
        off = self._off
        i0, i1 = max(k * size, start) - start + off, min((k + 1) * size, end) - start + off
        count = self._counts[i1] - self._counts[i0]
        if not count:
            return None
        if self._odd[i1] != self._odd[i0]:
            return mean([v for v in list(self.points)[i0 - off : i1 - off] if v is not None])
        return (self._sums[i1] - self._sums[i0]) / (1 << self._scale) / count

    def bars(self, width: int, low: float, high: float) -> str:
        """``bar_cells(self.downsample(width), low, high, width)``. The buckets are anchored to positions, so a new
        point changes the newest bucket alone (or starts another, the others one column left) and the oldest (its
        points leaving the window): the cells of the buckets between are the last call's, not worked out again (a
        monitored pod draws 32 of these a second)."""
        n = len(self.points)
        if width <= 0:
            return ""
        if n <= width or self._odd[-1] != self._odd[self._off]:  # few points, or nan/inf in the window
            return bar_cells(self.downsample(width), low, high, width)
        span = high - low
        if span <= 0:
            return " " * width
        size = -(-n // width)
        end = self._seq
        start = end - n
        last = (end - 1) // size
        first = max(start // size, last - width + 1)
        cached = self._bars
        # the buckets whose points were all in the last call's window and still are: their cells as they were
        if cached is not None and cached[0] == width and cached[1] == size and cached[2] == low and cached[3] == high:
            c_first, c_start, c_end, c_text = cached[4], cached[5], cached[6], cached[7]
            keep_from = max(first, c_first, -(-max(start, c_start) // size))
            keep_to = min(last, c_first + len(c_text) - 1, min(end, c_end) // size - 1)
        else:
            keep_from, keep_to, c_first, c_text = first, first - 1, first, ""
        if keep_from <= keep_to:
            text = (
                self._cells(first, keep_from, size, start, end, low, span)
                + c_text[keep_from - c_first : keep_to - c_first + 1]
                + self._cells(keep_to + 1, last + 1, size, start, end, low, span)
            )
        else:
            text = self._cells(first, last + 1, size, start, end, low, span)
        self._bars = (width, size, low, high, first, start, end, text)
        return text.rjust(width)

    def _cells(self, k0: int, k1: int, size: int, start: int, end: int, low: float, span: float) -> str:
        """Buckets ``k0`` to ``k1 - 1`` as cells (:func:`bar_cells` of their means, as :meth:`_bucket` works them
        out: inlined, a call per cell was most of the graphs' cost); only for a window of finite points."""
        if k0 >= k1:
            return ""
        counts, sums, off = self._counts, self._sums, self._off - start
        scale = 1 << self._scale
        top = len(BARS) - 1
        out = []
        for k in range(k0, k1):
            i0 = (k * size if k * size > start else start) + off
            i1 = ((k + 1) * size if (k + 1) * size < end else end) + off
            count = counts[i1] - counts[i0]
            if not count:
                out.append(" ")
                continue
            frac = ((sums[i1] - sums[i0]) / scale / count - low) / span
            level = int((1.0 if frac > 1.0 else 0.0 if frac < 0.0 else frac) * len(BARS))
            out.append(BARS[top if level > top else level])
        return "".join(out)
