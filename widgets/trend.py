"""A one-line history drawn on a FIXED scale, with gaps left blank.

Textual's Sparkline scales each window to its own min and max, so a GPU going 87 % → 92 % looks like
a full swing from idle to saturated: on a monitoring screen that is a lie. ``Trend`` draws every
value against ``low..high`` (0–100 % for utilisation, 0–total for memory), and a missing value (a
gap in the history, or N/A from the pod) as a blank cell rather than as a zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

BARS = "▁▂▃▄▅▆▇█"


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
        chunk = [v for v in values[max(0, end - size):end] if v is not None]
        out.append(sum(chunk) / len(chunk) if chunk else None)
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


class Trend(Widget):
    DEFAULT_CSS = """
    Trend { height: 1; color: $accent; }
    """

    data: reactive[tuple[float | None, ...]] = reactive(tuple, layout=False)
    high: reactive[float] = reactive(100.0, layout=False)

    def __init__(self, *, low: float = 0.0, high: float = 100.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.low = low
        self.set_reactive(Trend.high, high)

    def render(self) -> Text:
        width = self.size.width
        return Text(bar_cells(downsample(self.data, width), self.low, self.high, width), no_wrap=True)
