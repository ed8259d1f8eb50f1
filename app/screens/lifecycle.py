"""The modal for launch / kill / resume / cleanup: a confirm step showing what will be started, killed or
deleted, then the pre-flight checks (✓/✗ with their fixes) and the progress of the action.

``lifecycle_screen(action, pod, ...)`` builds it; the app pushes it (keys L / k / R / c). The screen
connects to the pod itself for the plan; the action then runs as an app task (app/tasks.py), so
"Background" closes the dialog while the action goes on (the task list, t, shows it). Escape cancels
the plan or the action (and so the action's generator). It dismisses with the action's final event
(``kind`` "done" or "error"), or None when cancelled or sent to the background.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, ProgressBar, Static

PlanFn = Callable[[Any], Awaitable[str]]
RunFn = Callable[[Any, bool], AsyncIterator[Any]]

_MARK_STYLE = {"ok": "green", "fail": "red", "skip": "yellow", "warn": "yellow"}


class LifecycleScreen(ModalScreen["Any | None"]):
    DEFAULT_CSS = """
    LifecycleScreen .dialog { width: 90; max-height: 90%; }
    LifecycleScreen #lc-log { height: auto; max-height: 24; }
    LifecycleScreen #lc-plan { margin-bottom: 1; }
    LifecycleScreen ProgressBar { margin: 1 0; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="lifecycle_cancel")]

    def __init__(self, action: str, pod: Any, *, plan: PlanFn | None, run: RunFn, confirm: str,
                 connect: Callable[[Any], Any] | None = None, settings: Any = None) -> None:
        super().__init__(classes="dialog-screen")
        self.action_name = action
        self.pod = pod
        self._plan, self._run, self._confirm = plan, run, confirm
        self._connect = connect or _default_connect
        self.settings = settings
        self.lines: list[str] = []  # what the log shows (plain text), for tests and copy-paste
        self.result: Any = None
        self._running = False
        self._conn: Any = None  # the plan's connection, reused by the action
        self.run_task: Any = None  # the app task running the action (app/tasks.py), once started

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide" + (" -danger" if self.action_name in ("kill", "cleanup") else "")):
            yield Static(f"[b]{self.action_name.capitalize()}[/b] · {escape(self.pod.name)}", classes="dialog-title")
            yield Static("preparing…", id="lc-plan", markup=False)
            with VerticalScroll(id="lc-log"):
                yield Static("", id="lc-lines")
            yield ProgressBar(total=1.0, show_eta=False, id="lc-progress")
            yield Static("", id="lc-status")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self._confirm, id="lc-go", variant="error", disabled=True)
                yield Button("Force", id="lc-force", variant="warning", classes="-hidden")
                yield Button("Background", id="lc-bg", tooltip="Close this dialog; the action goes on (t lists it)")
                yield Button("Cancel", id="lc-cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#lc-force", Button).display = False
        self.query_one("#lc-bg", Button).display = False
        self.query_one("#lc-cancel", Button).focus()
        self._prepare()

    # ---------------------------------------------------------------- workers
    @work(exclusive=True, group="lifecycle")
    async def _prepare(self) -> None:
        plan_widget = self.query_one("#lc-plan", Static)
        if self._plan is None:
            plan_widget.update(f"{self.action_name} on {self.pod.name}")
            self.query_one("#lc-go", Button).disabled = False
            return
        conn = self._connect(self.pod)
        try:
            await conn.connect()
            text = await self._plan(conn)
        except Exception as exc:  # noqa: BLE001 - any failure is shown, the user closes the dialog
            await _quietly_close(conn)
            hint = getattr(exc, "hint", "")
            plan_widget.update(f"✗ {exc}" + (f"\n  hint: {hint}" if hint else ""))
            self._finish_buttons()
            return
        except BaseException:
            await _quietly_close(conn)
            raise
        self._conn = conn  # kept for the action: no second SSH handshake after the click
        plan_widget.update(text)
        self.query_one("#lc-go", Button).disabled = False

    def _execute(self, force: bool) -> None:
        """The action runs as an app task (app/tasks.py): it outlives this dialog when sent to the
        background, shows in the task list, and is cancelled from here or from there."""
        from app.tasks import Busy, Tasks

        tasks = getattr(self.app, "tasks", None)
        if not isinstance(tasks, Tasks):  # a bare host app (tests, embedding) gets a list of its own
            tasks = Tasks(self.app)
        holder = {"conn": self._conn}
        self._conn = None
        bg = getattr(self.app, "lifecycle_bg", None) if self.action_name in ("launch", "resume") else None

        async def events() -> AsyncIterator[Any]:
            if holder["conn"] is None:
                holder["conn"] = self._connect(self.pod)
                await holder["conn"].connect()
            async for ev in self._run(holder["conn"], force):
                if ev.kind == "done" and bg is not None:
                    bg.run_started(ev.data)  # the monitor follows the new run, dialog open or not
                yield ev

        async def close() -> None:
            if holder["conn"] is not None:
                await _quietly_close(holder["conn"])

        try:
            self.run_task = tasks.start_events(self.pod.name, self.action_name, events, self._on_task, close=close)
        except Busy as err:
            self.run_worker(close(), name="closing the pod connection", exit_on_error=False)
            self.query_one("#lc-status", Static).update(f"[red]✗ {escape(str(err))}[/red]")
            self.lines.append(f"✗ {err}")
            self._finish_buttons()
            return
        self._running = True
        self.query_one("#lc-bg", Button).display = True

    def _on_task(self, task: Any, ev: Any) -> None:
        if ev is not None:
            self.add_event(ev)
            if ev.progress is not None:
                self.query_one("#lc-progress", ProgressBar).update(progress=ev.progress)
        if task.running:
            return
        self._running = False
        self.query_one("#lc-bg", Button).display = False
        if isinstance(task.result, Exception):
            self.query_one("#lc-status", Static).update(f"[red]✗ {escape(str(task.result))}[/red]")
            self.lines.append(f"✗ {task.result}")
            self.result = None
        elif task.state != "cancelled":
            self.result = task.result
        last = self.result
        if last is not None and last.kind == "error" and "pre-flight failed" in last.message:
            self.query_one("#lc-force", Button).display = True
        self._finish_buttons()

    # ---------------------------------------------------------------- view
    def add_event(self, ev: Any) -> None:
        status = self.query_one("#lc-status", Static)
        if ev.check is not None:
            c = ev.check
            text = f"{c.mark} {c.name}" + (f" — {c.detail}" if c.detail else "")
            self.lines.append(text)
            if c.status == "fail" and c.fix:
                self.lines.append(f"    fix: {c.fix}")
        elif ev.kind == "done":
            status.update(f"[green]✓ {escape(ev.message)}[/green]")
            self.lines.append(f"✓ {ev.message}")
        elif ev.kind == "error":
            status.update(f"[red]✗ {escape(ev.message)}[/red]")
            self.lines.append(f"✗ {ev.message}")
        elif ev.kind == "warn":
            self.lines.append(f"! {ev.message}")
        else:
            self.lines.append(ev.message)
        self.query_one("#lc-lines", Static).update(self._render_lines())
        self.query_one("#lc-log", VerticalScroll).scroll_end(animate=False)

    def _render_lines(self) -> str:
        out = []
        for line in self.lines:
            style = {"✓": "green", "✗": "red", "!": "yellow", "–": "yellow"}.get(line[:1])
            out.append(f"[{style}]{escape(line)}[/{style}]" if style else escape(line))
        return "\n".join(out)

    def _finish_buttons(self) -> None:
        go = self.query_one("#lc-go", Button)
        go.display = False
        cancel = self.query_one("#lc-cancel", Button)
        cancel.label = "Close"
        cancel.focus()

    # ---------------------------------------------------------------- input
    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "lc-go":
            event.button.disabled = True
            self._execute(False)
        elif event.button.id == "lc-bg":
            self.action_background()
        elif event.button.id == "lc-force":
            event.button.display = False
            self.lines.append("! forced: starting despite failed checks")
            self._execute(True)
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "lifecycle")
        if self.run_task is not None and self.run_task.running:
            self.run_task.listeners.remove(self._on_task)
            self.run_task.worker.cancel()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self.app.run_worker(_quietly_close(conn), name="closing the pod connection", exit_on_error=False)
        self.dismiss(self.result)

    def action_background(self) -> None:
        """Close the dialog, keep the action going: the task list (t) shows it, a toast says how it ended."""
        if self.run_task is None or not self.run_task.running:
            self.action_cancel()
            return
        self.run_task.listeners.remove(self._on_task)
        self.dismiss(None)


