"""The offers table: one row per ranked offer, sorted by Est. $ by default; clicking a header sorts by
that column (again: reverses). Misfits are marked with their reason. No I/O: fed ``Ranked`` rows. A spot row's Est. $
is the range "if not
preempted – expected" (services/offers/spot_risk.py; sorted by the expected); its Spot cell says "spot ⚠" when the
provider's spot is going away (the pane's explanation line says why).

A narrow pane drops the low-value columns first (region, VRAM, estimated time, spot): provider, GPU, count,
$/hr, Est. $ (and whatever column the rows are sorted by) and the fit stay, whole, never cut to "Pr…".

At most :data:`MAX_ROWS` rows are in the table: the first of all the rows in the current order (a header
sorts every row, then the first ``MAX_ROWS`` show). A DataTable's cost grows with its rows (10,000 rows took
3.7 s to fill on each filter keystroke; 200 take ~40 ms); nobody reads past a few hundred, and the pane says
how many are left out (:attr:`OffersView.hidden`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.widgets import DataTable
from textual.widgets._data_table import Row, RowKey

from services.offers.ranking import Ranked
from widgets.columns import content_width, fit_columns
from widgets.format import duration

COLUMNS: tuple[tuple[str, str, Callable[[Ranked], Any]], ...] = (  # (attrgetter: a header sorts 10,000 rows)
    ("provider", "Provider", attrgetter("offer.provider")),
    ("gpu", "GPU", attrgetter("offer.gpu_type")),
    ("count", "#", attrgetter("offer.gpu_count")),
    ("vram", "VRAM/GPU", attrgetter("offer.vram_gb")),
    ("price", "$/hr", attrgetter("offer.price_hr")),
    ("spot", "Spot", attrgetter("offer.spot")),
    ("region", "Region", attrgetter("offer.region")),
    ("time", "Est. time", attrgetter("est_hours")),
    ("cost", "Est. $", attrgetter("est_cost")),
    ("fit", "Fit", attrgetter("fits")),
)
KEYS = {key: get for key, _, get in COLUMNS}
COLUMN_KEYS = tuple(key for key, _, _ in COLUMNS)
LABELS = {key: label for key, label, _ in COLUMNS}
# kept longest first: what the offer is and what the run costs on it; where and how are extras
# (Spot before the estimated time and VRAM: a spot row's price is not what it ends up costing; the column the
# rows are sorted by always stays: docs/architecture.md "At 80 columns")
PRIORITY = {
    "provider": 9,
    "gpu": 9,
    "fit": 9,
    "count": 8,
    "price": 8,
    "cost": 8,
    "spot": 7,
    "time": 6,
    "vram": 5,
    "region": 2,
}
FIT_MIN = 12  # a misfit's reason may be long: it takes what is left, at least this
# Where the columns above priority 6 do not all fit (80 columns), the provider cell is cut to this ("…") and a
# misfit's reason counts as "Fit" wide (it runs to the table's edge): Spot stays, with `m` too.
PROVIDER_NARROW = 12
MAX_ROWS = 200  # rows in the table at most: the first of all rows in the current order


def cost_text(r: Ranked) -> str:
    """ "12.40" on demand; "10.80–12.40" on spot: no preemption – expected (one figure when both round alike)."""
    low, high = f"{r.base_cost:.2f}", f"{r.est_cost:.2f}"
    return f"{low}–{high}" if r.risk is not None and low != high else high


def spot_text(r: Ranked) -> str:
    if not r.offer.spot:
        return ""
    return "spot ⚠" if r.risk is not None and r.risk.note else "spot"


def cells(r: Ranked) -> list[Any]:
    o = r.offer
    fit = Text("ok", style="green") if r.fits else Text(f"✗ {r.reason}", style="red")
    return [
        o.provider + (f" ({o.host})" if o.host else ""),
        o.gpu_type,
        str(o.gpu_count),
        f"{o.vram_gb:.0f} GB",
        f"{o.price_hr:.2f}",
        spot_text(r),
        o.region,
        duration(r.est_hours * 3600) + (" ✓" if r.measured else ""),
        cost_text(r),
        fit,
    ]


class _Cell(Text):
    """A cell's text with no ``__rich_measure__``: the view gives every column its width (:meth:`OffersView.
    _render_rows` measures the plain text once), so DataTable's measuring of each new cell through a Rich
    console (~45 µs a cell, 2,000 cells a refill: the largest share of a filter keystroke's time in
    tests/benchmarks/offers_table.py) is left out; without the method it takes a default it never uses
    (a column given a width keeps it)."""

    __rich_measure__ = None  # type: ignore[assignment]


def _text(cell: Any) -> Text:
    """A cell as the table gets it: text as Rich Text, never read as markup. DataTable parses a str cell as
    markup each time it measures or draws it (~40 % of a refill's time, tests/benchmarks/offers_table.py), and
    a provider's "[beta] eu-1" region showed as " eu-1"."""
    if isinstance(cell, str):
        return _Cell(cell, no_wrap=True, end="")
    return _Cell(cell.plain, style=cell.style, no_wrap=True, end="", spans=cell.spans)


def _plain_line(text: str) -> bool:
    """Whether a cell's text is one line of printable characters (what the fast cell drawing handles)."""
    return text.isprintable()


class OffersView(DataTable):
    """A DataTable whose filling and drawing of rows skip DataTable's general paths where the cells are this
    view's own one-line texts in columns of a given width (``fast``): the rows go in at once rather than one
    ``add_row`` each (each re-validates the cursor), nothing is measured on idle (every column has its width),
    and a cell is drawn as padding + its text cropped to the column rather than through Rich's console
    (~0.2 ms a cell: 300 cells on a 160x48 screen were half of a filter keystroke's time in
    tests/benchmarks/offers_table.py). ``fast = False`` takes DataTable's own paths: tests/app/offers/
    test_offers_fast_table.py pins the screens of both equal, cell for cell."""

    HELP_WHERE = "the offers table"  # what the help calls it
    DEFAULT_CSS = "OffersView { height: 1fr; }"
    fast = True

    def __init__(self, *, max_rows: int | None = MAX_ROWS, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.items: Sequence[Ranked] = []
        self.sort_key, self.descending = "cost", False
        self.shown_columns: list[str] = []
        self._narrow = False  # the provider cells cut (PROVIDER_NARROW)
        self.max_rows = max_rows  # None: every row (the benchmark's baseline)
        self._ordered: Sequence[Ranked] | None = None  # every row in the current order, until items or order change

    @property
    def hidden(self) -> int:
        """How many rows are left out of the table (beyond :attr:`max_rows`)."""
        return len(self.items) - len(self._shown())

    def on_mount(self) -> None:
        self._render_rows()

    def on_resize(self, event: events.Resize) -> None:
        if self._columns_for(self._rows()) != self.shown_columns:
            self._render_rows()

    def show(self, rows: Sequence[Ranked]) -> None:
        """Show these rows (kept, not copied: a ranking builds a row only when it is read)."""
        self.items, self._ordered = rows, None
        self._render_rows()

    def sort_by(self, key: str, descending: bool | None = None) -> None:
        if descending is None:
            descending = not self.descending if key == self.sort_key else False
        self.sort_key, self.descending, self._ordered = key, descending, None
        self._render_rows()

    def ordered(self) -> Sequence[Ranked]:
        """Every row (not only those in the table) in the current order: fits first, each part sorted. Rows
        that come in that order already (``sorted_by``, a ranking's: fits by Est. $, then misfits) are kept as
        they are, and only the rows the table shows are ever built."""
        if self._ordered is None and not self.descending and getattr(self.items, "sorted_by", None) == self.sort_key:
            self._ordered = self.items
        if self._ordered is None:
            get = KEYS[self.sort_key]
            fits = sorted((r for r in self.items if r.fits), key=get, reverse=self.descending)
            self._ordered = fits + sorted((r for r in self.items if not r.fits), key=get, reverse=self.descending)
        return self._ordered

    def _shown(self) -> list[Ranked]:
        rows = self.ordered()
        return list(rows) if self.max_rows is None else list(rows[: self.max_rows])

    def ranked_for(self, row_key: Any) -> Ranked | None:
        """The offer behind a row key (rows are keyed ``index:provider:id:region`` of :meth:`ordered`)."""
        try:
            index = int(str(row_key).split(":", 1)[0])
            return self._shown()[index]
        except (ValueError, IndexError):
            return None

    def _rows(self) -> list[list[Any]]:
        return [cells(r) for r in self._shown()]

    def _widths(self, rows: list[list[Any]]) -> dict[str, int]:
        widths = {key: content_width(LABELS[key], [row[i] for row in rows]) for i, key in enumerate(COLUMN_KEYS)}
        widths["fit"] = min(widths["fit"], FIT_MIN)
        return widths

    def _columns_for(self, rows: list[list[Any]]) -> list[str]:
        return self._layout(rows)[0]

    def _layout(self, rows: list[list[Any]]) -> tuple[list[str], bool]:
        """The columns to show, and whether the provider cells are cut (PROVIDER_NARROW)."""
        available = (self.size.width or self.app.size.width) - 2  # the vertical scrollbar
        priority = {**PRIORITY, self.sort_key: 10}
        widths = self._widths(rows)
        kept = fit_columns(COLUMN_KEYS, widths, priority, available, gap=2 * self.cell_padding)
        if all(k in kept for k in COLUMN_KEYS if priority[k] > 6):
            return kept, False
        narrow = {
            **widths,
            "provider": min(widths["provider"], PROVIDER_NARROW),
            "fit": min(widths["fit"], len(LABELS["fit"])),
        }
        cut = fit_columns(COLUMN_KEYS, narrow, priority, available, gap=2 * self.cell_padding)
        return (cut, True) if len(cut) > len(kept) else (kept, False)

    def _render_rows(self) -> None:
        rows = self._rows()
        kept, narrow = self._layout(rows)
        if narrow:
            for row in rows:
                if cell_len(row[0]) > PROVIDER_NARROW:
                    row[0] = set_cell_size(row[0], PROVIDER_NARROW - 1) + "…"
        index = [COLUMN_KEYS.index(k) for k in kept]
        widths = [content_width(LABELS[key], [row[i] for row in rows]) for key, i in zip(kept, index)]
        if kept != self.shown_columns or narrow != self._narrow:  # a column keeps its widest cell until cleared
            self._narrow = narrow
            self.clear(columns=True)
            self.shown_columns = kept
            for key, width in zip(kept, widths):
                self.add_column(LABELS[key], key=key, width=width)
        else:
            self.clear()
            for column, width in zip(self.ordered_columns, widths):
                column.width = max(column.width, width)
        keyed = [
            ([_text(row[j]) for j in index], f"{i}:{r.offer.provider}:{r.offer.id}:{r.offer.region}")
            for i, (r, row) in enumerate(zip(self._shown(), rows))
        ]
        if not self.fast:
            for cells_, key in keyed:
                self.add_row(*cells_, key=key)
            return
        self._add_rows(keyed)

    def _add_rows(self, keyed: list[tuple[list[Text], str]]) -> None:
        """``add_row`` for each row, done once for all of them: the same table state, the cursor re-validated
        and the first row highlighted once (DataTable re-validates it after every row)."""
        was_empty = self.row_count == 0
        columns = [column.key for column in self.ordered_columns]
        for row_cells, key in keyed:
            row_key = RowKey(key)
            self._row_locations[row_key] = len(self.rows)
            self._data[row_key] = dict(zip(columns, row_cells))
            self.rows[row_key] = Row(row_key, 1)
            self._new_rows.add(row_key)
        if not keyed:
            return
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if was_empty and self.columns and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()
        self._update_count += 1
        self.check_idle()

    def _update_dimensions(self, new_rows: Any) -> None:
        """Every column has its width and every row is one line: no cell to measure, only the size to set."""
        if not self.fast or any(column.auto_width for column in self.columns.values()):
            super()._update_dimensions(new_rows)
            return
        header_height = self.header_height if self.show_header else 0
        self.virtual_size = Size(
            sum(column.get_render_width(self) for column in self.columns.values()) + self._row_label_column_width,
            self._total_row_height + header_height,
        )

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        """A body cell drawn as DataTable draws it (Rich's Padding around the text, cropped to the column, the
        row's style before and the cursor's after), without the console; headers and anything else: DataTable."""
        if not self.fast or row_index < 0 or column_index < 0 or self.fixed_rows or self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        cell = self._data.get(row_key, {}).get(column_key) if row_key is not None and column_key else None
        padding = self.cell_padding
        if not isinstance(cell, _Cell) or cell.spans or not _plain_line(cell.plain) or width <= 2 * padding:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        assert row_key is not None and column_key is not None  # a cell was found under them
        cache_key = (
            row_key,
            column_key,
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        cached = self._cell_render_cache.get(cache_key)
        if cached is not None:
            return cached
        component_style, post_style = self._get_styles_to_render_cell(
            False,
            False,
            False,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        pad_style = pre_style + post_style
        text_style = pre_style + self.app.console.get_style(cell.style) + post_style
        inner = width - 2 * padding
        text = cell.plain
        used = cell_len(text)
        if used > inner:
            text, used = set_cell_size(text, inner), inner
        line = [Segment(" " * padding, pad_style), Segment(text, text_style)]
        if used < inner:
            line.append(Segment(" " * (inner - used), pad_style))
        line.append(Segment(" " * padding, pad_style))
        lines = [line]
        self._cell_render_cache[cache_key] = lines
        return lines

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))
