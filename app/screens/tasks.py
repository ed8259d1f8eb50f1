"""The task list (`t`): every action this app runs on a pod — launch, kill, resume, cleanup, and anything
else registered in app/tasks.py — with its state, progress, elapsed time and newest line. `x` cancels the
selected running task (after a confirm), `enter` shows its log; the list refreshes twice a second while
open, changing only the cells that changed."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from app.screens.confirm import ConfirmScreen
from app.tasks import Task, Tasks

COLUMNS = ("pod", "action", "state", "progress", "elapsed", "latest")
_STATE_STYLE = {"running": "bold cyan", "done": "green", "failed": "bold red", "cancelled": "yellow"}
BAR_WIDTH = 12


def progress_cell(task: Task) -> Text:
    if task.progress is None:
        return Text("…" if task.running else "", style="dim")
    filled = round(task.progress * BAR_WIDTH)
    return Text("█" * filled + "░" * (BAR_WIDTH - filled) + f" {task.progress:4.0%}")


def elapsed_cell(task: Task, now: float) -> str:
    secs = int(task.elapsed(now))
    return f"{secs // 60}:{secs % 60:02d}" if secs < 3600 else f"{secs // 3600} h {secs % 3600 // 60:02d}"


def row_cells(task: Task, now: float) -> tuple[object, ...]:
    return (
        Text(task.pod),
        Text(task.action),
        Text(task.state, style=_STATE_STYLE.get(task.state, "")),
        progress_cell(task),
        elapsed_cell(task, now),
        Text(task.status[:80]),
    )


class TasksScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    TasksScreen .dialog { width: 120; max-height: 90%; }
    TasksScreen DataTable { height: auto; max-height: 16; }
    TasksScreen #tasks-log { height: auto; max-height: 14; margin-top: 1; }
    """
    BINDINGS = [
        Binding("x", "cancel_task", "Cancel task", id="tasks_cancel"),
        Binding("escape", "close", "Close", id="tasks_close"),
        Binding("t", "close", "Close", show=False, id="tasks_close_t"),
    ]

    def __init__(self, tasks: Tasks) -> None:
        super().__init__(classes="dialog-screen")
        self.tasks = tasks
        self._shown: dict[str, tuple[object, ...]] = {}

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Static(
                "[b]Tasks[/b] · x cancels the selected running task · enter shows its log · escape closes",
                classes="dialog-title",
            )
            yield DataTable(id="tasks-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="tasks-empty")
            yield Static("", id="tasks-log", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        self.refresh_rows()
        self.set_interval(0.5, self.refresh_rows)
        table.focus()

    def refresh_rows(self) -> None:
        table = self.query_one(DataTable)
        now = time.monotonic()
        wanted = {str(t.id): t for t in reversed(self.tasks.items)}  # newest first
        for key in [k for k in self._shown if k not in wanted]:
            table.remove_row(key)
            del self._shown[key]
        for key, task in wanted.items():
            cells = row_cells(task, now)
            old = self._shown.get(key)
            if old is None:
                table.add_row(*cells, key=key)
            else:
                for col, new, was in zip(COLUMNS, cells, old):
                    if new != was:
                        table.update_cell(key, col, new)
            self._shown[key] = cells
        self.query_one("#tasks-empty", Static).update(
            "" if wanted else "No tasks yet: launch (L), kill (k), resume (R) and clean-up (c) run here."
        )

    def selected(self) -> Task | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((t for t in self.tasks.items if str(t.id) == key), None)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        task = self.selected()
        if task is not None:
            self.query_one("#tasks-log", Static).update("\n".join(task.lines[-40:]) or "(no output yet)")

    def action_cancel_task(self) -> None:
        task = self.selected()
        if task is None or not task.running:
            self.notify("Select a running task to cancel it.", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes and task.running:
                self.tasks.cancel(task)

        what = {
            "cleanup": " Deletions already done stay done; the rest is not deleted.",
            "launch": " A run already started keeps running (k kills it).",
        }.get(task.action, "")
        self.app.push_screen(
            ConfirmScreen(f"Cancel {task.action} on {task.pod}?{what}", yes="Cancel task", no="Keep going"), answered
        )

    def action_close(self) -> None:
        self.dismiss(None)