async def _quietly_close(conn: Any) -> None:
    try:
        await conn.close()
    except Exception:  # noqa: BLE001 - a connection that died meanwhile is closed enough
        pass


def _default_connect(pod: Any) -> Any:
    from app.commands.launch import make_conn

    return make_conn(pod)


def _settings(settings: Any) -> Any:
    if settings is not None:
        return settings
    from app.settings import load_lifecycle_settings

    return load_lifecycle_settings()


def _backup_settings(backup: Any) -> Any:
    """The S3 backup settings (backup.toml + env) when a bucket is configured, else None: cleanup then
    never deletes an unverified checkpoint, and resume restores from the bucket when the pod has none."""
    if backup is not None:
        return backup if getattr(backup, "bucket", "") else None
    from app.settings import config_dir
    from services.errors import PrimeTrainError
    from services.s3 import load_backup_settings

    try:
        loaded = load_backup_settings(config_dir() / "backup.toml")
    except PrimeTrainError:
        return None  # the Checkpoints pane reports a broken backup.toml; lifecycle keeps today's rules
    return loaded if loaded.bucket else None


def lifecycle_screen(action: str, pod: Any, *, config: Path | str | None = None, run_dir: str | None = None,
                     keep: int | None = None, settings: Any = None, backup: Any = None,
                     connect: Callable[[Any], Any] | None = None) -> LifecycleScreen:
    """The modal for one action: "launch" (needs ``config``), "kill", "resume" or "cleanup" (``keep``)."""
    from services import lifecycle as lc
    from services.units import fmt_bytes

    settings = _settings(settings)
    if action == "launch":
        if config is None:
            raise ValueError("launch needs a config")
        cfg = Path(config)

        async def plan_launch(conn: Any) -> str:
            where = run_dir or lc.default_run_dir(pod, cfg)
            return (f"Launch {cfg.name} on {pod.name}\nrun dir: {where}\n"
                    f"command: {settings.command}\nPre-flight checks run first; a failed one stops the launch.")

        def run_launch(conn: Any, force: bool) -> AsyncIterator[Any]:
            return lc.launch(conn, cfg, settings=settings, run_dir=run_dir, force=force)

        return LifecycleScreen("launch", pod, plan=plan_launch, run=run_launch, confirm="Launch",
                               connect=connect, settings=settings)
    if action == "kill":
        async def plan_kill(conn: Any) -> str:
            target = await lc.plan_kill(conn)
            if target is None:
                raise lc.LifecycleError(f"no active run on {pod.name}")
            procs = "\n".join(f"  {p['pid']:>7}  {p['cmd'][:70]}" for p in target.get("procs", [])[:10])
            return (f"Kill run {target['id']} in {target['run_dir']}: {len(target.get('pids', []))} process(es)\n"
                    f"{procs}\nSIGTERM, {settings.grace_seconds:g} s grace, then SIGKILL.")

        def run_kill(conn: Any, force: bool) -> AsyncIterator[Any]:
            return lc.kill(conn, settings=settings)

        return LifecycleScreen("kill", pod, plan=plan_kill, run=run_kill, confirm="Kill", connect=connect,
                               settings=settings)
    if action == "resume":
        bucket = _backup_settings(backup)

        async def plan_resume(conn: Any) -> str:
            p = await lc.plan_resume(conn, settings, backup=bucket)
            skipped = "".join(f"\n  step_{c['step']} is incomplete — skipped" for c in p["skipped"])
            source = (f"restored first from {p['restore']['where']}" if p.get("restore")
                      else f"newest complete checkpoint in {p['ckpt_dir']}")
            return (f"Resume run {p['run']['id']} from step_{p['checkpoint']['step']} "
                    f"({source}){skipped}")

        def run_resume(conn: Any, force: bool) -> AsyncIterator[Any]:
            return lc.resume(conn, settings=settings, force=force, backup=bucket)

        return LifecycleScreen("resume", pod, plan=plan_resume, run=run_resume, confirm="Resume",
                               connect=connect, settings=settings)
    if action == "cleanup":
        holder: dict[str, Any] = {}
        bucket = _backup_settings(backup)

        async def plan_cleanup(conn: Any) -> str:
            plan = await lc.plan_cleanup(conn, keep=keep, settings=settings, run_dir=run_dir, backup=bucket)
            holder["plan"] = plan
            lines = plan.preview(fmt_bytes)
            return "\n".join(lines)

        def run_cleanup(conn: Any, force: bool) -> AsyncIterator[Any]:
            return lc.cleanup(conn, holder["plan"], settings=settings, backup=bucket)

        return LifecycleScreen("cleanup", pod, plan=plan_cleanup, run=run_cleanup, confirm="Delete",
                               connect=connect, settings=settings)
    raise ValueError(f"unknown action {action!r}")


