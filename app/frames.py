"""Snapshots to the screen: the monitor's ``on_snapshot`` -> one :class:`PodUpdated` per frame (FRAME_S) for
all pods -> the sidebar, the visible pane, the fleet view, alert toasts and host-key questions; the once-a-second
tick that moves relative times on. A mixin of PrimeTrainApp (app/tui.py): it uses the App's ``pods``,
``snapshots``, ``_pending``, ``pod_list``, ``tabs``, ``monitor``, ``clock`` and the background helpers.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.message import Message

from app.screens import fleet_shown
from app.screens.host_key import HostKeyChangedScreen, HostKeyScreen
from services.errors import PrimeTrainError
from services.models import Pod, PodSnapshot, PodState, PodStatus
from widgets.alerts import TOAST_SEVERITY
from widgets.monitor_pane import MonitorPane
from widgets.pod_list import PodList

if TYPE_CHECKING:
    from app.panes.bottleneck import BottleneckPane
    from app.panes.checkpoints import CheckpointsPane

FRAME_S = 0.2  # pods' snapshots reach the screen at most this often, together (one refresh, not one per pod)


class PodUpdated(Message):
    """Pods changed: their newest snapshots wait in App._pending; one message per frame for all of them."""


class SnapshotFrames:
    pods: Any
    snapshots: Any
    monitor: Any
    clock: Any
    lifecycle_bg: Any
    auto_backup: Any
    rentals: Any
    alert_log: Any
    pod_list: Any
    monitor_pane: Any
    tabs: Any
    screen: Any
    screen_stack: Any
    selected: Any
    _pending: Any
    _flush_due: Any
    _last_flush: Any
    _toasted: Any
    _prompted: Any
    _live: Any
    _main_widgets_ready: Any
    _on_main_screen: Any
    _focus_pane: Any
    post_message: Any
    set_timer: Any
    batch_update: Any
    notify: Any
    push_screen: Any
    refresh_bindings: Any

    def on_snapshot(self, snapshot: PodSnapshot) -> None:
        """Called by the monitor on the event loop for every change: keep it cheap."""
        background, backup = self.lifecycle_bg, self.auto_backup  # started with the watching, if not yet
        self._queue_snapshot(snapshot)
        if snapshot.pod.name in self.pods:  # a removed pod's last snapshots (still in flight) start nothing
            background.observe(snapshot)
            backup.observe(snapshot)

    def _show_connecting(self, pod: Pod) -> None:
        """A pod listed but not watched yet (the first frame; watching starts just after it) reads as what the
        monitor says first: connecting."""
        self._queue_snapshot(PodSnapshot(pod=pod, status=PodStatus.connecting(self.clock())))

    def _queue_snapshot(self, snapshot: PodSnapshot) -> None:
        self._pending[snapshot.pod.name] = snapshot
        if not self._flush_due:  # per frame, not per sample: 64 pods sampling at their own moments of a
            self._flush_due = True  # second are a few refreshes a second, not 64; a lone change shows at once
            wait = self._last_flush + FRAME_S - time.monotonic()
            if wait <= 0:
                self.post_message(PodUpdated())
            else:
                self.set_timer(wait, lambda: self.post_message(PodUpdated()), name="pods' next frame")

    @property
    def frame_pending(self) -> bool:
        """Snapshots have arrived that the screen does not show yet (they will at the next frame)."""
        fleet = fleet_shown(self.screen)
        return bool(self._pending) or self._flush_due or (fleet is not None and fleet.frame_pending)

    def on_pod_updated(self, message: PodUpdated) -> None:
        self._flush_due, self._last_flush = False, time.monotonic()
        pending, self._pending = self._pending, {}
        if not self._main_widgets_ready():
            return  # the app is shutting down
        with self.batch_update():
            for name, snapshot in pending.items():
                if name in self.pods:  # else removed meanwhile
                    self._show_snapshot(name, snapshot)

    def _show_snapshot(self, name: str, snapshot: PodSnapshot) -> None:
        self.snapshots[name] = snapshot
        now = self.clock()
        self.pod_list.update_snapshot(snapshot, now)
        self._toast_new_alerts(snapshot)  # first: the monitor pane shows the alert log, new entries included
        if name == self.selected and (pane := self._live_pane()) is not None:
            pane.show(snapshot, now)
        if (fleet := fleet_shown(self.screen)) is not None:
            fleet.update_pod(snapshot)
        self._ask_about_host_key(snapshot)
        self.rentals.record_rate(snapshot)

    def _toast_new_alerts(self, snapshot: PodSnapshot) -> None:
        """A toast per alert id per pod when it fires; a cleared alert toasts again if it fires again."""
        name = snapshot.pod.name
        current = frozenset(a.id for a in snapshot.alerts)
        seen = self._toasted.get(name, frozenset())
        if current == seen:
            return
        self._toasted[name] = current
        for alert in snapshot.alerts:
            if alert.id not in seen:
                self.notify(alert.message, title=f"{name}: {alert.title}",
                            severity=TOAST_SEVERITY[alert.severity], timeout=10)
                self.alert_log.append((name, alert))
                if (fleet := fleet_shown(self.screen)) is not None:
                    fleet.alert_fired(name, alert)

    def _ask_about_host_key(self, snapshot: PodSnapshot) -> None:
        prompt, name = snapshot.status.host_key, snapshot.pod.name
        if prompt is None or (name, prompt.fingerprint) in self._prompted:
            return
        if snapshot.status.state is PodState.HOSTKEY_UNKNOWN and not prompt.changed:
            self._prompted.add((name, prompt.fingerprint))
            self.push_screen(HostKeyScreen(name, prompt), partial(self._host_key_answered, name))
        elif snapshot.status.state is PodState.HOSTKEY_CHANGED or prompt.changed:
            self._prompted.add((name, prompt.fingerprint))
            self.push_screen(HostKeyChangedScreen(name, prompt))

    def _host_key_answered(self, name: str, trust: bool | None) -> None:
        if trust and self.monitor is not None and name in self.pods:
            try:
                self.monitor.trust_host_key(name)
            except (PrimeTrainError, OSError) as err:
                self.notify(f"Could not trust the key of {name}: {err}", severity="error")
            else:
                self.notify(f"Trusted the host key of {name}; reconnecting.")

    # The main screen's widgets, found once: App.query_one searches the *active* screen, which is a
    # modal (help, host key, confirm) whenever a snapshot may arrive, and walking the DOM per update

    def _live_pane(self) -> MonitorPane | BottleneckPane | CheckpointsPane | None:
        """The visible pane that renders the selected pod (updates pause under a modal)."""
        if not self._on_main_screen() or not self._main_widgets_ready():
            return None
        return self._live.get(self.tabs.active or "")

    def _monitor_visible(self) -> bool:
        return isinstance(self._live_pane(), MonitorPane)

    def _refresh_live_pane(self) -> None:
        pane = self._live_pane()
        if pane is None:
            return
        snapshot = self.snapshots.get(self.selected or "")
        if snapshot is None:
            pane.clear()
        else:
            pane.show(snapshot, self.clock())

    def _tick(self) -> None:
        """Once a second: relative times ("retry in 4 s", "last sample 3 s ago") move on."""
        if not self._on_main_screen() or not self._main_widgets_ready():
            return
        self.pod_list.tick(self.clock())
        if (snapshot := self.snapshots.get(self.selected or "")) and self._monitor_visible():
            self.monitor_pane.tick(snapshot, self.clock())

    def on_pod_list_pod_selected(self, _message: PodList.PodSelected) -> None:
        if not self.screen_stack:  # handled while the App closes: nothing to show it on
            return
        self._refresh_live_pane()
        self.refresh_bindings()

    def on_tabbed_content_tab_activated(self) -> None:
        self._refresh_live_pane()
        self._focus_pane()
        self.refresh_bindings()
