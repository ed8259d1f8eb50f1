"""Snapshot of the demo screen: the real app, the real monitor, the embedded simulated pod.

Deterministic by construction: a fixed clock (so every "N s ago" reads the same), demo seed 0 and a
fixed number of ticks (so the GPU numbers and sparklines are the same), a fixed terminal size, and the
shot is taken once the app has rendered exactly ``demo_max_ticks`` samples.

Two things the demo does not simulate yet are pinned here, in the test only (see ``as_seen_by_ci``):
after its last tick the probe keeps sending GPU-less samples (~1/s), so later snapshots are held back;
and disk usage / the open-files limit are the real machine's, so they are fixed to stable figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

from app.tui import PrimeTrainApp
from services.models import Pod, PodKind, PodSnapshot
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings

TICKS = 3
FIXED_NOW = 1_700_000_000.0


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


GIB = 1024**3


def as_seen_by_ci(on_snapshot: Callable[[PodSnapshot], None]) -> Callable[[PodSnapshot], None]:
    """Hold the picture at exactly TICKS samples; pin the host figures the demo takes from this machine."""

    def forward(snapshot: PodSnapshot) -> None:
        if snapshot.samples_total > TICKS:
            return
        history = tuple(
            replace(s, host=replace(s.host, disk_used=40 * GIB, disk_total=200 * GIB, nofile_soft=65536))
            for s in snapshot.history
        )
        on_snapshot(replace(snapshot, history=history))

    return forward


def demo_app() -> PrimeTrainApp:
    settings = MonitorSettings(interval=0.2, demo_seed=0, demo_max_ticks=TICKS, stale_after=60.0)
    clock = lambda: FIXED_NOW  # noqa: E731

    def monitor(on_snapshot: Callable[[PodSnapshot], None]) -> MonitorService:
        return MonitorService(as_seen_by_ci(on_snapshot), settings=settings, clock=clock)

    return PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=settings, clock=clock, monitor_factory=monitor)


async def rendered_all_ticks(pilot: Pilot) -> None:
    app = pilot.app
    assert isinstance(app, PrimeTrainApp)
    for _ in range(200):  # ≤ 10 s
        shown = app.snapshots.get("demo")
        if shown is not None and shown.samples_total == TICKS:
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("the demo pod never delivered its samples")
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


def test_demo_monitor_screen(snap_compare) -> None:
    assert snap_compare(demo_app(), terminal_size=(140, 40), run_before=rendered_all_ticks)
