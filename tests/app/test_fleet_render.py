"""The fleet table's render caches (widgets/fleet_view.py): a changed cell is the only cell rendered again, and
what the table draws is always what a plain Textual DataTable draws for the same rows, however the table got
there (cells updated, rows added and removed, the cursor moved, the terminal resized, the theme changed).

The reference is a real DataTable beside it in the same App, given the same columns and rows; the two are
compared line by line (text and style of every segment).
"""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.widgets import DataTable

from services.models import (
    Alert,
    GpuSample,
    HostSample,
    Pod,
    PodKind,
    PodSnapshot,
    PodState,
    PodStatus,
    RunProgress,
    Sample,
    Severity,
)
from tests.app.helpers import wait_for
from widgets.fleet_view import FleetView

GIB = 1024**3


def snapshot(name: str, step: int, util: float = 90.0, alerts: tuple[Alert, ...] = ()) -> PodSnapshot:
    pod = Pod(name=name, kind=PodKind.SSH, host="10.0.0.1", price_per_hr=23.92)
    gpus = tuple(GpuSample(i, "NVIDIA H100 80GB HBM3", util, 60 * GIB, 80 * GIB, 600.0, 60.0) for i in range(8))
    run = RunProgress(
        step=step,
        max_steps=100,
        loss=0.5 / step,
        tokens_per_s=20_000.0 + step,
        loss_history=tuple(0.5 / s for s in range(1, step + 1)),
    )
    return PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "via nvml", since=0.0),
        history=(Sample(t=1.0, gpus=gpus, host=HostSample()),),
        run=run,
        alerts=alerts,
    )


class Pair(App[None]):
    """The fleet table above a plain DataTable of the same width (neither focused: the focus colours the cursor)."""

    AUTO_FOCUS = None
    CSS = "FleetView, DataTable { height: 8; }"

    def compose(self) -> ComposeResult:
        yield FleetView(id="fleet")
        yield DataTable(id="plain", cursor_type="row", zebra_stripes=True)


def copy_to_plain(fleet: FleetView, plain: DataTable) -> None:
    plain.clear(columns=True)
    for key, column in fleet.columns.items():
        plain.add_column(column.label, width=column.width, key=key.value)
    for row_key in fleet.rows:
        plain.add_row(*fleet.get_row(row_key), key=row_key.value)
    plain.move_cursor(row=fleet.cursor_row, animate=False)
    plain.hover_coordinate = fleet.hover_coordinate
    plain._show_hover_cursor = fleet._show_hover_cursor


def drawn(table: DataTable) -> list[list[tuple[str, object]]]:
    return [[(seg.text, seg.style) for seg in table.render_line(y)] for y in range(table.size.height)]


def painted(table: DataTable) -> list[list[tuple[str, object]]]:
    """The lines as a paint gets them (the widget's render_lines: its own line cache, refreshed where the table
    marked itself dirty, and its styles on top)."""
    return [[(seg.text, seg.style) for seg in strip] for strip in table.render_lines(Region(0, 0, *table.size))]


async def assert_draws_like_plain(app: Pair, pilot) -> None:
    fleet, plain = app.query_one(FleetView), app.query_one("#plain", DataTable)
    copy_to_plain(fleet, plain)
    await pilot.pause()
    plain.scroll_to(y=fleet.scroll_offset.y, animate=False, immediate=True)
    await pilot.pause()
    assert plain.scroll_offset == fleet.scroll_offset
    assert not fleet.has_focus and not plain.has_focus
    lines = drawn(fleet)
    assert len(lines) == 8 and any(text.strip() for line in lines for text, _ in line)
    assert lines == drawn(plain)
    assert painted(fleet) == painted(plain)


def render_all(fleet: FleetView) -> None:
    fleet.render_lines(Region(0, 0, *fleet.size))


async def test_an_updated_cell_is_the_only_cell_rendered_again() -> None:
    app = Pair()
    async with app.run_test(size=(150, 20)) as pilot:
        fleet = app.query_one(FleetView)
        for i, name in enumerate(("h100-a", "h100-b", "h100-c")):
            fleet.update_pod(snapshot(name, 10 + i))
        await pilot.pause()
        render_all(fleet)  # every visible cell rendered once
        before = fleet.cell_renders
        render_all(fleet)
        assert fleet.cell_renders == before  # nothing changed: nothing rendered

        fleet.update_pod(snapshot("h100-b", 14))  # new figures: the step, loss and tok/s cells
        render_all(fleet)
        assert 1 <= fleet.cell_renders - before <= 3, fleet.cell_renders - before
        assert "14/100" in "".join(text for text, _ in drawn(fleet)[2])
        before = fleet.cell_renders
        fleet.update_pod(snapshot("h100-a", 12))  # figures another row shows already: drawn from what it drew
        render_all(fleet)
        assert fleet.cell_renders == before
        assert "12/100" in "".join(text for text, _ in drawn(fleet)[1])


