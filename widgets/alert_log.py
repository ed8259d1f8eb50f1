"""The fleet view's alert log: every alert fired since the app started, newest last. Its own module because
RichLog pulls in rich.pretty (~10 ms) that the first screen does not need."""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import RichLog

from services.models import Alert
from widgets.alerts import log_entry


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
