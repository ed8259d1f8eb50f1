"""The fleet table: one row per pod, keyed by pod name, diff-updated cell by cell (never rebuilt).

Columns: pod, state, step, loss trend, tokens/s, mean GPU util, $/hr, alerts. A snapshot changes only
the cells whose rendered value differs from what the row shows, so 64 pods at 1 Hz cost a few cell
updates per second, not a table rebuild. A narrow terminal drops the low-value columns first (loss
trend, tokens/s, GPU util): pod, state, step, $/hr and alerts stay, the alerts taking the room left. A Slurm login
node's alerts cell starts with its cluster in brief
("2 jobs, 1 node down").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual._segment_tools import line_crop
from textual._types import SegmentLines
from textual.cache import LRUCache
from textual.color import Color
from textual.coordinate import Coordinate
from textual.filter import LineFilter
from textual.geometry import Offset, Region
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widgets import DataTable
from textual.widgets._data_table import _EMPTY_TEXT, CursorType, RowRenderables, default_cell_formatter
from textual.widgets.data_table import CellType, ColumnKey, Row, RowKey

from services.models import PodKind, PodSnapshot, PodState, RunProgress
from widgets.alerts import SEVERITY_STYLE, badge_text, loss_trend, worst
from widgets.cluster_view import job_utils, summary
from widgets.columns import fit_columns
from widgets.format import NA
from widgets.paint import draws_own_lines_only, filtered, repaint

COLUMNS = (
    ("pod", "Pod", 22),
    ("state", "State", 11),
    ("step", "Step", 10),
    ("loss", "Loss trend", 22),
    ("tps", "tok/s", 9),
    ("util", "GPU util", 10),
    ("price", "$/hr", 8),
    ("alerts", "Alerts", 40),
)
COLUMN_KEYS = tuple(key for key, _, _ in COLUMNS)
# kept longest first: what a person scanning many pods needs (which pod, is it alive, does it cost, is
# anything wrong, how far); the loss sparkline and the throughput figures are the first to go
PRIORITY = {"pod": 10, "state": 9, "alerts": 8, "price": 8, "step": 7, "util": 5, "loss": 4, "tps": 3}
ALERTS_MIN, POD_MIN = 20, 8
STATE_STYLE = {
    PodState.ONLINE: "green",
    PodState.CONNECTING: "cyan",
    PodState.STALE: "yellow",
    PodState.OFFLINE: "red",
    PodState.UNSUPPORTED: "red",
}


def price_of(snapshot: PodSnapshot, demo_price: float | None = None) -> float | None:
    """The pod's $/hr on the same basis the Monitor's "$ spent" uses: its own price, or for the demo pod
    the price the monitor simulates it at."""
    pod = snapshot.pod
    if pod.price_per_hr is not None:
        return pod.price_per_hr
    return demo_price if pod.kind is PodKind.DEMO else None


_TEXTS: dict[tuple[str, str], Text] = {}  # (text, style) -> its cell


def _cell_text(text: str, style: str = "") -> Text:
    """One Text per pod name and state for every row that shows it: a snapshot's row then compares equal to the
    row shown by identity, not by comparing Texts (nothing draws a cell by changing it)."""
    cell = _TEXTS.get((text, style))
    if cell is None:
        if len(_TEXTS) > 4096:
            _TEXTS.clear()
        cell = _TEXTS[text, style] = Text(text, style=style)
    return cell


_TRENDS: dict[int, tuple[tuple[float, ...], str]] = {}  # id(loss history) -> (it, its sparkline)


def _loss_trend(run: RunProgress | None) -> str:
    """loss_trend, once per loss history: the monitor hands the same history (one object) until a step adds to
    it, and a pod samples ~3 times a step."""
    if run is None:
        return loss_trend(run)
    history = run.loss_history
    found = _TRENDS.get(id(history))
    if found is not None and found[0] is history:
        return found[1]
    if len(_TRENDS) > 1024:
        _TRENDS.clear()
    trend = loss_trend(run)
    _TRENDS[id(history)] = (history, trend)
    return trend


def fleet_row(snapshot: PodSnapshot, demo_price: float | None = None) -> tuple[str | Text, ...]:
    """The cells of one pod's row (pure: the same snapshot always gives equal cells)."""
    pod, run, latest = snapshot.pod, snapshot.run, snapshot.latest
    state = snapshot.status.state
    name = _cell_text(pod.name + (" (sim)" if pod.simulated else ""))  # a Text: DataTable reads a str as markup
    step = (
        NA if run is None or run.step is None else (f"{run.step}/{run.max_steps}" if run.max_steps else str(run.step))
    )
    trend = _loss_trend(run)
    loss = f"{trend} {run.loss:.4g}" if run is not None and run.loss is not None else NA
    tps = NA if run is None or run.tokens_per_s is None else f"{run.tokens_per_s:,.0f}"
    utils = [g.util for g in latest.gpus if g.util is not None] if latest else []
    if not utils:  # a Slurm login node has no GPUs of its own: its running jobs' GPUs, every node's
        utils = job_utils(snapshot.cluster)
    util = f"{sum(utils) / len(utils):.0f}% ×{len(utils)}" if utils else NA
    price_hr = price_of(snapshot, demo_price)
    price = NA if price_hr is None else f"{price_hr:.2f}"
    alerts: str | Text = ""
    if snapshot.alerts:
        sev = worst(snapshot.alerts)
        assert sev is not None
        alerts = Text(f"{badge_text(snapshot.alerts)}: {snapshot.alerts[0].title}", style=SEVERITY_STYLE[sev])
    if snapshot.idle is not None:  # paid for and unused: said before the alerts
        alerts = Text.assemble((snapshot.idle.label, "yellow"), " · " if alerts else "", alerts)
    if cluster := summary(snapshot.cluster):  # a Slurm login node: its jobs and lost nodes first
        alerts = Text.assemble(cluster, " · " if alerts else "", alerts)
    state_cell = _cell_text(state.value, STATE_STYLE.get(state, "bold red"))
    return (name, state_cell, step, loss, tps, util, price, alerts)


