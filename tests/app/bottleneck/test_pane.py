"""BottleneckPane in a small App fed real snapshots: a real monitor + probe tailing a run dir that the
simulated trainer is writing; `p` profiles the next steps and `e` exports the report; a snapshot."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from app.panes.bottleneck import BottleneckPane
from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from tests.app.helpers import wait_for
from widgets.bottleneck_view import BottleneckView, bar

REPO = Path(__file__).resolve().parents[3]


class PaneApp(App):
    def __init__(self, pod: Pod | None, export_dir: Path) -> None:
        super().__init__()
        self.pod, self.export_dir = pod, export_dir
        self.shown = 0
        self.exported: list[Path] = []

    def compose(self) -> ComposeResult:
        yield BottleneckPane(steps=20, profile_steps=3, export_dir=self.export_dir)

    async def on_mount(self) -> None:
        self.monitor = MonitorService(self.on_snapshot, settings=MonitorSettings(interval=0.2))
        if self.pod is not None:
            self.monitor.add(self.pod)

    def on_snapshot(self, snapshot: PodSnapshot) -> None:
        self.call_later(self._show, snapshot)

    def _show(self, snapshot: PodSnapshot) -> None:
        pane = self.query_one(BottleneckPane)
        if not pane.query("#bn-empty"):  # the app is closing: the pane's parts are gone, the monitor not yet (as
            return  # PrimeTrainApp, which shows nothing once its widgets go)
        pane.show(snapshot, snapshot.last_received or 0.0)
        self.shown += 1

    def on_bottleneck_pane_profile_exported(self, message: BottleneckPane.ProfileExported) -> None:
        self.exported.append(message.path)

    async def on_unmount(self) -> None:
        await self.monitor.aclose()


@pytest.fixture
async def trainer(tmp_path: Path):
    run = tmp_path / "run"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.demo.trainer",
        "--run-dir",
        str(run),
        "--step-seconds",
        "0.1",
        "--max-steps",
        "0",
        "--profile",
        "latency-bound",
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    yield run
    proc.kill()
    await proc.wait()


def text_of(widget) -> str:
    """What a Label/Static shows, as plain text (Rich renderables rendered the way the screen would)."""
    import io

    from rich.console import Console

    content = widget.content
    if isinstance(content, str):
        return content
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(content)
    return out.getvalue()


async def test_live_breakdown_profile_and_export(trainer: Path, tmp_path: Path) -> None:
    app = PaneApp(Pod(name="local", kind=PodKind.LOCAL, run_dir=str(trainer)), tmp_path / "exports")
    async with app.run_test(size=(140, 50)) as pilot:
        pane = app.query_one(BottleneckPane)
        await wait_for(pilot, lambda: pane.breakdown is not None and pane.breakdown.steps >= 3)
        live = pane.breakdown
        assert live.diagnosis == "latency-bound" and live.source == "metrics.jsonl"
        view = app.query_one("#bn-live", BottleneckView)
        bars = text_of(view.query_one("#bn-bars"))
        tools = live.component("tools")
        (flagged,) = [ln for ln in bars.splitlines() if "BOTTLENECK" in ln]
        assert flagged.startswith("Trainer waiting for a batch")  # the flag is on the top-level row
        assert f"{100 * tools.share:.0f}%" in bars and f"{tools.seconds:.1f} s" in bars
        assert "DIAGNOSIS: LATENCY-BOUND" in text_of(view.query_one("#bn-diagnosis"))
        assert "10-15x" in text_of(view.query_one("#bn-recs"))

        pane.focus()
        await pilot.press("e")  # nothing to export yet: a warning, no file
        await pilot.press("p")
        profiling = pane._profile  # None already when the 3 steps arrived in one batch (a loaded machine)
        status = pane.query_one("#bn-profile-status")
        assert (
            profiling is not None and f"/3 steps after step {profiling[1]}…" in text_of(status)
        ) or pane.report is not None
        await wait_for(pilot, lambda: pane.report is not None)
        report = pane.report
        start = profiling[1] if profiling is not None else report.first_step - 1
        assert report.steps == 3 and report.first_step == start + 1 and report.diagnosis == "latency-bound"
        assert pane.query_one("#bn-report").display
        await pilot.press("e")
        await wait_for(pilot, lambda: app.exported)
        (path,) = app.exported
        assert path.parent == tmp_path / "exports" and path.name == f"bottleneck-local-steps-{start + 1}-{start + 3}.md"
        assert "**Diagnosis: LATENCY-BOUND**" in path.read_text()

        pane.clear()  # checked before the event loop runs again: the live run's next sample would fill it back
        assert pane.query_one("#bn-empty").display and not pane.query_one("#bn-body").display


def test_bar_widths() -> None:
    assert bar(0.0, 10) == " " * 10 and bar(1.0, 10) == "█" * 10
    assert bar(0.5, 10) == "█████     " and bar(0.55, 10).startswith("█████▌")
    assert len(bar(2.0, 10)) == 10  # clamped


# ---------------------------------------------------------------------------------------- snapshot
def finished_snapshot(tmp_path: Path) -> PodSnapshot:
    run = tmp_path / "snap-run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.001",
            "--max-steps",
            "20",
            "--profile",
            "latency-bound",
            "--seed",
            "0",
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    lines = tuple((run / "metrics.jsonl").read_text().splitlines())
    return PodSnapshot(
        pod=Pod(name="pod-a", kind=PodKind.SSH, host="pod-a"),
        status=PodStatus(PodState.ONLINE, since=0.0),
        metrics=lines,
        metrics_total=len(lines),
    )


class SnapApp(App):
    def __init__(self, snapshot: PodSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def compose(self) -> ComposeResult:
        yield BottleneckPane()

    def on_mount(self) -> None:
        self.query_one(BottleneckPane).show(self.snapshot, 0.0)


def test_bottleneck_pane_snapshot(snap_compare, tmp_path: Path) -> None:
    assert snap_compare(SnapApp(finished_snapshot(tmp_path)), terminal_size=(130, 40))
