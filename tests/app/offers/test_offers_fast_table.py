"""Issue 36: a filter keystroke at 10,000 offers cost ~150 ms of CPU, half of it DataTable drawing each visible
cell through Rich's console and a third adding 200 rows one ``add_row`` at a time and measuring every cell on
idle. OffersView now fills the rows at once, measures nothing (its columns have widths) and draws its one-line
cells itself (``OffersView.fast``). What must hold: the screen is the one DataTable's own paths draw, cell for
cell, style and mouse metadata included (80x24 and 160x48; filtered, misfits cut to the Fit column, cursor moved,
hovered, sorted, scrolled, empty), and the cursor, a click and ``enter`` on a filtered row pick that row's offer.
The fast paths override DataTable internals: the last test fails loudly when Textual renames them."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Checkbox, DataTable, Input, Label

from app.panes.offers import OffersPane
from services.offers.models import FetchResult
from services.offers.ranking import RunSpec
from tests.app.helpers import wait_for
from tests.app.offers.test_many_offers import many_offers
from widgets.offers_view import MAX_ROWS, OffersView

OFFERS = many_offers(1_500)  # more than the table holds and than the pane filters on every key (DEBOUNCE_OVER)


async def fetch_many(spot):
    return FetchResult(OFFERS)


class FilterApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.rents: list[Any] = []
        self.highlighted: list[tuple[int, Any]] = []

    def compose(self) -> ComposeResult:
        yield OffersPane(run=RunSpec(model="Qwen/Qwen3-8B"), fetcher=fetch_many)

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        self.highlighted.append((message.cursor_row, message.row_key.value))

    def on_offers_pane_rent_requested(self, message: OffersPane.RentRequested) -> None:
        self.rents.append(message.ranked)


@pytest.fixture(autouse=True)
def no_user_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))


async def filtered(pilot, price: str, misfits: bool = False) -> tuple[OffersPane, OffersView]:
    app = pilot.app
    pane, table = app.query_one(OffersPane), app.query_one(OffersView)
    pane.spot_rates = {}  # no settings.toml read
    pane.focus()
    await pilot.press("r")
    await wait_for(pilot, lambda: bool(pane.ranked))
    app.query_one("#of-misfits", Checkbox).value = misfits
    field = app.query_one("#of-max-price", Input)
    field.focus()
    for ch in price:  # typed, as a user filters
        await pilot.press("full_stop" if ch == "." else ch)
    await wait_for(pilot, lambda: pane._pending is None)
    await pilot.pause()
    return pane, table


def table_cells(table: OffersView) -> list[list[tuple[str, Any]]]:
    """Every line of the table as (character, style) per cell; a style's equality covers its mouse metadata."""
    return [
        [(ch, seg.style) for seg in table.render_line(y) for ch in seg.text if not seg.control]
        for y in range(table.size.height)
    ]


STATES = [  # (size, max $/hr typed, misfits shown, keys in the table, sort by)
    ((80, 24), "2.5", True, ["down", "down", "down"], None),
    ((160, 48), "3", True, ["pagedown", "pagedown", "down"], "price"),
    ((80, 24), "3", False, ["pagedown", "down"], "price"),
    ((160, 48), "0.01", False, [], None),
]


