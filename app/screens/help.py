"""Help generated from the bindings that are live right now, so it cannot drift from the keys."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static


@dataclass(frozen=True)
class HelpRow:
    key: str
    description: str
    where: str
    enabled: bool


def help_rows(app: App, screen: Screen) -> list[HelpRow]:
    """One row per action among ``screen``'s active bindings (app, screen and focused widget chain).

    Keys bound to the same action in the same place share a row ("^c / super+c")."""
    rows: dict[tuple[str, str], HelpRow] = {}
    for active in screen.active_bindings.values():
        binding: Binding = active.binding
        description = binding.description or binding.tooltip or binding.action
        key = app.get_key_display(binding)
        where = _where(app, active)
        row = rows.get((description, where))
        if row is None:
            rows[(description, where)] = HelpRow(key, description, where, active.enabled)
        elif key not in row.key.split(" / "):
            rows[(description, where)] = replace(row, key=f"{row.key} / {key}")
    # App-wide keys first, then the focused widget's, each group in declared order.
    return sorted(rows.values(), key=lambda r: r.where != "everywhere")


def _where(app: App, active: ActiveBinding) -> str:
    node = active.node
    if node is app or isinstance(node, Screen):
        return "everywhere"
    return f"in {type(node).__name__}"


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close help", id="help_close"),
        Binding("question_mark", "close", "Close help", id="help_close_again", show=False),
    ]

    def __init__(self, rows: list[HelpRow]) -> None:
        super().__init__(classes="dialog-screen")
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, show_header=True, header_style="bold")
        table.add_column("Key", no_wrap=True)
        table.add_column("Action")
        table.add_column("Where")
        for row in self.rows:
            style = "" if row.enabled else "dim"
            table.add_row(Text(row.key, style="bold"), Text(row.description, style=style), row.where)
        with Vertical(classes="dialog -wide"):
            yield Static("[b]Keys[/b] (from the live bindings; dim = not available now)", classes="dialog-title")
            with VerticalScroll(classes="help-body"):
                yield Static(table, id="help-table")
            yield Static("escape closes", classes="dialog-hint")

    @property
    def text(self) -> str:
        """The help as plain text (what tests read)."""
        return "\n".join(f"{r.key} {r.description} {r.where}" for r in self.rows)

    def action_close(self) -> None:
        self.dismiss(None)
