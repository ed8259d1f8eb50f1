"""Small terminals: every pane fits 80x24 and 100x30 without headers cut to "s…"; tables drop their
low-value columns first; toasts leave the pane readable; the wizard fits and scrolls.

The whole App runs (tests/app/layout_app.py: parked pods fed fixed snapshots, a fixed clock), and what
is checked is the screen's text, row by row, as the user reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from app.tui import PrimeTrainApp
from tests.app.layout_app import (
    DEMO,
    OFFLINE,
    TRAINING,
    bucket_listing,
    isolate,
    layout_app,
    metrics_snapshot,
    offline_snapshot,
    screen_text,
    settle,
)
from widgets.fleet_view import COLUMNS as FLEET_COLUMNS


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory):
    return metrics_snapshot(tmp_path_factory.mktemp("metrics"))


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)


async def fed(pilot: Pilot, metrics, pane: str | None = None) -> PrimeTrainApp:
    app = pilot.app
    assert isinstance(app, PrimeTrainApp)
    await settle(pilot)
    app.on_snapshot(metrics)
    app.on_snapshot(offline_snapshot())
    await settle(pilot)
    bucket_listing(app)
    if pane is not None:
        await pilot.press(pane)
    app.clear_notifications()
    await settle(pilot)
    return app


def pane_rows(pilot: Pilot) -> list[str]:
    """The rows right of the sidebar, between the tabs and the footer."""
    app = pilot.app
    assert isinstance(app, PrimeTrainApp)
    left = app.pod_list.region.right + 1
    return [row[left:] for row in screen_text(pilot)[3:-1]]


def cut_words(rows: list[str]) -> list[str]:
    return [row for row in rows if "…" in row]


async def checkpoint_tables_fit(pilot: Pilot) -> None:
    await pilot.press("5")
    await settle(pilot)
    rows = pane_rows(pilot)
    text = "\n".join(rows)
    assert not cut_words(rows), text
    for header in ("step", "complete", "backed up", "verified"):  # whole headers, the low-value columns go
        assert header in text, (header, text)
    assert "writing" in text, text
    await pilot.press("pagedown")  # a small terminal: the rest of the bucket's table is a key away
    await settle(pilot)
    assert "this run" in "\n".join(pane_rows(pilot)) or "this run" in text, text


async def offers_table_fits(pilot: Pilot) -> None:
    from services.demo.offers import demo_offers

    app = pilot.app
    assert isinstance(app, PrimeTrainApp) and app.offers_pane is not None

    async def fetch(spot: bool):
        return demo_offers(spot)

    app.offers_pane.fetcher = fetch
    app.offers_pane.action_refresh_offers()
    await pilot.press("2")
    await settle(pilot)
    rows = pane_rows(pilot)
    header = next(row for row in rows if "Provider" in row)
    for label in ("Provider", "GPU", "$/hr", "Est. $", "Fit"):  # region and spot go before price and cost
        assert label in header, header
    assert "Region" not in header and "…" not in header, header
    table_rows = rows[rows.index(header) :]
    # the provider's name is the one cell shortened (to 12 cells, "primeintell…") so Spot and the column the
    # rows rank by stay at 80 columns (docs/architecture.md "At 80 columns"); nothing else is cut
    provider_width = header.index("GPU")
    assert not cut_words([row[provider_width:] for row in table_rows]), "\n".join(table_rows)
    assert "Spot" in header, header


async def fleet_fits(pilot: Pilot) -> None:
    await pilot.press("o")
    await settle(pilot)
    rows = screen_text(pilot)
    header = next(row for row in rows if row.lstrip().startswith("Pod"))
    for label in ("Pod", "State", "Step", "$/hr", "Alerts"):
        assert label in header, header
    dropped = [label for _, label, _ in FLEET_COLUMNS if label not in header]
    assert dropped and set(dropped) <= {"Loss trend", "tok/s", "GPU util"}, header
    row = next(r for r in rows if r.lstrip().startswith("h100-a"))
    assert "23.92" in row and "2 alerts" in row, row
    await pilot.press("escape")


async def test_every_pane_fits_80x24(metrics) -> None:
    from widgets.monitor_pane import MonitorPane
    from widgets.monitor_rows import GpuRows

    async with layout_app([TRAINING, OFFLINE, DEMO]).run_test(size=(80, 24)) as pilot:
        app = await fed(pilot, metrics, "3")
        # Monitor: the GPUs are on screen, no figure cut; the graphs give way before the numbers
        text = "\n".join(pane_rows(pilot))
        assert "GPU0" in text and "util" in text and "90 %" in text, text
        assert "open files ≤ 1024" in text and " samples" in text and "malformed" not in text, text  # none: not said
        assert "Disk almost full" in text and "Open-files limit too low" in text, text
        pane = app.query_one(MonitorPane)
        rows = pane.query_one(GpuRows)
        assert len(rows.lines) == 4 and rows.size.height == 4
        graphs = [c for c in rows.columns() if c.part == "graph"]
        assert all(c.width >= 10 for c in graphs), graphs
        for metric in ("util", "mem", "power", "temp"):  # every figure stays, whole
            figure = rows.column("figure", metric)
            assert figure is not None and figure.x + figure.width <= rows.size.width, (metric, rows.columns())
        # Bottleneck: every component's label whole (long ones wrap at a space), its % and seconds
        await pilot.press("4")
        await settle(pilot)
        rows = pane_rows(pilot)
        text = "\n".join(rows)
        assert not cut_words(rows), text
        assert "Trainer waiting for a batch" in text and "78%" in text and "30.2 s" in text, text
        for _ in range(3):  # the recommendations, below the fold here, are a key away
            await pilot.press("pagedown")
        await settle(pilot)
        shown = " ".join(pane_rows(pilot))
        assert "Tools/environment (agent/harness) take" in shown and "67% of each step" in shown, shown
        await checkpoint_tables_fit(pilot)
        await offers_table_fits(pilot)
        sidebar = "\n".join(screen_text(pilot))
        assert all(name in sidebar for name in ("h100-a", "h100-b", "demo")), sidebar
        await fleet_fits(pilot)


async def test_tables_fit_100x30(metrics) -> None:
    async with layout_app().run_test(size=(100, 30)) as pilot:
        await fed(pilot, metrics)
        await checkpoint_tables_fit(pilot)
        await offers_table_fits(pilot)
        await fleet_fits(pilot)


async def test_fleet_at_160x48_shows_every_column_and_prices_the_demo_as_the_monitor_bills_it(metrics) -> None:
    """Item 10: the Monitor shows "$ spent" for the demo (at the monitor's demo price); the fleet's $/hr is
    that same price, not N/A."""
    from dataclasses import replace

    from widgets.fleet_view import FleetView

    async with layout_app([DEMO, TRAINING]).run_test(size=(160, 48)) as pilot:
        app = await fed(pilot, metrics)
        app.on_snapshot(replace(metrics, pod=DEMO))
        await settle(pilot)
        assert app.snapshots["demo"].run is not None and app.snapshots["demo"].run.cost_so_far is not None
        await pilot.press("o")
        await settle(pilot)
        header = next(row for row in screen_text(pilot) if row.lstrip().startswith("Pod"))
        assert all(label in header for _, label, _ in FLEET_COLUMNS), header
        table = app.screen.query_one(FleetView)
        assert table.get_cell("demo", "price") == f"{app.monitor_settings.demo_price_per_hr:.2f}"


async def test_toasts_leave_most_of_the_pane_readable_at_80x24(metrics) -> None:
    from textual.widgets._toast import Toast, ToastRack

    async with layout_app().run_test(size=(80, 24), notifications=True) as pilot:
        app = await fed(pilot, metrics, "3")
        for _ in range(3):
            app.notify(
                "Open-files limit is 1024 (ulimit -n), below 65536: a reported prime-rl run died with "
                '"Too many open files" at step 15. Raise it before the next launch.',
                title="h100-a: Open-files limit too low",
                severity="warning",
                timeout=60,
            )
        await settle(pilot)
        toasts = [t for t in app.screen.query(Toast) if t.region.height]
        assert len(toasts) >= 3
        rack = app.screen.query_one(ToastRack)
        assert rack.region.height <= 24 // 2, rack.region  # the newest at the bottom, the rest scroll
        assert all(t.region.width <= 32 and t.region.height <= 7 for t in toasts), [t.region for t in toasts]
        assert "GPU0" in "\n".join(screen_text(pilot))  # the GPU figures are still readable beside them


async def test_the_wizard_fits_80x24_and_scrolls_to_its_buttons(metrics) -> None:
    from app.screens.wizard import WizardScreen

    async with layout_app().run_test(size=(80, 24)) as pilot:
        app = await fed(pilot, metrics)
        await pilot.press("w")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, WizardScreen)
        for child in screen.query("*"):
            if child.display and child.region.width:
                assert child.region.right <= 80, child
        nxt = screen.query_one("#wizard-next")
        nxt.scroll_visible(animate=False)
        await settle(pilot)
        assert 0 <= nxt.region.y < 24 and nxt.region.height, nxt.region
        await pilot.click("#wizard-next")
        await settle(pilot)
        assert screen.step == 1


async def test_dialogs_fit_80x24(metrics) -> None:
    """The lifecycle dialog (90 columns wide) and help (96) shrink to the terminal: every button on screen."""
    from app.screens.lifecycle import LifecycleScreen

    async def nothing(conn, force):
        if False:
            yield

    async with layout_app([TRAINING]).run_test(size=(80, 24)) as pilot:
        app = await fed(pilot, metrics)
        app.push_screen(LifecycleScreen("cleanup", TRAINING, plan=None, run=nothing, confirm="Delete"))
        await settle(pilot)
        for button in ("#lc-go", "#lc-cancel"):
            region = app.screen.query_one(button).region
            assert region.width and region.right <= 80, (button, region)
        await pilot.press("escape")
        await pilot.press("question_mark")
        await settle(pilot)
        assert all(w.region.right <= 80 for w in app.screen.query(".dialog")), app.screen
