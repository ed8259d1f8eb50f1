"""The Config pane looks at its file on disk only while it is shown.

What was wasteful: the pane's disk check woke the App every 2 s from the moment it was mounted, behind the Monitor
pane too, where nobody reads the file (issue 36: the idle app must not wake for nothing).

What must hold: while another tab is shown the pane runs no disk timer; a change made on disk meanwhile is told as
soon as the pane is shown again; hidden again, the timer stops.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import Label, TabbedContent, TabPane

from app.panes.config import ConfigPane
from tests.app.config.test_pane import config_file, isolated_dirs  # noqa: F401 (the fixture: its own dirs)
from tests.app.helpers import wait_for
from tests.services.config.test_rules import RL_BASE


class TabsApp(App[None]):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        with TabbedContent(id="tabs"):
            with TabPane("Monitor", id="monitor"):
                yield Label("the monitor")
            with TabPane("Config", id="config"):
                yield ConfigPane(self.path, debounce=0.05, disk_check=0.1)


async def test_disk_check_only_while_shown(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    async with TabsApp(path).run_test(size=(140, 36)) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        await pilot.pause(0.3)
        assert pane._disk_timer is None  # hidden behind the Monitor tab: no timer
        path.write_text(RL_BASE.replace("max_steps = 20", "max_steps = 99"))
        os.utime(path, (time.time() + 5, time.time() + 5))
        await pilot.pause(0.4)
        status = lambda: str(pane.query_one("#config-status").render())  # noqa: E731
        assert "CHANGED ON DISK" not in status()
        pilot.app.query_one(TabbedContent).active = "config"
        await wait_for(pilot, lambda: "CHANGED ON DISK" in status())  # told on coming back
        assert pane._disk_timer is not None
        pilot.app.query_one(TabbedContent).active = "monitor"
        await wait_for(pilot, lambda: pane._disk_timer is None)