def fleet_layout(available: int, pod_width: int, padding: int = 1) -> dict[str, int]:
    """key -> width of the columns that fit ``available`` cells, in COLUMNS order; the alerts column takes
    what is left (up to its full width)."""
    widths = {key: width for key, _, width in COLUMNS}
    widths["pod"] = pod_width
    widths["alerts"] = ALERTS_MIN
    gap = 2 * padding
    kept = fit_columns(COLUMN_KEYS, widths, PRIORITY, available, gap=gap)
    if "alerts" in kept:
        others = sum(widths[k] + gap for k in kept if k != "alerts")
        widths["alerts"] = max(ALERTS_MIN, min(dict((k, w) for k, _, w in COLUMNS)["alerts"], available - others - gap))
    return {k: widths[k] for k in kept}


class _Paint(NamedTuple):
    """The table's state that a drawn line depends on, besides its row: read once per paint."""

    width: int
    scroll: Offset
    cursor: Coordinate
    hover: Coordinate
    cursor_type: CursorType
    show_cursor: bool
    show_hover: bool
    pseudo_classes: object
    structure: int
    foreground_css: bool
    background_css: bool


def _value_key(value: object) -> object:
    """A hashable stand-in for a cell's value, equal only for values DataTable draws alike (rich Text is not
    hashable; 1, 1.0 and True are equal but drawn differently)."""
    if isinstance(value, Text):
        return (
            Text,
            value.plain,
            value.style,
            tuple(value.spans),
            value.justify,
            value.overflow,
            value.no_wrap,
            value.end,
        )
    try:
        hash(value)
    except TypeError:
        return object()  # equal to nothing: drawn afresh each time
    return (type(value), value)


