"""The bottleneck breakdown drawn: one bar per component with % and seconds and its trend over the
last steps, the diagnosis with its evidence, the tool time per episode (p50/p95/max per env, when the
run's episode traces are read) and the recommendations. Plain data in, no I/O."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Label, Static

from services.bottleneck.analysis import Breakdown, Component
from services.bottleneck.tail import ToolTail
from widgets.format import set_label
from widgets.trend import bar_cells

BAR_WIDTH = 30
TREND_WIDTH = 20
FULL, PARTS = "█", " ▏▎▍▌▋▊▉"


def bar(share: float, width: int = BAR_WIDTH) -> str:
    """A horizontal bar of ``share`` (0–1) of ``width`` cells, with eighth-cell precision."""
    eighths = int(round(max(0.0, min(1.0, share)) * width * 8))
    full, rest = divmod(eighths, 8)
    return (FULL * full + (PARTS[rest] if rest else "")).ljust(width)


def _is_top(c: Component, b: Breakdown) -> bool:
    tops = [x for x in b.components if x.parent is None and x.timeline == "trainer"]
    return bool(tops) and c is max(tops, key=lambda x: x.share) and c.share >= 0.4


def _label(c: Component) -> str:
    indent = "\u00a0\u00a0└\u00a0" if c.parent else ""  # non-breaking: leading spaces would be dropped
    return indent + c.label + (" (orch.)" if c.timeline == "orchestrator" else "")


LABEL_CAP = 30  # a label longer than this wraps (at spaces) once the bar would get too short


def bars_layout(b: Breakdown, width: int | None) -> tuple[int, int, bool, int | None]:
    """(bar cells, trend cells (0: dropped), whole flag word, label width cap (None: no cap)) for ``width``.
    What gives way first: the bar down to 24 cells, then the trend, then the bar to 20, then long labels
    wrap (at spaces), then the bar to 10, then the flag word (a ◀ instead); the label's words, the % and
    the seconds always stay."""
    if width is None:
        return BAR_WIDTH, TREND_WIDTH, True, None
    label = max((len(_label(c)) for c in b.components), default=0)
    capped = min(label, LABEL_CAP)
    # (label cells, cap, flag cells, trend cells, bar from, bar to)
    for label_w, cap, flag, trend, low, high in (
        (label, None, 10, TREND_WIDTH, 24, BAR_WIDTH),
        (label, None, 10, 0, 20, BAR_WIDTH),
        (capped, LABEL_CAP, 10, 0, 20, BAR_WIDTH),
        (capped, LABEL_CAP, 10, 0, 10, 20),
        (capped, LABEL_CAP, 1, 0, 10, BAR_WIDTH),
    ):
        gaps = 5 if trend else 4
        room = width - label_w - 4 - 6 - flag - trend - gaps
        if room >= low:
            return min(room, high), trend, flag == 10, cap if label > LABEL_CAP else None
    return 10, 0, False, max(12, width - 4 - 6 - 1 - 4 - 10)


def bars_table(b: Breakdown, width: int | None = None) -> Table:
    bar_w, trend_w, word, cap = bars_layout(b, width)
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=cap is None, max_width=cap)  # label
    table.add_column(no_wrap=True)  # bar
    table.add_column(justify="right", no_wrap=True)  # %
    table.add_column(justify="right", no_wrap=True)  # s
    if trend_w:
        table.add_column(no_wrap=True)  # trend
    table.add_column(no_wrap=True)  # flag
    top_series = max((v for c in b.components for v in c.series if v is not None), default=0.0)
    for c in b.components:
        top = _is_top(c, b)
        high = max((v for v in c.series if v is not None), default=0.0) or top_series or 1.0
        cells = [
            Text(_label(c), style="bold" if top else ""),
            Text(bar(c.share, bar_w), style="bold" if top else ""),
            Text(f"{100 * c.share:.0f}%", style="bold" if top else ""),
            Text(f"{c.seconds:.1f} s"),
        ]
        if trend_w:
            cells.append(Text(bar_cells(c.series, 0.0, high, trend_w), style="dim"))
        flag = ("BOTTLENECK" if word else "◀") if top else ""
        cells.append(Text(flag, style="bold reverse" if top else ""))
        table.add_row(*cells)
    return table


TAIL_ROWS = 6  # envs listed in the tool-time table (the slowest p95 first)


def tail_table(tails: tuple[ToolTail, ...]) -> Table:
    """Tool seconds per episode, per env: p50 / p95 / max over the window's episodes; a slow tail flagged."""
    table = Table.grid(padding=(0, 1))
    table.title = Text("Tool time per episode", style="bold")
    table.title_justify = "left"
    table.add_column(overflow="fold", min_width=8, max_width=40)  # env: a long name folds, figures never shrink
    for _ in range(4):
        table.add_column(justify="right", no_wrap=True, min_width=6)  # p50, p95, max, episodes
    table.add_column(no_wrap=True, min_width=9)  # flag
    table.add_row(*(Text(h, style="bold") for h in ("env", "p50", "p95", "max", "episodes", "")))
    for t in tails[:TAIL_ROWS]:
        style = "bold" if t.slow else ""
        table.add_row(
            Text(t.label, style=style),
            Text(f"{t.p50:.1f} s"),
            Text(f"{t.p95:.1f} s", style=style),
            Text(f"{t.max:.1f} s"),
            Text(str(t.episodes)),
            Text("SLOW TAIL", style="bold reverse") if t.slow else Text(""),
        )
    if len(tails) > TAIL_ROWS:
        table.add_row(Text(f"… {len(tails) - TAIL_ROWS} more envs", style="dim"), "", "", "", "", "")
    return table