async def screen(monkeypatch, fast: bool, size, price, misfits, keys, sort) -> tuple[str, list, list, int, str | None]:
    monkeypatch.setattr(OffersView, "fast", fast)
    app = FilterApp()
    async with app.run_test(size=size) as pilot:
        pane, table = await filtered(pilot, price, misfits)
        if sort:
            table.sort_by(sort)
        table.focus()
        for key in keys:
            await pilot.press(key)
        if table.row_count:
            await pilot.hover(OffersView, offset=(3, 4))  # the hover cursor on a row
        await pilot.pause()
        await pilot.pause()
        cursor = None
        if table.row_count:
            cursor = table.ranked_for(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        offer = cursor and cursor.offer.id
        return app.export_screenshot(), table_cells(table), app.highlighted, table.cursor_row, offer


@pytest.mark.parametrize(("size", "price", "misfits", "keys", "sort"), STATES)
async def test_the_fast_table_draws_what_datatable_draws(monkeypatch, size, price, misfits, keys, sort):
    ours = await screen(monkeypatch, True, size, price, misfits, keys, sort)
    reference = await screen(monkeypatch, False, size, price, misfits, keys, sort)
    assert ours[1] == reference[1]  # the table, cell for cell with styles and metadata
    assert ours[0] == reference[0]  # the whole screen
    assert ours[2:] == reference[2:]  # the same rows highlighted on the way, the cursor on the same offer
    if price == "0.01":
        assert ours[3:] == (0, None)
    else:
        assert ours[2] and ours[4] is not None


async def test_a_filtered_row_rents_the_offer_it_shows():
    app = FilterApp()
    async with app.run_test(size=(160, 48)) as pilot:
        pane, table = await filtered(pilot, "2.5")
        assert 0 < table.row_count < len(OFFERS)
        await pilot.click(OffersView, offset=(3, 1 + 4))  # the header, then the fifth row
        await pilot.pause()
        assert table.cursor_row == 4
        table.focus()
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: bool(app.rents))
        chosen = app.rents[-1]
        assert chosen is table.ordered()[5]
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        assert tuple(str(table.get_cell(key, column)) for column in ("provider", "gpu", "price")) == (
            chosen.offer.provider,
            chosen.offer.gpu_type,
            f"{chosen.offer.price_hr:.2f}",
        )
        assert chosen.offer.price_hr <= 2.5 and chosen.fits


async def test_an_empty_filter_says_why():
    app = FilterApp()
    async with app.run_test(size=(80, 24)) as pilot:
        pane, table = await filtered(pilot, "0.01")
        assert table.row_count == 0
        assert "No offer fits the filters" in str(app.query_one("#of-best", Label).render())
        await pilot.press("backspace", "backspace", "backspace", "backspace")  # "0.01" erased: every offer again
        await wait_for(pilot, lambda: table.row_count > 0)
        assert table.row_count == min(MAX_ROWS, len(pane.ranked)) and len(pane.ranked) > MAX_ROWS


def test_the_datatable_internals_the_fast_paths_rely_on_are_there():
    """OffersView overrides these DataTable methods and fills these attributes itself: a Textual that renames
    one would leave the table slow (an override never called) or broken; say so here first."""
    for name in ("_render_cell", "_update_dimensions", "_get_styles_to_render_cell", "_highlight_cursor"):
        assert callable(getattr(DataTable, name, None)), name
    table = DataTable()
    for name in (
        "_row_locations",
        "_column_locations",
        "_data",
        "rows",
        "_new_rows",
        "_require_update_dimensions",
        "_update_count",
        "_cell_render_cache",
        "_show_hover_cursor",
    ):
        assert hasattr(table, name), name


async def test_every_cell_is_drawn_as_datatable_draws_it_at_any_width():
    """Each cell of a filtered table (misfits' "✗ reason" included) at widths narrower than
    its text (cut), exact and wider, under the cursor, the hover cursor and neither: the same segments' cells."""
    app = FilterApp()
    async with app.run_test(size=(160, 48)) as pilot:
        pane, table = await filtered(pilot, "1", misfits=True)  # ~100 fit, then misfits
        await pilot.hover(OffersView, offset=(3, 4))
        texts = set()
        for row in range(0, table.row_count, 7):
            style = table._get_row_style(row, table.rich_style)
            for column in range(len(table.columns)):
                cell = table.get_cell_at((row, column))
                texts.add(cell.plain)
                n = len(cell.plain)
                for width in {1, 2, 3, n, n + 1, n + 2, n + 5}:
                    for cursor, hover in ((False, False), (True, False), (False, True)):
                        table._cell_render_cache.clear()
                        ours = table._render_cell(row, column, style, width, cursor, hover)
                        table._cell_render_cache.clear()
                        theirs = DataTable._render_cell(table, row, column, style, width, cursor, hover)
                        assert [[(ch, s.style) for s in line for ch in s.text] for line in ours] == [
                            [(ch, s.style) for s in line for ch in s.text] for line in theirs
                        ], (cell.plain, width, cursor, hover)
        assert any("✗" in t for t in texts), texts
