"""PrimeTrainApp: composition, global bindings, the command palette, the pods in the sidebar.

The App composes parts, each with a typed view of it: its pods (app/pods.py ``PodBook``), snapshots to frames
(app/frames.py ``SnapshotFrames``), the panes' keys (app/pane_keys.py ``PaneKeys``), the run dialogs
(app/run_actions.py ``RunDialogs``), and the controllers that post it messages (app/host.py: the lifecycle's
background work, auto-backup, the demo pod, rentals). The panes come from app/pane_registry.py.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.widget import AwaitMount, Widget
from textual.widgets import Header, TabbedContent, TabPane

from app.compositor import LineScreen
from app.frames import MainWidgets, PodUpdated, SnapshotFrames
from app.host import ConfigOffered, DeadlineMoved, PodLost, PodRented, PodTerminated, RunInterrupted, RunStarted
from app.palette import PodCommands
from app.pane_keys import PaneKeys, app_action_keys
from app.pane_registry import CONFIG, FIRST_PANE, MONITOR, OFFERS, PANE_BY_NAME, PANE_REGISTRY, Pane, PaneInputs
from app.pods import PodBook
from app.rentals import Rentals
from app.run_actions import RunDialogs
from app.screens import fleet_shown
from app.screens.add_pod import AddPodScreen
from app.screens.confirm import ConfirmScreen
from app.tasks import Tasks
from app.worker_hub import install as install_worker_hub
from services.errors import PrimeTrainError
from services.models import Alert, Pod, PodKind, PodSnapshot, PodState
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.specs import parse_pod_spec
from services.text import plain
from widgets.footer import Footer
from widgets.monitor_pane import MonitorPane
from widgets.pod_list import PodList

if TYPE_CHECKING:  # the four panes not on the first screen are imported when they mount (~20 ms of start-up)
    from app.auto_backup import AutoBackup
    from app.demo import DemoInApp
    from app.lifecycle_bg import BackgroundLifecycle
    from app.panes.config import ConfigPane
    from app.panes.offers import OffersPane

__all__ = ["APP_ACTION_KEYS", "STYLES", "PrimeTrainApp"]

STYLES = Path(__file__).resolve().parent.parent / "styles" / "app.tcss"
MonitorFactory = Callable[[Callable[[PodSnapshot], None]], MonitorService]
W = TypeVar("W", bound=Widget)
# the panes besides the first mount once the selected pod shows its first answer, at the latest this many seconds
# after the first screen (a pod that takes longer to answer does not hold them back)
FIRST_LOOK_WAIT = 2.0


def _default_rentals(app: PrimeTrainApp) -> Rentals:
    from app.settings import data_dir
    from services.offers.rentals import AUDIT_NAME, AuditLog

    return Rentals(app, AuditLog(data_dir() / AUDIT_NAME))


_BINDINGS: list[BindingType] = [
    Binding("a", "add_pod", "Add pod", id="add_pod"),
    Binding("d", "remove_pod", "Remove pod", id="remove_pod"),
    Binding("r", "reconnect", "Reconnect", id="reconnect"),
    Binding("L", "launch", "Launch run", id="launch", show=False),
    Binding("k", "kill", "Kill run", id="kill", show=False),
    Binding("R", "resume", "Resume run", id="resume", show=False),
    Binding("c", "cleanup", "Clean up checkpoints", id="cleanup", show=False),
    # show=False keeps the footer (and its pinned snapshot) as it was; help and the keymap list it
    Binding("o", "fleet", "Fleet view", id="fleet", show=False),
    Binding("w", "wizard", "Config wizard", id="wizard", show=False),
    Binding("t", "tasks", "Tasks", id="tasks", show=False),
    Binding("T", "terminate_pod", "Terminate rented pod", id="terminate_pod", show=False),
    Binding("dollar_sign", "spend", "Spend (rented pods' cost)", id="spend", key_display="$", show=False),
    Binding("question_mark", "help", "Help", id="help", key_display="?"),
    Binding("ctrl+p", "command_palette", "Commands", id="command_palette", show=False, priority=True),
    *(
        Binding(str(n), f"show_pane('{pane.name}')", f"Go to {pane.title}", id=f"pane_{pane.name}", show=False)
        for n, pane in enumerate(PANE_REGISTRY, 1)
    ),
    Binding("left_square_bracket", "select_pod(-1)", "Previous pod", id="prev_pod", key_display="[", show=False),
    Binding("right_square_bracket", "select_pod(1)", "Next pod", id="next_pod", key_display="]", show=False),
    Binding("q", "quit", "Quit", id="quit"),
]
# action -> the keys the App binds to it (a pane binding the same key takes it while it is on screen)
APP_ACTION_KEYS: dict[str, list[str]] = app_action_keys(_BINDINGS)


class PrimeTrainApp(App[None]):
    TITLE = "prime-train-tui"
    CSS_PATH = STYLES
    COMMANDS = App.COMMANDS | {PodCommands}
    BINDINGS = _BINDINGS

    def __init__(
        self,
        pods: list[Pod],
        *,
        settings: MonitorSettings = MonitorSettings(),
        clock: Callable[[], float] = time.time,
        pods_path: Path | None = None,
        monitor_factory: MonitorFactory | None = None,
        notices: Sequence[str] = (),
        config_path: Path | None = None,
        rentals: Callable[[PrimeTrainApp], Rentals] | None = None,
    ) -> None:
        super().__init__()
        self.worker_errors = install_worker_hub(self)  # no worker ends the App: failures are toasts and log lines
        self.initial_pods, self.monitor_settings, self.clock = list(pods), settings, clock
        self.pods_path, self._monitor_factory, self._notices = pods_path, monitor_factory, tuple(notices)
        self.monitor: MonitorService | None = None
        self.config_path = config_path
        self.book = PodBook(pods_path, self._spawn, self._pod_replaced)
        self.frames = SnapshotFrames(self, self.book)
        self.keys = PaneKeys(self, APP_ACTION_KEYS)
        self.dialogs = RunDialogs(self)
        self._main: MainWidgets | None = None
        # the panes besides the first, once asked for: each its widget and its mount (_mount_pane)
        self._pane_mounts: dict[str, tuple[Widget, AwaitMount]] = {}
        self._panes_mounting = False  # the first look is on screen, or FIRST_LOOK_WAIT passed: all of them mount
        self.rentals = (rentals or _default_rentals)(self)
        self.frames.on_shown.append(self.rentals.record_rate)
        self._watching = False  # _start_watching ran: the pods are in the monitor (or about to be)
        self._demo: DemoInApp | None = None  # the demo pod's sandbox and run (app/demo.py), made with the watching
        self._lifecycle_bg: BackgroundLifecycle | None = None  # made with the watching, or after the first look
        self._auto_backup: AutoBackup | None = None
        self._early_snapshots: list[PodSnapshot] = []  # came before the background: it gets them when it starts
        self.tasks = Tasks(self)  # launch/kill/resume/cleanup as app tasks: the task list (t)
        self.tasks.on_finish.append(self.dialogs.task_finished)

    # -- the pods (app/pods.py), read-only for everyone else --------------------------------------------

    @property
    def pods(self) -> Mapping[str, Pod]:
        return self.book

    @property
    def snapshots(self) -> Mapping[str, PodSnapshot]:
        return self.book.snapshots

    @property
    def alert_log(self) -> deque[tuple[str, Alert]]:
        return self.book.alert_log

    def _spawn(self, work: Any, name: str) -> None:
        self.run_worker(work, name=name, exit_on_error=False)

    def _pod_replaced(self, pod: Pod) -> None:
        """The one place a listed pod's sidebar row follows a change of the pod."""
        if self._main is not None and (row := self._main.pod_list.row(pod.name)) is not None:
            row.pod = pod
            if row.is_mounted:  # its relative times (a moved deadline's countdown) now, and their next moments
                row.tick(self.clock())
                self.frames.times_moved()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every toast is plain text, whoever asks (a widget's ``notify`` passes ``markup=True`` by default):
        toasts carry log lines, exceptions, provider and pod text, where ``[/x]`` ended the App with a
        MarkupError and ``[@click=...]`` made an action. Escape sequences are removed (``plain``)."""
        super().notify(
            plain(message), title=plain(title, oneline=True), severity=severity, timeout=timeout, markup=False
        )

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield PodList(id="pods")
            with TabbedContent(initial=FIRST_PANE.name, id="panes"):
                for pane in PANE_REGISTRY:
                    with TabPane(pane.title, id=pane.name):
                        if pane is FIRST_PANE:
                            yield self._pane_widget(pane)
        yield Footer()

    def _first_look(self, snapshot: PodSnapshot) -> None:
        """Told of every snapshot put on screen until the selected pod (the Monitor pane's) shows its first
        answer (a sample, or why there is none): then, after that frame, the other panes mount. Mounted
        before, their ~250 widgets held the event loop ~0.4 s while the demo pod's probe waited to start
        (tests/benchmarks/startup.py); a key or a click for one of them mounts it at once (_mount_pane)."""
        if self._panes_mounting or snapshot.pod.name != self.selected:
            return
        if snapshot.latest is not None or snapshot.status.state not in (PodState.CONNECTING, PodState.ONLINE):
            self._panes_mounting = True
            # a timer, not call_after_refresh: that ran before the frame was written (the flush is a batch
            # update), and the panes' mount then held the frame back; the screen's paint is due sooner
            self.set_timer(0.05, self._mount_other_panes, name="the other panes, after the first look")

    def _first_look_late(self) -> None:
        """FIRST_LOOK_WAIT after the first screen: the panes mount whether the pods answered or not."""
        if not self._panes_mounting:
            self._panes_mounting = True
            self.call_after_refresh(self._mount_other_panes)

    async def _mount_other_panes(self) -> None:
        """The panes not on the first screen, one after the other (keys and snapshots are handled between
        them). Nothing waits on them meanwhile: a key for one of them mounts it first (_mount_pane), and what
        the App gives them at start (the Config pane's file) they read when they mount."""
        self._panes_mounting = True
        if self._first_look in self.frames.on_shown:
            self.frames.on_shown.remove(self._first_look)
        self._start_background()
        for pane in PANE_REGISTRY:
            if (mounting := self._mount_pane(pane)) is not None:
                await mounting
        if self.screen_stack:
            self.call_after_refresh(self._settle_collector)

    def _mount_pane(self, pane: Pane[Any]) -> AwaitMount | None:
        """Mounts the pane (the first call makes it) and returns what to await for it; None once it is mounted
        or while there is no main screen."""
        if not self.screen_stack:
            return None
        if pane is FIRST_PANE:
            return None
        if pane.name not in self._pane_mounts:
            widget = self._pane_widget(pane)
            mounting = self.screen_stack[0].query_one(f"TabPane#{pane.name}", TabPane).mount(widget)
            self._pane_mounts[pane.name] = (widget, mounting)
            if pane.live:
                self.frames.live[pane.name] = widget
        widget, mounting = self._pane_mounts[pane.name]
        return None if widget.is_mounted else mounting

    @staticmethod
    def _settle_collector() -> None:
        """Once the whole first screen is up: what start-up made (widgets, styles, modules) lives as long as
        the app, and Python's full collections scanned it all again every few hundred allocations (a 75-150 ms
        pause every ~10 keystrokes in a 1,000-line config, tests/benchmarks/editor_latency.py): freeze it.
        `prime-train-tui` turns the collector off while it starts (app.cli.tui_app: its ~200 collections
        found next to nothing and cost ~45 ms before the first paint); it comes back on here."""
        gc.freeze()
        gc.enable()

    def _pane_widget(self, pane: Pane[W]) -> W:
        return pane.factory(
            PaneInputs(
                config_path=self.config_path,
                demo=any(p.simulated for p in self.initial_pods),
                observed_path=lambda: self.rentals.observations.path,
                cache_ttl=lambda: self.rentals.settings.cache_ttl,
            )
        )

    def get_default_screen(self) -> LineScreen:
        return LineScreen(id="_default")  # drawn line by line: app/compositor.py

    def on_mount(self) -> None:
        self.theme = "textual-dark"
        factory = self._monitor_factory or (
            lambda cb: MonitorService(cb, settings=self.monitor_settings, clock=self.clock)
        )
        self.monitor = factory(self.on_snapshot)
        for pod in self.initial_pods:
            self._list_pod(pod)  # in the sidebar from the first frame, watched just after it
            self.frames.connecting(pod)
        self.pod_list.focus()
        self.frames.start_ticking()
        for notice in self._notices:
            self.notify(notice, severity="warning", timeout=10)
        self.call_after_refresh(self._start_watching)
        if self.initial_pods and FIRST_LOOK_WAIT > 0:
            self.frames.on_shown.append(self._first_look)
            self.set_timer(FIRST_LOOK_WAIT, self._first_look_late, name="the other panes at the latest")
        else:
            self.call_after_refresh(self._first_look_late)
        self.call_after_refresh(self._watcher_notice)

    def _watcher_notice(self) -> None:
        """Is a headless watcher running, and what it saw meanwhile (a toast, after the first screen)."""
        from app.settings import data_dir
        from services.watch.state import watch_notice

        if (watched := watch_notice(data_dir())) is not None:
            self.notify(watched, title="Watcher", timeout=20)

    def on_resize(self, event: events.Resize) -> None:
        """Small terminals: the sidebar narrows (classes read by styles/app.tcss), the panes keep the room."""
        width = event.size.width
        self.set_class(width < 130, "-narrow")
        self.set_class(width < 100, "-compact")
        self.set_class(event.size.height < 32, "-short")

    async def on_unmount(self) -> None:
        gc.unfreeze()  # what was frozen at start can be collected again once the app is gone
        if self.monitor is not None:
            await self.monitor.aclose()

    # -- snapshots to frames (app/frames.py) -------------------------------------------------------------

    def on_snapshot(self, snapshot: PodSnapshot) -> None:
        """Called by the monitor on the event loop for every change: keep it cheap."""
        background, backup = self._lifecycle_bg, self._auto_backup
        if background is None or backup is None:
            if not self._watching:
                background, backup = self.lifecycle_bg, self.auto_backup  # started with the watching, if not yet
            elif snapshot.pod.name in self.book:  # the background starts after the first look: it gets these then
                self._early_snapshots.append(snapshot)
        self.frames.queue(snapshot)
        if background is not None and backup is not None and snapshot.pod.name in self.book:
            # (a removed pod's last snapshots, still in flight, start nothing)
            background.observe(snapshot)
            backup.observe(snapshot)

    @property
    def frame_pending(self) -> bool:
        """Snapshots have arrived that the screen does not show yet (they will at the next frame)."""
        return self.frames.pending

    def on_pod_updated(self, _message: PodUpdated) -> None:
        self.frames.flush()

    @on(PodList.PodSelected)
    def _pod_selected(self) -> None:
        if not self.screen_stack:  # handled while the App closes: nothing to show it on
            return
        self.frames.refresh_live_pane()
        self.refresh_bindings()

    @on(TabbedContent.TabActivated, "#panes")
    async def _pane_shown(self, event: TabbedContent.TabActivated) -> None:
        pane = PANE_BY_NAME.get(event.pane.id or "")
        if pane is not None and (mounting := self._mount_pane(pane)) is not None:
            await mounting  # a tab clicked in the App's first moments
        self.frames.refresh_live_pane()
        self.keys.focus_pane()
        self.refresh_bindings()

    # -- the main screen ---------------------------------------------------------------------------------

    def main(self) -> MainWidgets | None:
        """The main screen's widgets; None while the App starts or stops."""
        if self._main is None:
            try:
                self._widgets()
            except (NoMatches, IndexError):  # IndexError: no screen at all
                return None
        assert self._main is not None
        return self._main if self._main.pod_list.is_attached else None

    def on_main_screen(self) -> bool:
        """The main screen shows (no modal on it); False while the App starts or stops (no screen at all:
        a timer firing then must not raise ScreenStackError)."""
        return bool(self.screen_stack) and self.screen is self.screen_stack[0]

    def _widgets(self) -> MainWidgets:
        if self._main is None:
            main = self.screen_stack[0]
            self._main = MainWidgets(
                main.query_one(PodList), main.query_one(MonitorPane), main.query_one(TabbedContent)
            )
            self.frames.live[MONITOR.name] = self._main.monitor_pane  # (the others: added as they mount)
        return self._main

    @property
    def pod_list(self) -> PodList:
        return self._widgets().pod_list

    @property
    def monitor_pane(self) -> MonitorPane:
        return self._widgets().monitor_pane

    @property
    def tabs(self) -> TabbedContent:
        return self._widgets().tabs

    @property
    def selected(self) -> str | None:
        return self.pod_list.selected

    def _selected_pod(self) -> Pod | None:
        return self.book.get(self.selected or "")

    # -- the panes and their keys (app/pane_registry.py, app/pane_keys.py) -------------------------------

    def mounted(self, pane: Pane[W]) -> W | None:
        """The pane's widget on the main screen; None before it is mounted."""
        return self.keys.mounted(pane)

    def active_pane(self) -> Widget | None:
        return self.keys.active_pane()

    def pane_bindings(self) -> dict[str, Binding]:
        return self.keys.pane_bindings()

    @property
    def offers_pane(self) -> OffersPane | None:
        return self.mounted(OFFERS)

    async def on_key(self, event: events.Key) -> None:
        await self.keys.key(event)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.keys.check_action(action)

    def action_show_pane(self, pane: str) -> Awaitable[None] | None:
        """Shows the pane; one not mounted yet (the App's first moments) is mounted first and then shown, so
        no empty pane flashes and the keys after this one (the App handles them in turn: a binding's action
        is awaited) find it there. Returns what to await then (a task: callers outside Textual may drop it)."""
        mounting = self._mount_pane(PANE_BY_NAME[pane]) if pane in PANE_BY_NAME else None
        if mounting is None:
            self.keys.show(pane)
            return None

        async def show() -> None:
            await mounting
            self.keys.show(pane)

        return asyncio.ensure_future(show())

    # -- the pods in the sidebar -------------------------------------------------------------------------

    def action_select_pod(self, step: int) -> None:
        names = list(self.book)
        if not names:
            return
        at = names.index(self.selected) if self.selected in names else -1
        self.pod_list.select(names[(at + step) % len(names)])

    def action_add_pod(self) -> None:
        self.push_screen(AddPodScreen(), self._add_spec)

    def _add_spec(self, spec: str | None) -> None:
        if not spec:
            return
        try:
            pod = parse_pod_spec(spec)
        except PrimeTrainError as err:
            self.notify(str(err), severity="error", title="Cannot add pod")
            return
        if pod.name in self.book:
            self.notify(f"A pod named {pod.name} is already in the list.", severity="error")
            return
        if pod.kind is PodKind.SSH:
            pod = replace(pod, saved=True)
            self.book.save(pod)
        self._start(pod)
        self.pod_list.select(pod.name)

    def action_remove_pod(self) -> None:
        name = self.selected
        if name is None:
            return
        where = "It will be removed from pods.toml." if self.book[name].saved else "It is not in pods.toml."
        self.push_screen(ConfirmScreen(f"Remove pod {name}? {where}"), partial(self._remove_confirmed, name))

    def _remove_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self.forget_pod(name)

    def forget_pod(self, name: str) -> None:
        """Stop watching a pod and drop it from the sidebar and pods.toml (which keeps a .bak)."""
        pod = self.book.forget(name)
        if self._watching:  # else nothing watches it yet
            self.lifecycle_bg.remove(name)
            self.auto_backup.remove(name)
        if pod is None:
            return
        if (fleet := fleet_shown(self.screen)) is not None:
            fleet.remove_pod(name)
        self.pod_list.remove_pod(name)
        self.sub_title = "SIMULATED" if self.book.simulated else ""
        if self.monitor is not None:
            self.run_worker(self.monitor.remove(name), name=f"removing {name}", exit_on_error=False)
        if pod.saved:
            self.book.unsave(name)

    def action_terminate_pod(self) -> None:
        pod = self._selected_pod()
        if pod is None:
            return
        snap = self.book.snapshots.get(pod.name)
        latest = snap.latest if snap is not None else None
        ckpts = len(latest.ckpts) if latest is not None else 0
        note = f", including {ckpts} checkpoint(s) — back them up first (Checkpoints, b)" if ckpts else ""
        self.rentals.terminate(pod, note)

    def action_reconnect(self) -> None:
        name = self.selected
        if name is not None and self.monitor is not None:
            self.monitor.reconnect(name)
            self.notify(f"Reconnecting {name}…")

    def _start(self, pod: Pod) -> None:
        """A pod into the sidebar and watched."""
        self._list_pod(pod)
        if not self._watching:
            self._start_watching()  # every pod listed so far, this one included
        else:
            self._start_background()  # (its cleanup daemon and runs dir before the pod is watched)
            self._watch(pod)

    def _list_pod(self, pod: Pod) -> None:
        self.book.add(pod)
        self.pod_list.add_pod(pod)
        self.sub_title = "SIMULATED" if self.book.simulated else ""

    def _start_watching(self) -> None:
        """What watches the pods, started once, just after the App's first frame (the first screen does not
        wait for its imports and the demo sandbox's set-up): the monitor on every pod listed, each connection
        started first; the lifecycle's background work (cleanup daemons, preemption tracker), auto-backup and
        the rentals' checks after the selected pod's first look (_mount_other_panes: ~40-100 ms of imports and
        set-up on loaded cores, which held the probes' start back), given the snapshots that came meanwhile.
        The monitor is told the runs dir before any connection: a pod without run_dir follows its newest
        launch recorded there."""
        if self._watching or self.monitor is None:  # started, or the App not mounted yet
            return
        self._watching = True
        from app.demo import DemoInApp
        from app.lifecycle_bg import runs_dir

        self._demo = DemoInApp(self)
        self.monitor.rented_at = self._rented_at  # "$ so far" of a rented pod counts from its creation
        self.monitor.runs_dir = runs_dir()
        for pod in list(self.book.values()):
            self._watch(pod)

    def _start_background(self) -> None:
        """The lifecycle's background work and auto-backup (once, after _start_watching), given the watched pods
        and, in order, every snapshot that came before them; then the rentals' checks."""
        if self._lifecycle_bg is not None or not self._watching:
            return
        from app.auto_backup import AutoBackup
        from app.lifecycle_bg import BackgroundLifecycle  # cleanup daemons + preemption tracker

        assert self._demo is not None
        self._lifecycle_bg = BackgroundLifecycle(self, demo=self._demo)
        self._auto_backup = AutoBackup(self)  # fed every snapshot of every pod, whatever is on screen
        watched = set(self.monitor.names()) if self.monitor is not None else set()
        for pod in list(self.book.values()):
            if pod.name in watched:
                self._lifecycle_bg.add(pod)
        early, self._early_snapshots = self._early_snapshots, []
        for snapshot in early:
            if snapshot.pod.name in self.book:
                self._lifecycle_bg.observe(snapshot)
                self._auto_backup.observe(snapshot)
        self.rentals.start()

    def _rented_at(self, pod: Pod) -> float | None:
        rental = self.rentals.rental_for(pod)
        return rental.created_at if rental is not None else None

    def _watch(self, pod: Pod) -> None:
        assert self._demo is not None
        prepared = self._demo.start(pod) if pod.simulated else pod  # the demo pod: its sandbox and run
        if prepared is not pod:
            self.book.replace(prepared, save=False)
        if self._lifecycle_bg is not None:
            self._lifecycle_bg.add(prepared)
        if self.monitor is not None:
            try:
                self.monitor.add(prepared)
            except ValueError as err:  # still being removed from a moment ago
                self.notify(str(err), severity="error")

    @property
    def watching(self) -> bool:
        """The pods are watched (monitor, lifecycle background, auto-backup): from the selected pod's first look
        (at the latest FIRST_LOOK_WAIT after the first frame)."""
        return self._lifecycle_bg is not None

    @property
    def lifecycle_bg(self) -> BackgroundLifecycle:
        """Cleanup daemons, preemption tracker, the demo pod's sandbox (app/lifecycle_bg.py): started after the
        selected pod's first look, or here if something asks before."""
        self._start_watching()
        self._start_background()
        assert self._lifecycle_bg is not None, "the App is not mounted yet"
        return self._lifecycle_bg

    @property
    def auto_backup(self) -> AutoBackup:
        """Fed every snapshot of every pod, whatever is on screen (app/auto_backup.py); started as lifecycle_bg."""
        self._start_watching()
        self._start_background()
        assert self._auto_backup is not None, "the App is not mounted yet"
        return self._auto_backup

    # -- what the controllers ask (app/host.py) ----------------------------------------------------------

    def on_run_started(self, message: RunStarted) -> None:
        """A launch or resume is done: its run dir becomes the pod's (sidebar, pods.toml for a saved pod) and
        the monitor reopens its probe on it, so progress and run alerts follow the run just started."""
        name, run_dir = message.pod, message.run_dir
        pod, monitor = self.book.get(name), self.monitor
        if pod is None or not run_dir or monitor is None:
            return
        if pod.run_dir and run_dir.rstrip("/").endswith("/" + pod.run_dir.strip("/")):
            return  # the pods.toml run_dir (relative to the home) the launch used: already watched
        if monitor.set_run_dir(name, run_dir) is None and pod.run_dir == run_dir:
            return
        self.book.replace(replace(pod, run_dir=run_dir))

    def on_deadline_moved(self, message: DeadlineMoved) -> None:
        """A rented pod's deadline moved (kept at start-up): the sidebar's countdown and pods.toml follow."""
        pod = self.book.get(message.name)
        if pod is not None:
            self.book.replace(replace(pod, deadline=message.deadline))

    def on_pod_rented(self, message: PodRented) -> None:
        """A pod rented a moment ago: into the sidebar, pods.toml, and selected."""
        pod = message.pod
        if pod.name in self.book:
            self.forget_pod(pod.name)
        self._start(pod)
        self.book.save(pod)
        self.pod_list.select(pod.name)

    def on_pod_terminated(self, message: PodTerminated) -> None:
        self.forget_pod(message.name)

    def on_pod_lost(self, message: PodLost) -> None:
        if self._lifecycle_bg is not None and self._lifecycle_bg.tracker is not None:
            self._lifecycle_bg.tracker.mark_terminated(message.name)

    def on_run_interrupted(self, message: RunInterrupted) -> None:
        self.rentals.record_preemption(message.pod, message.run_id)

    def on_config_offered(self, message: ConfigOffered) -> None:
        """The Config pane opens the offered file when it has none; a pane not mounted yet (it mounts just after
        the first screen) opens the App's ``config_path``."""
        pane = self.mounted(CONFIG)
        if pane is None:
            if self.config_path is None:
                self.config_path = message.path
        elif pane.path is None:
            pane.open(message.path)

    # -- run dialogs (app/run_actions.py) ----------------------------------------------------------------

    def action_launch(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self.dialogs.launch(pod, self.mounted(CONFIG), self.config_path)

    def action_kill(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self.dialogs.open("kill", pod)

    def action_resume(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self.dialogs.open("resume", pod)

    def action_cleanup(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self.dialogs.open("cleanup", pod)

    def action_tasks(self) -> None:
        self.dialogs.show_tasks()

    async def action_quit(self) -> None:
        self.dialogs.quit()

    # -- screens -----------------------------------------------------------------------------------------

    def action_spend(self) -> None:
        """The Spend view: the spend ledger and whether a watcher enforces budgets (app/screens/spend.py)."""
        from app.screens.spend import SpendScreen

        if self.screen is self.screen_stack[0]:
            self.push_screen(SpendScreen())

    def action_fleet(self) -> None:
        """Toggle the fleet view."""
        if fleet_shown(self.screen) is not None:
            self.pop_screen()
        elif self.screen is self.screen_stack[0]:
            from app.screens.fleet import FleetScreen

            self.push_screen(
                FleetScreen(
                    (self.book.snapshots[n] for n in self.book if n in self.book.snapshots), self.book.alert_log
                )
            )

    def action_wizard(self) -> None:
        """The config wizard, from anywhere; the file it saves opens in the Config pane."""
        from app.screens.save_as import free_name
        from app.screens.wizard import WizardScreen

        config = self.mounted(CONFIG)  # (None in the App's first instant)
        folder = config.path.parent if config is not None and config.path is not None else Path.cwd()
        self.push_screen(WizardScreen(free_name(folder)), self._wizard_saved)

    def _wizard_saved(self, path: Path | None) -> None:
        if path is None:
            return
        from app.panes.config import ConfigPane

        config = self.screen_stack[0].query_one(ConfigPane)

        def open_it(yes: bool | None = True) -> None:
            if yes:
                config.open(path)
                self.action_show_pane(CONFIG.name)
            else:
                self.notify(f"The wizard's config is saved as {path}; the Config pane kept your edits.")

        if config.modified:
            self.push_screen(
                ConfirmScreen(
                    f"The Config pane has unsaved edits of {config.path}. Open {path.name} "
                    "instead (your edits are lost)?"
                ),
                open_it,
            )
        else:
            open_it()

    def action_help(self) -> None:
        pane = self.active_pane()
        title = (self.tabs.active or "").title() + " pane" if pane is not None else ""
        from app.screens.help import HelpScreen, help_rows

        self.push_screen(HelpScreen(help_rows(self, self.screen, pane, title)))

    # -- rented pods (app/rentals.py) and the panes' messages --------------------------------------------

    def on_offers_pane_rent_requested(self, message: OffersPane.RentRequested) -> None:
        self.rentals.request(message.ranked)

    def on_config_pane_validated(self, message: ConfigPane.Validated) -> None:
        pane = self.offers_pane
        config = self.mounted(CONFIG)
        if pane is not None and config is not None and message.report.data is not None:
            pane.use_config(message.report.data, config.path.name if config.path else "the config")

    def palette_commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        """What the command palette offers now: every action of the App and of every pane, with the
        pod or pane it acts on ("demo: kill run", "Offers: refresh offers"). Each is a binding's action,
        so keys and palette agree."""
        commands: list[tuple[str, str, Callable[[], object]]] = [
            ("Pod: add", "user@host[:port], an ssh alias, local or demo", self.action_add_pod),
            ("Config: open the wizard", "Model, environment, GPUs: a config that validates (w)", self.action_wizard),
        ]
        name = self.selected
        if name is not None:
            pod = self.book.get(name)
            commands += [
                (f"{name}: launch run", "Pre-flight checks, then start the run (L)", self.action_launch),
                (f"{name}: kill run", "Stop the run's processes and free the GPUs (asks first; k)", self.action_kill),
                (f"{name}: resume run", "From the newest complete checkpoint (asks first; R)", self.action_resume),
                (f"{name}: clean up checkpoints", "Preview, then delete old checkpoints (c)", self.action_cleanup),
                (f"{name}: reconnect", "Retry now, skip the backoff (r)", self.action_reconnect),
                (f"{name}: remove from the list", "Stop watching it (asks first; d)", self.action_remove_pod),
            ]
            if pod is not None and pod.provider:
                commands.append(
                    (f"{name}: terminate rented pod", "Stop paying for it (asks first; T)", self.action_terminate_pod)
                )
        main = self.main()
        if main is not None:
            for pane in PANE_REGISTRY:
                if (widget := self.mounted(pane)) is None:  # mounted just after the first screen
                    continue
                for binding in type(widget).BINDINGS:
                    if isinstance(binding, Binding) and binding.show:
                        key = self.get_key_display(binding)
                        commands.append(
                            (
                                f"{pane.title}: {binding.description.lower()}",
                                f"Shows the {pane.title} pane and does it ({key})",
                                partial(self.keys.run_pane_action, pane, binding.action),
                            )
                        )
        active = main.tabs.active if main is not None else None
        commands += [
            (f"Go to: {p.title}", f"Show the {p.title} pane ({n})", partial(self.action_show_pane, p.name))
            for n, p in enumerate(PANE_REGISTRY, 1)
            if p.name != active
        ]
        running = len(self.tasks.running())
        commands.append(
            ("Show tasks", f"Launch/kill/resume/clean-up actions ({running} running; t)", self.action_tasks)
        )
        commands.append(("Fleet view", "Every pod at once (o)", self.action_fleet))
        commands.append(("Spend", "Every rented pod's cost, per run and per day ($)", self.action_spend))
        return commands + [("Show help", "Every key, from the live bindings (?)", self.action_help)]
