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

    def clear(self) -> None:
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
        self._seq = 0  # position of the next point since the history began

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
        n = len(self.points)
        if width <= 0:
            return []
        if n <= width:
            return list(self.points)
        size = -(-n // width)
        sums, counts, odd, unit, off = self._sums, self._counts, self._odd, 1 << self._scale, self._off
        out: list[float | None] = []
        end = n
        while end > 0:
            start = max(0, end - size)
            count = counts[off + end] - counts[off + start]
            if not count:
                out.append(None)
            elif odd[off + end] != odd[off + start]:
                out.append(mean([v for v in list(self.points)[start:end] if v is not None]))
            else:
                out.append((sums[off + end] - sums[off + start]) / unit / count)
            end -= size
        out.reverse()
        return out

    def bars(self, width: int, low: float, high: float) -> str:
        """``bar_cells(self.downsample(width), low, high, width)`` in one pass, without the list between them (a
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
        sums, counts, unit, off = self._sums, self._counts, 1 << self._scale, self._off
        top = len(BARS) - 1
        cells: list[str] = []
        end = n
        while end > 0:
            start = end - size if end > size else 0
            count = counts[off + end] - counts[off + start]
            if not count:
                cells.append(" ")
            else:
                frac = ((sums[off + end] - sums[off + start]) / unit / count - low) / span
                frac = 1.0 if frac > 1.0 else 0.0 if frac < 0.0 else frac
                level = int(frac * len(BARS))
                cells.append(BARS[top if level > top else level])
            end -= size
        cells.reverse()
        return "".join(cells).rjust(width)
