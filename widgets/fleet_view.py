"""The fleet table: one row per pod, keyed by pod name, diff-updated cell by cell (never rebuilt).

Columns: pod, state, step, loss trend, tokens/s, mean GPU util, $/hr, alerts. A snapshot changes only
the cells whose rendered value differs from what the row shows, so 64 pods at 1 Hz cost a few cell
updates per second, not a table rebuild.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from services.models import PodSnapshot, PodState
from widgets.alerts import SEVERITY_STYLE, badge_text, loss_trend, worst
from widgets.format import NA

COLUMNS = (
    ("pod", "Pod", 22),
    ("state", "State", 11),
    ("step", "Step", 10),
    ("loss", "Loss trend", 22),
    ("tps", "tok/s", 9),
    ("util", "GPU util", 10),
    ("price", "$/hr", 8),
    ("alerts", "Alerts", 40),
)
COLUMN_KEYS = tuple(key for key, _, _ in COLUMNS)
STATE_STYLE = {
    PodState.ONLINE: "green",
    PodState.CONNECTING: "cyan",
    PodState.STALE: "yellow",
    PodState.OFFLINE: "red",
}



def fleet_row(snapshot: PodSnapshot) -> tuple[str | Text, ...]:
    """The cells of one pod's row (pure: the same snapshot always gives equal cells)."""
    pod, run, latest = snapshot.pod, snapshot.run, snapshot.latest
    state = snapshot.status.state
    name = pod.name + (" (sim)" if pod.simulated else "")
    step = NA if run is None or run.step is None else (
        f"{run.step}/{run.max_steps}" if run.max_steps else str(run.step))
    trend = loss_trend(run)
    loss = f"{trend} {run.loss:.4g}" if run is not None and run.loss is not None else NA
    tps = NA if run is None or run.tokens_per_s is None else f"{run.tokens_per_s:,.0f}"
    utils = [g.util for g in latest.gpus if g.util is not None] if latest else []
    util = f"{sum(utils) / len(utils):.0f}% ×{len(utils)}" if utils else NA
    price = NA if pod.price_per_hr is None else f"{pod.price_per_hr:.2f}"
    alerts: str | Text = ""
    if snapshot.alerts:
        sev = worst(snapshot.alerts)
        assert sev is not None
        alerts = Text(f"{badge_text(snapshot.alerts)}: {snapshot.alerts[0].title}", style=SEVERITY_STYLE[sev])
    return (name, Text(state.value, style=STATE_STYLE.get(state, "bold red")), step, loss, tps, util, price, alerts)


class FleetView(DataTable):
    DEFAULT_CSS = """
    FleetView { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[str, tuple[str | Text, ...]] = {}
        self.cell_updates = 0  # for tests and the benchmark: how much work the diffing left

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, width=width, key=key)

    @property
    def pod_names(self) -> list[str]:
        return list(self._cells)

    def cells(self, name: str) -> tuple[str | Text, ...] | None:
        return self._cells.get(name)

    def update_pod(self, snapshot: PodSnapshot) -> None:
        name = snapshot.pod.name
        new = fleet_row(snapshot)
        old = self._cells.get(name)
        self._cells[name] = new
        if old is None:
            self.add_row(*new, key=name)
            return
        for key, before, after in zip(COLUMN_KEYS, old, new):
            if before != after:
                self.update_cell(name, key, after)
                self.cell_updates += 1

    def remove_pod(self, name: str) -> None:
        if self._cells.pop(name, None) is not None:
            self.remove_row(name)
