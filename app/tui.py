"""PrimeTrainApp: composition, global bindings, the command palette, the worker error hub.

The rest of the App lives beside it as mixins: app/frames.py (snapshots -> one PodUpdated per frame ->
widgets; the tick), app/pane_keys.py (the panes' keys whatever has the focus), app/pod_actions.py (the
pods in the sidebar, pods.toml) and app/run_actions.py (launch, kill, resume, clean up).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.widget import Widget
from textual.widgets import Header, TabbedContent, TabPane

from app.frames import FRAME_S, PodUpdated, SnapshotFrames
from app.palette import PodCommands
from app.pane_keys import PANES, PaneKeys, app_action_keys
from app.pod_actions import PodActions
from app.rentals import Rentals
from app.run_actions import RunActions
from app.screens import fleet_shown
from app.tasks import Tasks
from app.worker_hub import install as install_worker_hub
from services.errors import PrimeTrainError
from services.models import Alert, Pod, PodSnapshot
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.text import plain
from widgets.footer import Footer
from widgets.monitor_pane import MonitorPane
from widgets.pod_list import PodList

if TYPE_CHECKING:  # the four panes not on the first screen are imported when they mount (~20 ms of start-up)
    from app.auto_backup import AutoBackup
    from app.lifecycle_bg import BackgroundLifecycle
    from app.panes.config import ConfigPane
    from app.panes.offers import OffersPane

__all__ = ["APP_ACTION_KEYS", "FRAME_S", "PANES", "STYLES", "PodUpdated", "PrimeTrainApp"]

FIRST_PANE = "monitor"  # the pane on the first screen; the others mount once it is painted

STYLES = Path(__file__).resolve().parent.parent / "styles" / "app.tcss"
MonitorFactory = Callable[[Callable[[PodSnapshot], None]], MonitorService]

def _default_rentals(app: PrimeTrainApp) -> Rentals:
    from app.settings import data_dir, load_offer_settings
    from services.offers.rentals import AUDIT_NAME, AuditLog

    try:
        settings = load_offer_settings()
    except PrimeTrainError as err:
        app._notices = (*app._notices, f"{err} — offers use the defaults")
        settings = {}
    return Rentals(app, AuditLog(data_dir() / AUDIT_NAME), settings=settings)



class PrimeTrainApp(PodActions, SnapshotFrames, PaneKeys, RunActions, App[None]):
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
        rentals: Callable[[PrimeTrainApp], Rentals] | None = None,
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
        self._live: dict[str, Widget] = {}
        self._toasted: dict[str, frozenset[str]] = {}  # pod -> alert ids already toasted (while they last)
        self.alert_log: deque[tuple[str, Alert]] = deque(maxlen=500)  # (pod, alert) as they fired
        self.rentals = (rentals or _default_rentals)(self)
        self._lifecycle_bg: BackgroundLifecycle | None = None  # made just after the first frame (_start_watching)
        self._auto_backup: AutoBackup | None = None
        self.tasks = Tasks(self)  # launch/kill/resume/cleanup as app tasks: the task list (t)
        self.tasks.on_finish.append(self._task_finished)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every toast is plain text, whoever asks (a widget's ``notify`` passes ``markup=True`` by default):
        toasts carry log lines, exceptions, provider and pod text, where ``[/x]`` ended the App with a
        MarkupError and ``[@click=...]`` made an action. Escape sequences are removed (``plain``)."""
        super().notify(plain(message), title=plain(title, oneline=True), severity=severity, timeout=timeout,
                       markup=False)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield PodList(id="pods")
            with TabbedContent(initial=FIRST_PANE, id="panes"):
                for pane in PANES:
                    with TabPane(pane.title(), id=pane):
                        if pane == FIRST_PANE:
                            yield self._pane_widget(pane)
        yield Footer()

    async def _mount_other_panes(self) -> None:
        """The panes not on the first screen, mounted once it is painted: composing and styling them (some 250 of
        the ~400 widgets, the config editor, the offers table) before it made the first screen wait ~100 ms more
        (tests/benchmarks/startup.py). Nothing waits on them meanwhile: a key for one of them finds it mounted,
        and what the App gives them at start (the Config pane's file) they read when they mount."""
        if not self.screen_stack:
            return
        main = self.screen_stack[0]
        mounts = []
        for pane in PANES:
            if pane == FIRST_PANE:
                continue
            widget = self._pane_widget(pane)
            mounts.append(main.query_one(f"TabPane#{pane}", TabPane).mount(widget))
            if pane in ("bottleneck", "checkpoints"):
                self._live[pane] = widget
        for mounted in mounts:
            await mounted
        if self._main_widgets_ready() and self._on_main_screen() and self.tabs.active != FIRST_PANE:
            self._refresh_live_pane()  # a key showed one of them before it came: draw it, focus it now
            self._focus_pane()
        self.call_after_refresh(self._settle_collector)

    @staticmethod
    def _settle_collector() -> None:
        """Once the whole first screen is up: what start-up made (widgets, styles, modules) lives as long as
        the app, and Python's full collections scanned it all again every few hundred allocations (a 75-150 ms
        pause every ~10 keystrokes in a 1,000-line config, tests/benchmarks/editor_latency.py): freeze it.
        `prime-train-tui` turns the collector off while it starts (app.cli.tui_app: its ~200 collections
        found next to nothing and cost ~45 ms before the first paint); it comes back on here."""
        gc.freeze()
        gc.enable()

    def _pane_widget(self, pane: str) -> Widget:  # PANES order: config, offers, monitor, ...
        if pane == "config":
            from app.panes.config import ConfigPane

            return ConfigPane(self.config_path, id="config-pane")
        if pane == "monitor":
            return MonitorPane(id="monitor-pane")
        if pane == "bottleneck":
            from app.panes.bottleneck import BottleneckPane

            return BottleneckPane(id="bottleneck-pane")
        if pane == "checkpoints":
            from app.panes.checkpoints import CheckpointsPane

            return CheckpointsPane(id="checkpoints-pane")
        from app.panes.offers import OffersPane, default_fetcher, demo_fetcher
        from app.settings import cache_dir

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
        for pod in self.initial_pods:
            self._list_pod(pod)  # in the sidebar from the first frame, watched just after it
            self._show_connecting(pod)
        self.pod_list.focus()
        self.set_interval(1.0, self._tick)
        for notice in self._notices:
            self.notify(notice, severity="warning", timeout=10)
        self.call_after_refresh(self._start_watching)
        self.call_after_refresh(self._mount_other_panes)
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

            self.push_screen(FleetScreen((self.snapshots[n] for n in self.pods if n in self.snapshots),
                                         self.alert_log))

    @property
    def watching(self) -> bool:
        """The pods are watched (monitor, lifecycle background, auto-backup): from just after the first frame."""
        return self._lifecycle_bg is not None

    @property
    def lifecycle_bg(self) -> BackgroundLifecycle:
        """Cleanup daemons, preemption tracker, the demo pod's sandbox (app/lifecycle_bg.py): started with the
        pods' watching just after the first frame, or here if something asks before."""
        self._start_watching()
        assert self._lifecycle_bg is not None, "the App is not mounted yet"
        return self._lifecycle_bg

    @property
    def auto_backup(self) -> AutoBackup:
        """Fed every snapshot of every pod, whatever is on screen (app/auto_backup.py); started as lifecycle_bg."""
        self._start_watching()
        assert self._auto_backup is not None, "the App is not mounted yet"
        return self._auto_backup

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
            self._live["monitor"] = self._main[1]  # (Bottleneck, Checkpoints: added as they mount)
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

    def action_wizard(self) -> None:
        """The config wizard, from anywhere; the file it saves opens in the Config pane."""
        from app.screens.save_as import free_name
        from app.screens.wizard import WizardScreen

        config = self.mounted_pane("config")  # (None in the App's first instant)
        folder = config.path.parent if config is not None and config.path is not None else Path.cwd()
        self.push_screen(WizardScreen(free_name(folder)), self._wizard_saved)

    def _wizard_saved(self, path: Path | None) -> None:
        if path is None:
            return
        from app.panes.config import ConfigPane
        from app.screens.confirm import ConfirmScreen

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

    def action_help(self) -> None:
        pane = self.active_pane()
        title = (self.tabs.active or "").title() + " pane" if pane is not None else ""
        from app.screens.help import HelpScreen, help_rows

        self.push_screen(HelpScreen(help_rows(self, self.screen, pane, title)))

    # -- rented pods (app/rentals.py) ------------------------------------------------------------------

    @property
    def offers_pane(self) -> OffersPane | None:
        return self.mounted_pane("offers")

    def on_offers_pane_rent_requested(self, message: OffersPane.RentRequested) -> None:
        self.rentals.request(message.ranked)

    def on_config_pane_validated(self, message: ConfigPane.Validated) -> None:
        pane = self.offers_pane
        config = self.mounted_pane("config")
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
            for pane in PANES:
                if (widget := self.mounted_pane(pane)) is None:  # mounted just after the first screen
                    continue
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
        commands.append(("Show tasks", f"Launch/kill/resume/clean-up actions ({running} running; t)",
                         self.action_tasks))
        commands.append(("Fleet view", "Every pod at once (o)", self.action_fleet))
        commands.append(("Spend", "Every rented pod's cost, per run and per day ($)", self.action_spend))
        return commands + [("Show help", "Every key, from the live bindings (?)", self.action_help)]


# action -> the keys the App binds to it (a pane binding the same key takes it while it is on screen)
APP_ACTION_KEYS: dict[str, list[str]] = app_action_keys(PrimeTrainApp)
