"""Snapshots to the screen: the monitor's snapshots -> one :class:`PodUpdated` per frame (FRAME_S) for all pods
-> the sidebar, the visible pane, the fleet view, alert toasts and host-key questions; the once-a-second tick
that moves relative times on. :class:`SnapshotFrames` is the App's part that does it; it draws on a
:class:`FrameView` (the App) and keeps its pods' snapshots in the App's :class:`~app.pods.PodBook`."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, NamedTuple, Protocol

from textual import events
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import TabbedContent

from app.compositor import LineScreen
from app.pods import PodBook
from app.screens import fleet_shown
from app.screens.host_key import HostKeyChangedScreen, HostKeyScreen
from services.errors import PrimeTrainError
from services.models import Pod, PodSnapshot, PodState, PodStatus
from services.monitor.service import MonitorService
from widgets.alerts import TOAST_SEVERITY
from widgets.monitor_pane import MonitorPane
from widgets.paint import one_frame
from widgets.pod_list import PodList

FRAME_S = 0.2  # pods' snapshots reach the screen at most this often, together (one refresh, not one per pod)
TICK_S = 1.0  # relative times move on at most this often


class PodUpdated(Message):
    """Pods changed: their newest snapshots wait in the PodBook; one message per frame for all of them."""


class MainWidgets(NamedTuple):
    """The main screen's widgets, found once: App.query_one searches the *active* screen, which is a modal (help,
    host key, confirm) whenever a snapshot may arrive, and walking the DOM per update costs."""

    pod_list: PodList
    monitor_pane: MonitorPane
    tabs: TabbedContent


class LivePane(Protocol):
    """A pane that draws the selected pod's snapshots (the registry's ``live`` panes)."""

    def show(self, snapshot: PodSnapshot, now: float) -> None: ...
    def clear(self) -> None: ...


class FrameView(Protocol):
    """What SnapshotFrames draws on and asks: the App."""

    @property
    def screen(self) -> Screen[Any]: ...
    @property
    def monitor(self) -> MonitorService | None: ...
    @property
    def clock(self) -> Callable[[], float]: ...

    def main(self) -> MainWidgets | None:
        """The main screen's widgets; None while the App starts or stops."""

    def on_main_screen(self) -> bool:
        """The main screen shows (no modal on it)."""

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...
    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], None] | None = None) -> object: ...
    def post_message(self, message: Message) -> bool: ...
    def batch_update(self) -> AbstractContextManager[None]: ...


