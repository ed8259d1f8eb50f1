"""The idle figure (services/monitor/idle.py, carried in the snapshot) in the real app: a rented pod whose GPUs
sat idle with no run said nothing of what the wait cost; now the Monitor pane's run line and the fleet view's
row say "idle 42 min · $16.74 wasted" (and nothing for a pod that is not idle)."""

from __future__ import annotations

from dataclasses import replace

from app.screens.fleet import FleetScreen
from services.models import HostSample, IdleFigure, Sample
from tests.app.helpers import parked_app
from tests.app.monitor.test_fleet import NOW, PODS, SIZE, isolated_home, pod_snapshot, settle  # noqa: F401
from widgets.fleet_view import COLUMN_KEYS, FleetView
from widgets.monitor_pane import MonitorPane


async def test_the_monitor_and_the_fleet_show_an_idle_pods_waste() -> None:
    app = parked_app(PODS[:2], NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        idle = IdleFigure(NOW - 42 * 60, 42 * 60.0, round(23.92 * 0.7, 2))
        plain = replace(
            pod_snapshot(PODS[0], 0),
            alerts=(),
            run=None,
            log_tail=(),
            history=(Sample(t=NOW, gpus=(), host=HostSample()),),
        )
        app.on_snapshot(replace(plain, idle=idle))
        app.on_snapshot(pod_snapshot(PODS[1], 3))
        await settle(pilot)
        progress = app.query_one(MonitorPane).query_one("#run-progress")
        assert progress.display and str(progress.render()) == "idle 42 min · $16.74 wasted"
        await pilot.press("o")
        assert isinstance(app.screen, FleetScreen)
        await settle(pilot)
        table = app.screen.query_one(FleetView)
        assert str(table.cells(PODS[0].name)[COLUMN_KEYS.index("alerts")]).startswith("idle 42 min · $16.74 wasted")
        assert "idle" not in str(table.cells(PODS[1].name)[COLUMN_KEYS.index("alerts")])
