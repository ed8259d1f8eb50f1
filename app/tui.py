"""PrimeTrainApp: composition, global bindings, the command palette provider, the worker error hub.

Data flows one way: monitor ``on_snapshot`` -> one :class:`PodUpdated` per frame (FRAME_S) -> handlers -> widgets.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Header, Input, TabbedContent, TabPane, TextArea

from app.auto_backup import AutoBackup
from app.screens.add_pod import AddPodScreen
from app.screens.confirm import ConfirmScreen
from app.screens.fleet import FleetScreen
from app.screens.help import HelpScreen, help_rows
from app.screens.host_key import HostKeyChangedScreen, HostKeyScreen
from app.settings import add_saved_pod, remove_saved_pod
from services.errors import PrimeTrainError
from services.models import Alert, Pod, PodKind, PodSnapshot, PodState
from services.monitor.service import MonitorService, MonitorSettings
from services.pod.specs import parse_pod_spec
from app.panes.bottleneck import BottleneckPane
from widgets.alerts import TOAST_SEVERITY
from app.panes.checkpoints import CheckpointsPane
from app.panes.config import ConfigPane
from app.palette import PodCommands
from app.panes.offers import OffersPane
from app.rentals import Rentals
from app.run_actions import RunActions
from app.tasks import Tasks
from app.worker_hub import install as install_worker_hub
from widgets.monitor_pane import MonitorPane
from widgets.footer import Footer
from widgets.pod_list import PodList

STYLES = Path(__file__).resolve().parent.parent / "styles" / "app.tcss"
PANES = ("config", "offers", "monitor", "bottleneck", "checkpoints")
# What gets the focus when a pane is shown (1-5, a tab click): its main widget, so arrows and Enter act
# there; None: the pod list (the Monitor pane follows the selected pod and has no keys of its own). Never a
# text field: there the number keys would type digits (Config opens on its findings; e edits, escape leaves).
PANE_FOCUS = {"config": "#config-findings", "offers": "#of-table", "monitor": None,
              "bottleneck": "#bottleneck-pane", "checkpoints": "#checkpoints-pane"}
PANE_IDS = {"config": "#config-pane", "offers": "#offers-pane", "monitor": "#monitor-pane",
            "bottleneck": "#bottleneck-pane", "checkpoints": "#checkpoints-pane"}


def _keys(binding: Binding) -> list[str]:
    return [k.strip() for k in binding.key.split(",")]
MonitorFactory = Callable[[Callable[[PodSnapshot], None]], MonitorService]


def _default_rentals(app: "PrimeTrainApp") -> "Rentals":
    from app.settings import data_dir, load_offer_settings
    from services.offers.rentals import AUDIT_NAME, AuditLog

    try:
        settings = load_offer_settings()
    except PrimeTrainError as err:
        app._notices = (*app._notices, f"{err} — offers use the defaults")
        settings = {}
    return Rentals(app, AuditLog(data_dir() / AUDIT_NAME), settings=settings)


FRAME_S = 0.2  # pods' snapshots reach the screen at most this often, together (one refresh, not one per pod)


class PodUpdated(Message):
    """Pods changed: their newest snapshots wait in App._pending; one message per frame for all of them."""


@functools.lru_cache(maxsize=None)
def _shown_keys(pane_type: type) -> dict[str, Binding]:
    """A pane class's shown keys: key -> binding (hidden ones, escape, stay with the focus)."""
    keys: dict[str, Binding] = {}
    for binding in pane_type.BINDINGS:
        if isinstance(binding, Binding) and binding.show:
            for key in _keys(binding):
                keys.setdefault(key, binding)
    return keys