class SnapshotFrames:
    def __init__(self, view: FrameView, book: PodBook) -> None:
        self.view, self.book = view, book
        self.live: dict[str, LivePane] = {}  # pane name -> its widget, once mounted
        self.on_shown: list[Callable[[PodSnapshot], None]] = []  # told of every snapshot put on screen
        self._flush_due, self._last_flush = False, 0.0  # a PodUpdated is on its way; when the last one ran
        self._prompted: set[tuple[str, str]] = set()  # (pod, fingerprint) host-key modals shown
        self._grid: float | None = None  # the loop time the tick's once-a-second grid starts from
        self._wake: asyncio.TimerHandle | None = None  # the next tick

    def connecting(self, pod: Pod) -> None:
        """A pod listed but not watched yet (the first frame; watching starts just after it) reads as what the
        monitor says first: connecting."""
        self.queue(PodSnapshot(pod=pod, status=PodStatus.connecting(self.view.clock())))

    def queue(self, snapshot: PodSnapshot) -> None:
        name = snapshot.pod.name
        # the selected pod's first sample (its GPUs on the Monitor pane: what the user waits for at start) shows
        # at once, not at the next frame, which the "connecting" frames just before put up to FRAME_S away
        shown = self.book.snapshots.get(name)
        first = snapshot.latest is not None and shown is not None and shown.latest is None
        first = first and (main := self.view.main()) is not None and main.pod_list.selected == name
        self.book.pending[name] = snapshot
        if first:
            self._flush_due = True
            self.view.post_message(PodUpdated())
        elif not self._flush_due:  # per frame, not per sample: 64 pods sampling at their own moments of a
            self._flush_due = True  # second are a few refreshes a second, not 64; a lone change shows at once
            wait = self._last_flush + FRAME_S - time.monotonic()
            if wait <= 0:
                self._post_frame()
            else:  # a plain loop handle: a Textual timer is a task of its own, started and ended per frame
                asyncio.get_running_loop().call_later(wait, self._post_frame)

    def _post_frame(self) -> None:
        self.view.post_message(PodUpdated())

    @property
    def pending(self) -> bool:
        """Snapshots have arrived that the screen does not show yet (they will at the next frame)."""
        fleet = fleet_shown(self.view.screen)
        return bool(self.book.pending) or self._flush_due or (fleet is not None and fleet.frame_pending)

    def flush(self) -> None:
        """The frame: every pod's newest snapshot on screen."""
        self._flush_due, self._last_flush = False, time.monotonic()
        pending, self.book.pending = self.book.pending, {}
        main = self.view.main()
        if main is None:
            return  # the app is shutting down
        shown = [snapshot for name, snapshot in pending.items() if name in self.book]  # else removed meanwhile
        screen = self.view.screen  # the frame is drawn at the end, in one go (LineScreen.paint_now)
        drawn = one_frame(screen, screen.paint_now) if isinstance(screen, LineScreen) else nullcontext()
        with drawn, self.view.batch_update():
            now, selected = self.view.clock(), main.pod_list.selected  # (the same for every pod of the frame)
            for snapshot in shown:
                self._show(main, snapshot, now, selected)
            # the fleet table takes the frame's snapshots at once: one repaint of the rows they changed
            if shown and (fleet := fleet_shown(self.view.screen)) is not None:
                fleet.update_pods(shown)
            for snapshot in shown:
                self._ask_about_host_key(snapshot)
                for told in self.on_shown:
                    told(snapshot)
        self._arm()  # the times shown may change at other moments now

    def _show(self, main: MainWidgets, snapshot: PodSnapshot, now: float, selected: str | None) -> None:
        name = snapshot.pod.name
        self.book.snapshots[name] = snapshot
        main.pod_list.update_snapshot(snapshot, now)
        self._toast_new_alerts(snapshot)  # first: the monitor pane shows the alert log, new entries included
        if name == selected and (pane := self.live_pane()) is not None:
            pane.show(snapshot, now)

    def _toast_new_alerts(self, snapshot: PodSnapshot) -> None:
        """A toast per alert id per pod when it fires; a cleared alert toasts again if it fires again."""
        name = snapshot.pod.name
        current = frozenset(a.id for a in snapshot.alerts)
        seen = self.book.toasted.get(name, frozenset())
        if current == seen:
            return
        self.book.toasted[name] = current
        for alert in snapshot.alerts:
            if alert.id not in seen:
                self.view.notify(
                    alert.message, title=f"{name}: {alert.title}", severity=TOAST_SEVERITY[alert.severity], timeout=10
                )
                self.book.alert_log.append((name, alert))
                if (fleet := fleet_shown(self.view.screen)) is not None:
                    fleet.alert_fired(name, alert)

    def _ask_about_host_key(self, snapshot: PodSnapshot) -> None:
        prompt, name = snapshot.status.host_key, snapshot.pod.name
        if prompt is None or (name, prompt.fingerprint) in self._prompted:
            return
        if snapshot.status.state is PodState.HOSTKEY_UNKNOWN and not prompt.changed:
            self._prompted.add((name, prompt.fingerprint))
            self.view.push_screen(HostKeyScreen(name, prompt), partial(self._host_key_answered, name))
        elif snapshot.status.state is PodState.HOSTKEY_CHANGED or prompt.changed:
            self._prompted.add((name, prompt.fingerprint))
            self.view.push_screen(HostKeyChangedScreen(name, prompt))

    def _host_key_answered(self, name: str, trust: bool | None) -> None:
        monitor = self.view.monitor
        if trust and monitor is not None and name in self.book:
            try:
                monitor.trust_host_key(name)
            except (PrimeTrainError, OSError) as err:
                self.view.notify(f"Could not trust the key of {name}: {err}", severity="error")
            else:
                self.view.notify(f"Trusted the host key of {name}; reconnecting.")

    def live_pane(self) -> LivePane | None:
        """The visible pane that renders the selected pod (updates pause under a modal)."""
        main = self.view.main()
        if main is None or not self.view.on_main_screen():
            return None
        return self.live.get(main.tabs.active or "")

    def refresh_live_pane(self) -> None:
        main, pane = self.view.main(), self.live_pane()
        if main is not None and pane is not None:
            snapshot = self.book.snapshots.get(main.pod_list.selected or "")
            if snapshot is None:
                pane.clear()
            else:
                pane.show(snapshot, self.view.clock())
        self._arm()  # another pod or pane: other relative times shown

    def start_ticking(self) -> None:
        """Relative times ("retry in 4 s", "last sample 3 s ago") move on from now: :meth:`tick` runs at the
        moments one of the texts on screen next reads differently, on a once-a-second grid from here (the moments
        a 1 s interval would have redrawn them), and not at all while nothing shown counts time."""
        loop = asyncio.get_running_loop()
        self._grid = loop.time()
        self._arm()

    def times_moved(self) -> None:
        """A relative time on screen changed outside a frame (a pod's deadline moved): the tick follows it."""
        self._arm()

    def _arm(self) -> None:
        """(Re)schedule the tick for the next grid second at or after the earliest change due."""
        if self._grid is None:
            return  # not ticking yet (or any more)
        loop = asyncio.get_running_loop()
        t, now = loop.time(), self.view.clock()
        due = self._next_change(now)
        wake: float | None = None
        if due is not None:  # at most once a grid second, never the one that is running
            k = max(math.floor((t - self._grid) / TICK_S) + 1, math.ceil((t + due - now - self._grid) / TICK_S))
            wake = self._grid + k * TICK_S
        handle = self._wake
        if handle is not None and not handle.cancelled() and handle.when() == wake:
            return
        if handle is not None:
            handle.cancel()  # (a plain loop handle: cancelling one costs no wake-up, as a Textual timer's task does)
        self._wake = None if wake is None else loop.call_at(wake, self._due)

    def _due(self) -> None:
        self._wake = None
        # on the App's queue (its error handling, after what is queued) as ``call_later`` puts it, without the new
        # partial per call whose signature Textual inspects each time (a bound method's count is kept)
        self.view.post_message(events.Callback(callback=self.tick))

    def _next_change(self, now: float) -> float | None:
        main = self.view.main()
        if main is None or not self.view.on_main_screen():
            return now  # starting, or under a modal: look again next second
        due = main.pod_list.next_change()
        snapshot = self.book.snapshots.get(main.pod_list.selected or "")
        if snapshot is not None and isinstance(self.live_pane(), MonitorPane):
            pane = main.monitor_pane.next_change(snapshot)
            due = pane if due is None else due if pane is None else min(due, pane)
        return due

    def tick(self) -> None:
        """Relative times ("retry in 4 s", "last sample 3 s ago") move on."""
        main = self.view.main()
        if main is not None and self.view.on_main_screen():
            now = self.view.clock()
            main.pod_list.tick(now)
            snapshot = self.book.snapshots.get(main.pod_list.selected or "")
            if snapshot is not None and isinstance(self.live_pane(), MonitorPane):
                main.monitor_pane.tick(snapshot, now)
        self._arm()
