"""After the user's own `k` the TUI stays quiet: the demo run killed from the App, then watched well past the
stall budget (2 s here; 5 min by default) raises no alert, and the Monitor's run line says "killed" with no ETA
and no "$ to go". Before, the ETA kept counting and a critical "No training progress" opened a few minutes
after the kill: the pod's run record still said "running"."""

from __future__ import annotations

import asyncio

from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.health import HealthSettings
from services.monitor.worker import MonitorSettings
from tests.app.helpers import wait_for
from tests.app.test_demo_actions import answer_yes, dialog, seen, step

SETTINGS = MonitorSettings(
    interval=0.2,
    demo_step_seconds=0.2,
    demo_ckpt_interval=2,
    demo_max_steps=400,
    stale_after=30.0,
    health=HealthSettings(stall_floor_s=1.0, stall_k=1.0, stall_cap_s=2.0, stall_start_s=2.0),
)


async def test_k_on_the_demo_run_raises_nothing_and_stops_the_eta(tmp_path) -> None:
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=SETTINGS, pods_path=tmp_path / "pods.toml")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: step(app) >= 5)
        assert "ETA" in seen(pilot) and "to go" in seen(pilot)
        await answer_yes(pilot, await dialog(pilot, "k"))
        await wait_for(pilot, lambda: (run := app.snapshots["demo"].run) is not None and run.phase == "killed")
        alerts_before = len(app.alert_log)
        await asyncio.sleep(4)  # twice the stall budget
        await pilot.pause()
        snap = app.snapshots["demo"]
        assert snap.alerts == (), snap.alerts
        assert len(app.alert_log) == alerts_before  # nothing fired meanwhile either
        assert snap.run is not None and snap.run.eta_s is None and snap.run.cost_to_finish is None
        text = seen(pilot)
        assert "killed (last step" in text and "ETA" not in text and "to go" not in text and "steps/hr" not in text
