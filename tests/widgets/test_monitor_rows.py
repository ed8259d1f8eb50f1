"""The Monitor pane's one-widget rows (widgets/monitor_rows.py) place their parts exactly where Textual's own
layout placed the labels and graphs they replace, so they line up with each other and with what users saw before:
checked against a real Textual horizontal layout (fixed widths, ``1fr`` graphs with a one-cell margin) and a real
two-column grid, over many widths."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.containers import Grid, Horizontal
from textual.geometry import Region
from textual.widgets import Label

from widgets.monitor_pane import MonitorPane
from widgets.monitor_rows import FIGURE_WIDTH, INDEX_WIDTH, METRICS, columns, first_line, fit_left, fit_right

WIDTHS = range(36, 222, 9)


class LayoutApp(App[None]):
    CSS = """
    #probe { height: 1; }
    .fixed { height: 1; }
    .graph { height: 1; width: 1fr; margin-right: 1; }
    #grid { grid-size: 2; grid-columns: 1fr 1fr; grid-rows: 1; height: 2; }
    #grid Label { margin-right: 3; }
    """

    def compose(self) -> ComposeResult:
        yield Horizontal(id="probe")
        yield Grid(
            Label("CPU 12 %"),
            Label("RAM 200.0/2000.0 GiB"),
            Label("disk 900.0/1000.0 GiB"),
            Label("open files ≤ 1024"),
            id="grid",
        )


def labels(tight: bool, graphs: frozenset[str]) -> list[Label]:
    """The widgets the row replaced: the index, then each figure and (when shown) its graph."""
    out = [Label("", classes="fixed")]
    out[0].styles.width = INDEX_WIDTH[tight]
    for metric in METRICS:
        figure = Label("", classes="fixed")
        figure.styles.width = FIGURE_WIDTH[tight][metric]
        out.append(figure)
        if metric in graphs:
            out.append(Label("", classes="graph"))
    return out


async def test_columns_are_where_textual_lays_the_labels_out() -> None:
    app = LayoutApp()
    compared = 0
    async with app.run_test(size=(240, 10)) as pilot:
        probe = app.query_one("#probe")
        for tight in (False, True):
            for keep in range(len(MonitorPane.SPARK_ORDER) + 1):
                graphs = frozenset(MonitorPane.SPARK_ORDER[:keep])
                await probe.remove_children()
                await probe.mount_all(labels(tight, graphs))
                for width in WIDTHS:
                    probe.styles.width = width
                    await pilot.pause()
                    placed = [(w.region.x - probe.region.x, w.region.width) for w in probe.children]
                    ours = [(c.x, c.width) for c in columns(width, tight, graphs)]
                    assert ours == placed, (width, tight, sorted(graphs))
                    compared += 1
    assert compared == 2 * 5 * len(WIDTHS)


async def test_the_host_rows_halves_are_textuals_grid_columns() -> None:
    app = LayoutApp()
    async with app.run_test(size=(240, 10)) as pilot:
        grid = app.query_one("#grid")
        for width in WIDTHS:
            grid.styles.width = width
            await pilot.pause()
            second = grid.children[1]
            assert second.region.x - grid.region.x == width // 2, width  # HostRow puts its second figure there


async def test_figures_read_as_the_labels_showed_them() -> None:
    """Right-aligned with one cell of padding; a text too long wraps at a space and its first line is seen."""
    app = LayoutApp()
    async with app.run_test(size=(240, 10)) as pilot:
        for text, width in (
            ("90 %", 8),
            ("690.5 W", 8),
            ("1234.5 W", 8),
            ("12345.6 W", 7),
            ("40.0/80.0 GiB", 14),
            ("1000.0/1000.0 GiB", 14),
            ("N/A", 7),
        ):
            label = Label(text)
            label.styles.width, label.styles.height = width, 1
            label.styles.text_align, label.styles.padding = "right", (0, 1, 0, 0)
            await app.query_one("#probe").remove_children()
            await app.query_one("#probe").mount(label)
            await pilot.pause()
            shown = "".join(s.text for s in label.render_lines(Region(0, 0, width, 1))[0])
            assert fit_right(text, width) == shown, (text, width)
    assert fit_right("x", 1) == " "
    assert fit_left("GPU12", 4) == "GPU1" and fit_left("GPU1", 6) == "GPU1  "
    assert first_line("disk 900.0/1000.0 GiB", 12) == "disk"
