"""The modal for launch / kill / resume / cleanup: a confirm step showing what will be started, killed or
deleted, then the pre-flight checks (✓/✗ with their fixes) and the progress of the action.

``lifecycle_screen(action, pod, ...)`` builds it; the app pushes it (keys L / k / R / c). The screen
connects to the pod itself for the plan; the action then runs as an app task (app/tasks.py), so
"Background" closes the dialog while the action goes on (the task list, t, shows it). Escape cancels
the plan or the action (and so the action's generator). It dismisses with the action's final event
(``kind`` "done" or "error"), or None when cancelled or sent to the background.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, ProgressBar, Static

from services.text import plain
from widgets.read_to_end import ReadToEnd

if TYPE_CHECKING:
    from services.lifecycle.events import Event
    from services.models import Pod
    from services.pod.connection import Connection


PlanFn = Callable[["Connection"], Awaitable[str]]
RunFn = Callable[["Connection", bool], AsyncIterator["Event"]]


class NothingToDo(str):
    """A plan text that needs no confirmation (a cleanup with nothing to delete): the dialog shows it with
    Close only."""


class LifecycleScreen(ModalScreen["Any | None"]):
    DEFAULT_CSS = """
    LifecycleScreen .dialog { width: 90; max-height: 90%; }
    LifecycleScreen #lc-log { height: auto; max-height: 24; }
    LifecycleScreen #lc-plan-box { margin-bottom: 1; }
    LifecycleScreen #lc-plan-hint { margin-bottom: 1; }
    LifecycleScreen ProgressBar { margin: 1 0; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="lifecycle_cancel"),
        Binding("y", "go", "Yes, do it", id="lifecycle_yes"),
        Binding("n", "no", "No", id="lifecycle_no"),
    ]

    def __init__(
        self,
        action: str,
        pod: Pod,
        *,
        plan: PlanFn | None,
        run: RunFn,
        confirm: str,
        connect: Callable[[Pod], Connection] | None = None,
        settings: Any = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.action_name = action
        self.pod = pod
        self._plan, self._run, self._confirm = plan, run, confirm
        self._connect = connect or default_connect
        self.settings = settings
        self.lines: list[str] = []  # what the log shows (plain text), for tests and copy-paste
        self.result: Any = None
        self._acting = False  # the action runs (not `_running`: that name is Textual's own, True once mounted)
        self._conn: Connection | None = None  # the plan's connection, reused by the action
        self.run_task: Any = None  # the app task running the action (app/tasks.py), once started
        self._plan_ready = False

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide" + (" -danger" if self.action_name in ("kill", "cleanup") else "")):
            yield Static(
                Content.assemble((self.action_name.capitalize(), "bold"), plain(f" · {self.pod.name}")),
                classes="dialog-title",
            )
            hint = Static("", id="lc-plan-hint", classes="dialog-hint", markup=False)
            with ReadToEnd(id="lc-plan-box", hint=hint):
                yield Static("preparing…", id="lc-plan", markup=False)
            yield hint
            with VerticalScroll(id="lc-log"):
                yield Static("", id="lc-lines")
            yield ProgressBar(total=1.0, show_eta=False, id="lc-progress")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self._confirm, id="lc-go", variant="error", disabled=True)
                yield Button("Force", id="lc-force", variant="warning", classes="-hidden")
                yield Button("Background", id="lc-bg", tooltip="Close this dialog; the action goes on (t lists it)")
                yield Button("Cancel", id="lc-cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#lc-force", Button).display = False
        self.query_one("#lc-bg", Button).display = False
        self.query_one("#lc-plan-hint", Static).display = False
        self.query_one("#lc-log").display = False  # shown with its first line: rows for the plan until then
        self.query_one("#lc-progress", ProgressBar).display = False  # until the action runs: rows for the plan
        self.query_one("#lc-cancel", Button).focus()
        self._prepare()

    # ---------------------------------------------------------------- workers
    @work(exclusive=True, group="lifecycle")
    async def _prepare(self) -> None:
        plan_widget = self.query_one("#lc-plan", Static)
        if self._plan is None:
            plan_widget.update(plain(f"{self.action_name} on {self.pod.name}"))
            self._plan_ready = True
            self._enable_go()
            return
        conn = self._connect(self.pod)
        try:
            await conn.connect()
            text = await self._plan(conn)
        except Exception as exc:  # noqa: BLE001 - any failure is shown, the user closes the dialog
            await _quietly_close(conn)
            hint = getattr(exc, "hint", "")
            plan_widget.update(plain(f"✗ {exc}" + (f"\n  hint: {hint}" if hint else "")))
            self._finish_buttons()
            return
        except BaseException:
            await _quietly_close(conn)
            raise
        self._conn = conn  # kept for the action: no second SSH handshake after the click
        plan_widget.update(plain(text))  # the pod's own words (file names, its errors)
        self.query_one(ReadToEnd).content_changed()
        if isinstance(text, NothingToDo):  # nothing to confirm: no Delete button, only Close
            self.run_worker(_quietly_close(conn), name="closing the pod connection", exit_on_error=False)
            self._conn = None
            self._finish_buttons()
            return
        self._plan_ready = True
        self._enable_go()

    def _enable_go(self) -> None:
        """The confirm button works once the plan is there and the user has seen all of it."""
        go = self.query_one("#lc-go", Button)
        if self._plan_ready and not self._acting and self.run_task is None and go.display:
            go.disabled = not self.query_one(ReadToEnd).seen_end

    def on_read_to_end_changed(self, event: ReadToEnd.Changed) -> None:
        event.stop()
        self._enable_go()
        if not event.box.seen_end:
            event.box.focus()  # the arrow keys scroll what is to be confirmed

    def _execute(self, force: bool) -> None:
        """The action runs as an app task (app/tasks.py): it outlives this dialog when sent to the
        background, shows in the task list, and is cancelled from here or from there."""
        from app.tasks import Busy, Tasks

        tasks = getattr(self.app, "tasks", None)
        if not isinstance(tasks, Tasks):  # a bare host app (tests, embedding) gets a list of its own
            tasks = Tasks(self.app)
        holder: dict[str, Connection | None] = {"conn": self._conn}
        self._conn = None
        bg = getattr(self.app, "lifecycle_bg", None) if self.action_name in ("launch", "resume") else None

        async def events() -> AsyncIterator[Any]:
            conn = holder["conn"]
            if conn is None:
                holder["conn"] = conn = self._connect(self.pod)
                await conn.connect()
            async for ev in self._run(conn, force):
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
            self._say(f"✗ {err}")
            self._finish_buttons()
            return
        self._acting = True
        self.query_one("#lc-progress", ProgressBar).display = True
        self.add_class("-acting")  # the plan was read: on a short terminal the log gets its rows
        self.query_one("#lc-bg", Button).display = True

    def _on_task(self, task: Any, ev: Any) -> None:
        if ev is not None:
            self.add_event(ev)
            if ev.progress is not None:
                self.query_one("#lc-progress", ProgressBar).update(progress=ev.progress)
        if task.running:
            return
        self._acting = False
        self.query_one("#lc-bg", Button).display = False
        if isinstance(task.result, Exception):
            self._say(f"✗ {task.result}")
            self.result = None
        elif task.state != "cancelled":
            self.result = task.result
        last = self.result
        if last is not None and last.kind == "error" and "pre-flight failed" in last.message:
            self.query_one("#lc-force", Button).display = True
        self._finish_buttons()

    # ---------------------------------------------------------------- view
    def add_event(self, ev: Any) -> None:
        if ev.check is not None:
            c = ev.check
            text = f"{c.mark} {c.name}" + (f" — {c.detail}" if c.detail else "")
            self.lines.append(text)
            if c.status == "fail" and c.fix:
                self.lines.append(f"    fix: {c.fix_for('tui')}")
        elif ev.kind == "done":
            self.lines.append(f"✓ {ev.message}")
        elif ev.kind == "error":
            self.lines.append(f"✗ {ev.message}")
        elif ev.kind == "warn":
            self.lines.append(f"! {ev.message}")
        else:
            self.lines.append(ev.message)
        self._show_log()

    def _say(self, line: str) -> None:
        """One line in the log, once (the outcome is said there, not again in a status line under it)."""
        self.lines.append(line)
        self._show_log()

    def _show_log(self) -> None:
        self.query_one("#lc-log").display = True
        self.query_one("#lc-lines", Static).update(self._render_lines())
        log = self.query_one("#lc-log", VerticalScroll)
        # after the refresh that lays the new lines out: scrolled now, it stopped at the old end, and a long
        # pre-flight at 80x24 hid its outcome line below the fold
        self.call_after_refresh(log.scroll_end, animate=False)

    def _render_lines(self) -> Content:
        """The lines as text (the pod's and the provider's words), never markup; coloured by their mark."""
        out = []
        for line in self.lines:
            style = {"✓": "green", "✗": "red", "!": "yellow", "–": "yellow"}.get(line[:1])
            out.append(Content.styled(plain(line), style) if style else Content(plain(line)))
        return Content("\n").join(out)

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

    def action_go(self) -> None:
        """y: the confirm button, once the plan is there and the checks allow it (never twice)."""
        go = self.query_one("#lc-go", Button)
        if not go.disabled and go.display:
            go.press()
        elif self._plan_ready and not self.query_one(ReadToEnd).seen_end:
            self.query_one(ReadToEnd).focus()  # the rest of the plan first: the hint under it says so

    def action_no(self) -> None:
        """n: no, before anything started (once it runs, escape cancels and Background keeps it going)."""
        if self.run_task is None and not self._acting:
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


