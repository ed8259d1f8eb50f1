"""The monitor's window of per-episode timings (the probe's "traces"): a real MonitorService and probe
tailing a run dir the demo trainer wrote, through the bottleneck breakdown to the Bottleneck view."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from textual.app import App, ComposeResult

from services.bottleneck.analysis import analyze_snapshot
from services.models import Pod, PodKind
from services.monitor.metrics import EpisodeTiming
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from widgets.bottleneck_view import BottleneckView

REPO = Path(__file__).resolve().parents[3]


def demo_run(run_dir: Path, profile: str = "latency-bound", steps: int = 8) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run_dir),
            "--step-seconds",
            "0.001",
            "--max-steps",
            str(steps),
            "--profile",
            profile,
            "--seed",
            "0",
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    return run_dir


async def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class ViewApp(App):
    def compose(self) -> ComposeResult:
        yield BottleneckView()


def rendered(widget) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(widget.content)
    return out.getvalue()


async def test_monitor_keeps_episode_timings_and_the_view_shows_the_tail(tmp_path: Path) -> None:
    run = demo_run(tmp_path / "run")
    settings = MonitorSettings(interval=0.2, episodes_len=20)
    mon = MonitorService(lambda snap: None, settings=settings)
    mon.add(Pod(name="local", kind=PodKind.LOCAL, run_dir=str(run)))
    try:
        snap = await wait_for(
            lambda: (s := mon.snapshot("local")) is not None and s.metrics and s.episodes and s,
            what="a sample with traces",
        )
    finally:
        await mon.aclose()
    # 32 traces in the newest 2 step dirs; the window keeps the newest episodes_len of them
    assert len(snap.episodes) == 20 and all(isinstance(e, EpisodeTiming) for e in snap.episodes)
    assert {e.step for e in snap.episodes} <= {7, 8} and snap.episodes[-1].step == 8
    assert {e.env for e in snap.episodes} == {"reverse-text"} and all(e.tool_s and e.tool_s > 0 for e in snap.episodes)

    b = analyze_snapshot(snap, last=5)
    assert b.diagnosis == "latency-bound" and b.tool_tail and b.tool_tail[0].episodes == 20

    app = ViewApp()
    async with app.run_test(size=(140, 40)) as pilot:
        view = app.query_one(BottleneckView)
        tail = view.query_one("#bn-tail")
        view.show(b, "local")
        await pilot.pause()
        assert tail.display
        text = rendered(tail)
        t = b.tool_tail[0]
        assert "Tool time per episode" in text and "reverse-text" in text
        assert f"{t.p50:.1f} s" in text and f"{t.p95:.1f} s" in text and f"{t.max:.1f} s" in text
        assert ("SLOW TAIL" in text) is t.slow
        view.show(analyze_snapshot(replace(snap, episodes=()), last=5), "local")
        await pilot.pause()
        assert not tail.display  # no traces: no table
