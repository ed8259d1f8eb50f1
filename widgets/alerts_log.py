"""The alert log: every alert as it fired (pod, time on the pod's clock, title), newest last. Cleared
alerts stay in the log; the sidebar badge and the monitor pane show what stands now."""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.text import Text
from textual.widgets import RichLog

from services.models import Alert
from widgets.alerts_view import SEVERITY_ICON, SEVERITY_STYLE


def log_entry(pod: str, alert: Alert) -> Text:
    stamp = time.strftime("%H:%M:%S", time.localtime(alert.since))
    text = Text(f"{stamp} {pod}: ", style="dim")
    text.append(f"{SEVERITY_ICON[alert.severity]} {alert.title}", style=SEVERITY_STYLE[alert.severity])
    if alert.line:
        text.append(f" — {alert.line}")
    return text


class AlertLog(RichLog):
    DEFAULT_CSS = """
    AlertLog { height: 10; border-top: solid $panel; }
    """

    def __init__(self, entries: Iterable[tuple[str, Alert]] = (), **kwargs) -> None:
        super().__init__(max_lines=500, wrap=False, markup=False, **kwargs)
        self._initial = list(entries)
        self.entries = 0

    def on_mount(self) -> None:
        for pod, alert in self._initial:
            self.add(pod, alert)
        self._initial = []

    def add(self, pod: str, alert: Alert) -> None:
        self.write(log_entry(pod, alert))
        self.entries += 1