async def _quietly_close(conn: Connection) -> None:
    try:
        await conn.close()
    except Exception:  # noqa: BLE001 - a connection that died meanwhile is closed enough
        pass


def default_connect(pod: Pod) -> Connection:
    """services.connect's connection, with the app's demo sandbox passed in (app/demo.py)."""
    from app.demo import demo_inputs
    from services.connect import open_connection

    return open_connection(pod, **demo_inputs(pod))


def lifecycle_settings(settings: Any) -> Any:
    if settings is not None:
        return settings
    from app.settings import load_lifecycle_settings

    return load_lifecycle_settings()


def backup_settings(backup: Any) -> Any:
    """The S3 backup settings (backup.toml + env) when a bucket is configured, else None: cleanup then
    never deletes an unverified checkpoint, and resume restores from the bucket when the pod has none.
    An unreadable backup.toml gives its error (never None): cleanup refuses while it stays so."""
    if backup is not None:
        return backup if isinstance(backup, BaseException) or bool(getattr(backup, "bucket", "")) else None
    from app.settings import load_backup_toml
    from services.errors import PrimeTrainError

    try:
        loaded = load_backup_toml()
    except PrimeTrainError as exc:
        return exc  # unreadable backup.toml: cleanup refuses (fail closed), resume goes without the bucket
    return loaded if loaded.bucket else None


