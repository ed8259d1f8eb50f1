"""The Monitor pane's rows that change every second, drawn by one widget each: every GPU's line, the host's figures.

A GPU's line shows its index, then util %, memory used/total, power and temperature, each figure followed by
its history graph (the last hour: the monitor's downsampled buckets, then its recent samples) on a fixed scale
(:mod:`widgets.trend`). It used to be nine widgets (a label per
figure, a ``Trend`` per graph): with 8 GPUs that was 72 widgets repainted every second, most of the pane's
cost per snapshot (tests/benchmarks/render_load.py --view monitor); then a widget per GPU. Now one widget keeps
every GPU's figures and graphs' histories, works out the lines it would draw, and repaints only those that
changed.

The columns are placed as Textual's horizontal layout places the header's labels above them (fixed widths
first, then the shown graphs share what is left, each followed by one blank cell), so the rows still line up
with the pane's header; the colours come from the component classes in styles/app.tcss. The host's four
figures were four auto-width labels: a CPU share going from 9 % to 10 % changed a label's width and made Textual
lay out the whole screen again (about every other second); as one widget of fixed height it never does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.content import Content
from textual.geometry import Region, Size
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget

from services.models import GpuSample, Sample
from services.monitor.trend import BUCKET_S, TrendBucket
from services.text import plain
from widgets.format import NA, Timeline, number, used_total_gib
from widgets.paint import draws_own_lines_only, filtered, repaint, truecolor_already
from widgets.trend import History

if TYPE_CHECKING:  # typing.Self is Python 3.11+
    from typing_extensions import Self

METRICS = ("util", "mem", "power", "temp")
PICKS: dict[str, Callable[[GpuSample], float | None]] = {
    "util": lambda g: g.util,
    "mem": lambda g: g.mem_pct,
    "power": lambda g: g.power_w,
    "temp": lambda g: g.temp_c,
}
TEMP_WARN, TEMP_CRITICAL = 75.0, 85.0
MEM_WARN_PCT = 95.0
INDEX_WIDTH = {False: 6, True: 5}  # by -tight (a narrow pane)
FIGURE_WIDTH = {
    False: {"util": 8, "mem": 17, "power": 8, "temp": 8},
    True: {"util": 7, "mem": 14, "power": 7, "temp": 7},
}


@functools.lru_cache(maxsize=256)
def offset_style(x: int, y: int) -> Style:
    """The mark Textual puts on a line of text: where it starts in the text (its text selection reads it); made
    once (``Style.from_meta`` serialises the mark)."""
    return Style.from_meta({"offset": (x, y)})


_text = itemgetter(0)  # a Segment's text


def merged(segments: Iterable[Segment]) -> list[Segment]:
    """``segments`` without the empty ones, neighbours in the same style (the very same object: the rows' looks)
    joined: every segment of a line is worked on again by Textual per repaint (its colours filtered, the line cut
    where widgets in front of it start), and a GPU's line was ~25 of them, a third only blanks beside blanks."""
    out: list[Segment] = []
    for segment in segments:
        text, style = segment.text, segment.style
        if not text:
            continue
        if out and out[-1].style is style:
            out[-1] = Segment(out[-1].text + text, style)
        else:
            out.append(segment)
    return out


@functools.lru_cache(maxsize=1024)
def label_segments(text: str, look: Style, blank: Style, width: int, right: bool) -> tuple[Segment, ...]:
    """``text`` in ``width`` cells as a label shows it (see :func:`fit_right`), in ``look``, the padding in
    ``blank``: made once per text, style and width (a GPU's figures take few values, and a line drawn again for
    one changed figure draws the others as they were)."""
    cell = fit_right(text, width) if right else fit_left(text, width)
    shown = cell.strip(" ")
    lead = cell.index(shown[0]) if shown else len(cell)
    return (Segment(" " * lead, blank), Segment(shown, look), Segment(" " * (len(cell) - lead - len(shown)), blank))


class Column(NamedTuple):
    part: str  # index | figure | graph
    metric: str  # "" for the index
    x: int
    width: int


@functools.lru_cache(maxsize=64)
def columns(width: int, tight: bool, graphs: frozenset[str]) -> tuple[Column, ...]:
    """The row's parts at ``width`` cells, placed exactly as Textual's horizontal layout places the header's
    labels (``#gpu-header``: the same fixed widths, the graphs ``1fr`` with a one-cell right margin): the fixed
    parts first, then the graphs share the rest as fractions, each cell boundary rounded down."""
    parts: list[tuple[str, str, int | None]] = [("index", "", INDEX_WIDTH[tight])]
    for metric in METRICS:
        parts.append(("figure", metric, FIGURE_WIDTH[tight][metric]))
        if metric in graphs:
            parts.append(("graph", metric, None))
    shown = sum(1 for _, _, w in parts if w is None)
    fixed = sum(w for _, _, w in parts if w is not None)
    remaining = max(0, width - fixed - shown)  # each graph's right margin
    unit = Fraction(remaining, shown) if remaining and shown else Fraction(1)  # Textual's 1fr of no room is 1
    out: list[Column] = []
    x = Fraction(0)
    for part, metric, fixed_width in parts:
        size = unit if fixed_width is None else Fraction(fixed_width)
        end = x + size
        out.append(Column(part, metric, x.__floor__(), end.__floor__() - x.__floor__()))
        x = end + (1 if fixed_width is None else 0)
    return tuple(out)


def first_line(text: str, room: int) -> str:
    """What a one-line label of ``room`` cells shows of ``text``: a text too long wraps at a space, and only its
    first line is seen; a first word longer than the room is cut."""
    if len(text) <= room:
        return text
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if len(candidate) > room:
            break
        line = candidate
    return line or text[:room]


def fit_right(text: str, width: int) -> str:
    """``text`` as a right-aligned label of ``width`` cells with one cell of padding on its right shows it."""
    room = width - 1
    if room <= 0:
        return " " * max(0, width)
    return first_line(text, room).rjust(room) + " "


def fit_left(text: str, width: int) -> str:
    """``text`` as a left-aligned label of ``width`` cells shows it."""
    return first_line(text, max(0, width)).ljust(max(0, width))


def level(value: float | None, warn: float, critical: float = math.inf) -> str:
    """ "critical", "warn" or "" for ``value`` against its thresholds (a figure's colour; None is none)."""
    if value is None:
        return ""
    return "critical" if value >= critical else "warn" if value >= warn else ""


def levels(gpu: GpuSample) -> dict[str, str]:
    """The figures' colours: memory >= 95 % is a warning, temperature from 75 °C a warning and 85 °C critical."""
    return {
        "util": "",
        "power": "",
        "mem": level(gpu.mem_pct, MEM_WARN_PCT),
        "temp": level(gpu.temp_c, TEMP_WARN, TEMP_CRITICAL),
    }


def gpu_at(sample: Sample, index: int) -> GpuSample | None:
    """GPU ``index`` of ``sample``: the probe lists them in index order, so by position, else searched (a GPU
    missing from a sample). Every row reads every new sample: no map built per row and sample."""
    gpus = sample.gpus
    if index < len(gpus) and gpus[index].index == index:
        return gpus[index]
    return next((g for g in gpus if g.index == index), None)


def figures(gpu: GpuSample) -> dict[str, str]:
    return {
        "util": number(gpu.util, "%"),
        "mem": used_total_gib(gpu.mem_used, gpu.mem_total),
        "power": number(gpu.power_w, "W"),
        "temp": number(gpu.temp_c, "°C"),
    }


class PartsRow(Widget):
    """A row drawn as segments, each styled by a component class ``<PREFIX>--<part>``; it repaints itself for new
    figures without losing the styles it worked out, and forgets them whenever Textual repaints it (styles, theme,
    size changed)."""

    PREFIX = ""
    PARTS: tuple[str, ...] = ()
    LEVELS = ("warn", "critical")  # every row's threshold colours: ``parts-row--warn``, styled once in app.tcss
    LOOKS_ONLY = False  # True: :meth:`draw` draws with the styles of :attr:`looks` alone (no marks, no others)

    def __init_subclass__(cls, **kwargs) -> None:
        if cls.PREFIX:  # the component classes are its parts: ``<PREFIX>--<part>``
            cls.COMPONENT_CLASSES = {cls.component(part) for part in cls.PARTS}
        super().__init_subclass__(**kwargs)

    @classmethod
    def component(cls, part: str) -> str:
        return f"parts-row--{part}" if part in cls.LEVELS else f"{cls.PREFIX}--{part}"

    def __init__(self, *, tight: bool = False, graphs: Iterable[str] = METRICS, **kwargs) -> None:
        self._looks: dict[str, Style] | None = None  # the parts' styles, until Textual repaints the row for a reason
        # (until then too) whether its styles draw anything around or over its lines: None, or its background
        self._plain: tuple[Color | None] | None = None
        self._own_refresh = False  # of its own (new figures or points) rather than Textual's
        self._strips: dict[int, tuple[tuple, Strip]] = {}  # per line: (what it shows, the line drawn)
        self._width: int | None = None  # while Textual renders lines of it: its width
        self._on_screen: Screen[object] | None = None  # the screen it was found on (:attr:`screen`)
        super().__init__(**kwargs)
        self.tight, self.graphs = tight, frozenset(graphs)  # what fits the pane's width (MonitorPane.on_resize)

    def fit(self, tight: bool, graphs: Iterable[str] = METRICS) -> None:
        """The pane's width changed what fits: narrow figures (``tight``), and which graphs are shown."""
        graphs = frozenset(graphs)
        if (tight, graphs) != (self.tight, self.graphs):
            self.tight, self.graphs = tight, graphs
            self._redraw()

    @property
    def looks(self) -> dict[str, Style]:
        """The row's own style, the background alone (padding and margins, as Textual paints them), and each
        part's: worked out once, not per repaint (Textual's own cache of them is emptied on every refresh, and
        each costs a walk up the DOM)."""
        looks = self._looks
        if looks is None:
            base = self.rich_style
            looks = {"base": base, "blank": Style(bgcolor=base.bgcolor)}
            for part in self.PARTS:
                looks[part] = base + self.get_component_rich_style(self.component(part))
            self._looks = looks
        return looks

    def _redraw(self, *regions: Region) -> None:
        """Repaint (``regions`` of it, else all) for new figures or points: the styles stay as they were, and the
        screen is told at once (widgets/paint.py :func:`repaint`): every row repainted by one snapshot is drawn in
        one frame."""
        if not repaint(self, *regions):  # not on a screen yet: Textual's way
            self._own_refresh = True
            try:
                self.refresh(*regions)
            finally:
                self._own_refresh = False

    @property
    def screen(self) -> Screen[object]:
        """The screen the row is on: Textual's, found once rather than by a walk up the DOM each time (~10 a
        snapshot, through ``size`` and ``region``: a tenth of the calls a snapshot made); looked for again once
        the row is out of the DOM or closing (Textual's NoScreen then, as its own)."""
        screen = self._on_screen
        if screen is None or self._parent is None or self._closing:
            screen = self._on_screen = Widget.screen.fget(self)  # type: ignore[attr-defined]
        return screen

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Self:
        if not self._own_refresh:
            self._looks = self._plain = None
            self._strips = {}
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._looks = self._plain = None
        self._strips = {}

    def text_segments(self, text: str, look: Style, width: int, *, right: bool = False) -> tuple[Segment, ...]:
        """``text`` in ``width`` cells as a label shows it (see :func:`fit_right`), the padding in background alone."""
        return label_segments(text, look, self.looks["blank"], width, right)

    def line_key(self, y: int, width: int) -> tuple:
        """Everything line ``y`` shows at ``width`` cells (it is drawn again only when this changed)."""
        return (width, self.tight, self.graphs)

    def draw(self, y: int, width: int, key: tuple) -> list[Segment]:
        """Line ``y``'s segments (padded or cut to ``width`` by :meth:`render_line`)."""
        raise NotImplementedError

    def plain_background(self) -> Color | None:
        """The row's background when its styles draw nothing around or over its lines (no border, padding,
        outline, title, tint, opacity, hatch): Textual's styles cache then sends each line as drawn through the
        App's line filters; None when they do draw something. Worked out once, until Textual repaints the row
        for a reason (as :attr:`looks`)."""
        plain = self._plain
        if plain is None:
            plain = self._plain = (self.background_colors[1] if draws_own_lines_only(self) else None,)
        return plain[0]

    def render_lines(self, crop: Region) -> list[Strip]:
        """The lines of ``crop``; with no styles of its own to draw (:meth:`plain_background`), each line as
        :meth:`render_line` keeps it through the App's line filters, cut to the crop's columns, as Textual's
        styles cache paints them, without its general path (~40 style lookups and two new Strips per line): a
        line drawn before is the very Strip kept, whose filtered copy Textual's Strip keeps too."""
        # the width, once for the lines Textual asks for (``size`` finds the widget on the screen per call)
        width = self._width = self.size.width
        try:
            background = self.plain_background()
            if background is None:
                return super().render_lines(crop)
            filters = self.app.get_line_filters()
            render_line = self.render_line
            rgb_only = self.LOOKS_ONLY and all(map(truecolor_already, self.looks.values()))
            strips = [filtered(render_line(y), filters, background, rgb_only=rgb_only) for y in crop.line_range]
        finally:
            self._width = None
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def render_line(self, y: int) -> Strip:
        width = self.size.width if self._width is None else self._width
        key = self.line_key(y, width)
        cached = self._strips.get(y)
        if cached is not None and cached[0] == key:
            return cached[1]
        strip = self.line_strip(y, width, key) if width else Strip.blank(0)
        self._strips[y] = (key, strip)
        return strip

    def line_strip(self, y: int, width: int, key: tuple) -> Strip:
        """Line ``y`` drawn (:meth:`draw`), padded or cut to ``width`` cells."""
        return Strip(merged(self.draw(y, width, key))).adjust_cell_length(width, self.looks["blank"])


def older_points(buckets: Sequence[TrendBucket], gpu: int, metric: str, room: int) -> list[float | None]:
    """One GPU's ``metric`` from the monitor's downsampled buckets as the graph's points: a bucket's mean once per
    sample it holds, blanks for the time between buckets (at the bucket's own rate); the newest ``room`` of them."""
    out: list[float | None] = []
    end: float | None = None
    for bucket in buckets:
        if end is not None and bucket.t > end:
            out.extend([None] * min(room, round((bucket.t - end) * bucket.n / BUCKET_S)))
        value = bucket.stat(gpu, metric)
        out.extend([value] * bucket.n)
        end = bucket.t + BUCKET_S
    return out[-room:] if room > 0 else []


class GpuLine:
    """One GPU's line of :class:`GpuRows`: util %, memory used/total GiB, power W, temperature °C, each with its
    history graph (util, memory and temperature on 0-100, power on 0 to the most seen in the window: the probe
    reports no power limit). Plain data: the table draws every GPU's line."""

    def __init__(self, index: int, limit: int) -> None:
        self.index = index
        self.histories = {metric: History(limit) for metric in METRICS}
        self.figures = dict.fromkeys(METRICS, NA)
        self.levels = dict.fromkeys(METRICS, "")
        self._seen = (-1, 0)  # the timeline's (generation, appended) the graphs show
        self._cells: tuple[tuple, tuple[str, ...]] | None = None  # ((seen, width, tight, graphs), cells per graph)

    def high(self, metric: str) -> float:
        """The top of the graph's scale."""
        if metric == "power":
            return self.histories[metric].peak() or 1.0
        return 100.0

    def data(self, metric: str) -> tuple[float | None, ...]:
        """The graph's points, oldest first (None: a gap or N/A), before they are fitted to its width."""
        return tuple(self.histories[metric].points)

    def cells(self, metric: str, width: int) -> str:
        return self.histories[metric].bars(width, 0.0, self.high(metric))

    def update(
        self,
        gpu: GpuSample | None,
        timeline: Timeline,
        older: Callable[[], Sequence[TrendBucket]] = tuple,
        end: int = 0,
    ) -> None:
        """The latest figures, and the graphs' new points; a graph drawn afresh starts with ``older()``, the
        monitor's downsampled buckets before the timeline's first sample (an hour at 1 Hz in all; asked for only
        then), its newest point at position ``end - 1`` (the graphs' buckets are anchored to positions:
        widgets/trend.py clock_buckets)."""
        if gpu is None:
            self.figures = dict.fromkeys(METRICS, NA)
            self.levels = dict.fromkeys(METRICS, "")
        else:
            self.figures = figures(gpu)
            self.levels = levels(gpu)
        seen = (timeline.generation, timeline.appended)
        if seen != self._seen:
            everything, entries = timeline.since(*self._seen)
            self._seen = seen
            index = self.index
            gpus = [None if sample is None else gpu_at(sample, index) for sample in entries]
            before = older() if everything else ()
            for metric, pick in PICKS.items():
                history = self.histories[metric]
                if everything:  # the newest point at position ``end - 1``, the others one before another
                    points = older_points(before, index, metric, history.limit - len(gpus)) if before else []
                    history.clear(start=end - len(points) - len(gpus))
                    history.extend(points)
                for g in gpus:
                    v = None if g is None else pick(g)
                    history.append(None if v is None else float(v))

    def key(self, width: int, tight: bool, graphs: frozenset[str]) -> tuple:
        """Everything the line shows; the graphs' cells worked out once per new point or new width."""
        basis = (self._seen, width, tight, graphs)
        if self._cells is None or self._cells[0] != basis:
            self._cells = (
                basis,
                tuple(self.cells(c.metric, c.width) for c in columns(width, tight, graphs) if c.part == "graph"),
            )
        return (width, tight, graphs, tuple(self.figures.values()), tuple(self.levels.values()), self._cells[1])


class GpuRows(PartsRow):
    """Every GPU's line (:class:`GpuLine`), one widget for all: with a widget per GPU, Textual's own cost of
    painting a widget (its background worked out from every ancestor, its line cache, filters) was paid eight
    times a frame, ~60 % of what a monitored pod's snapshot cost the app (tests/benchmarks/render_load.py). A
    line is repainted only when what it draws changed (a new point often leaves every cell as it was)."""

    DEFAULT_CSS = "GpuRows { height: auto; }"
    PREFIX, PARTS = "gpu-row", ("index", "warn", "critical", *METRICS)
    LOOKS_ONLY = True

    def __init__(self, *, limit: int, tight: bool = False, graphs: Iterable[str] = METRICS, **kwargs) -> None:
        super().__init__(tight=tight, graphs=graphs, **kwargs)
        self.limit = limit
        self.lines: list[GpuLine] = []
        self._drawn: dict[int, tuple] = {}  # per line: what it shows on screen (its key when last drawn)
        self._anchor = (-1, 0)  # (timeline generation, position of its first entry ever appended): see end()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines)

    def columns(self) -> tuple[Column, ...]:
        return columns(self.size.width, self.tight, self.graphs)

    def column(self, part: str, metric: str) -> Column | None:
        """Where ``part`` (figure | graph) of ``metric`` is drawn now on every line; None when it is not shown."""
        return next((c for c in self.columns() if c.part == part and c.metric == metric), None)

    def show(
        self, gpus: dict[int, GpuSample], timeline: Timeline, older: Callable[[], Sequence[TrendBucket]] = tuple
    ) -> None:
        """The GPUs of the newest sample (by index) and the graphs' new points. Another set of GPUs (one missing
        from the newest sample, a pod switch) makes new lines, whose graphs read the whole timeline, after
        ``older()`` (the monitor's downsampled buckets before it: worked out only for graphs drawn afresh, once
        for all lines; an hour of them is ~360 buckets to go through)."""
        indices = sorted(gpus)
        if indices != [line.index for line in self.lines]:
            self.lines = [GpuLine(i, self.limit) for i in indices]
            self._drawn = {}
            self.refresh(layout=True)  # another height; every line drawn afresh
        width, tight, graphs, drawn = self.size.width, self.tight, self.graphs, self._drawn.get
        end = self.end(timeline)
        older = functools.cache(older)
        changed: list[list[int]] = []  # runs of neighbouring lines that changed, [first, end]: a region each
        for y, line in enumerate(self.lines):
            line.update(gpus[line.index], timeline, older, end)
            if line.key(width, tight, graphs) != drawn(y):
                if changed and changed[-1][1] == y:
                    changed[-1][1] = y + 1
                else:
                    changed.append([y, y + 1])
        if changed:
            self._redraw(*(Region(0, first, width, last - first) for first, last in changed))

    def end(self, timeline: Timeline) -> int:
        """The position after the timeline's newest entry: the graphs' points are numbered one a second, the newest
        entry of a timeline (re)built at its sample's second on the clock, each entry appended since one more; so
        the graphs' buckets are the clock's (bucket k: seconds k*w to (k+1)*w) and a new sample changes only the
        newest."""
        if timeline.generation != self._anchor[0]:
            newest = next((sample.t for sample in reversed(timeline.entries) if sample is not None), 0.0)
            self._anchor = (timeline.generation, round(newest) + 1 - timeline.appended)
        return self._anchor[1] + timeline.appended

    def line_key(self, y: int, width: int) -> tuple:
        if not 0 <= y < len(self.lines):  # (below the last GPU: blank)
            return (width,)
        return self.lines[y].key(width, self.tight, self.graphs)

    def line_strip(self, y: int, width: int, key: tuple) -> Strip:
        """As every row's, but its length known without measuring each segment's cells (the graphs' bar
        characters are not on rich's fast path, so measuring was a lookup per cell): each part is a column's width
        of one-cell characters (the figures as the header's labels place them, the graphs' bars), and the line is
        padded to ``width`` here. tests/app/monitor/test_monitor_graphs.py measures every line."""
        segments = merged(self.draw(y, width, key))
        cells = sum(map(len, map(_text, segments)))
        if cells < width:
            segments.append(Segment(" " * (width - cells), self.looks["blank"]))
        elif cells > width:
            return Strip(segments).adjust_cell_length(width, self.looks["blank"])
        return Strip(segments, width)

    def draw(self, y: int, width: int, key: tuple) -> list[Segment]:
        if not 0 <= y < len(self.lines):
            return []
        self._drawn[y] = key
        line = self.lines[y]
        looks = self.looks
        base, blank = looks["base"], looks["blank"]
        graph_cells = iter(key[5])
        segments: list[Segment] = []
        add = segments.append
        end = 0
        for column in columns(width, self.tight, self.graphs):
            if column.x > end:  # a graph's right margin
                add(Segment(" " * (column.x - end), blank))
            if column.part == "index":
                segments += label_segments(f"GPU{line.index}", looks["index"], blank, column.width, False)
            elif column.part == "figure":
                level = line.levels[column.metric]
                segments += label_segments(
                    line.figures[column.metric], looks[level] if level else base, blank, column.width, True
                )
            else:
                add(Segment(next(graph_cells), looks[column.metric]))
            end = column.x + column.width
        return segments


class HostRow(PartsRow):
    """The pod's CPU, RAM, disk and open-files figures: on one line, each followed by three blank cells, or two
    a line in a narrow pane, each at the start of its half (as the four labels it replaces were laid out)."""

    PREFIX, PARTS = "host-row", ("warn", "critical")
    LOOKS_ONLY = True
    GAP = 3

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.parts: tuple[tuple[str, str], ...] = ()  # (text, level: "" | "warn" | "critical")
        self.styles.height = 2 if self.tight else 1

    def fit(self, tight: bool, graphs: Iterable[str] = METRICS) -> None:
        """As the other rows, and two lines when ``tight`` (one switch for both its height and its layout)."""
        self.styles.height = 2 if tight else 1
        super().fit(tight, graphs)

    def show(self, parts: Iterable[tuple[str, str]]) -> None:
        parts = tuple(parts)
        if parts != self.parts:
            self.parts = parts
            self._redraw()

    def line_key(self, y: int, width: int) -> tuple:
        return (width, self.tight, self.parts)

    def draw(self, y: int, width: int, key: tuple) -> list[Segment]:
        looks = self.looks
        segments: list[Segment] = []
        if not self.tight:
            shown = self.parts if y == 0 else ()
            for text, level in shown:
                segments += self.text_segments(text, looks[level] if level else looks["base"], len(text))
                segments.append(Segment(" " * self.GAP, looks["blank"]))
        else:
            half = width // 2
            for x, cell in ((0, half), (half, width - half)):
                index = 2 * y + (x > 0)
                if index < len(self.parts):
                    text, level = self.parts[index]
                    cut = first_line(text, max(0, cell - self.GAP))
                    segments += self.text_segments(cut, looks[level] if level else looks["base"], len(cut))
                segments.append(Segment(" " * (x + cell - sum(s.cell_length for s in segments)), looks["blank"]))
        return segments


class GpuHeader(PartsRow):
    """The titles over the GPU rows' figures, placed by the same :func:`columns` (the graphs' room left blank)."""

    TITLES = {"util": "util", "mem": "memory", "power": "power", "temp": "temp"}
    DEFAULT_CSS = "GpuHeader { height: 1; }"
    LOOKS_ONLY = True

    def draw(self, y: int, width: int, key: tuple) -> list[Segment]:
        looks = self.looks
        segments: list[Segment] = []
        if y == 0:
            for column in columns(width, self.tight, self.graphs):
                if column.part == "figure":
                    segments.append(Segment(" " * (column.x - sum(s.cell_length for s in segments)), looks["blank"]))
                    segments += self.text_segments(self.TITLES[column.metric], looks["base"], column.width, right=True)
        return segments


class TextLine(PartsRow):
    """A label of plain text that changes every second (the sample count and the sample's age, what the run has
    spent): cell for cell what a ``width: 100%`` Label of the same text draws, wrapped as the Label wraps it, but
    repainted from its own lines and styles. A Label runs Textual's content pipeline (the text made into a visual,
    wrapped, formatted, its styles worked out from the DOM) on every change; these two labels changed with every
    snapshot. The text is shown as written, never read as markup."""

    DEFAULT_CSS = "TextLine { width: 100%; height: auto; }"

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = plain(text)
        # (width, text, style, its lines): the style is the row's own until Textual repaints it for a reason
        self._wrapped: tuple[int, str, Style | None, tuple[tuple[str, Style], ...]] = (-1, "", None, ())

    def render(self) -> Content:
        """The text (what readers of the widget see; drawing goes through :meth:`render_line`)."""
        return Content(self.text)

    def lines(self, width: int) -> tuple[tuple[str, Style], ...]:
        """The text's lines at ``width`` cells, each with its style: itself when it fits, else as Textual wraps a
        Label's text; each line marked with where it starts in the text, as a Label marks it (Textual's text
        selection reads it)."""
        cached_width, cached_text, cached_base, lines = self._wrapped
        base = self.looks["base"]
        if cached_width != width or cached_text != self.text or cached_base is not base:
            text = self.text
            wrapped = [text] if cell_len(text) <= width else [line.plain for line in Content(text).wrap(max(1, width))]
            out, at = [], 0
            for line in wrapped:
                start = text.find(line, at) if line else at
                start = at if start < 0 else start
                row = text.count("\n", 0, start)
                x = start - (text.rfind("\n", 0, start) + 1)
                out.append((line, base + offset_style(x, row)))
                at = start + len(line)
            lines = tuple(out)
            self._wrapped = (width, text, base, lines)
        return lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.lines(width)))

    def update(self, text: str) -> None:
        """Show ``text``; the layout is asked for only when its number of lines changes."""
        text = plain(text)
        if text == self.text:
            return
        width = self.size.width
        before = len(self.lines(width))
        self.text = text
        if not width or len(self.lines(width)) != before:
            self.refresh(layout=True)
        else:
            self._redraw()

    def line_key(self, y: int, width: int) -> tuple:
        return (width, self.text)

    def draw(self, y: int, width: int, key: tuple) -> list[Segment]:
        lines = self.lines(width)
        return [Segment(*lines[y])] if y < len(lines) else []


