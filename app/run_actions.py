"""The App's run actions: launch / kill / resume / clean-up (each a dialog that checks, confirms, then runs the
action as a task), the task list, and quitting while a task runs. A mixin of PrimeTrainApp (app/tui.py):
it uses the App's ``tasks``, ``_selected_pod``, ``screen_stack``, ``notify`` and ``push_screen``."""

from __future__ import annotations

from typing import Any

from app.screens.confirm import ConfirmScreen
from app.tasks import Task


class RunActions:
    tasks: Any
    config_path: Any
    mounted_pane: Any
    _selected_pod: Any
    screen: Any
    notify: Any
    push_screen: Any
    exit: Any

    def action_launch(self) -> None:
        pod, pane = self._selected_pod(), self.mounted_pane("config")
        if pod is None:
            return
        # the Config pane mounts just after the first screen: until then, the file it is about to open
        path, modified = (pane.path, pane.modified) if pane is not None else (self.config_path, False)
        if path is None:
            self.notify("Open the run's config in the Config pane first (or start with --config FILE).",
                        severity="warning", title="Nothing to launch")
            return
        if modified:
            self.notify("Save the config first (ctrl+s in the Config pane): the pod gets what is on disk.",
                        severity="warning", title="Unsaved config")
            return
        self._open_action("launch", pod, config=path)

    def action_kill(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self._open_action("kill", pod)

    def action_resume(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self._open_action("resume", pod)

    def action_cleanup(self) -> None:
        if (pod := self._selected_pod()) is not None:
            self._open_action("cleanup", pod)

    def _open_action(self, action: str, pod: Any, **kw: Any) -> None:
        """The action's dialog; settings that cannot be used (a typo, an AWS key among the secrets) are said
        in a toast with their fix, never a crash of the App."""
        from app.screens.lifecycle import lifecycle_screen
        from services.errors import PrimeTrainError

        try:
            screen = lifecycle_screen(action, pod, **kw)
        except PrimeTrainError as err:
            hint = getattr(err, "hint", "")
            self.notify(f"{err}" + (f"\n{hint}" if hint else ""), severity="error",
                        title=f"Cannot {action}: settings.toml", timeout=15)
            return
        self.push_screen(screen, self._lifecycle_done)

    def action_tasks(self) -> None:
        from app.screens.tasks import TasksScreen

        if not isinstance(self.screen, TasksScreen):
            self.push_screen(TasksScreen(self.tasks))

    def _task_finished(self, task: Task) -> None:
        """A task sent to the background ended: the toast its dialog would have shown."""
        if task.listeners:
            return  # a dialog shows it and reports when it is dismissed
        if task.state == "cancelled":
            self.notify(f"{task.action} on {task.pod} cancelled", severity="warning")
        elif isinstance(task.result, Exception):
            self.notify(f"{task.action} on {task.pod}: {task.result}", severity="error", title="Run action failed")
        else:
            self._lifecycle_done(task.result)

    async def action_quit(self) -> None:
        running = self.tasks.running()
        if not running:
            self.exit()
            return
        names = ", ".join(f"{t.action} on {t.pod}" for t in running)

        def answered(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(ConfirmScreen(f"Still running: {names}. Quitting stops them (a run already started on "
                                       "a pod keeps running there). Quit anyway?", yes="Quit", no="Stay"),
                         answered)

    def _lifecycle_done(self, event: object | None) -> None:
        kind, message = getattr(event, "kind", None), getattr(event, "message", "")
        if kind == "error":
            self.notify(str(message), severity="error", title="Run action failed")
        elif kind == "done" and message:
            self.notify(str(message), title="Done")
