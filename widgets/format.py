"""Formatting shared by the widgets: one place decides how N/A, bytes and durations read."""

from __future__ import annotations

import math
import re
import time
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Sequence

from rich.cells import cell_len
from textual.content import Content
from textual.css.scalar import Unit
from textual.widgets import Static

from services.models import PodSnapshot, PodState, Sample
from services.text import plain

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


def age(seconds: float) -> str:
    """How long ago, in whole seconds elapsed ("0 s" for the first second): a sample that came in 0.4 s ago was
    not "1 s" ago, and the once-a-second clock tick between two samples leaves the text, and the screen, as
    they were (rounding up, it changed twice a second: a repaint for the sample, another for the tick)."""
    return duration(math.floor(max(0.0, seconds)))


# The moments a relative time's text next changes, so the App's clock tick wakes only then (app/frames.py): each
# mirrors the function it names and returns a moment on the same clock as its arguments (None: it never changes).
# A text reads whole seconds up to an hour, whole minutes from there.


def _next_whole(n: int) -> int:
    """The next whole-seconds value after ``n`` that :func:`duration` writes differently."""
    return n + 1 if n < 3600 else (n // 60 + 1) * 60


def age_changes(at: float, now: float) -> float:
    """When ``age(now - at)`` next reads differently."""
    return at + _next_whole(math.floor(max(0.0, now - at)))


def elapsed_changes(start: float, now: float) -> float:
    """When ``duration(now - start)`` (rounded up, growing) next reads differently: just after this moment."""
    return start + _next_whole(math.ceil(max(0.0, now - start))) - 1


def countdown_changes(target: float, now: float) -> float | None:
    """When ``duration(target - now)`` (rounded up, shrinking) next reads differently; None once it reads "0 s"."""
    s = math.ceil(max(0.0, target - now))
    if s <= 0:
        return None
    return target - (s - 1 if s <= 3600 else s // 60 * 60 - 1)


def clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def received_at(snapshot: PodSnapshot) -> float | None:
    """When the monitor received the latest sample, on the monitor's (injected) clock.

    The pod's own ``Sample.t`` is another machine's clock, so relative times never use it.
    """
    return snapshot.last_received


# The monitor's STALE reason counts its threshold ("no sample for 5 s": services/monitor/service.py
# _stale_reason); shown, it counts from the latest sample on the clock of the line that says "last sample … ago".
_STALE = re.compile(r"^no (valid )?sample for [0-9.]+ s")


def status_reason_now(snapshot: PodSnapshot, now: float) -> str:
    """The pod's status reason, a STALE one's "no sample for N s" counted from the latest sample to ``now``."""
    reason = snapshot.status.reason
    at = received_at(snapshot)
    if snapshot.status.state is not PodState.STALE or at is None:
        return reason
    return _STALE.sub(lambda m: f"no {m[1] or ''}sample for {age(now - at)}", reason, count=1)


def series(
    history: Sequence[Sample],
    value: Callable[[Sample], float | None],
    *,
    limit: int = 120,
) -> list[float | None]:
    """The last ``limit`` values of one metric for a history graph.

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


class Timeline:
    """``series``'s timeline (each entry a sample, or None for one missing step of a gap) kept up to date as
    the history grows, instead of worked out again from the whole history on every snapshot.

    ``update`` says what changed: the entries to append, or that the timeline was rebuilt (a history that is
    not the previous one plus new samples, or a changed usual step that moves a gap's blanks). Its
    ``entries`` always equal the timeline ``series`` walks for the same history and ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: deque[Sample | None] = deque(maxlen=limit)
        self._window: deque[Sample] = deque()  # history[-limit:]
        self._first = 0  # the number of the window's first sample, counted since the timeline began
        self._steps: list[tuple[float, int]] = []  # (seconds from the sample before, number), sorted; only > 0
        self._blanks: dict[int, int] = {}  # sample number -> blanks before it
        self.generation = 0  # counts rebuilds: a reader of ``entries`` that saw another generation reads them all
        self.appended = 0  # entries appended so far: a reader that saw fewer reads the difference

    def update(self, history: Sequence[Sample]) -> tuple[bool, list[Sample | None]]:
        """(rebuilt, entries): the entries appended, or, when ``rebuilt``, all of them (``entries`` replaced)."""
        new = self._new_samples(history)
        if new is None or len(new) >= self.limit:
            return True, self._rebuild(history)
        window, steps = self._window, self._steps
        if not new:
            return False, []
        for sample in new:
            if window and sample.t > window[-1].t:
                insort(steps, (sample.t - window[-1].t, self._first + len(window)))
            window.append(sample)
        target = min(self.limit, len(history))
        while len(window) > target:  # the oldest samples leave, with their steps to the next one
            gone = window.popleft()
            self._first += 1
            dt = window[0].t - gone.t if window else 0.0
            if dt > 0:
                del steps[bisect_left(steps, (dt, self._first))]
            if target < self.limit:  # a history shorter than the graph: its oldest entries must go too
                return True, self._rebuild(history)
        blanks = self._gaps()
        first_new = self._first + len(window) - len(new)
        for number in set(blanks) | set(self._blanks):
            if self._first < number < first_new and blanks.get(number) != self._blanks.get(number):
                return True, self._rebuild(history)  # the usual step moved: an older gap reads differently
        self._blanks = blanks
        added: list[Sample | None] = []
        for number, sample in enumerate(new, start=first_new):
            added.extend([None] * blanks.get(number, 0))
            added.append(sample)
        self.entries.extend(added)
        self.appended += len(added)
        return False, added[-self.limit :]

    def _new_samples(self, history: Sequence[Sample]) -> list[Sample] | None:
        """The samples after the window's newest when ``history`` continues the window, else None."""
        window = self._window
        if not window or not history:
            return None
        last = window[-1]
        for k in range(min(len(history), 64)):
            if history[-1 - k] is last:
                break
        else:
            return None
        start = len(history) - k - len(window)  # where the window's oldest sample is, if still there
        if history[max(start, 0)] is not window[max(-start, 0)]:
            return None
        if start > 0 and len(window) < self.limit:
            return None  # older samples than the window's, which the window should have held
        if not k and start < 0:
            return None  # nothing new, yet older samples went
        return list(history[len(history) - k :])

    def _gaps(self) -> dict[int, int]:
        steps = self._steps
        step = steps[len(steps) // 2][0] if steps else 0.0
        blanks: dict[int, int] = {}
        if step <= 0:
            return blanks
        for dt, number in steps[bisect_left(steps, (3.5 * step, -1)) :]:  # candidates: a gap needs dt >= 4 steps
            missing = int(dt / step) - 1
            if missing >= 3:
                blanks[number] = min(missing, self.limit)
        return blanks

    def _rebuild(self, history: Sequence[Sample]) -> list[Sample | None]:
        recent = list(history[-self.limit :])
        self._window = deque(recent)
        self._first = 0
        self._steps = sorted((b.t - a.t, i) for i, (a, b) in enumerate(zip(recent, recent[1:]), start=1) if b.t > a.t)
        self._blanks = self._gaps()
        entries: list[Sample | None] = []
        for i, sample in enumerate(recent):
            entries.extend([None] * self._blanks.get(i, 0))
            entries.append(sample)
        self.entries = deque(entries, maxlen=self.limit)
        self.generation += 1
        self.appended += len(entries)
        return list(self.entries)

    def since(self, generation: int, appended: int) -> tuple[bool, list[Sample | None]]:
        """(all, entries) for a reader that last saw ``generation`` with ``appended`` entries: the entries added
        since, or (True, every entry) when it saw another generation or more has been added than is kept."""
        behind = self.appended - appended
        if generation != self.generation or behind < 0 or behind >= self.limit:
            return True, list(self.entries)
        entries = self.entries
        return False, [entries[-i] for i in range(behind, 0, -1)]


def set_label(label: Static, text: str) -> None:
    """Update a one-line label only when its text changed, and ask for a layout pass only when its
    size may change: a full reflow per sample per label was most of the app's CPU with many pods.
    The text is shown as written, never read as markup: much of it comes from pods (process command lines,
    probe errors, model names), where '[/x]' raised MarkupError and '[bold]' vanished; escape sequences are
    removed."""
    old = getattr(label, "_shown_text", None)
    if old == text:
        return
    label._shown_text = text  # type: ignore[attr-defined]
    text = plain(text)  # a terminal acts on none of it either (cheap: printable text is returned as it is)
    label.update(
        Content(text), layout=old is None or (cell_len(old) != cell_len(text) and not _same_size(label, old, text))
    )


def _same_size(label: Static, old: str, new: str) -> bool:
    """A label whose width does not follow its text (cells, a share of its container: anything but auto)
    keeps its size while both texts fit on its one line."""
    width = label.styles.width
    if width is None or width.unit is Unit.AUTO:
        return False
    room = label.content_size.width
    return room > 0 and cell_len(old) <= room and cell_len(new) <= room