async def test_the_table_draws_what_a_plain_datatable_draws_after_every_kind_of_change() -> None:
    app = Pair()
    async with app.run_test(size=(150, 20)) as pilot:
        fleet = app.query_one(FleetView)
        for i, name in enumerate(("h100-a", "h100-b", "h100-c")):
            fleet.update_pod(snapshot(name, 10 + i))
        await pilot.pause()
        drawn(fleet)  # fill the caches with what is about to go stale
        await assert_draws_like_plain(app, pilot)

        fleet.update_pod(snapshot("h100-a", 11, util=93.0))  # cells updated in place
        alert = Alert(id="disk", severity=Severity.WARNING, title="Disk 96% full", message="disk", since=0.0)
        fleet.update_pod(snapshot("h100-c", 12, alerts=(alert,)))  # a Text cell (styled alert)
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)
        assert any("Disk 96% full" in "".join(t for t, _ in line) for line in drawn(fleet))

        fleet.update_pod(snapshot("h100-a", 11, util=90.0))  # back to a value seen before
        fleet.move_cursor(row=2, animate=False)
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)

        fleet.hover_coordinate = Coordinate(1, 0)  # the mouse over another row
        fleet._show_hover_cursor = True
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)
        fleet._show_hover_cursor = False

        # strings the direct drawing hands to Rich: cut to the column, an emoji code, markup, a wide character
        fleet.update_cell("h100-a", "step", "1234567890/1234567890")
        fleet.update_cell("h100-b", "tps", ":smile: 20,000")
        fleet.update_cell("h100-c", "util", "[b]93%[/b] ×8")
        fleet.update_cell("h100-b", "price", "日本語")
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)

        fleet.update_pod(snapshot("h100-new", 1))  # a row added, one removed
        fleet.remove_pod("h100-b")
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)

        for i in range(12):  # more rows than the table shows, scrolled down
            fleet.update_pod(snapshot(f"h100-more{i:02d}", 20 + i))
        await pilot.pause()
        fleet.scroll_to(y=5, animate=False, immediate=True)
        await pilot.pause()
        assert fleet.scroll_offset.y == 5
        await assert_draws_like_plain(app, pilot)
        fleet.update_pod(snapshot("h100-more05", 40))  # a row scrolled into view changes
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)
        assert any("40/100" in "".join(t for t, _ in line) for line in painted(fleet))
        for i in range(12):
            fleet.remove_pod(f"h100-more{i:02d}")
        await pilot.pause()

        await pilot.resize_terminal(90, 20)  # a narrower table: columns dropped, rows re-added
        await wait_for(pilot, lambda: "loss" not in fleet.shown_columns)
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)

        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)
        fleet.update_pod(replace(snapshot("h100-c", 13), alerts=()))
        await pilot.pause()
        await assert_draws_like_plain(app, pilot)
        assert not any("Disk 96% full" in "".join(t for t, _ in line) for line in drawn(fleet))
        assert isinstance(fleet.get_cell("h100-c", "state"), Text)

        # the lines above were painted without Textual's styles cache (the table has no styles of its own to draw);
        # with a border, padding and a tint the cache draws them, and without them again the table itself
        assert fleet._plain_look() is not None
        plain = app.query_one("#plain", DataTable)
        for table in (fleet, plain):
            table.styles.border = ("round", "red")
            table.styles.padding = (0, 1)
            table.styles.tint = "blue 20%"
        await pilot.pause()
        assert fleet._plain_look() is None
        assert painted(fleet) == painted(plain)
        for table in (fleet, plain):
            table.styles.border = ("none", "red")
            table.styles.padding = 0
            table.styles.tint = "transparent"
        fleet.update_pod(snapshot("h100-c", 14))
        await pilot.pause()
        assert fleet._plain_look() is not None
        await assert_draws_like_plain(app, pilot)


async def test_a_pod_name_with_brackets_is_drawn_as_written() -> None:
    """pods.toml allows any name; DataTable reads a plain str cell as markup ('[bold]' vanished, '[/x]' raised)."""
    app = Pair()
    async with app.run_test(size=(150, 20)) as pilot:
        fleet = app.query_one(FleetView)
        for name in ("h100[beta]", "a[bold]b", "c[/x]"):
            fleet.update_pod(snapshot(name, 10))
        await pilot.pause()
        lines = ["".join(text for text, _ in line) for line in drawn(fleet)]
        for name in ("h100[beta]", "a[bold]b", "c[/x]"):
            assert any(name in line for line in lines), (name, lines)
