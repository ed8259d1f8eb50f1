"""The task list: a lifecycle action sent to the background keeps running as an app task, shows in the list
(`t`) with its progress, can be cancelled from there (after a confirm), and ends with a toast; one action at
a time per pod; quitting with a running task asks first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from textual.widgets import DataTable

from app.screens.confirm import ConfirmScreen
from app.screens.lifecycle import LifecycleScreen
from app.screens.tasks import TasksScreen
from app.tui import PrimeTrainApp
from services.lifecycle.events import Event
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from tests.app.helpers import Parked, laid_out, wait_for


class Gate:
    """An action that reports 50 %, then waits for the test to let it finish (or to cancel it)."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.cancelled = False
        self.connections: list[Any] = []

    def connect(self, pod: Pod) -> Any:
        gate = self

        class Conn:
            closed = False

            async def connect(self) -> None:
                gate.connections.append(self)

            async def close(self) -> None:
                self.closed = True

        return Conn()

    async def run(self, conn: Any, force: bool) -> AsyncIterator[Event]:
        yield Event("cleanup", "step", "deleting step_1", progress=0.5)
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        yield Event("cleanup", "done", "deleted 1 checkpoint", progress=1.0)


def app_with(pod: Pod) -> PrimeTrainApp:
    app = PrimeTrainApp([pod], monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))
    app.animation_level = "none"
    return app


def gated_screen(pod: Pod, gate: Gate) -> LifecycleScreen:
    return LifecycleScreen("cleanup", pod, plan=None, run=gate.run, confirm="Delete", connect=gate.connect)


POD = Pod(name="gpu1", kind=PodKind.LOCAL)


async def start_and_background(app: PrimeTrainApp, pilot: Any, gate: Gate) -> Any:
    screen = gated_screen(POD, gate)
    results: list[Any] = []
    app.push_screen(screen, results.append)
    await laid_out(pilot, "#lc-go")
    await wait_for(pilot, lambda: not screen.query_one("#lc-go").disabled)
    await pilot.click("#lc-go")
    await wait_for(pilot, lambda: any("deleting step_1" in line for line in screen.lines))
    await laid_out(pilot, "#lc-bg")
    await pilot.click("#lc-bg")
    await wait_for(pilot, lambda: not isinstance(app.screen, LifecycleScreen))
    assert results == [None]  # dismissed without a result: the action goes on
    return screen


async def test_background_task_keeps_running_shows_in_the_list_and_toasts_when_done():
    gate = Gate()
    app = app_with(POD)
    async with app.run_test(size=(140, 40)) as pilot:
        await start_and_background(app, pilot, gate)
        [task] = app.tasks.running("gpu1")
        assert any(t == "Show tasks" and "1 running" in h for t, h, _ in app.palette_commands())
        assert task.action == "cleanup" and task.progress == 0.5 and task.status == "deleting step_1"
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, TasksScreen))
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        row = [str(c) for c in table.get_row_at(0)]
        assert row[:3] == ["gpu1", "cleanup", "running"] and "50%" in row[3] and row[5] == "deleting step_1"
        gate.go.set()
        await wait_for(pilot, lambda: str(table.get_row_at(0)[2]) == "done")  # the open list follows
        assert "100%" in str(table.get_row_at(0)[3])
        assert any("deleted 1 checkpoint" in str(n.message) for n in app._notifications)
        assert gate.connections and gate.connections[0].closed  # the action's connection closed at the end
        await pilot.press("enter")
        assert "✓ deleted 1 checkpoint" in str(app.screen.query_one("#tasks-log").render())


async def test_cancel_from_the_list_after_a_confirm():
    gate = Gate()
    app = app_with(POD)
    async with app.run_test(size=(140, 40)) as pilot:
        await start_and_background(app, pilot, gate)
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, TasksScreen))
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")  # keep going
        await wait_for(pilot, lambda: isinstance(app.screen, TasksScreen))
        assert app.tasks.running("gpu1") and not gate.cancelled
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.tasks.running("gpu1"))
        assert gate.cancelled and app.tasks.items[0].state == "cancelled"
        assert gate.connections[0].closed
        await wait_for(pilot, lambda: any("cancelled" in str(n.message) for n in app._notifications))


async def test_one_action_at_a_time_per_pod_and_quit_asks_while_one_runs():
    gate = Gate()
    app = app_with(POD)
    async with app.run_test(size=(140, 40)) as pilot:
        await start_and_background(app, pilot, gate)
        second = gated_screen(POD, Gate())
        app.push_screen(second)
        await laid_out(pilot, "#lc-go")
        await wait_for(pilot, lambda: not second.query_one("#lc-go").disabled)
        await pilot.click("#lc-go")
        await wait_for(pilot, lambda: any("still running on gpu1" in line for line in second.lines))
        assert len(app.tasks.items) == 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, LifecycleScreen))
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "cleanup on gpu1" in app.screen.question
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.is_running and app.tasks.running("gpu1")
        gate.go.set()
        await wait_for(pilot, lambda: not app.tasks.running("gpu1"))


async def test_unusable_lifecycle_settings_are_a_toast_not_a_crash(tmp_path, monkeypatch):
    """An AWS key listed among the secrets (refused: long-lived S3 keys never go to a pod) or a typo in
    [lifecycle]: k/R/c say so with the fix and the App keeps running."""
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "settings.toml").write_text('[lifecycle]\nsecrets = ["WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY"]\n')
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    app = app_with(POD)
    async with app.run_test(size=(140, 40)) as pilot:
        for key in ("k", "R", "c"):
            await pilot.press(key)
            await pilot.pause()
            assert app.is_running and not isinstance(app.screen, LifecycleScreen)
        notes = [str(n.message) for n in app._notifications if "AWS_SECRET_ACCESS_KEY" in str(n.message)]
        assert notes and app.tasks.items == []
        assert any("settings.toml" in str(n.title) for n in app._notifications)


async def test_a_task_cancelled_before_it_started_does_not_block_its_lane():
    app = app_with(POD)
    async with app.run_test(size=(140, 40)) as pilot:
        started: list[str] = []

        async def body(task):
            started.append(task.action)

        task = app.tasks.start("gpu1", "cleanup", body)
        task.worker.cancel()  # before the event loop ran it
        await pilot.pause()
        assert app.tasks.running("gpu1") == [] and task.state == "cancelled"
        second = app.tasks.start("gpu1", "kill", body)  # the lane is free
        await wait_for(pilot, lambda: not second.running)
        assert second.state == "done" and started == ["kill"]
