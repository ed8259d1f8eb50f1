"""The fleet view takes a frame's snapshots as one batch (app/frames.py ``SnapshotFrames.flush`` ->
``FleetView.update_pods``): the cells of every pod set, then one repaint of the rows they changed. A burst of 64
pods' snapshots within one frame must all be on screen after that frame, each pod's newest (two from one pod in
the frame: the later one), in the pods' order, none dropped; and the table it draws is a plain DataTable's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.geometry import Region

from app.screens.fleet import FleetScreen
from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, RunProgress, Sample
from tests.app.helpers import parked_app, shown, wait_for
from widgets.fleet_view import FleetView

GIB = 1024**3
NOW = 1_700_000_000.0
PODS = [Pod(name=f"pod{i:02d}", kind=PodKind.SSH, host=f"10.0.0.{i + 1}", price_per_hr=23.92) for i in range(64)]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def snap(pod: Pod, step: int, util: float) -> PodSnapshot:
    gpus = tuple(GpuSample(i, "NVIDIA H100 80GB HBM3", util, 60 * GIB, 80 * GIB, 600.0, 60.0) for i in range(8))
    return PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "via nvml", since=NOW - 60),
        history=(Sample(t=NOW, gpus=gpus, host=HostSample(), source="nvml"),),
        samples_total=step,
        last_received=NOW,
        run=RunProgress(step=step, max_steps=1000, loss=1.0 / step, loss_history=(1.0, 1.0 / step)),
    )


def painted(table: FleetView) -> list[str]:
    """The table's lines as the last paint left them (its line cache, re-rendered only where it was marked dirty)."""
    return [strip.text for strip in table.render_lines(Region(0, 0, *table.size))]


async def test_a_burst_of_64_pods_in_one_frame_is_all_on_screen_after_it() -> None:
    app = parked_app(PODS, NOW)
    async with app.run_test(size=(150, 90)) as pilot:
        await shown(pilot)
        for i, pod in enumerate(PODS):
            app.on_snapshot(snap(pod, 10, 50.0 + i % 7))
        await shown(pilot)
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))
        await shown(pilot)
        table = app.screen.query_one(FleetView)
        assert table.size.height >= len(PODS) + 1  # every row on screen
        before = painted(table)
        assert all(f"{50 + i % 7}% ×8" in before[1 + i] for i in range(len(PODS)))

        told: list[tuple[str, int | None]] = []
        app.frames.on_shown.append(lambda s: told.append((s.pod.name, s.run.step if s.run else None)))
        flushes = 0
        flush = app.frames.flush

        def counted() -> None:
            nonlocal flushes
            flushes += 1
            flush()

        app.frames.flush = counted  # type: ignore[method-assign]
        # the burst, fed as the monitor does, between two frames: every pod once, every third pod twice (its older
        # sample first: the later one is what the frame shows)
        expected: dict[str, tuple[int, int]] = {}
        for i, pod in enumerate(PODS):
            if i % 3 == 0:
                app.on_snapshot(snap(pod, 20 + i, 10.0))
            step, util = 100 + i, 60 + i % 40
            app.on_snapshot(snap(pod, step, float(util)))
            expected[pod.name] = (step, util)
        await wait_for(pilot, lambda: flushes >= 1)
        await pilot.pause()
        assert flushes == 1  # one frame brought the whole burst
        assert told == [(pod.name, expected[pod.name][0]) for pod in PODS]  # each pod's newest, in order, once

        lines = painted(table)
        assert table.pod_names == [pod.name for pod in PODS]
        for i, pod in enumerate(PODS):
            step, util = expected[pod.name]
            line = lines[1 + i]  # (line 0: the header)
            assert line.lstrip().startswith(pod.name), (i, line)
            assert f"{step}/1000" in line and f"{util}% ×8" in line, (i, line)
        assert lines == [strip.text for strip in table.render_lines(Region(0, 0, *table.size))]


async def test_a_frame_starting_the_fleet_with_the_burst_is_drawn_as_a_plain_table() -> None:
    """update_pods with rows added (one with a longer name: the pod column widens mid-batch) and changed at once."""
    from textual.widgets import DataTable

    from tests.app.test_fleet_render import Pair, copy_to_plain

    class Tall(Pair):
        CSS = "FleetView, DataTable { height: 12; }"

    app = Tall()
    async with app.run_test(size=(150, 30)) as pilot:
        fleet, plain = app.query_one(FleetView), app.query_one("#plain", DataTable)
        fleet.update_pods([snap(pod, 10, 90.0) for pod in PODS[:6]])
        await pilot.pause()
        painted(fleet)
        long = Pod(name="a-much-longer-pod-name", kind=PodKind.SSH, host="10.0.1.1", price_per_hr=1.0)
        batch = [snap(PODS[1], 11, 91.0), snap(long, 3, 40.0), snap(PODS[4], 12, 92.0), snap(PODS[1], 13, 93.0)]
        fleet.update_pods(batch)
        await pilot.pause()
        copy_to_plain(fleet, plain)
        await pilot.pause()
        got = [[(seg.text, seg.style) for seg in strip] for strip in fleet.render_lines(Region(0, 0, *fleet.size))]
        want = [[(seg.text, seg.style) for seg in strip] for strip in plain.render_lines(Region(0, 0, *plain.size))]
        assert got == want
        text = [strip.text for strip in fleet.render_lines(Region(0, 0, *fleet.size))]
        assert "13/1000" in text[2] and "93% ×8" in text[2] and "12/1000" in text[5]
        assert "a-much-longer-pod-name" in text[7]