class PrimeTrainApp(RunActions, App[None]):
    TITLE = "prime-train-tui"
    CSS_PATH = STYLES
    COMMANDS = App.COMMANDS | {PodCommands}
    BINDINGS = [
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
            Binding(str(n), f"show_pane('{pane}')", f"Go to {pane.title()}", id=f"pane_{pane}", show=False)
            for n, pane in enumerate(PANES, 1)
        ),
        Binding("left_square_bracket", "select_pod(-1)", "Previous pod", id="prev_pod", key_display="[",
                show=False),
        Binding("right_square_bracket", "select_pod(1)", "Next pod", id="next_pod", key_display="]", show=False),
        Binding("q", "quit", "Quit", id="quit"),
    ]

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
        rentals: Callable[["PrimeTrainApp"], "Rentals"] | None = None,
    ) -> None:
        super().__init__()
        install_worker_hub(self)  # no worker ends the App: failures are toasts and log lines
        self.initial_pods, self.monitor_settings, self.clock = list(pods), settings, clock
        self.pods_path, self._monitor_factory, self._notices = pods_path, monitor_factory, tuple(notices)
        self.monitor: MonitorService | None = None
        self.config_path = config_path
        self.pods: dict[str, Pod] = {}
        self.snapshots: dict[str, PodSnapshot] = {}
        self._pending: dict[str, PodSnapshot] = {}
        self._flush_due, self._last_flush = False, 0.0  # a PodUpdated is on its way; when the last one ran
        self._prompted: set[tuple[str, str]] = set()  # (pod, fingerprint) host-key modals shown
        self._pods_file_lock = asyncio.Lock()
        self._main: tuple[PodList, MonitorPane, TabbedContent] | None = None
        self._live: dict[str, MonitorPane | BottleneckPane | CheckpointsPane] = {}
        self._toasted: dict[str, frozenset[str]] = {}  # pod -> alert ids already toasted (while they last)
        self.alert_log: deque[tuple[str, Alert]] = deque(maxlen=500)  # (pod, alert) as they fired
        self.rentals = (rentals or _default_rentals)(self)
        self.tasks = Tasks(self)  # launch/kill/resume/cleanup as app tasks: the task list (t)
        self.tasks.on_finish.append(self._task_finished)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield PodList(id="pods")
            with TabbedContent(initial="monitor", id="panes"):
                for pane in PANES:
                    with TabPane(pane.title(), id=pane):
                        yield self._pane_widget(pane)
        yield Footer()

    def _pane_widget(self, pane: str) -> Widget:  # PANES order: config, offers, monitor, ...
        if pane == "config":
            return ConfigPane(self.config_path, id="config-pane")
        if pane == "monitor":
            return MonitorPane(id="monitor-pane")
        if pane == "bottleneck":
            return BottleneckPane(id="bottleneck-pane")
        if pane == "checkpoints":
            return CheckpointsPane(id="checkpoints-pane")
        from app.settings import cache_dir

        from app.panes.offers import default_fetcher, demo_fetcher

        demo = any(p.simulated for p in self.initial_pods)
        return OffersPane(id="offers-pane", cache_dir=cache_dir(), observed_path=self.rentals.observations.path,
                          fetcher=demo_fetcher if demo else default_fetcher,
                          cache_ttl=float(self.rentals.settings.get("cache_ttl", 600)))

    def on_mount(self) -> None:
        self.theme = "textual-dark"
        factory = self._monitor_factory or (
            lambda cb: MonitorService(cb, settings=self.monitor_settings, clock=self.clock)
        )
        self.monitor = factory(self.on_snapshot)
        from app.lifecycle_bg import BackgroundLifecycle  # cleanup daemons + preemption tracker

        self.lifecycle_bg = BackgroundLifecycle(self)
        self.auto_backup = AutoBackup(self)  # fed every snapshot of every pod, whatever is on screen
        for pod in self.initial_pods:
            self._start(pod)
        self.pod_list.focus()
        self.set_interval(1.0, self._tick)
        for notice in self._notices:
            self.notify(notice, severity="warning", timeout=10)
        from app.settings import data_dir
        from services.watch.state import watch_notice  # is a headless watcher running, what it saw meanwhile

        if (watched := watch_notice(data_dir())) is not None:
            self.notify(watched, title="Watcher", timeout=20)
        self.rentals.start()

    def on_resize(self, event: events.Resize) -> None:
        """Small terminals: the sidebar narrows (classes read by styles/app.tcss), the panes keep the room."""
        width = event.size.width
        self.set_class(width < 130, "-narrow")
        self.set_class(width < 100, "-compact")
        self.set_class(event.size.height < 32, "-short")

    async def on_unmount(self) -> None:
        if self.monitor is not None:
            await self.monitor.aclose()

    def on_snapshot(self, snapshot: PodSnapshot) -> None:
        """Called by the monitor on the event loop for every change: keep it cheap."""
        name = snapshot.pod.name
        self._pending[name] = snapshot
        if name in self.pods:  # a removed pod's last snapshots (still in flight) start nothing
            self.lifecycle_bg.observe(snapshot)
            self.auto_backup.observe(snapshot)
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
        return bool(self._pending) or self._flush_due or (isinstance(self.screen, FleetScreen)
                                                          and self.screen.frame_pending)

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
        if isinstance(self.screen, FleetScreen):
            self.screen.update_pod(snapshot)
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
                            severity=TOAST_SEVERITY[alert.severity], timeout=10)  # type: ignore[arg-type]
                self.alert_log.append((name, alert))
                if isinstance(self.screen, FleetScreen):
                    self.screen.alert_fired(name, alert)

    def action_spend(self) -> None:
        """The Spend view: the spend ledger and whether a watcher enforces budgets (app/screens/spend.py)."""
        from app.screens.spend import SpendScreen

        if self.screen is self.screen_stack[0]:
            self.push_screen(SpendScreen())

    def action_fleet(self) -> None:
        """Toggle the fleet view."""
        if isinstance(self.screen, FleetScreen):
            self.pop_screen()
        elif self.screen is self.screen_stack[0]:
            self.push_screen(FleetScreen((self.snapshots[n] for n in self.pods if n in self.snapshots),
                                         self.alert_log))

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
    # was a tenth of the app's CPU with 32 pods.
    @property
    def pod_list(self) -> PodList:
        return self._widgets()[0]

    @property
    def monitor_pane(self) -> MonitorPane:
        return self._widgets()[1]

    @property
    def tabs(self) -> TabbedContent:
        return self._widgets()[2]

    def _widgets(self) -> tuple[PodList, MonitorPane, TabbedContent]:
        if self._main is None:
            main = self.screen_stack[0]
            self._main = (main.query_one(PodList), main.query_one(MonitorPane), main.query_one(TabbedContent))
            self._live = {"monitor": self._main[1], "bottleneck": main.query_one(BottleneckPane),
                          "checkpoints": main.query_one(CheckpointsPane)}
        return self._main

    def _on_main_screen(self) -> bool:
        """The main screen shows (no modal on it); False while the App starts or stops (no screen at all:
        a timer firing then must not raise ScreenStackError)."""
        return bool(self.screen_stack) and self.screen is self.screen_stack[0]

    def _main_widgets_ready(self) -> bool:
        return self._main is not None and self._main[0].is_attached

    @property
    def selected(self) -> str | None:
        return self.pod_list.selected

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

    # -- keys: the visible pane's keys work whatever has the focus, and app keys never shadow them -------

    def active_pane(self) -> Widget | None:
        """The pane widget on screen (None under a modal or while the App starts or stops)."""
        if not self._main_widgets_ready() or not self._on_main_screen():
            return None
        selector = PANE_IDS.get(self.tabs.active or "")
        if not selector:
            return None
        cache: dict[str, Widget] = self.__dict__.setdefault("_pane_widgets", {})
        pane = cache.get(selector)  # footer and help ask on every refresh: one DOM query per pane, not per frame
        if pane is None or not pane.is_attached:
            found = self.screen_stack[0].query(selector)
            if not found:
                return None
            pane = cache[selector] = found.first()
        return pane

    def pane_bindings(self) -> dict[str, Binding]:
        """The visible pane's own keys: key -> binding."""
        pane = self.active_pane()
        return {} if pane is None else _shown_keys(type(pane))

    def _focus_pane(self) -> None:
        if not self._main_widgets_ready() or not self._on_main_screen():
            return
        selector = PANE_FOCUS.get(self.tabs.active or "")
        target = self.screen_stack[0].query(selector).first() if selector else self.pod_list
        if target.focusable:
            target.focus()

    async def on_key(self, event: events.Key) -> None:
        """A key no binding took (the focus is outside the visible pane, e.g. in the pod list): the
        pane's own binding for it runs. Text fields keep their keys."""
        if isinstance(self.focused, (Input, TextArea)) or event.key in ("tab", "shift+tab"):
            return
        pane = self.active_pane()
        binding = self.pane_bindings().get(event.key)
        if pane is None or binding is None:
            return
        if self.focused is not None and pane in self.focused.ancestors_with_self:
            return  # the focus is in the pane: its bindings had the key already
        event.stop()
        await self.run_action(binding.action, pane)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in APP_ACTION_KEYS and set(APP_ACTION_KEYS[action]) & set(self.pane_bindings()):
            return False  # the visible pane uses this key: it is the pane's (hidden here, run in on_key)
        if action in ("remove_pod", "reconnect", "launch", "kill", "resume", "cleanup", "terminate_pod"):  # None: shown dimmed (footer, help), not runnable
            return True if self._main_widgets_ready() and self.pod_list.selected else None
        return True

    def action_show_pane(self, pane: str) -> None:
        if self.tabs.active == pane:
            self._focus_pane()
        self.tabs.active = pane

    def action_wizard(self) -> None:
        """The config wizard, from anywhere; the file it saves opens in the Config pane."""
        from app.screens.save_as import free_name
        from app.screens.wizard import WizardScreen

        config = self.screen_stack[0].query_one(ConfigPane)
        folder = config.path.parent if config.path is not None else Path.cwd()
        self.push_screen(WizardScreen(free_name(folder)), self._wizard_saved)

    def _wizard_saved(self, path: Path | None) -> None:
        if path is None:
            return
        config = self.screen_stack[0].query_one(ConfigPane)

        def open_it(yes: bool | None = True) -> None:
            if yes:
                config.open(path)
                self.action_show_pane("config")
            else:
                self.notify(f"The wizard's config is saved as {path}; the Config pane kept your edits.")

        if config.modified:
            self.push_screen(ConfirmScreen(f"The Config pane has unsaved edits of {config.path}. Open {path.name} "
                                           "instead (your edits are lost)?"), open_it)
        else:
            open_it()

    def action_select_pod(self, step: int) -> None:
        names = list(self.pods)
        if not names:
            return
        at = names.index(self.selected) if self.selected in names else -1
        self.pod_list.select(names[(at + step) % len(names)])

    def action_help(self) -> None:
        pane = self.active_pane()
        title = (self.tabs.active or "").title() + " pane" if pane is not None else ""
        self.push_screen(HelpScreen(help_rows(self, self.screen, pane, title)))

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
        if pod.name in self.pods:
            self.notify(f"A pod named {pod.name} is already in the list.", severity="error")
            return
        if pod.kind is PodKind.SSH:
            pod = replace(pod, saved=True)
            self.run_worker(self._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)
        self._start(pod)
        self.pod_list.select(pod.name)

    def action_remove_pod(self) -> None:
        name = self.selected
        if name is None:
            return
        where = "It will be removed from pods.toml." if self.pods[name].saved else "It is not in pods.toml."
        self.push_screen(ConfirmScreen(f"Remove pod {name}? {where}"), partial(self._remove_confirmed, name))

    def _remove_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self.forget_pod(name)

    def forget_pod(self, name: str) -> None:
        """Stop watching a pod and drop it from the sidebar and pods.toml (which keeps a .bak)."""
        pod = self.pods.pop(name, None)
        self.lifecycle_bg.remove(name)
        self.auto_backup.remove(name)
        if pod is None:
            return
        self.snapshots.pop(name, None)
        self._pending.pop(name, None)
        self._toasted.pop(name, None)
        if isinstance(self.screen, FleetScreen):
            self.screen.remove_pod(name)
        self.pod_list.remove_pod(name)
        self.sub_title = "SIMULATED" if any(p.simulated for p in self.pods.values()) else ""
        if self.monitor is not None:
            self.run_worker(self.monitor.remove(name), name=f"removing {name}", exit_on_error=False)
        if pod.saved:
            self.run_worker(self._save_pods(remove=name), name="saving pods.toml", exit_on_error=False)

    # -- rented pods (app/rentals.py) ------------------------------------------------------------------

    @property
    def offers_pane(self) -> OffersPane | None:
        panes = self.screen_stack[0].query(OffersPane) if self.screen_stack else None
        return panes.first() if panes else None

    def on_offers_pane_rent_requested(self, message: OffersPane.RentRequested) -> None:
        self.rentals.request(message.ranked)

    def on_config_pane_validated(self, message: ConfigPane.Validated) -> None:
        pane = self.offers_pane
        if pane is not None and message.report.data is not None:
            config = self.screen_stack[0].query_one(ConfigPane)
            pane.use_config(message.report.data, config.path.name if config.path else "the config")

    def adopt_pod(self, pod: Pod) -> None:
        """A pod rented a moment ago: into the sidebar, pods.toml, and selected."""
        if pod.name in self.pods:
            self.forget_pod(pod.name)
        self._start(pod)
        self.run_worker(self._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)
        self.pod_list.select(pod.name)

    def move_deadline(self, name: str, deadline: float | None) -> None:
        """A rented pod's deadline moved (kept at start-up): the sidebar's countdown and pods.toml follow."""
        pod = self.pods.get(name)
        if pod is None:
            return
        pod = self.pods[name] = replace(pod, deadline=deadline)
        if (row := self.pod_list.row(name)) is not None:
            row.pod = pod
        if pod.saved:
            self.run_worker(self._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)

    def action_terminate_pod(self) -> None:
        pod = self._selected_pod()
        if pod is None:
            return
        snap = self.snapshots.get(pod.name)
        latest = snap.latest if snap is not None else None
        ckpts = len(latest.ckpts) if latest is not None else 0
        note = f", including {ckpts} checkpoint(s) — back them up first (Checkpoints, b)" if ckpts else ""
        self.rentals.terminate(pod, note)

    def _selected_pod(self) -> Pod | None:
        return self.pods.get(self.selected or "")

    def action_reconnect(self) -> None:
        name = self.selected
        if name is not None and self.monitor is not None:
            self.monitor.reconnect(name)
            self.notify(f"Reconnecting {name}…")

    def _start(self, pod: Pod) -> None:
        pod = self.lifecycle_bg.prepare_pod(pod)  # the demo pod: its sandbox and run (app/demo.py)
        self.pods[pod.name] = pod
        self.lifecycle_bg.add(pod)
        self.pod_list.add_pod(pod)
        self.sub_title = "SIMULATED" if any(p.simulated for p in self.pods.values()) else ""
        if self.monitor is not None:
            try:
                self.monitor.add(pod)
            except ValueError as err:  # still being removed from a moment ago
                self.notify(str(err), severity="error")

    async def _save_pods(self, *, add: Pod | None = None, remove: str | None = None) -> None:
        """Change one entry of pods.toml (off the event loop; one write at a time)."""
        async with self._pods_file_lock:
            if add is not None:
                await asyncio.to_thread(add_saved_pod, add, self.pods_path)
            if remove is not None:
                await asyncio.to_thread(remove_saved_pod, remove, self.pods_path)

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
            pod = self.pods.get(name)
            commands += [
                (f"{name}: launch run", "Pre-flight checks, then start the run (L)", self.action_launch),
                (f"{name}: kill run", "Stop the run's processes and free the GPUs (asks first; k)", self.action_kill),
                (f"{name}: resume run", "From the newest complete checkpoint (asks first; R)", self.action_resume),
                (f"{name}: clean up checkpoints", "Preview, then delete old checkpoints (c)", self.action_cleanup),
                (f"{name}: reconnect", "Retry now, skip the backoff (r)", self.action_reconnect),
                (f"{name}: remove from the list", "Stop watching it (asks first; d)", self.action_remove_pod),
            ]
            if pod is not None and pod.provider:
                commands.append((f"{name}: terminate rented pod", "Stop paying for it (asks first; T)",
                                 self.action_terminate_pod))
        if self._main_widgets_ready():
            main = self.screen_stack[0]
            for pane in PANES:
                widget = main.query(PANE_IDS[pane]).first()
                for binding in type(widget).BINDINGS:
                    if isinstance(binding, Binding) and binding.show:
                        key = self.get_key_display(binding)
                        commands.append((f"{pane.title()}: {binding.description.lower()}",
                                         f"Shows the {pane.title()} pane and does it ({key})",
                                         partial(self._run_pane_action, pane, binding.action)))
        active = self.tabs.active if self._main_widgets_ready() else None
        commands += [
            (f"Go to: {p.title()}", f"Show the {p.title()} pane ({n})", partial(self.action_show_pane, p))
            for n, p in enumerate(PANES, 1)
            if p != active
        ]
        running = len(self.tasks.running())
        commands.append(("Show tasks", f"Launch/kill/resume/clean-up actions ({running} running; t)", self.action_tasks))
        commands.append(("Fleet view", "Every pod at once (o)", self.action_fleet))
        commands.append(("Spend", "Every rented pod's cost, per run and per day ($)", self.action_spend))
        return commands + [("Show help", "Every key, from the live bindings (?)", self.action_help)]

    async def _run_pane_action(self, pane: str, action: str) -> None:
        self.action_show_pane(pane)
        widget = self.screen_stack[0].query(PANE_IDS[pane]).first()
        await self.run_action(action, widget)

    # The worker error hub is app/worker_hub.py (installed in __init__): every worker of the App, its panes
    # and modals runs with exit_on_error=False, and its failure is a toast and a line in the log.


# action -> the keys the App binds to it (a pane binding the same key takes it while it is on screen)
APP_ACTION_KEYS: dict[str, list[str]] = {}
for _b in PrimeTrainApp.BINDINGS:
    if isinstance(_b, Binding):
        APP_ACTION_KEYS.setdefault(_b.action.split("(")[0], []).extend(_keys(_b))
