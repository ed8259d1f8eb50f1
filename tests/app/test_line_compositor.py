"""The main screen's and the fleet view's compositor (app/compositor.py's LineCompositor).

What was slow: for a partial update Textual rendered every widget overlapping the box around the changed
regions, and a widget it shows whole, whole: one new figure on the Monitor pane drew the screen, the nine containers
above the GPU rows, the header and the footer (~570 widget lines a frame for ~15 that changed), most of the app's
CPU per snapshot and all of the idle app's (tests/benchmarks/render_load.py).

What must hold now: a frame renders only the widgets seen on the lines it changes, only those lines; and every
frame is Textual's own, cell for cell: the same strips as Textual's compositor gives for the same screen and the
same changed lines, on the Monitor pane and in the fleet view, for lines scattered or together.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest
from textual._compositor import Compositor
from textual.geometry import Region
from textual.widget import Widget

from app.compositor import LineCompositor
from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from tests.app.helpers import parked_app, wait_for

GIB = 1024**3
NOW = 1_700_000_000.0


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def snapshot(pod: Pod, n: int) -> PodSnapshot:
    history = tuple(
        Sample(
            t=NOW - 60 + i,
            gpus=tuple(
                GpuSample(g, "NVIDIA H100 80GB HBM3", float(50 + (i * 7 + g * 13) % 50), 60 * GIB, 80 * GIB, 600.0, 65)
                for g in range(8)
            ),
            host=HostSample(float(5 + i % 20), 300 * GIB, 2000 * GIB, 400 * GIB, 1000 * GIB, 1048576),
            source="nvml",
        )
        for i in range(n)
    )
    return PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "via nvml", since=NOW - 100),
        history=history,
        samples_total=n,
        last_received=history[-1].t,
    )


def cells(chops, cuts: list[list[int]], crop: Region) -> list[list[tuple[int, list[tuple[str, object]]]]]:
    """Per line, the pieces the terminal is sent (ChopsUpdate writes those reaching into the changed box)."""
    return [
        [
            (cut, [(s.text, s.style) for s in strip])
            for cut, strip in sorted(line.items())
            if strip is not None and cut < crop.right and cut_ends[cut_ends.index(cut) + 1] > crop.x
        ]
        for line, cut_ends in zip(chops, cuts)
    ]


def same_as_textual(compositor: Compositor, seed: int) -> None:
    """Textual's compositor and ours, on the same screen and the same changed lines, draw the same cells."""
    assert isinstance(compositor, LineCompositor)
    width, height = compositor.size
    rng = random.Random(seed)
    cases = [(Region(0, 0, width, height), lambda y: True)]  # a full update
    for _ in range(6):
        lines = set(rng.sample(range(height), rng.randint(1, 6)))  # scattered lines, some adjacent
        top, bottom = min(lines), max(lines) + 1
        x = rng.randint(0, width // 2)
        cases.append((Region(x, top, width - x, bottom - top), lines.__contains__))
        x = rng.randint(width // 4, width // 2)  # a box inside the main pane (the sidebar beside it is not sent)
        cases.append((Region(x, top, rng.randint(1, width - x), bottom - top), lines.__contains__))
    for crop, rendered in cases:
        cuts = compositor.cuts
        ours = cells(compositor._render_chops(crop, rendered), cuts, crop)
        theirs = cells(Compositor._render_chops(compositor, crop, rendered), cuts, crop)
        for y in range(height):
            if rendered(y):
                assert ours[y] == theirs[y], f"line {y} of {crop}"


async def test_frames_are_textuals_cell_for_cell() -> None:
    pods = [Pod(name=f"pod{i}", kind=PodKind.SSH, host=f"10.0.0.{i + 1}") for i in range(3)]
    app = parked_app(pods, NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        for n in (30, 31):
            for pod in pods:
                app.on_snapshot(snapshot(pod, n))
            await pilot.pause(0.3)
        same_as_textual(app.screen._compositor, seed=1)
        await pilot.press("o")  # the fleet view
        await wait_for(pilot, lambda: type(app.screen).__name__ == "FleetScreen")
        for pod in pods:
            app.on_snapshot(snapshot(pod, 32))
        await pilot.pause(0.5)
        same_as_textual(app.screen._compositor, seed=2)


async def test_one_changed_line_renders_what_is_seen_there(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = Pod(name="pod0", kind=PodKind.SSH, host="10.0.0.1")
    app = parked_app([pod], NOW)
    rendered: Counter[str] = Counter()

    def counting(widget: Widget):  # each widget's own render_lines (a row's may not call Widget's)
        original = widget.render_lines

        def render_lines(crop: Region):
            rendered[type(widget).__name__] += crop.height
            return original(crop)

        return render_lines

    async with app.run_test(size=(160, 48)) as pilot:
        app.on_snapshot(snapshot(pod, 30))
        await pilot.pause(0.5)
        for widget in app.screen.walk_children(with_self=True):
            monkeypatch.setattr(widget, "render_lines", counting(widget))
        app.on_snapshot(snapshot(pod, 31))  # a new sample: the GPU rows, the host row, "31 samples"
        deadline = time.monotonic() + 10
        while not rendered and time.monotonic() < deadline:
            await pilot.pause(0.05)
        await pilot.pause(0.3)
    assert rendered["GpuRows"] == 8  # every GPU's line, once
    for hidden in ("Screen", "LineScreen", "Header", "Footer", "TabbedContent", "ContentSwitcher", "TabPane"):
        assert rendered[hidden] == 0, (hidden, rendered)  # covered by what is in front of them, or not changed
    for beside in ("PodList", "MonitorPane"):  # the sidebar, and the pane's padding: outside the changed box
        assert rendered[beside] == 0, (beside, rendered)
    assert sum(rendered.values()) < 60, rendered
