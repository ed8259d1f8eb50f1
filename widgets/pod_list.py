"""The pod sidebar: one row per pod with its state badge and, on failure, the reason."""

from __future__ import annotations

from datetime import datetime

from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.widgets import Label, ListItem, ListView

from services.models import Pod, PodSnapshot, PodState
from widgets.alerts import badge_class, badge_text
from widgets.format import (
    age_changes,
    countdown_changes,
    duration,
    received_at,
    set_label,
    status_reason_now,
)

STATE_CLASS = {
    PodState.CONNECTING: "-connecting",
    PodState.ONLINE: "-online",
    PodState.STALE: "-stale",
    PodState.OFFLINE: "-offline",
    PodState.AUTH_FAILED: "-failed",
    PodState.HOSTKEY_UNKNOWN: "-failed",
    PodState.HOSTKEY_CHANGED: "-failed",
    PodState.UNSUPPORTED: "-failed",
}


DEADLINE_WARN = 15 * 60.0


def rent_text(pod: Pod, now: float) -> str:
    """ "$2.49/hr · ends 18:45 (in 3 h 10 min)" for a pod with a price and/or an auto-terminate deadline."""
    parts = [f"${pod.price_per_hr:.2f}/hr"] if pod.price_per_hr is not None else []
    if pod.deadline is not None:
        left = pod.deadline - now
        when = datetime.fromtimestamp(pod.deadline).strftime("%H:%M")
        if now <= 0:  # not ticked yet: no relative time
            parts.append(f"ends {when}")
        else:
            parts.append(f"ends {when} (in {duration(left)})" if left > 0 else f"deadline {when} passed")
    return " · ".join(parts)


def status_reason(snapshot: PodSnapshot, now: float) -> str:
    """The line under the badge: why the pod is not online and when it is retried."""
    status = snapshot.status
    if status.state is PodState.ONLINE:
        return ""  # the Monitor pane shows the data source; the sidebar stays quiet when all is well
    reason = status_reason_now(snapshot, now)  # the countdown is computed from next_retry, so it moves
    parts = [reason] if reason else []
    if status.next_retry is not None and status.state is not PodState.ONLINE:
        parts.append(f"retry in {duration(status.next_retry - now)}")
    return ", ".join(parts)


def cut_text(snapshot: PodSnapshot) -> str:
    """ "log cut: 3.1 MB skipped" when the probe left part of the run's logs out of its samples (it caps
    what one sample carries); "" when nothing was cut."""
    n = snapshot.cut_bytes
    if not n and not snapshot.cut_lines:
        return ""
    size = f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B"
    return f"log cut: {size} skipped"