class BottleneckView(Widget):
    """Shows a :class:`Breakdown`; ``show`` re-renders only the parts whose content changed."""

    DEFAULT_CSS = """
    BottleneckView { height: auto; }
    BottleneckView > Vertical { height: auto; }
    BottleneckView #bn-title { text-style: bold; width: 100%; }
    BottleneckView #bn-diagnosis { margin-top: 1; text-style: bold; }
    BottleneckView #bn-diagnosis.-bound { color: $warning; }
    BottleneckView #bn-evidence { color: $text-muted; }
    BottleneckView #bn-recs { margin-top: 1; }
    BottleneckView #bn-bars { height: auto; margin-top: 1; color: $accent; }
    BottleneckView #bn-tail { height: auto; margin-top: 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._bars_key: object = None
        self._recs_key: object = None
        self._tail_key: object = None
        self._shown: tuple[Breakdown, str] | None = None

    def on_resize(self, event: events.Resize) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def _width(self) -> int:
        return max(30, (self.size.width or self.app.size.width) - 2)  # 2: a vertical scrollbar, when it shows

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("", id="bn-title")
            yield Static("", id="bn-bars")
            yield Label("", id="bn-diagnosis")
            yield Static("", id="bn-evidence")
            tail = Static("", id="bn-tail")
            tail.display = False  # only with tool times
            yield tail
            yield Static("", id="bn-recs")

    def show(self, b: Breakdown, title: str = "") -> None:
        self._shown = (b, title)
        width = self._width()
        if b.steps:
            head = (
                f"{title} · steps {b.first_step}–{b.last_step} ({b.steps}) · {b.source}"
                f" · {b.step_seconds or 0:.1f} s/step" + (f" · {b.trend}" if b.trend else "")
            )
        else:
            head = f"{title} · waiting for step timings (metrics.jsonl or console lines)"
        set_label(self.query_one("#bn-title", Label), head.lstrip(" ·"))
        key = (
            width,
            *((c.name, round(c.share, 3), round(c.seconds, 2), c.series[-TREND_WIDTH:]) for c in b.components),
        )
        if key != self._bars_key:
            self._bars_key = key
            self.query_one("#bn-bars", Static).update(bars_table(b, width) if b.components else "")
        diag = self.query_one("#bn-diagnosis", Label)
        set_label(
            diag,
            f"DIAGNOSIS: {b.diagnosis.upper()}" + (f" ({b.confidence} confidence)" if b.confidence != "high" else "")
            if b.steps
            else "",
        )
        diag.set_class(b.diagnosis != "balanced", "-bound")
        if b.tool_tail != self._tail_key:
            self._tail_key = b.tool_tail
            tail = self.query_one("#bn-tail", Static)
            tail.update(tail_table(b.tool_tail) if b.tool_tail else "")
            tail.display = bool(b.tool_tail)
        recs_key = (b.evidence, tuple(r.text for r in b.recommendations), b.skipped)
        if recs_key != self._recs_key:
            self._recs_key = recs_key
            evidence = "\n".join(f"· {escape(e)}" for e in b.evidence)
            if b.skipped:
                evidence += f"\n· {b.skipped} garbled or partial lines skipped"
            self.query_one("#bn-evidence", Static).update(evidence)
            fix = next((r.change for r in b.recommendations if r.change is not None), None)
            self.query_one("#bn-recs", Static).update(
                "\n".join(f"[b]-[/b] {escape(r.text)}" for r in b.recommendations)
                + (
                    f"\n[b]f[/b] applies {escape(fix.describe())} to the config open in the Config pane"
                    if fix is not None
                    else ""
                )
            )
