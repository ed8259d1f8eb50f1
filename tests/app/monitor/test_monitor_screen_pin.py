"""The Monitor pane's screen, as the terminal is left by the frames drawn one snapshot after another.

What could break: the main screen draws only what a frame changed (app/compositor.py's LineCompositor renders
only the widgets seen on the changed lines, and none beside the changed box; the GPU rows repaint only the lines
whose figures or graphs changed). A line left out, a widget skipped that still had cells to send, or a stale
cached line would leave the terminal showing an older picture than the app holds.

What must hold: after N snapshots (new figures, graphs sliding on, training steps, the log tail growing), at 80x24
and 160x48, the terminal written by every frame the app sent is, cell for cell, Textual's own full render of the
same screen.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.segment import ControlType
from textual._compositor import Compositor
from textual.screen import Screen
from textual.widget import Widget

from app.tui import PrimeTrainApp
from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from services.monitor.health import HealthTracker
from services.monitor.service import MonitorService
from tests.app.helpers import Parked
from widgets.monitor_rows import PartsRow

GIB = 1024**3
START = 1_700_000_000.0


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


class Terminal:
    """A grid of cells written as a terminal writes what the app sends (cursor moves, then segments)."""

    def __init__(self, width: int, height: int) -> None:
        self.cells: list[list[tuple[str, object] | None]] = [[None] * width for _ in range(height)]

    def write(self, update) -> None:
        x = y = 0
        for segment in update.__rich_console__(None, None):
            if segment.control:
                for code in segment.control:
                    if code[0] is ControlType.CURSOR_MOVE_TO:
                        x, y = code[1], code[2]
                continue
            if segment.text == "\n":
                continue  # a new line is always followed by a cursor move
            for char in segment.text:
                if 0 <= y < len(self.cells) and 0 <= x < len(self.cells[y]):
                    self.cells[y][x] = (char, segment.style)
                x += cell_len(char)


def screen_cells(screen: Screen, compositor: Compositor) -> list[list[tuple[str, object]]]:
    """Textual's own full render of the screen, cell by cell, every widget drawn afresh (no line kept from before)."""
    for widget in screen.walk_children(with_self=True):
        widget.refresh()  # (the GPU and host rows forget their lines and styles)
        widget._styles_cache.clear()
    out = []
    own = PartsRow.render_lines
    PartsRow.render_lines = Widget.render_lines  # type: ignore[method-assign]  # the rows' lines through Textual's styles cache
    try:
        chops = Compositor._render_chops(compositor, compositor.size.region, lambda y: True)
    finally:
        PartsRow.render_lines = own  # type: ignore[method-assign]
    for chop in chops:
        line: list[tuple[str, object]] = []
        for strip in chop.values():
            for segment in strip:
                for char in segment.text:
                    line.append((char, segment.style))
        out.append(line)
    return out


def snapshots(pod: Pod, count: int):
    """``count`` snapshots a second apart, as the monitor hands them over: 8 GPUs, a step every third, the
    health rules' run progress and log tail, a 10-minute history."""
    rng = random.Random(7)
    tracker = HealthTracker(price_per_hr=23.92, max_steps=1000)
    history: list[Sample] = []
    step = 0
    for n in range(1, 600 + count):
        t = START + n
        gpus = tuple(
            GpuSample(
                i,
                "NVIDIA H100 80GB HBM3",
                float(rng.randint(80, 100)),  # busy, cool and within memory: no alert toasts over the pane
                int(rng.uniform(40, 70) * GIB),
                80 * GIB,
                round(rng.uniform(400, 690), 1),
                float(rng.randint(50, 74)),
            )
            for i in range(8)
        )
        log: tuple[str, ...] = ()
        if n % 3 == 0:
            step += 1
            log = (
                f"trainer: SUCCESS Step {step} |    3.0s | Loss {0.5 / (1 + step / 50):.4f} | Throughput "
                f"{rng.randint(24000, 26000)} tokens/s | MFU 31.2% | Peak Mem. 41.3 GiB",
            )
        host = HostSample(rng.uniform(1, 99), 300 * GIB, 2000 * GIB, rng.uniform(100, 700) * GIB, 1000 * GIB, 1048576)
        sample = Sample(t=t, gpus=gpus, host=host, log=log, source="nvml")
        history = [*history[-599:], sample]
        alerts = tracker.observe(sample)
        if n >= 600:
            yield PodSnapshot(
                pod=pod,
                status=PodStatus(PodState.ONLINE, "via nvml", since=START),
                history=tuple(history),
                samples_total=n,
                last_received=t,
                alerts=alerts,
                run=tracker.progress,
                log_tail=tuple(tracker.tail),
            )


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_frames_after_n_snapshots_leave_textuals_full_render(size: tuple[int, int]) -> None:
    pod = Pod(name="pod0", kind=PodKind.SSH, host="10.0.0.1", price_per_hr=23.92)
    now = [START]
    app = PrimeTrainApp(
        [pod],
        clock=lambda: now[0],
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p), clock=lambda: now[0]),
    )
    app.animation_level = "none"
    feed = snapshots(pod, 18)
    async with app.run_test(size=size) as pilot:
        for snapshot in [next(feed) for _ in range(6)]:  # the pane laid out with a run, its log tail and graphs
            now[0] = snapshot.last_received or now[0]
            app.on_snapshot(snapshot)
            await pilot.pause(0.25)
        compositor = app.screen._compositor
        terminal = Terminal(*size)
        terminal.write(compositor.render_update(full=True))  # the picture the frames below change
        render_update = compositor.render_update

        def sent(*args, **kwargs):
            update = render_update(*args, **kwargs)
            if update is not None:
                terminal.write(update)
                spans.append(len(getattr(update, "spans", ())) or size[1])
            return update

        spans: list[int] = []  # lines each frame sent
        compositor.render_update = sent  # type: ignore[method-assign]
        frames = 0
        for snapshot in feed:
            now[0] = snapshot.last_received or now[0]
            app.on_snapshot(snapshot)
            await pilot.pause(0.25)
            frames += 1
        await pilot.pause(0.3)
        assert app.screen._compositor is compositor  # (no other screen came in between)
        want = screen_cells(app.screen, compositor)
        got = terminal.cells
        assert frames == 12
        assert sorted(spans)[len(spans) // 2] < size[1] * 2 // 3, spans  # frames of some lines, not whole screens
        for y, line in enumerate(want):
            assert got[y] == line, f"line {y}: {''.join(c[0] if c else '?' for c in got[y])!r} != " + repr(
                "".join(c[0] for c in line)
            )