def lifecycle_screen(
    action: str,
    pod: Pod,
    *,
    config: Path | str | None = None,
    run_dir: str | None = None,
    keep: int | None = None,
    settings: Any = None,
    backup: Any = None,
    connect: Callable[[Pod], Connection] | None = None,
) -> LifecycleScreen:
    """The modal for one action: "launch" (needs ``config``), "kill", "resume" or "cleanup" (``keep``)."""
    from services.lifecycle.events import LifecycleError
    from services.lifecycle.targets import target_for
    from services.units import fmt_bytes

    if settings is None:  # the demo pod: its sandbox and its own settings (app/demo.py)
        from app.demo import for_lifecycle

        pod, settings = for_lifecycle(pod)
    settings = lifecycle_settings(settings)
    target = target_for(pod)  # one machine or a Slurm cluster: the target plans, says and acts
    if action == "launch":
        if config is None:
            raise ValueError("launch needs a config")
        cfg = Path(config)

        async def plan_launch(conn: Connection) -> str:
            return target.plan_launch(pod, cfg, run_dir, settings).text

        def run_launch(conn: Connection, force: bool) -> AsyncIterator[Event]:
            return target.launch(conn, cfg, settings=settings, run_dir=run_dir, force=force)

        return LifecycleScreen(
            "launch", pod, plan=plan_launch, run=run_launch, confirm="Launch", connect=connect, settings=settings
        )
    if action == "kill":
        chosen: dict[str, Any] = {}

        async def plan_kill(conn: Connection) -> str:
            plan = chosen["plan"] = await target.plan_kill(conn, settings)
            if plan is None:
                raise LifecycleError(f"no active run on {pod.name}")
            return plan.text

        def run_kill(conn: Connection, force: bool) -> AsyncIterator[Event]:
            return target.kill(conn, chosen["plan"], settings=settings)

        return LifecycleScreen(
            "kill", pod, plan=plan_kill, run=run_kill, confirm=target.kill_button, connect=connect, settings=settings
        )
    if action == "resume":
        bucket = backup_settings(backup) if target.restores_from_bucket else None
        held: dict[str, Any] = {}

        async def plan_resume(conn: Connection) -> str:
            held["plan"] = await target.plan_resume(conn, settings, bucket)
            return held["plan"].text

        def run_resume(conn: Connection, force: bool) -> AsyncIterator[Event]:
            return target.resume(conn, held["plan"], settings=settings, force=force)

        return LifecycleScreen(
            "resume", pod, plan=plan_resume, run=run_resume, confirm="Resume", connect=connect, settings=settings
        )
    if action == "cleanup":
        holder: dict[str, Any] = {}
        bucket = backup_settings(backup)

        async def plan_cleanup(conn: Connection) -> str:
            plan = await target.plan_cleanup(conn, keep=keep, settings=settings, run_dir=run_dir, backup=bucket)
            holder["plan"] = plan
            lines = plan.preview(fmt_bytes)
            return NothingToDo("\n".join(lines)) if plan.empty else "\n".join(lines)

        def run_cleanup(conn: Connection, force: bool) -> AsyncIterator[Event]:
            return target.cleanup(conn, holder["plan"], settings=settings, backup=bucket)

        return LifecycleScreen(
            "cleanup", pod, plan=plan_cleanup, run=run_cleanup, confirm="Delete", connect=connect, settings=settings
        )
    raise ValueError(f"unknown action {action!r}")


