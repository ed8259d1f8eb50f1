"""The fleet view (``o``) and the monitor pane's run/alert sections, in the real app.

Diff-updating is checked on the real DataTable: rows keyed by pod, a snapshot that changes one figure
changes one cell, and rows are never re-added. Deterministic snapshots (hand-made PodSnapshots fed
through the App's own ``on_snapshot``, the monitor's pods parked on a connection that never completes,
a fixed clock) pin how the fleet and the monitor pane look with a run and alerts. One test runs the
live demo pod into the fleet view.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

from app.screens.fleet import FleetScreen
from app.tui import PrimeTrainApp
from services.models import (
    GpuSample,
    HostSample,
    Pod,
    PodKind,
    PodSnapshot,
    PodState,
    PodStatus,
    Sample,
)
from services.monitor.health import HealthTracker
from services.monitor.worker import MonitorSettings
from tests.app.helpers import parked_app, shown, wait_for
from widgets.alert_log import AlertLog
from widgets.fleet_view import COLUMN_KEYS, FleetView

GIB = 1024**3
NOW = 1_700_000_000.0
SIZE = (150, 40)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("TZ", "UTC")  # the alert log shows wall-clock times: same picture in every zone
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def step_line(n: int) -> str:
    return (
        f"trainer: 14:00:{n:02d} SUCCESS Step {n} |   30.0s | Loss 0.{50 - n:04d} | Entropy 0.4 | Mismatch KL "
        f"0.001 | Grad. Norm 0.2 | LR 3.00e-06 | Throughput {20000 + 100 * n} tokens/s | MFU 31.2% "
        "| Peak Mem. 41.3 GiB"
    )


def pod_snapshot(pod: Pod, steps: int, *, util: float = 90.0, oom: bool = False, dead: bool = False) -> PodSnapshot:
    """A snapshot as the monitor would build it: samples through the real HealthTracker."""
    tracker = HealthTracker(max_steps=100, price_per_hr=pod.price_per_hr)
    host = HostSample(12.0, 200 * GIB, 2000 * GIB, 900 * GIB, 1000 * GIB, 1024)
    history = []
    for i in range(1, steps + 1):
        gpus = tuple(
            GpuSample(
                g,
                "NVIDIA H100 80GB HBM3",
                0.0 if dead and g == 0 and i > 2 else util,
                0 if dead and g == 0 and i > 2 else 60 * GIB,
                80 * GIB,
                600.0,
                60.0,
            )
            for g in range(4)
        )
        log = [step_line(i)] + (
            ["trainer: " + "torch.OutOfMemoryError: CUDA out of memory."] if oom and i == steps else []
        )
        s = Sample(t=NOW - 30 * (steps - i), gpus=gpus, host=host, log=tuple(log), source="nvml")
        tracker.observe(s)
        history.append(s)
    if dead:  # a minute and a half later, GPU 0 still at 0 MiB
        s = replace(history[-1], t=NOW + 90, log=())
        tracker.observe(s)
        history.append(s)
    return PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "via nvml", since=NOW - 600),
        history=tuple(history),
        samples_total=len(history),
        last_received=NOW,
        alerts=tracker.alerts,
        run=tracker.progress,
        log_tail=tuple(tracker.tail),
    )


async def settle(pilot: Pilot) -> None:
    await shown(pilot)
    await pilot.wait_for_scheduled_animations()


PODS = [Pod(name=f"h100-{c}", kind=PodKind.SSH, host=f"10.0.0.{i}", price_per_hr=23.92) for i, c in enumerate("abc", 1)]


def feed_all(app: PrimeTrainApp) -> None:
    app.on_snapshot(pod_snapshot(PODS[0], 12))
    app.on_snapshot(pod_snapshot(PODS[1], 7, oom=True))
    app.on_snapshot(pod_snapshot(PODS[2], 5, dead=True))


async def test_fleet_rows_are_keyed_and_diff_updated() -> None:
    app = parked_app(PODS, NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        feed_all(app)
        await settle(pilot)
        await pilot.press("o")
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.query_one(FleetView)
        await settle(pilot)
        assert table.pod_names == [p.name for p in PODS] and table.row_count == 3
        row_keys = list(table.rows)
        cells = table.cells("h100-a")
        assert cells is not None and cells[COLUMN_KEYS.index("step")] == "12/100"
        assert "CUDA out of memory" in str(table.cells("h100-b")[COLUMN_KEYS.index("alerts")])
        assert "likely died" in str(table.cells("h100-c")[COLUMN_KEYS.index("alerts")])
        log = app.screen.query_one(AlertLog)
        fired = {(pod, a.id) for pod, a in app.alert_log}
        assert {("h100-b", "log:cuda-oom"), ("h100-c", "gpu-dead"), ("h100-a", "disk")} <= fired
        assert log.entries == len(app.alert_log)

        before = table.cell_updates
        app.on_snapshot(pod_snapshot(PODS[0], 12))  # same figures: nothing to update
        await settle(pilot)
        assert table.cell_updates == before
        app.on_snapshot(pod_snapshot(PODS[0], 13))  # one more step: step, loss, tok/s
        await settle(pilot)
        changed = table.cell_updates - before
        assert 1 <= changed <= 3
        assert list(table.rows) == row_keys  # no row added, removed or rebuilt
        assert table.get_cell("h100-a", "step") == "13/100"
        assert "23.92" == table.get_cell("h100-a", "price")
        app.on_snapshot(pod_snapshot(PODS[0], 13, oom=True))  # a new alert while the fleet is open
        await settle(pilot)
        assert log.entries == len(app.alert_log) and app.alert_log[-1][0] == "h100-a"
        assert "CUDA out of memory" in str(table.get_cell("h100-a", "alerts"))

        await pilot.press("o")
        assert not isinstance(app.screen, FleetScreen)
        await pilot.press("o")  # comes back with every pod, from the App's latest snapshots
        assert app.screen.query_one(FleetView).get_cell("h100-a", "step") == "13/100"
        await pilot.press("escape")
        assert not isinstance(app.screen, FleetScreen)


async def test_a_changed_cell_repaints_its_row_only() -> None:
    """Issue 36: DataTable repainted the whole table for every changed cell, and the screen composed every visible
    line of it again, five frames a second at 64 pods; the fleet repaints the changed row, which shows the value."""
    app = parked_app(PODS, NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        feed_all(app)
        await settle(pilot)
        await pilot.press("o")
        table = app.screen.query_one(FleetView)
        await settle(pilot)
        table.update_cell("h100-b", "step", "99/100")
        dirty = [region for region in table._dirty_regions if region.area]
        assert dirty and all(region.height == 1 for region in dirty), dirty
        await settle(pilot)
        y = table.header_height + table.get_row_index("h100-b")
        assert "99/100" in table.render_line(y).text
        assert "12/100" in table.render_line(table.header_height + table.get_row_index("h100-a")).text


async def test_a_snapshot_is_in_the_fleet_table_in_the_frame_that_brings_it() -> None:
    """Issue 36: the fleet view held snapshots for a frame timer of its own, behind the App's frame that had already
    gathered them, so a sample waited for two frames (sample -> screen p95 ~260-390 ms at 64 pods). The App's frame
    puts every snapshot it brings in the table, frame after frame."""
    app = parked_app(PODS, NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        feed_all(app)
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        table = app.screen.query_one(FleetView)
        for steps in (13, 14, 15):  # frames in quick succession, as at 64 pods sampled at their own moments
            app.on_snapshot(pod_snapshot(PODS[0], steps))
            app.frames.flush()  # the App's frame: what its PodUpdated message runs
            assert table.get_cell("h100-a", "step") == f"{steps}/100"


async def test_live_demo_pod_in_the_fleet_view() -> None:
    settings = MonitorSettings(interval=0.2, stale_after=10.0)
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=settings)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("o")
        table = app.screen.query_one(FleetView)

        await wait_for(
            pilot, lambda: table.cells("demo") is not None and "online" in str(table.get_cell("demo", "state"))
        )
        await wait_for(pilot, lambda: table.get_cell("demo", "step") not in ("N/A",), timeout=20)
        assert "%" in table.get_cell("demo", "util")


def test_fleet_snapshot(snap_compare) -> None:
    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)  # the parked pods' own "connecting" snapshots first
        feed_all(pilot.app)
        await settle(pilot)
        await pilot.press("o")
        pilot.app.clear_notifications()
        await settle(pilot)

    assert snap_compare(parked_app(PODS, NOW), terminal_size=SIZE, run_before=run_before)


def test_monitor_pane_with_run_and_alerts_snapshot(snap_compare) -> None:
    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        feed_all(pilot.app)
        await settle(pilot)
        pilot.app.pod_list.select("h100-b")
        await settle(pilot)
        pilot.app.clear_notifications()
        await settle(pilot)

    assert snap_compare(parked_app(PODS, NOW), terminal_size=(150, 50), run_before=run_before)


async def test_monitor_pane_lists_gpu_processes_and_hides_empty_sections() -> None:
    from services.models import GpuProcess
    from widgets.monitor_pane import MonitorPane

    app = parked_app(PODS[:1], NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        plain = replace(pod_snapshot(PODS[0], 0), alerts=(), run=None, log_tail=())
        app.on_snapshot(replace(plain, history=(Sample(t=NOW, gpus=(), host=HostSample()),)))
        await settle(pilot)
        pane = app.query_one(MonitorPane)
        for wid in ("#run-progress", "#monitor-alerts", "#gpu-procs", "#log-tail"):
            assert not pane.query_one(wid).display, wid
        procs = (GpuProcess(4242, 0, 40 * GIB, "python -m vllm.entrypoints.openai.api_server"),)
        snap = pod_snapshot(PODS[0], 4)
        app.on_snapshot(replace(snap, history=(*snap.history[:-1], replace(snap.history[-1], procs=procs))))
        await settle(pilot)
        text = str(pane.query_one("#gpu-procs").render())
        assert "4242 on GPU 0 (40.0 GiB) python -m vllm" in text
        assert str(pane.query_one("#run-progress").render()).startswith("run: step 4/100 · loss")
