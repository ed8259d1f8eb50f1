"""The App's run dialogs: launch / kill / resume / clean-up (each a dialog that checks, confirms, then runs the
action as a task), the task list, the toast of a task that ended in the background, and quitting while a task
runs. :class:`RunDialogs` is the App's part for them; the App's ``action_*`` methods hand it the selected pod."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from textual.notifications import SeverityLevel
from textual.screen import Screen

from app.screens.confirm import ConfirmScreen
from app.tasks import Task, Tasks
from services.models import Pod

if TYPE_CHECKING:
    from app.panes.config import ConfigPane


class DialogHost(Protocol):
    """What RunDialogs asks of the App."""

    @property
    def screen(self) -> Screen[Any]: ...
    @property
    def tasks(self) -> Tasks: ...

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
    def exit(self) -> None: ...


class RunDialogs:
    def __init__(self, host: DialogHost) -> None:
        self.host = host

    def launch(self, pod: Pod, pane: ConfigPane | None, config_path: Path | None) -> None:
        """Launch with the Config pane's file; the pane mounts just after the first screen: until then, the
        file it is about to open (``config_path``)."""
        path, modified = (pane.path, pane.modified) if pane is not None else (config_path, False)
        if path is None:
            self.host.notify(
                "Open the run's config in the Config pane first (or start with --config FILE).",
                severity="warning",
                title="Nothing to launch",
            )
            return
        if modified:
            self.host.notify(
                "Save the config first (ctrl+s in the Config pane): the pod gets what is on disk.",
                severity="warning",
                title="Unsaved config",
            )
            return
        self.open("launch", pod, config=path)

    def open(self, action: str, pod: Pod, **kw: Any) -> None:
        """The action's dialog; settings that cannot be used (a typo, an AWS key among the secrets) are said
        in a toast with their fix, never a crash of the App."""
        from app.screens.lifecycle import lifecycle_screen
        from services.errors import PrimeTrainError

        try:
            screen = lifecycle_screen(action, pod, **kw)
        except PrimeTrainError as err:
            hint = getattr(err, "hint", "")
            self.host.notify(
                f"{err}" + (f"\n{hint}" if hint else ""),
                severity="error",
                title=f"Cannot {action}: settings.toml",
                timeout=15,
            )
            return
        self.host.push_screen(screen, self.done)

    def show_tasks(self) -> None:
        from app.screens.tasks import TasksScreen

        if not isinstance(self.host.screen, TasksScreen):
            self.host.push_screen(TasksScreen(self.host.tasks))

    def task_finished(self, task: Task) -> None:
        """A task sent to the background ended: the toast its dialog would have shown."""
        if task.listeners:
            return  # a dialog shows it and reports when it is dismissed
        if task.state == "cancelled":
            self.host.notify(f"{task.action} on {task.pod} cancelled", severity="warning")
        elif isinstance(task.result, Exception):
            self.host.notify(f"{task.action} on {task.pod}: {task.result}", severity="error", title="Run action failed")
        else:
            self.done(task.result)

    def quit(self) -> None:
        running = self.host.tasks.running()
        if not running:
            self.host.exit()
            return
        names = ", ".join(f"{t.action} on {t.pod}" for t in running)

        def answered(yes: bool | None) -> None:
            if yes:
                self.host.exit()

        self.host.push_screen(
            ConfirmScreen(
                f"Still running: {names}. Quitting stops them (a run already started "
                "on a pod keeps running there). Quit anyway?",
                yes="Quit",
                no="Stay",
            ),
            answered,
        )

    def done(self, event: object | None) -> None:
        kind, message = getattr(event, "kind", None), getattr(event, "message", "")
        if kind == "error":
            self.host.notify(str(message), severity="error", title="Run action failed")
        elif kind == "done" and message:
            self.host.notify(str(message), title="Done")
