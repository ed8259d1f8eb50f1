"""The fleet view (``o``): every pod in one diff-updated table, for watching many pods at once, and
the alert log (every alert as it fired, across pods).

The App hands it each frame's new snapshots (``update_pods``) while it is the active screen; sampling goes on
underneath, and the main screen's panes pause meanwhile, as they do under a modal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Header, Label

from app.compositor import LineScreen
from services.models import Alert, PodSnapshot
from widgets.alert_log import AlertLog
from widgets.footer import Footer

if TYPE_CHECKING:  # the table (a DataTable) is imported when the view first opens, not with the App
    from widgets.fleet_view import FleetView


class FleetScreen(LineScreen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="fleet_back")]
    DEFAULT_CSS = """
    FleetScreen #fleet-title { padding: 0 1; color: $text-muted; width: 100%; }
    """

    def __init__(self, snapshots: Iterable[PodSnapshot] = (), alert_log: Iterable[tuple[str, Alert]] = ()) -> None:
        super().__init__()
        self._initial = list(snapshots)
        self._log = list(alert_log)
        self._table: FleetView | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("Fleet — every pod, live. o or escape: back to the pod view.", id="fleet-title")
        # the demo pod's $/hr: the price the monitor simulates its bill at (the Monitor's "$ spent" basis)
        settings = getattr(self.app, "monitor_settings", None)
        from widgets.fleet_view import FleetView

        yield FleetView(id="fleet-table", demo_price=getattr(settings, "demo_price_per_hr", None))
        yield AlertLog(self._log, id="alert-log")
        yield Footer()

    def on_mount(self) -> None:
        table = self.table
        table.update_pods(self._initial)
        self._initial = []
        table.focus()

    @property
    def table(self) -> FleetView:
        if self._table is None:  # found once: a query per snapshot walks the DOM 64 times a second at 64 pods
            from widgets.fleet_view import FleetView  # (imported by compose already)

            self._table = self.query_one("#fleet-table", FleetView)
        return self._table

    def update_pods(self, snapshots: Sequence[PodSnapshot]) -> None:
        """Shown in the frame that brings them: the App's frames already gather every pod's snapshots into one
        batch per FRAME_S (app/frames.py); a second frame timer here would add up to its own period to each
        sample's wait for the screen. The table re-renders only the rows that changed, whatever the cadence."""
        if self.is_mounted:
            self.table.update_pods(snapshots)

    @property
    def frame_pending(self) -> bool:
        """Nothing waits here: what the App's frame hands over is in the table at once."""
        return False

    def alert_fired(self, pod: str, alert: Alert) -> None:
        if self.is_mounted:
            self.query_one(AlertLog).add(pod, alert)

    def remove_pod(self, name: str) -> None:
        if self.is_mounted:
            self.table.remove_pod(name)