class LogTail(PartsRow):
    """The run's last log lines, one a line, cut with an ellipsis where too long, a line matching an error pattern
    in its severity's colour: cell for cell the Static of :func:`widgets.alerts.log_tail_text` it replaces (its
    CSS: ``text-wrap: nowrap; text-overflow: ellipsis``), without Textual's content pipeline (the text turned into
    content, split into lines, each line's control codes stripped again) every third snapshot."""

    DEFAULT_CSS = "LogTail { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lines: tuple[tuple[str, str], ...] = ()  # (line, its severity's style: "" for none)
        self._cut: dict[tuple[int, str], str] = {}  # (width, line) -> as shown

    def render(self) -> Content:
        """The lines (what readers of the widget see; drawing goes through :meth:`render_line`)."""
        return Content("\n".join(line for line, _ in self.lines))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.lines))

    def show(self, lines: Sequence[tuple[str, str]]) -> None:
        """The lines with their styles; the layout is asked for only when their number changes."""
        lines = tuple((plain(line), style) for line, style in lines)
        if lines == self.lines:
            return
        taller = len(lines) != len(self.lines)
        self.lines = lines
        if taller:
            self.refresh(layout=True)
        else:
            self._redraw()

    def line_key(self, y: int, width: int) -> tuple:
        return (width, self.lines[y] if 0 <= y < len(self.lines) else None)

    def fitted(self, line: str, width: int) -> str:
        if cell_len(line) <= width:
            return line
        key = (width, line)
        cut = self._cut.get(key)
        if cut is None:
            if len(self._cut) > 64:
                self._cut.clear()
            cut = self._cut[key] = Content(line).truncate(width, ellipsis=True).plain
        return cut

    def draw(self, y: int, width: int, key: tuple) -> list[Segment]:
        if not 0 <= y < len(self.lines):
            return []
        line, style = self.lines[y]
        base = self.looks["base"]
        look = base + Style.parse(style) if style else base
        # marked with where it starts in the text, as Textual marks a Static's lines (its text selection reads it)
        return [Segment(self.fitted(line, width), look + offset_style(0, y))]
