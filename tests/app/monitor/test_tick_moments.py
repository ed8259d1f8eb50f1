"""The clock tick runs only at the moments a relative time on screen next reads differently.

What could break: the App used to redraw every relative time ("last sample 3 s ago", "retry in 4 s", "ends 18:45
(in 3 h 10 min)", an ongoing gap, W&B's heartbeat) once a second, though most seconds none of them changed; now
app/frames.py schedules the tick for the earliest moment one of them changes (PodRow.next_change,
MonitorPane.next_change, widgets/format.py's *_changes). A moment computed too late leaves an old time on screen.

What must hold: stepping a fake clock second by second across the boundaries (seconds to minutes, the hour, the
deadline's warning), the screen under the schedule is, cell for cell, what the once-a-second tick draws at the same
moment; and an app with no relative time on screen schedules no tick at all.
"""

from __future__ import annotations

import asyncio

import pytest
from textual._compositor import Compositor

from app.tui import PrimeTrainApp
from services.models import Gap, Pod, PodKind, PodSnapshot, PodState, PodStatus, WandbStatus
from services.monitor.service import MonitorService
from tests.app.helpers import Parked
from tests.app.monitor.test_monitor_screen_pin import START, snapshots

SIZE = (160, 48)


def cells(app: PrimeTrainApp) -> list[list[tuple[str, object]]]:
    """The screen as the compositor holds it, cell by cell."""
    compositor = app.screen._compositor
    return [
        [(char, segment.style) for strip in chop.values() for segment in strip for char in segment.text]
        for chop in Compositor._render_chops(compositor, compositor.size.region, lambda y: True)
    ]


def parked(pods: list[Pod], now: list[float]) -> PrimeTrainApp:
    app = PrimeTrainApp(
        pods,
        clock=lambda: now[0],
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p), clock=lambda: now[0]),
    )
    app.animation_level = "none"
    return app


AT = START + 600.2  # when the scenario's snapshot came in; the clock starts 0.2 s later


def scenario(name: str) -> tuple[Pod, PodSnapshot, list[range]]:
    """One relative time alone on screen (a second one counting each second would hide a late moment), and the
    seconds on around its boundaries: seconds to minutes, the hour, the deadline's warning colour and passing."""
    deadline = AT + 3725.5 if name == "deadline" else None
    pod = Pod(name="pod-a", kind=PodKind.SSH, host="10.0.0.1", price_per_hr=23.92, deadline=deadline)
    online = PodStatus(PodState.ONLINE, "via nvml", since=AT)
    if name == "age":  # "last sample 59 min 59 s ago" -> "1 h 0 min", then each minute
        base = next(snapshots(pod, 1))
        snap = PodSnapshot(pod=pod, status=online, history=base.history, samples_total=1, last_received=AT)
        return pod, snap, [range(57, 62), range(3597, 3602), range(3657, 3662)]
    if name == "gap":  # "gap 59 min 59 s (ongoing)" -> "gap 1 h 0 min", then each minute
        snap = PodSnapshot(pod=pod, status=online, gaps=(Gap(start=AT - 3590.6, end=None),))
        return pod, snap, [range(7, 12), range(65, 71)]
    if name == "retry":  # "retry in 1 h 2 min" each minute, then each second under the hour
        status = PodStatus(PodState.OFFLINE, "connection refused", since=AT, next_retry=AT + 3725.9)
        return pod, PodSnapshot(pod=pod, status=status), [range(4, 9), range(64, 69), range(124, 129)]
    if name == "deadline":  # "ends 19:02 (in 1 h 2 min)" each minute, the warning 15 min before, then passed
        return pod, PodSnapshot(pod=pod, status=online), [range(4, 9), range(2823, 2828), range(3723, 3728)]
    beat = WandbStatus("me/proj/run1", checked_at=AT, state="running", heartbeat_at=AT - 40.3)
    return pod, PodSnapshot(pod=pod, status=online, wandb=beat), [range(4)]


@pytest.mark.parametrize("name", ["age", "gap", "retry", "deadline", "wandb"])
async def test_the_screen_under_the_schedule_is_the_once_a_second_ticks(name: str) -> None:
    pod, snap, windows = scenario(name)
    now = [AT + 0.2]
    app = parked([pod], now)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        app.on_snapshot(snap)
        await pilot.pause(0.3)
        frames = app.frames
        scheduled = moments = 0
        for k in (k for window in windows for k in window):
            t = now[0] = AT + 0.2 + k
            due = frames._next_change(t)
            if due is not None and due <= t:  # the tick's wake at this grid second
                frames.tick()
                scheduled += 1
            await pilot.pause()
            shown = cells(app)
            frames.tick()  # what the once-a-second tick draws at this moment
            await pilot.pause()
            assert cells(app) == shown, f"{k} s on: the schedule left an older time on screen"
            moments += 1
        if name != "wandb":  # (its heartbeat counts whole seconds: due each second)
            assert 0 < scheduled < moments


async def test_no_relative_time_on_screen_no_tick() -> None:
    now = [START]
    pod = Pod(name="pod-a", kind=PodKind.SSH, host="10.0.0.1")
    app = parked([pod], now)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        app.on_snapshot(PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE, "via nvml", since=START)))
        await pilot.pause(0.3)
        assert app.frames._wake is None  # nothing on screen counts time: the idle app does not wake
        snapshot = next(snapshots(pod, 1))
        now[0] = (snapshot.last_received or START) + 0.3
        app.on_snapshot(snapshot)
        await pilot.pause(0.3)
        wake = app.frames._wake
        assert wake is not None  # "last sample 0 s ago" turns to "1 s" a second after it came in
        loop = asyncio.get_running_loop()
        assert 0 < wake.when() - loop.time() <= 2.0


async def test_a_moved_deadline_counts_down_at_once_with_nothing_else_ticking() -> None:
    """A deadline moved outside a frame (an overdue rental kept an hour more at start-up): the row shows the new
    countdown at once, and the tick is armed for it — an overdue countdown changes no more, so without it the row
    kept "overdue" until something else happened to tick (the suite's test_rent caught it under load)."""
    from app.host import DeadlineMoved

    now = [START]
    pod = Pod(name="pod-a", kind=PodKind.SSH, host="10.0.0.1", deadline=START - 60)
    app = parked([pod], now)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        app.on_snapshot(PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE, "via nvml", since=START)))
        await pilot.pause(0.3)
        row = app.pod_list.row("pod-a")
        assert row is not None and "(in " not in row.text and app.frames._wake is None
        app.post_message(DeadlineMoved("pod-a", START + 3600))
        await pilot.pause(0.1)
        assert "(in 1 h" in row.text, row.text
        wake = app.frames._wake
        assert wake is not None and 0 < wake.when() - asyncio.get_running_loop().time() <= 2.0