class PodRow(ListItem):
    """One pod. Holds no connection: it renders whatever snapshot it was last given."""

    DEFAULT_CSS = """
    PodRow .pod-alerts { padding: 0 1; text-style: bold; width: auto; }
    PodRow .pod-alerts.-info { background: $primary-muted; color: $text; }
    PodRow .pod-alerts.-warning { background: $warning; color: $text; }
    PodRow .pod-alerts.-critical { background: $error; color: $text; }
    PodRow .pod-name { text-wrap: nowrap; text-overflow: ellipsis; }
    PodRow .pod-rent { color: $text-muted; }
    PodRow .pod-rent.-soon { color: $warning; text-style: bold; }
    """

    def __init__(self, pod: Pod) -> None:
        super().__init__(classes="pod-row")
        self.pod = pod
        self.snapshot: PodSnapshot | None = None
        self._drawn: PodSnapshot | None = None  # the snapshot the labels show
        self._now = 0.0
        self._rent_at = 0.0  # the moment the rent line was drawn for (0: not yet with a relative time)
        # Held, not queried: a row is updated by the 1 Hz tick and by snapshots, also while it is
        # still being composed or already being removed, when a query would find nothing.
        self._badge = Label(PodState.CONNECTING.value, classes="pod-badge -connecting")
        self._reason = Label("", classes="pod-reason")
        self._alerts = Label("", classes="pod-alerts")
        self._alerts.display = False
        self._rent = Label("", classes="pod-rent")
        self._rent.display = pod.price_per_hr is not None or pod.deadline is not None

    def compose(self) -> ComposeResult:
        # the name as written (never markup); a long one ends in "…" on its one row instead of wrapping
        name = Content(self.pod.name)
        if self.pod.simulated:
            name += Content.styled("  SIMULATED", "bold")
        yield Label(name, classes="pod-name")
        yield self._badge
        yield self._reason
        yield self._rent
        yield self._alerts

    def on_mount(self) -> None:
        self._show_rent(self._now)
        if self.snapshot is not None:  # it arrived before the row was on screen
            self.call_after_refresh(lambda: self.show(self.snapshot, self._now))

    def show(self, snapshot: PodSnapshot, now: float) -> None:
        self.snapshot, self._now = snapshot, now
        if not self._reason.is_attached:
            return  # not composed yet (drawn on mount), or being removed
        previous, self._drawn = self._drawn, snapshot
        state = snapshot.status.state
        if previous is None or previous.status.state is not state:
            badge = self._badge
            set_label(badge, state.value)
            for cls in set(STATE_CLASS.values()):
                badge.set_class(cls == STATE_CLASS[state], cls)
        reason = status_reason(snapshot, now) or cut_text(snapshot)
        label = self._reason
        set_label(label, f"— {reason}" if reason else "")
        if label.display != bool(reason):
            label.display = bool(reason)
        if previous is None or previous.alerts != snapshot.alerts:
            self._show_alerts(snapshot)

    def _show_alerts(self, snapshot: PodSnapshot) -> None:
        badge = self._alerts
        text, cls = badge_text(snapshot.alerts), badge_class(snapshot.alerts)
        set_label(badge, text)
        for c in ("-info", "-warning", "-critical"):
            badge.set_class(c == cls, c)
        if badge.display != bool(text):
            badge.display = bool(text)

    def _show_rent(self, now: float) -> None:
        if not self._rent.display:
            return
        set_label(self._rent, rent_text(self.pod, now))
        self._rent_at = now
        deadline = self.pod.deadline
        self._rent.set_class(deadline is not None and deadline - now <= DEADLINE_WARN, "-soon")

    def tick(self, now: float) -> None:
        """Re-render the relative times ("retry in 4 s", "ends in 2 h") from the stored snapshot."""
        self._now = now
        if self.pod.deadline is not None and self._rent.is_attached:
            self._show_rent(now)
        if self.snapshot is not None and self.snapshot.status.next_retry is not None:
            self.show(self.snapshot, now)

    def next_change(self) -> float | None:
        """The moment (App clock) a relative time :meth:`tick` redraws next reads differently; None: never."""
        if not self.is_mounted:
            return self._now  # ticked once it is (any moment now)
        due: list[float | None] = []
        deadline = self.pod.deadline
        if deadline is not None and self._rent.is_attached:
            drawn = self._rent_at
            if drawn <= 0:
                return drawn
            # (the warning colour comes DEADLINE_WARN before the deadline, a second the countdown changes anyway)
            due.append(countdown_changes(deadline, drawn))
        snapshot = self.snapshot
        if snapshot is not None and (retry := snapshot.status.next_retry) is not None:
            state = snapshot.status.state
            if state is not PodState.ONLINE:
                due.append(countdown_changes(retry, self._now))
                if state is PodState.STALE and (at := received_at(snapshot)) is not None:
                    due.append(age_changes(at, self._now))  # "no sample for N s"
        return min((d for d in due if d is not None), default=None)

    @property
    def text(self) -> str:
        """What the row says, as plain text (for tests and accessibility)."""
        return " ".join(str(label.render()) for label in self.query(Label) if label.display)


class PodList(ListView):
    """The sidebar. Posts :class:`PodList.PodSelected` when the highlighted pod changes."""

    HELP_WHERE = "the pod list"  # what the help calls it

    class PodSelected(Message):
        def __init__(self, name: str | None) -> None:
            super().__init__()
            self.name = name

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[str, PodRow] = {}

    @property
    def names(self) -> list[str]:
        return list(self._rows)

    @property
    def selected(self) -> str | None:
        item = self.highlighted_child
        return item.pod.name if isinstance(item, PodRow) else None

    def row(self, name: str) -> PodRow | None:
        return self._rows.get(name)

    def add_pod(self, pod: Pod) -> None:
        if pod.name in self._rows:
            return
        row = PodRow(pod)
        self._rows[pod.name] = row
        self.append(row)
        if self.index is None:
            self.index = 0

    def remove_pod(self, name: str) -> None:
        row = self._rows.pop(name, None)
        if row is not None and row in self._nodes:
            # pop() moves the highlight to a neighbour and posts Highlighted (None when empty).
            self.pop(self._nodes.index(row))

    def select(self, name: str) -> None:
        row = self._rows.get(name)
        if row is not None and row in self._nodes:
            self.index = self._nodes.index(row)

    def update_snapshot(self, snapshot: PodSnapshot, now: float) -> None:
        row = self._rows.get(snapshot.pod.name)
        if row is not None:
            row.show(snapshot, now)  # kept even before the row is mounted; it draws itself then

    def tick(self, now: float) -> None:
        for row in self._rows.values():
            if row.is_mounted:
                row.tick(now)

    def next_change(self) -> float | None:
        """The earliest moment a row's relative time next reads differently (see :meth:`PodRow.next_change`)."""
        return min((d for row in self._rows.values() if (d := row.next_change()) is not None), default=None)

    def _announce(self) -> None:
        self.post_message(self.PodSelected(self.selected))

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        event.stop()
        self._announce()

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        self._announce()
