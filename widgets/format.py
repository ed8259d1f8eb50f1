"""Formatting shared by the widgets: one place decides how N/A, bytes and durations read."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from rich.cells import cell_len
from textual.widgets import Label

from services.models import PodSnapshot, Sample

GIB = 1024**3
NA = "N/A"


def gib(value: int | None) -> str:
    """Bytes as GiB with one decimal; ``None`` (unmeasured) reads N/A, never 0."""
    return NA if value is None else f"{value / GIB:.1f}"


def used_total_gib(used: int | None, total: int | None) -> str:
    if used is None and total is None:
        return NA
    return f"{gib(used)}/{gib(total)} GiB"


def number(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return NA
    text = f"{value:.{digits}f}"
    return f"{text} {unit}" if unit else text


def duration(seconds: float) -> str:
    """A short human duration: "4 s", "2 min 5 s", "1 h 3 min"."""
    s = max(0, int(math.ceil(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def received_at(snapshot: PodSnapshot) -> float | None:
    """When the monitor received the latest sample, on the monitor's (injected) clock.

    The pod's own ``Sample.t`` is another machine's clock, so relative times never use it.
    """
    return snapshot.last_received


def series(
    history: Sequence[Sample],
    value: Callable[[Sample], float | None],
    *,
    limit: int = 120,
) -> list[float | None]:
    """The last ``limit`` values of one metric for a Trend.

    A stretch without samples (a gap in the pod's own timestamps wider than three usual steps) becomes
    one None per missing step, and so do N/A values: the graph leaves them blank, never 0.
    """
    recent = list(history[-limit:])
    if not recent:
        return []
    steps = sorted(b.t - a.t for a, b in zip(recent, recent[1:]) if b.t > a.t)
    step = steps[len(steps) // 2] if steps else 0.0
    out: list[float | None] = []
    previous: Sample | None = None
    for sample in recent:
        if previous is not None and step > 0:
            missing = int((sample.t - previous.t) / step) - 1
            if missing >= 3:
                out.extend([None] * min(missing, limit))
        v = value(sample)
        out.append(None if v is None else float(v))
        previous = sample
    return out[-limit:]


def set_label(label: Label, text: str) -> None:
    """Update a one-line label only when its text changed, and ask for a layout pass only when its
    width did: a full reflow per sample per label was most of the app's CPU with many pods."""
    old = getattr(label, "_shown_text", None)
    if old == text:
        return
    label._shown_text = text  # type: ignore[attr-defined]
    label.update(text, layout=old is None or cell_len(old) != cell_len(text))