class FleetView(DataTable):
    HELP_WHERE = "the fleet table"  # what the help calls it
    DEFAULT_CSS = """
    FleetView { height: 1fr; }
    """
    # class defaults too: DataTable's __init__ reads ordered_rows before ours has set them
    _cell_bumps = 0
    _ordered: tuple[tuple[int, int], list[Row]] | None = None
    _line_rows: tuple[tuple[int, int], list[tuple[RowKey, int]]] | None = None  # _y_offsets, by (rows, structure)
    _paint_style: Style | None = None
    _widths: tuple[tuple[int, int, int], list[tuple[int, ColumnKey, int]], int] | None = None
    _drawn_cells: tuple[int, dict[tuple[RowKey, ColumnKey], tuple]] | None = None  # by structure: see _draw_row
    _repaint_rows: set[RowKey] | None = None  # inside update_pods: the rows it changed, repainted at its end
    _paint: _Paint | None = None  # during a paint: _paint_state()

    def __init__(self, *, demo_price: float | None = None, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.demo_price = demo_price
        self._cells: dict[str, tuple[str | Text, ...]] = {}
        self._layout: dict[str, int] = {}
        self.cell_updates = 0  # for tests and the benchmark: how much work the diffing left
        self.cell_renders = 0  # for tests: cells rendered (not found in the cache below)
        # DataTable keys its render caches on one counter that every update_cell bumps, so one changed cell
        # re-renders every visible cell (64 pods: ~500 cells a second, most of the fleet view's CPU). These
        # caches key a cell on its value and a row or line on its own version instead, and all of them on
        # that counter less our cell updates, so anything else that changes the table (rows added or
        # removed, a resize, a relayout) still invalidates everything. They wrap Textual's private render
        # hooks (the results are DataTable's own): tests/app/test_fleet_render.py compares every line with a
        # plain DataTable's, so a Textual release that changes the hooks fails there (pinned < 9).
        self._cell_bumps = 0
        self._row_versions: dict[RowKey, int] = {}
        self._own_cells: LRUCache[tuple, SegmentLines] = LRUCache(4000)
        self._own_rows: LRUCache[tuple, tuple[SegmentLines, SegmentLines]] = LRUCache(1000)
        self._own_lines: LRUCache[tuple, Strip] = LRUCache(1000)
        self._own_renderables: LRUCache[tuple, RowRenderables] = LRUCache(1000)
        self._row_tops: tuple[int, list[int]] | None = None  # each row's y, by row structure
        self._row_styles: dict[tuple, Style] = {}  # DataTable looks the stripe's style up in the CSS per row
        self._ordered = None  # ordered_rows, by (rows, structure)
        self._padded: LRUCache[tuple, list[Segment]] = LRUCache(4000)  # a cell's padded line, by width and value
        self._layers: dict[tuple, Style] = {}  # the styles layered on a cell, by row, column, cursor and hover
        self._row_contexts: dict[tuple, tuple[list[Style], Style, Style]] = {}  # _row_context's, by its key
        self._plain_lines: dict[int, Any] = {}  # y -> (the table's line, the line painted); -1 -> their look

    def on_mount(self) -> None:
        self._relayout()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout()

    @property
    def shown_columns(self) -> list[str]:
        """The column keys on screen now (the narrow ones dropped)."""
        return list(self._layout)

    def _pod_width(self) -> int:
        names = [cell_len(str(cells[0])) for cells in self._cells.values()]
        return max(POD_MIN, min(dict((k, w) for k, _, w in COLUMNS)["pod"], max(names, default=0)))

    def _relayout(self) -> None:
        """Columns for the width there is now; rebuilt (rows re-added from the cells) only when they change."""
        width = self.size.width or self.app.size.width
        layout = fleet_layout(max(1, width - 2), self._pod_width(), self.cell_padding)  # 2: the scrollbar
        if layout == self._layout:
            return
        self._layout = layout
        cursor = self.cursor_coordinate
        self.clear(columns=True)
        labels = {key: label for key, label, _ in COLUMNS}
        for key, width in layout.items():
            self.add_column(labels[key], width=width, key=key)
        for name, cells in self._cells.items():
            self.add_row(*self._shown(cells), key=name)
        if self.row_count:
            self.move_cursor(row=min(cursor.row, self.row_count - 1), animate=False)

    def _shown(self, cells: tuple[str | Text, ...]) -> list[str | Text]:
        return [cell for key, cell in zip(COLUMN_KEYS, cells) if key in self._layout]

    @property
    def pod_names(self) -> list[str]:
        return list(self._cells)

    def cells(self, name: str) -> tuple[str | Text, ...] | None:
        return self._cells.get(name)

    def update_pods(self, snapshots: Iterable[PodSnapshot]) -> None:
        """A frame's snapshots, in order: every row's cells set, then the changed rows repainted in one refresh
        (a refresh per row marked the widget dirty, checked the window and woke the loop per pod)."""
        self._repaint_rows = rows = set[RowKey]()
        try:
            for snapshot in snapshots:
                self.update_pod(snapshot)
        finally:
            self._repaint_rows = None
        if rows:
            self._refresh_rows(rows)

    def update_pod(self, snapshot: PodSnapshot) -> None:
        name = snapshot.pod.name
        new = fleet_row(snapshot, self.demo_price)
        old = self._cells.get(name)
        self._cells[name] = new
        if old is None:
            if self._pod_width() != self._layout.get("pod", self._pod_width()):
                self._layout = {}  # a longer name: the pod column widens (rows re-added with this one)
                self._relayout()
                return
            self.add_row(*self._shown(new), key=name)
            return
        layout = self._layout
        changed = {
            key: after
            for key, before, after in zip(COLUMN_KEYS, old, new)
            if before is not after and before != after and key in layout
        }
        if changed:
            self._update_row(name, changed)

    def remove_pod(self, name: str) -> None:
        if self._cells.pop(name, None) is not None:
            self.remove_row(name)

    # -- render caches per cell (see __init__) ---------------------------------------------------------

    def update_cell(
        self, row_key: RowKey | str, column_key: ColumnKey | str, value: CellType, *, update_width: bool = False
    ) -> None:
        """DataTable's update_cell, repainting the cell's row only: DataTable repaints the whole table, and the
        screen composes every visible line of it again, for the few rows a fleet frame changes."""
        if update_width:
            super().update_cell(row_key, column_key, value, update_width=True)
            return  # column widths may change: the bump invalidates everything, as DataTable means it to
        self._update_row(row_key, {column_key: value})

    def _update_row(self, row_key: RowKey | str, values: dict[str, CellType] | dict[ColumnKey | str, CellType]) -> None:
        """Cells of one row set at once (DataTable's update_cell each), and the row repainted once."""
        row = RowKey(row_key) if isinstance(row_key, str) else row_key
        index = self._row_locations.get(row)
        for column_key, value in values.items():
            column = ColumnKey(column_key) if isinstance(column_key, str) else column_key
            if index is None or column not in self._column_locations:
                super().update_cell(row, column, value)  # raises CellDoesNotExist as DataTable does
                return
            self._data[row][column] = value
            self._update_count += 1
            self._cell_bumps += 1
            self.cell_updates += 1
        self._row_versions[row] = self._row_versions.get(row, 0) + 1
        if index is None:
            return
        if self._repaint_rows is not None:  # inside update_pods: repainted with the frame's other rows
            self._repaint_rows.add(row)
        else:
            self.refresh_row(index)

    def _refresh_rows(self, rows: Iterable[RowKey]) -> None:
        """refresh_row for each of ``rows`` (those still in the table), as one refresh; rows next to each other (pods
        sampling at neighbouring moments of the second) as one region of the same lines."""
        locations, count = self._row_locations, self.row_count
        indexes = sorted(i for row in rows if (i := locations.get(row)) is not None and 0 <= i < count)
        if not indexes:
            return
        window, offset = self.window_region, -self.scroll_offset
        tops, ordered = self._tops(), self.ordered_rows
        y0 = self.header_height if self.show_header else 0
        width = max(self.size.width, self._column_widths()[1])
        runs: list[list[int]] = []
        for index in indexes:
            if runs and runs[-1][1] == index:
                runs[-1][1] = index + 1
            else:
                runs.append([index, index + 1])
        regions = []
        for first, end in runs:
            top = y0 + tops[first]  # _get_row_region's, for the rows first..end-1 together
            region = Region(0, top, width, y0 + tops[end - 1] + ordered[end - 1].height - top)
            if window.overlaps(region):
                regions.append(region.translate(offset))
        if regions and not repaint(self, *regions):  # (drawn in the frame under way: the App's flush of its snapshots)
            self.refresh(*regions)  # on no screen yet: Textual's way

    @property
    def _structure(self) -> int:
        """DataTable's change counter without our cell updates: moves when anything else changed."""
        return self._update_count - self._cell_bumps

    @property
    def ordered_rows(self) -> list[Row]:
        """DataTable's, rebuilt only when the rows change: DataTable keys it on the counter every cell update
        bumps, and each update's repaint looks the row's place up in it (a list of every row, per cell)."""
        key = (self.row_count, self._structure)
        if self._ordered is None or self._ordered[0] != key:
            self._ordered = (key, DataTable.ordered_rows.fget(self))  # type: ignore[attr-defined]
        return self._ordered[1]

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        """DataTable's (each line's row), rebuilt only when the rows change: DataTable keys it on the counter every
        cell update bumps, so every frame that changed a cell walked every row again to find a line's row."""
        key = (self.row_count, self._structure)
        if self._line_rows is None or self._line_rows[0] != key:
            self._line_rows = (key, DataTable._y_offsets.fget(self))  # type: ignore[attr-defined]
        return self._line_rows[1]

    def _get_row_renderables(self, row_index: int) -> RowRenderables:
        """DataTable's (its cells formatted for drawing), kept per row version: DataTable keys them on the counter
        that every cell update bumps, so each changed cell formatted every visible row again."""
        row_key = None if row_index == -1 else self._row_locations.get_key(row_index)
        key = (row_index, row_key, self._structure, self._row_versions.get(row_key, 0) if row_key else 0)
        renderables = self._own_renderables.get(key)
        if renderables is None:
            renderables = self._own_renderables[key] = self._compute_row_renderables(row_index)
        return renderables

    def _get_row_region(self, row_index: int) -> Region:
        """DataTable's, with the rows' tops kept per row structure (DataTable adds up the heights of every row
        above, per cell update)."""
        if not self.is_valid_row_index(row_index):
            return Region(0, 0, 0, 0)
        row = self.ordered_rows[row_index]
        row_width = self._column_widths()[1]
        y = self._tops()[row_index] + (self.header_height if self.show_header else 0)
        return Region(0, y, max(self.size.width, row_width), row.height)

    def _tops(self) -> list[int]:
        """Each row's y below the header, in order."""
        if self._row_tops is None or self._row_tops[0] != self._structure:
            tops, y = [], 0
            for row in self.ordered_rows:
                tops.append(y)
                y += row.height
            self._row_tops = (self._structure, tops)
        return self._row_tops[1]

    def notify_style_update(self) -> None:
        self._own_cells.clear()
        self._own_rows.clear()
        self._own_lines.clear()
        self._own_renderables.clear()
        self._row_styles.clear()
        self._padded.clear()
        self._layers.clear()
        self._row_contexts.clear()
        self._plain_lines.clear()
        self._drawn_cells = None
        super().notify_style_update()

    def _get_row_style(self, row_index: int, base_style: Style) -> Style:
        kind = -1 if row_index == -1 else -2 if row_index < self.fixed_rows else row_index % 2
        key = (kind, base_style, self.zebra_stripes, self._pseudo_class_state)
        style = self._row_styles.get(key)
        if style is None:
            style = self._row_styles[key] = super()._get_row_style(row_index, base_style)
        return style

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        row_key = self._header_row_key if row_index == -1 else self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        # keyed by what the cell shows, so a value seen before in this row (a GPU utilisation going back to
        # 93 %) is not rendered again
        value = (
            None
            if row_index == -1 or row_key is None or column_key is None
            else self._data.get(row_key, {}).get(column_key)
        )
        key = (
            row_key,
            column_key,
            row_index,
            column_index,
            base_style,
            width,
            cursor,
            hover,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self._structure,
            _value_key(value),
        )
        lines = self._own_cells.get(key)
        if lines is None:
            self.cell_renders += 1
            lines = self._own_cells[key] = super()._render_cell(
                row_index, column_index, base_style, width, cursor, hover
            )
        return lines

    def _render_line_in_row(
        self, row_key: RowKey, line_no: int, base_style: Style, cursor_location: Coordinate, hover_location: Coordinate
    ) -> tuple[SegmentLines, SegmentLines]:
        key = (
            row_key,
            line_no,
            base_style,
            cursor_location,
            hover_location,
            self.cursor_type,
            self.show_cursor,
            self._show_hover_cursor,
            self._pseudo_class_state,
            self._structure,
            self._row_versions.get(row_key, 0),
        )
        pair = self._own_rows.get(key)
        if pair is None:
            pair = self._own_rows[key] = super()._render_line_in_row(
                row_key, line_no, base_style, cursor_location, hover_location
            )
        return pair

    def render_lines(self, crop: Region) -> list[Strip]:
        # the widget's style looked up once for the lines of one paint (DataTable looks it up per line, walking
        # the widget's ancestors each time), and the table's state with it (_paint_state)
        self._paint_style = self.rich_style
        try:
            look = self._plain_look()
            if look is None:
                return super().render_lines(crop)
            self._pseudo_class_state = self.get_pseudo_class_state()  # DataTable.render_lines's
            return self._render_plain(crop, *look)
        finally:
            self._paint_style = self._paint = None

    # -- the widget's lines without Textual's styles cache ---------------------------------------------------
    # Textual's styles cache (Widget.render_lines) sends each line drawn through its general path (border, padding,
    # outline, tint, opacity, hatch: ~40 style lookups), copies it into a new Strip and passes it through the App's
    # line filters into a third. With none of those styles set, a line is the table's own line, filtered: it is
    # made once per line the table draws anew (a changed row) and kept while the table hands the same line back.
    # tests/app/test_fleet_render.py compares these lines with a plain DataTable's, which go through the cache.

    def _plain_look(self) -> tuple[int, int, Style, Color, tuple[LineFilter, ...]] | None:
        """(width, height, the content's background style, background, the App's line filters) when the widget's
        styles leave its lines as it draws them; None when they do not (Textual's styles cache draws them then)."""
        if not draws_own_lines_only(self):
            return None
        size = self.region.size
        if self.auto_links:  # Textual restyles the hovered link: never in this table (its cells carry no @click)
            hover = self.hover_style
            if hover._link_id and hover._meta and "@click" in hover.meta:
                return None
        base_background, background = self.background_colors
        inner = VisualStyle(background=base_background + background).rich_style  # the styles cache's "inner"
        return size.width, size.height, inner, background, tuple(self.app.get_line_filters())

    def _render_plain(
        self, crop: Region, width: int, height: int, inner: Style, background: Color, filters: tuple[LineFilter, ...]
    ) -> list[Strip]:
        """The lines of ``crop`` as Textual's styles cache makes them for a widget with no styles of its own to
        draw: the line, as wide as the widget, through the App's line filters, cut to the crop's columns."""
        look = (width, inner, background, filters)
        made = self._plain_lines
        if made.get(-1) != look:  # anything else these lines depend on changed: every line made again
            made.clear()
            made[-1] = look
        render_line = self.render_line
        strips = []
        for y in crop.line_range:
            line = render_line(y) if y < height else Strip.blank(width, inner)
            kept = made.get(y)
            if kept is not None and kept[0] is line:
                strips.append(kept[1])
                continue
            strip = filtered(line.adjust_cell_length(width, inner), filters, background)
            made[y] = (line, strip)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _paint_state(self) -> _Paint:
        """What every line drawn depends on, read once per paint (reactives and the widget's size, each a walk
        through Textual's descriptors, were read several times per line)."""
        paint = self._paint
        if paint is None:
            paint = _Paint(
                self.size.width,
                self.scroll_offset,
                self.cursor_coordinate,
                self.hover_coordinate,
                self.cursor_type,
                self.show_cursor,
                self._show_hover_cursor,
                self._pseudo_class_state,
                self._structure,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
            if self._paint_style is not None:  # inside a paint: nothing changes until it ends
                self._paint = paint
        return paint

    def render_line(self, y: int) -> Strip:
        base_style = self._paint_style
        if base_style is None or self.fixed_rows:
            return super().render_line(y)
        paint = self._paint_state()
        scroll_x, scroll_y = paint.scroll
        if y >= (self.header_height if self.show_header else 0):  # DataTable's: the header stays, rows scroll
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + paint.width, base_style)

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        try:
            row_key, line_no = self._get_offsets(y)
        except LookupError:
            return super()._render_line(y, x1, x2, base_style)
        paint = self._paint_state()
        key = (y, x1, x2, base_style, paint, row_key, self._row_versions.get(row_key, 0))
        strip = self._own_lines.get(key)
        if strip is None:
            if row_key is self._header_row_key or line_no or not self._drawn_directly:
                strip = super()._render_line(y, x1, x2, base_style)
            else:
                strip = self._draw_row(row_key, x1, x2, base_style)
            self._own_lines[key] = strip
        return strip

    # -- a body row drawn straight into a Strip ----------------------------------------------------------
    # DataTable sends every cell of a changed row through Rich (Styled(Padding(cell)) rendered by the console)
    # with the row's place, stripe, cursor and hover baked into each cell's style, so a row that changed one
    # figure costs a Rich render per cell. What a cell draws is its padded text with those styles layered on
    # (Segment.apply_style: the row's style + the cell's own + the cursor's): the padded text is kept per
    # column width and value, the layered styles per row and column, and a row is put together from them.
    # Its characters and their styles are DataTable's own (tests/app/test_fleet_render.py compares every line).

    @property
    def _drawn_directly(self) -> bool:
        """The table as this view sets it up (row cursor, one-line rows, no fixed columns, no row labels): the
        only shape the direct drawing knows; anything else goes through DataTable's own."""
        return (
            self.cursor_type == "row"
            and not self.fixed_columns
            and not self.fixed_rows
            and not (self._labelled_row_exists and self.show_row_labels)
        )

    def _padded_cell(self, value: object, width: int, height: int, pad: int) -> list[Segment]:
        """The cell's one line as DataTable renders it before its styles go on: ``Padding(cell)`` at ``width``."""
        key = (width, height, pad, _value_key(value))
        segments = self._padded.get(key)
        if segments is not None:
            return segments
        self.cell_renders += 1
        room = width - 2 * pad
        if (
            type(value) is str
            and height == 1
            and value.isprintable()
            and "[" not in value  # markup, for DataTable
            and ":" not in value  # an emoji code, for Rich's markup
            and cell_len(value) <= room
        ):
            # a plain string read as markup with nothing to read is a Text of itself with no style: the padded line
            # is that text and spaces, all of one (null) style
            segments = [Segment(" " * pad + value + " " * (room - cell_len(value) + pad))]
        else:
            cell = _EMPTY_TEXT if value is None else default_cell_formatter(value, wrap=height != 1, height=height)
            options = self.app.console_options.update_dimensions(width, height)
            if height == 1:
                options = options.update(no_wrap=True)
            segments = self.app.console.render_lines(Padding(cell or _EMPTY_TEXT, (0, pad)), options)[0]
        self._padded[key] = segments
        return segments

    def _layered(self, row_style: Style, row_index: int, column_index: int, component: Style) -> Style:
        """The style DataTable puts before a cell's own: the row's, the cell's place (for the mouse), the cursor's."""
        key = (row_style, row_index, column_index, component)
        style = self._layers.get(key)
        if style is None:
            if len(self._layers) > 4096:
                self._layers.clear()
            style = row_style + Style.from_meta({"row": row_index, "column": column_index})
            style = self._layers[key] = style + component
        return style

    def _column_widths(self) -> tuple[list[tuple[int, ColumnKey, int]], int]:
        """(index, key, width drawn) of each column in order, and the table's width: kept per table structure
        (DataTable works them out from the columns' reactive settings for every row it draws)."""
        key = (self._structure, self.cell_padding, self._row_label_column_width)
        if self._widths is None or self._widths[0] != key:
            columns = [(i, column.key, column.get_render_width(self)) for i, column in enumerate(self.ordered_columns)]
            self._widths = (key, columns, sum(width for _, _, width in columns) + self._row_label_column_width)
        return self._widths[1], self._widths[2]

    def _row_context(self, row_index: int, base_style: Style, paint: _Paint) -> tuple[list[Style], Style, Style]:
        """The styles a body row's cells are drawn with: before each column's own (the row's, the cell's place for
        the mouse, the cursor's), after them (the cursor's, where its colours win), and the row's style carried to
        the table's edge; kept per row place, stripe, cursor and hover."""
        cursor_type, cursor, hover = paint.cursor_type, paint.cursor, paint.hover
        hovered = self._should_highlight(hover, Coordinate(row_index, 0), cursor_type)
        at_cursor = self._should_highlight(cursor, Coordinate(row_index, 0), cursor_type)
        row_style = self._get_row_style(row_index, base_style)
        columns, _ = self._column_widths()
        key = (row_style, row_index, hovered, at_cursor, row_index == cursor.row, paint, len(columns))
        context = self._row_contexts.get(key)
        if context is not None:
            return context
        show_cursor, show_hover = paint.show_cursor, paint.show_hover
        component, post = self._get_styles_to_render_cell(
            False,
            False,
            False,
            hovered,
            at_cursor,
            show_cursor,
            show_hover,
            paint.foreground_css,
            paint.background_css,
        )
        pres = [self._layered(row_style, row_index, column_index, component) for column_index, _, _ in columns]
        edge, _ = self._get_styles_to_render_cell(
            False, False, False, hovered, row_index == cursor.row, show_cursor, show_hover, False, False
        )
        edge = row_style + edge + Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        if len(self._row_contexts) > 1024:
            self._row_contexts.clear()
        context = self._row_contexts[key] = (pres, post, edge)
        return context

    def _draw_row(self, row_key: RowKey, x1: int, x2: int, base_style: Style) -> Strip:
        row_index = self._row_locations.get(row_key)
        row = self.rows.get(row_key)
        paint = self._paint_state()
        width = paint.width
        if row_index is None or row is None:
            return Strip.blank(width, base_style)
        pres, post, edge = self._row_context(row_index, base_style, paint)
        data = self._data.get(row_key, {})
        line: list[Segment] = []
        extend = line.extend
        columns, table_width = self._column_widths()
        height, pad = row.height, self._widths[0][1] if self._widths else self.cell_padding
        drawn = self._drawn_cells
        if drawn is None or drawn[0] != paint.structure:
            drawn = self._drawn_cells = (paint.structure, {})
        for (_, column_key, cell_width), pre in zip(columns, pres):
            value = data.get(column_key)
            # the cell as drawn last time, if nothing it depends on changed (the value compared by identity:
            # a changed cell is a new object in the table, and the entry holds the old one)
            kept = drawn[1].get((row_key, column_key))
            dims = (cell_width, height, pad)
            if kept is not None and kept[0] is value and kept[1] is pre and kept[2] is post and kept[3] == dims:
                extend(kept[4])
                continue
            segments = []
            for text, style, _ in self._padded_cell(value, cell_width, height, pad):
                style = pre + style  # Segment.apply_style: pre_style, the cell's own, then post_style
                segments.append(Segment(text, style + post if post and style else post or style))
            # simplified per cell: a cell's style carries its column (meta), so no two cells' segments merge
            segments = list(Segment.simplify(segments))
            drawn[1][row_key, column_key] = (value, pre, post, dims, segments)
            extend(segments)
        # the row's style carried out to the table's right edge, as DataTable does
        line.append(Segment(" " * max(0, width - table_width), edge))
        if x1 == 0 and x2 == width >= table_width:  # the whole line, as wide as the table shows it: no crop
            return Strip(line, width)  # (simplified: each cell is, and no two cells' segments share a style)
        return Strip(line_crop(line, x1, x2, width)).adjust_cell_length(width, base_style).simplify()