def launch_screen(pod: Pod, config: Path | str, **kw: Any) -> LifecycleScreen:
    return lifecycle_screen("launch", pod, config=config, **kw)


def cleanup_screen(pod: Pod, keep: int | None = None, **kw: Any) -> LifecycleScreen:
    return lifecycle_screen("cleanup", pod, keep=keep, **kw)


# ------------------------------------------------------------------------------------ background workers


class CleanupPreviewScreen(ModalScreen[bool]):
    """The cleanup daemon's dry run for one pod: approve it (deletions may start) or not now."""

    DEFAULT_CSS = """
    CleanupPreviewScreen .dialog { width: 100; max-height: 90%; }
    CleanupPreviewScreen #cp-plan { height: auto; max-height: 30; }
    """
    BINDINGS = [
        Binding("escape", "dismiss(False)", "Not now"),
        Binding("n", "dismiss(False)", "Not now", show=False),
        Binding("y", "approve", "Approve"),
    ]

    def __init__(self, pod: str, lines: list[str]) -> None:
        super().__init__(classes="dialog-screen")
        self.pod_name, self.lines = pod, list(lines)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide -danger"):
            yield Static(
                Content.assemble(
                    ("Cleanup daemon", "bold"), plain(f" · {self.pod_name} — dry run before its first deletion")
                ),
                classes="dialog-title",
            )
            hint = Static("", classes="dialog-hint", markup=False)
            with ReadToEnd(id="cp-plan", hint=hint):
                yield Static(plain("\n".join(self.lines)), markup=False)
            yield hint
            yield Static(
                "Approve to let the daemon delete this and keep the volume under its ceiling from now "
                "on (every deletion is logged with its size)."
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Approve", id="cp-approve", variant="error")
                yield Button("Not now", id="cp-later", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cp-later", Button).focus()
        self.query_one(ReadToEnd).content_changed()

    def on_read_to_end_changed(self, event: ReadToEnd.Changed) -> None:
        event.stop()
        self.query_one("#cp-approve", Button).disabled = not event.box.seen_end
        if not event.box.seen_end:
            event.box.focus()

    def action_approve(self) -> None:
        """y: approve, once the whole dry run has been on screen."""
        if self.query_one(ReadToEnd).seen_end:
            self.dismiss(True)
        else:
            self.query_one(ReadToEnd).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "cp-approve")
