"""The monitor pane with the run's other sources and the alert log (Pilot, real app).

A runbook-style trainer (training.csv, no prime-rl lines) through the real demo pod and probe shows its
step / loss / tokens/s / ETA; W&B's word shows as information; the selected pod's alert log is on the
main screen, and what fired stays there after it cleared.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import replace

import pytest

from app.tui import PrimeTrainApp
from services.models import Alert, Pod, PodKind, PodSnapshot, PodState, PodStatus, RunProgress, Severity, WandbStatus
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from tests.app.helpers import Parked, shown, wait_for

SIZE = (160, 50)


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def text(app: PrimeTrainApp, wid: str) -> str:
    w = app.query_one(wid)
    return str(w.render()) if w.display else ""


async def test_runbook_training_csv_in_the_monitor_pane() -> None:
    settings = MonitorSettings(interval=0.2, demo_gpus=2, demo_runbook=True, demo_step_seconds=0.2, demo_max_steps=500)
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=settings)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(
            pilot,
            lambda: (
                (r := app.snapshots.get("demo") and app.snapshots["demo"].run) is not None
                and r.step is not None
                and r.step >= 3
                and r.step_time_s is not None
            ),
        )
        await pilot.pause(0.1)
        line = text(app, "#run-progress")
        assert line.startswith("run: step ") and "/500" in line, line
        # the simulated loss is 0.5·exp(-step/200) plus up to 0.02 of noise (how far the run got depends on load)
        m = re.search(r"step (\d+)/500 · loss (\d\.\d+)", line)
        assert m and "tok/s" in line, line
        step, loss = int(m.group(1)), float(m.group(2))
        assert 0 <= loss - 0.5 * math.exp(-step / 200) <= 0.0201, line
        assert "ETA " in line and "ETA N/A" not in line
        assert "spent" in line  # the SIMULATED pod's price


async def test_alert_log_and_wandb_on_the_main_screen() -> None:
    pod = Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1")
    app = PrimeTrainApp([pod], monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))
    disk = Alert("disk", Severity.WARNING, "Disk almost full", "Run volume 90 % full.", since=1.0)
    wandb = WandbStatus("acme/rl/k3x9", checked_at=0.0, state="running", heartbeat_at=time.time() - 45)
    async with app.run_test(size=SIZE) as pilot:
        base = PodSnapshot(
            pod=pod,
            status=PodStatus(PodState.ONLINE, "", since=0.0),
            run=RunProgress(step=3, loss=1.5, source="training.csv"),
        )
        app.on_snapshot(replace(base, alerts=(disk,)))
        await shown(pilot)
        assert "Disk almost full" in text(app, "#monitor-alerts")
        log = text(app, "#monitor-alert-log")
        assert "Alert log" in log and "gpu1: ! Disk almost full" in log
        app.on_snapshot(replace(base, alerts=(), wandb=wandb))  # cleared; W&B has spoken
        await shown(pilot)
        assert text(app, "#monitor-alerts") == ""  # nothing stands now ...
        assert "Disk almost full" in text(app, "#monitor-alert-log")  # ... but the log remembers
        info = text(app, "#wandb-info")
        assert info.startswith("W&B: running, heartbeat 4") and "acme/rl/k3x9" in info and "information only" in info
        app.on_snapshot(replace(base, alerts=()))  # no W&B (off, or no run named): the line goes
        await shown(pilot)
        assert text(app, "#wandb-info") == ""
