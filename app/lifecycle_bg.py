"""What the App runs besides the lifecycle dialogs: a cleanup daemon per pod with cleanup enabled in
settings (its dry-run preview shown once for approval), the preemption tracker fed every snapshot (with the
auto-resume policy of settings), and the monitor following the run a launch or resume started."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.host import AppHost, RunInterrupted, RunStarted

if TYPE_CHECKING:
    from app.demo import DemoInApp


def runs_dir() -> Path:
    """Where this machine records the runs it launches (the lifecycle settings' ``runs_dir``): the monitor
    follows a pod without run_dir to its newest launch there. Cheap (no lifecycle imports): the App tells the
    monitor before any pod connects, and sets up this module's background after the first look."""
    from app.settings import data_dir

    return data_dir() / "runs"


class BackgroundLifecycle:
    """What the App runs besides the modals: a cleanup daemon per pod with cleanup enabled in settings
    (its dry-run preview shown once for approval), and the preemption tracker fed every snapshot (with
    the auto-resume policy of settings). A run started is said to the App with ``RunStarted``."""

    def __init__(
        self,
        app: AppHost,
        settings: Any = None,
        backup: Any = None,
        connect: Callable[[Any], Any] | None = None,
        demo: DemoInApp | None = None,
    ) -> None:
        from app.screens.lifecycle import backup_settings, default_connect, lifecycle_settings
        from services.lifecycle.preemption import AutoResumer, PreemptionTracker

        self.app = app
        try:
            self.settings = lifecycle_settings(settings)
        except Exception as exc:  # noqa: BLE001 - a broken settings.toml: say so, run without the workers
            from services.lifecycle.preflight import LifecycleSettings

            app.notify(f"{exc}", severity="error", title="Lifecycle settings: cleanup daemon and preemption off")
            self.settings = LifecycleSettings()
        self.backup = backup_settings(backup)
        self.connect = connect or default_connect
        self.daemons: dict[str, Any] = {}
        self._workers: dict[str, Any] = {}
        self._asked: set[str] = set()
        if demo is None:
            from app.demo import DemoInApp

            demo = DemoInApp(app)
        self.demo = demo  # the demo pod's sandbox and run (app/demo.py): the App's, made before this
        self.tracker = (
            PreemptionTracker.from_settings(self.settings, clock=app.clock)
            if self.settings.runs_dir is not None
            else None
        )
        self.resumer = (
            AutoResumer(self.tracker, self.settings, self.connect, self.backup) if self.tracker is not None else None
        )
        app.set_interval(5.0, self.tick)

    def prepare_pod(self, pod: Any) -> Any:
        """A pod about to be watched: the demo pod gets its sandbox (started fresh) and its run launched
        there through the lifecycle; any other pod is returned as it is."""
        return self.demo.start(pod) if getattr(pod, "simulated", False) else pod

    def run_started(self, record: Any) -> None:
        """A launch or resume is done (its last event's data, a run record): the App makes its run dir the pod's
        (sidebar, pods.toml for a saved pod) and the monitor follows the run just started."""
        if (started := RunStarted.of(record)) is not None:
            self.app.post_message(started)

    def add(self, pod: Any) -> None:
        if pod.name in self.daemons or not self.settings.cleanup_enabled(pod.name) or pod.simulated:
            return
        from services.lifecycle.auto_cleanup import CleanupDaemon

        daemon = CleanupDaemon(
            pod,
            self.settings,
            connect=self.connect,
            backup=self.backup,
            clock=self.app.clock,
            on_event=functools.partial(self._daemon_event, pod.name),
        )
        self.daemons[pod.name] = daemon
        self._workers[pod.name] = self.app.run_worker(
            daemon.run(), name=f"cleanup daemon {pod.name}", group="lifecycle-background", exit_on_error=False
        )

    def remove(self, name: str) -> None:
        self.demo.stop(name)  # the demo pod removed: its simulated run stops
        self.daemons.pop(name, None)
        self._asked.discard(name)
        worker = self._workers.pop(name, None)
        if worker is not None:
            worker.cancel()

    def observe(self, snapshot: Any) -> None:
        """Every monitor snapshot (cheap: no I/O unless a pod has been down for N minutes)."""
        daemon = self.daemons.get(snapshot.pod.name)
        if daemon is not None:
            daemon.observe(snapshot)
        if self.tracker is not None:
            self._act(self.tracker.observe(snapshot))

    def tick(self) -> None:
        if self.tracker is not None:
            self._act(self.tracker.check())

    def _act(self, decisions: list[Any]) -> None:
        for d in decisions:
            if d.kind == "interrupted":
                self.app.notify(f"run {d.run_id} marked interrupted", title=d.reason, severity="warning", timeout=15)
                self.app.post_message(RunInterrupted(d.pod, d.run_id))  # a rented pod's rental counts it
            elif d.kind == "give_up":
                self.app.notify(d.reason, title="Auto-resume", severity="error", timeout=15)
            elif d.kind == "resume" and self.resumer is not None and self.tracker is not None:
                if watcher_running():  # one process resumes a run: the watcher, which also runs with the app closed
                    self.tracker.handed_over(d)
                    self.app.notify(f"{d.reason.replace('resuming', 'the watcher resumes', 1)}", title="Auto-resume")
                    continue
                self.app.notify(d.reason, title="Auto-resume")
                self.app.run_worker(
                    self._resume(d), name=f"auto-resume {d.run_id}", group="lifecycle-background", exit_on_error=False
                )

    async def _resume(self, decision: Any) -> None:
        assert self.resumer is not None  # only started when auto-resume is on (_act)
        last = await self.resumer.execute(decision)
        if last.kind == "done":
            self.run_started(last.data)
            self.app.notify(last.message, title=f"Auto-resumed on {decision.target}")
        elif not (last.data or {}).get("waiting"):  # waiting: the pod did not answer yet, resumed when it does
            self.app.notify(last.message, title="Auto-resume failed", severity="error", timeout=15)

    def _daemon_event(self, pod: str, ev: Any) -> None:
        daemon = self.daemons.get(pod)
        if ev.data and "preview" in ev.data and daemon is not None and pod not in self._asked:
            from app.screens.lifecycle import CleanupPreviewScreen

            self._asked.add(pod)
            self.app.push_screen(CleanupPreviewScreen(pod, ev.data["preview"]), functools.partial(self._answered, pod))
        elif ev.kind == "done" and ev.data and ev.data.get("deleted"):
            self.app.notify(ev.message, title=f"Cleanup daemon · {pod}")
        elif ev.kind == "error" and "no run recorded" not in ev.message:
            self.app.notify(ev.message, title=f"Cleanup daemon · {pod}", severity="warning")

    def _answered(self, pod: str, yes: bool | None) -> None:
        daemon = self.daemons.get(pod)
        if daemon is None:
            return
        if yes:
            daemon.approve()
        else:
            self._asked.discard(pod)  # asked again at its next round that has deletions


def watcher_running() -> bool:
    """A headless watcher holds this data dir's lock (services/watch/lock.py)."""
    from app.settings import data_dir
    from services.watch.lock import LOCK_NAME, holder_alive, read_holder

    try:
        return holder_alive(read_holder(data_dir() / LOCK_NAME))
    except Exception:  # noqa: BLE001 - unknown: this app resumes, as without a watcher
        return False
