"""The demo pod's start: its run is launched once the pod's first sample is on screen, not at the first paint.

Launched at the first paint, the run's processes (the helper's pre-flight, the simulated trainer's start) shared
two loaded cores with the probe's and the fake nvidia-smi's first start, and the demo's GPUs reached the screen
later (tests/benchmarks/startup.py). What must hold: the launch waits for the first sample, and a demo pod that
never gets one (the monitor cannot reach it) still has its run launched, after LAUNCH_WAIT."""

from __future__ import annotations

from typing import Any

import app.demo
from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from tests.app.helpers import Parked, wait_for

SETTINGS = MonitorSettings(interval=0.2, demo_step_seconds=0.2, demo_max_steps=0, stale_after=30.0)


def spy_on_launches(app: PrimeTrainApp) -> list[Any]:
    """What the demo pod's snapshot on screen was when its run's launch was started (the task "launch")."""
    seen: list[Any] = []
    start_events = app.tasks.start_events

    def spy(pod: str, action: str, *args: Any, **kwargs: Any) -> Any:
        if action == "launch":
            seen.append(app.snapshots.get(pod))
        return start_events(pod, action, *args, **kwargs)

    app.tasks.start_events = spy  # type: ignore[method-assign]
    return seen


def launched(app: PrimeTrainApp) -> bool:
    return any(t.pod == "demo" and t.action == "launch" and t.state == "done" for t in app.tasks.items)


async def test_the_demo_run_is_launched_once_the_first_sample_is_on_screen(tmp_path) -> None:
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=SETTINGS, pods_path=tmp_path / "pods.toml")
    seen = spy_on_launches(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: launched(app), timeout=30)
        assert len(seen) == 1
        assert seen[0] is not None and seen[0].latest is not None and seen[0].latest.gpus, (
            "the launch started before the demo pod's GPUs were on screen"
        )


async def test_a_demo_pod_without_samples_still_gets_its_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(app.demo, "LAUNCH_WAIT", 0.5)
    demo_app = PrimeTrainApp(
        [Pod(name="demo", kind=PodKind.DEMO)],
        settings=SETTINGS,
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, settings=SETTINGS, connector=lambda p: Parked(p)),
    )
    seen = spy_on_launches(demo_app)
    async with demo_app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: launched(demo_app), timeout=30)
        assert len(seen) == 1 and (seen[0] is None or seen[0].latest is None)  # nothing came: launched anyway


async def test_the_launch_waits_on_the_frames_not_by_polling(tmp_path, monkeypatch) -> None:
    """The wait for the first sample is told by the frame that shows it (a hook on the frames' on_shown), not
    found by polling every 50 ms; the hook goes once the wait ends. (The wait is long enough for a loaded
    machine's test to see the hook in place: at 0.5 s it was gone before the first look at load 15.)"""
    monkeypatch.setattr(app.demo, "LAUNCH_WAIT", 2.0)
    demo_app = PrimeTrainApp(
        [Pod(name="demo", kind=PodKind.DEMO)],
        settings=SETTINGS,
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, settings=SETTINGS, connector=lambda p: Parked(p)),
    )

    def waiting() -> list[Any]:
        return [h for h in demo_app.frames.on_shown if "_first_sample_shown" in getattr(h, "__qualname__", "")]

    async with demo_app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: bool(waiting()), timeout=5)
        await wait_for(pilot, lambda: launched(demo_app), timeout=30)
        assert not waiting()