def launch_screen(pod: Any, config: Path | str, **kw: Any) -> LifecycleScreen:
    return lifecycle_screen("launch", pod, config=config, **kw)


def kill_screen(pod: Any, **kw: Any) -> LifecycleScreen:
    return lifecycle_screen("kill", pod, **kw)


def resume_screen(pod: Any, **kw: Any) -> LifecycleScreen:
    return lifecycle_screen("resume", pod, **kw)


def cleanup_screen(pod: Any, keep: int | None = None, **kw: Any) -> LifecycleScreen:
    return lifecycle_screen("cleanup", pod, keep=keep, **kw)


# ------------------------------------------------------------------------------------ background workers


class CleanupPreviewScreen(ModalScreen[bool]):
    """The cleanup daemon's dry run for one pod: approve it (deletions may start) or not now."""

    DEFAULT_CSS = """
    CleanupPreviewScreen .dialog { width: 100; max-height: 90%; }
    CleanupPreviewScreen #cp-plan { height: auto; max-height: 30; }
    """
    BINDINGS = [Binding("escape", "dismiss(False)", "Not now")]

    def __init__(self, pod: str, lines: list[str]) -> None:
        super().__init__(classes="dialog-screen")
        self.pod_name, self.lines = pod, list(lines)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide -danger"):
            yield Static(f"[b]Cleanup daemon[/b] · {escape(self.pod_name)} — dry run before its first deletion",
                         classes="dialog-title")
            with VerticalScroll(id="cp-plan"):
                yield Static("\n".join(self.lines), markup=False)
            yield Static("Approve to let the daemon delete this and keep the volume under its ceiling from now "
                         "on (every deletion is logged with its size).")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Approve", id="cp-approve", variant="error")
                yield Button("Not now", id="cp-later", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cp-later", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "cp-approve")


class BackgroundLifecycle:
    """What the App runs besides the modals: a cleanup daemon per pod with cleanup enabled in settings
    (its dry-run preview shown once for approval), and the preemption tracker fed every snapshot (with
    the auto-resume policy of settings). ``app`` needs run_worker, push_screen, notify, set_interval."""

    def __init__(self, app: Any, settings: Any = None, backup: Any = None,
                 connect: Callable[[Any], Any] | None = None) -> None:
        from services.preemption import AutoResumer, PreemptionTracker

        self.app = app
        try:
            self.settings = _settings(settings)
        except Exception as exc:  # noqa: BLE001 - a broken settings.toml: say so, run without the workers
            from services.preflight import LifecycleSettings

            app.notify(f"{exc}", severity="error", title="Lifecycle settings: cleanup daemon and preemption off")
            self.settings = LifecycleSettings()
        self.backup = _backup_settings(backup)
        self.connect = connect or _default_connect
        self.daemons: dict[str, Any] = {}
        self._workers: dict[str, Any] = {}
        self._asked: set[str] = set()
        self.tracker = (PreemptionTracker.from_settings(self.settings, clock=app_clock(app))
                        if self.settings.runs_dir is not None else None)
        self.resumer = (AutoResumer(self.tracker, self.settings, self.connect, self.backup)
                        if self.tracker is not None else None)
        app.set_interval(5.0, self.tick)
        if (monitor := getattr(app, "monitor", None)) is not None:  # a pod without run_dir: its newest launch
            monitor.runs_dir = self.settings.runs_dir
            monitor.rented_at = self._rented_at  # "$ so far" of a rented pod counts from its creation

    def _rented_at(self, pod: Any) -> float | None:
        rentals = getattr(self.app, "rentals", None)
        return getattr(rentals.rental_for(pod), "created_at", None) if rentals is not None else None

    def run_started(self, record: Any) -> None:
        """A launch or resume is done: its run dir becomes the pod's (sidebar, pods.toml for a saved pod) and
        the monitor reopens its probe on it, so progress and run alerts follow the run just started."""
        from dataclasses import replace

        name, run_dir = (record or {}).get("pod"), (record or {}).get("run_dir")
        pods, monitor = getattr(self.app, "pods", {}), getattr(self.app, "monitor", None)
        pod = pods.get(name) if isinstance(name, str) else None
        if pod is None or not isinstance(run_dir, str) or not run_dir or monitor is None:
            return
        if pod.run_dir and run_dir.rstrip("/").endswith("/" + pod.run_dir.strip("/")):
            return  # the pods.toml run_dir (relative to the home) the launch used: already watched
        if monitor.set_run_dir(name, run_dir) is None and pod.run_dir == run_dir:
            return
        pod = pods[name] = replace(pod, run_dir=run_dir)
        if (row := self.app.pod_list.row(name)) is not None:
            row.pod = pod
        if pod.saved:
            self.app.run_worker(self.app._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)

    def add(self, pod: Any) -> None:
        from services.cleanup_daemon import CleanupDaemon

        if pod.name in self.daemons or not self.settings.cleanup_enabled(pod.name) or pod.simulated:
            return
        daemon = CleanupDaemon(pod, self.settings, connect=self.connect, backup=self.backup,
                               clock=app_clock(self.app), on_event=lambda ev, n=pod.name: self._daemon_event(n, ev))
        self.daemons[pod.name] = daemon
        self._workers[pod.name] = self.app.run_worker(daemon.run(), name=f"cleanup daemon {pod.name}",
                                                      group="lifecycle-background", exit_on_error=False)

    def remove(self, name: str) -> None:
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
            elif d.kind == "give_up":
                self.app.notify(d.reason, title="Auto-resume", severity="error", timeout=15)
            elif d.kind == "resume" and self.resumer is not None:
                self.app.notify(d.reason, title="Auto-resume")
                self.app.run_worker(self._resume(d), name=f"auto-resume {d.run_id}", group="lifecycle-background",
                                    exit_on_error=False)

    async def _resume(self, decision: Any) -> None:
        last = await self.resumer.execute(decision)
        if last.kind == "done":
            self.run_started(last.data)
            self.app.notify(last.message, title=f"Auto-resumed on {decision.target}")
        else:
            self.app.notify(last.message, title="Auto-resume failed", severity="error", timeout=15)

    def _daemon_event(self, pod: str, ev: Any) -> None:
        daemon = self.daemons.get(pod)
        if ev.data and "preview" in ev.data and daemon is not None and pod not in self._asked:
            self._asked.add(pod)
            self.app.push_screen(CleanupPreviewScreen(pod, ev.data["preview"]),
                                 lambda yes, n=pod: self._answered(n, yes))
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


def app_clock(app: Any) -> Callable[[], float]:
    import time

    return getattr(app, "clock", None) or time.time
