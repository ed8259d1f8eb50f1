"""What the first frame waits for: the pods are listed in it; watching them (the monitor, the lifecycle's
background work, the demo sandbox, auto-backup, the rentals' checks) starts just after it (issue 17: ~15 ms of
the first paint of --demo)."""

from __future__ import annotations

import pytest
from textual.app import App

from app.tui import PrimeTrainApp
from services.models import Pod, PodKind, PodState
from services.monitor.service import MonitorService
from tests.app.helpers import Parked, wait_for

PODS = [Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1"), Pod(name="gpu2", kind=PodKind.SSH, host="10.0.0.2")]


def parked_app(pods: list[Pod] = PODS) -> PrimeTrainApp:
    return PrimeTrainApp(pods, monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))


async def test_the_first_frame_lists_the_pods_and_their_watching_starts_just_after(monkeypatch) -> None:
    at_first_frame: list[tuple[bool, list[str], list[str], str, bool, str]] = []
    display = App._display

    def first(self: App, screen, renderable) -> None:
        if isinstance(self, PrimeTrainApp) and renderable is not None and not at_first_frame:
            sidebar = [name for name in self.pods if self.pod_list.row(name) is not None]
            pane = self.monitor_pane
            at_first_frame.append(
                (
                    self.watching,
                    sidebar,
                    self.monitor.names(),
                    self.sub_title,
                    pane.query_one("#monitor-empty").display,
                    f"{pane.query_one('#monitor-title').render()} / {pane.query_one('#monitor-state').render()}",
                )
            )
        display(self, screen, renderable)

    monkeypatch.setattr(App, "_display", first)
    app = parked_app()
    async with app.run_test(size=(120, 40)) as pilot:  # hands over once the app watches (tests/conftest.py)
        # the selected pod's state, not "No pod selected": it is connecting (from a frame later, for real)
        assert at_first_frame == [
            (False, ["gpu1", "gpu2"], [], "", False, "gpu1 (10.0.0.1) — connecting / Connecting…")
        ]
        assert app.watching and sorted(app.monitor.names()) == ["gpu1", "gpu2"]
        assert app.lifecycle_bg is app.lifecycle_bg and app.auto_backup.running("gpu1") is None
        await wait_for(
            pilot, lambda: (s := app.snapshots.get("gpu1")) is not None and s.status.state is PodState.CONNECTING
        )  # the monitor's own first word on screen


async def test_a_pod_removed_before_its_watching_starts_is_never_watched() -> None:
    app = parked_app()
    async with App.run_test(app, size=(120, 40)) as pilot:  # Textual's own: hands over right after on_mount
        app.forget_pod("gpu2")
        await wait_for(pilot, lambda: app.watching)
        await pilot.pause()
        assert app.monitor.names() == ["gpu1"] and list(app.pods) == ["gpu1"]
        assert app.pod_list.row("gpu2") is None


@pytest.mark.parametrize("first_use", ["lifecycle_bg", "auto_backup"])
async def test_asking_for_the_background_before_the_first_frame_starts_the_watching(first_use: str) -> None:
    app = parked_app()
    async with App.run_test(app, size=(120, 40)) as pilot:
        assert getattr(app, first_use) is not None
        assert app.watching and sorted(app.monitor.names()) == ["gpu1", "gpu2"]
        await pilot.pause()
        assert sorted(app.monitor.names()) == ["gpu1", "gpu2"]  # once: the deferred start found it done
