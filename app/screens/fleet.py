"""The fleet view (``o``): every pod in one diff-updated table, for watching many pods at once, and
the alert log (every alert as it fired, across pods).

The App hands it each new snapshot (``update_pod``) while it is the active screen; sampling goes on
underneath, and the main screen's panes pause meanwhile, as they do under a modal.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
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


# as the main screen's frame (app.frames.FRAME_S): a sample shows within ~0.2 s (p95 < 300 ms at 64 pods). A pod's
# row changes at most once a second whatever the frame, and the table re-renders only the rows that changed (its
# line caches), so 5 frames a second cost the compositing of the few changed rows, not the table
FLEET_FRAME_S = 0.2


class FleetScreen(LineScreen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="fleet_back")]
    DEFAULT_CSS = """
    FleetScreen #fleet-title { padding: 0 1; color: $text-muted; width: 100%; }
    """

    def __init__(self, snapshots: Iterable[PodSnapshot] = (), alert_log: Iterable[tuple[str, Alert]] = ()) -> None:
        super().__init__()
        self._initial = list(snapshots)
        self._log = list(alert_log)
        self._due: dict[str, PodSnapshot] = {}  # pod -> its newest snapshot, for the next table frame
        self._timer_set, self._last = False, 0.0

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
        for snapshot in self._initial:
            table.update_pod(snapshot)
        self._initial = []
        table.focus()

    @property
    def table(self) -> FleetView:
        from widgets.fleet_view import FleetView  # (imported by compose already)

        return self.query_one("#fleet-table", FleetView)

    def update_pod(self, snapshot: PodSnapshot) -> None:
        """At most one table update per FLEET_FRAME_S for all pods (pods sampled at 1 Hz at their own moments
        would be ~64 refreshes a second at 64 pods); a first sight of a pod, or one after a quiet frame, shows at
        once."""
        if not self.is_mounted:
            return
        self._due[snapshot.pod.name] = snapshot
        if self._timer_set:
            return
        wait = self._last + FLEET_FRAME_S - time.monotonic()
        if wait <= 0:
            self._flush()
        else:
            self._timer_set = True
            self.set_timer(wait, self._flush, name="fleet's next frame")

    @property
    def frame_pending(self) -> bool:
        return bool(self._due) or self._timer_set

    def _flush(self) -> None:
        self._timer_set, self._last = False, time.monotonic()
        due, self._due = self._due, {}
        if not self.is_mounted:
            return
        table = self.table
        with self.app.batch_update():
            for snapshot in due.values():
                table.update_pod(snapshot)

    def alert_fired(self, pod: str, alert: Alert) -> None:
        if self.is_mounted:
            self.query_one(AlertLog).add(pod, alert)

    def remove_pod(self, name: str) -> None:
        self._due.pop(name, None)
        if self.is_mounted:
            self.table.remove_pod(name)
