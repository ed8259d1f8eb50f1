"""Help generated from the bindings that are live right now, so it cannot drift from the keys."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Static


@dataclass(frozen=True)
class HelpRow:
    key: str
    description: str
    where: str
    enabled: bool


def help_rows(app: App, screen: Screen, pane: Widget | None = None, pane_title: str = "") -> list[HelpRow]:
    """One row per action: the visible pane's own keys first (they work whatever has the focus), then
    the App's, then the focused widget's (scrolling and the like), each group in declared order.

    Keys bound to the same action in the same place share a row ("^c / super+c"). App keys that the
    pane takes over while it is on screen are left out (the App hides them: check_action)."""
    rows: dict[tuple[str, str], HelpRow] = {}

    def add(binding: Binding, where: str, enabled: bool) -> None:
        description = binding.description or binding.tooltip or binding.action
        key = app.get_key_display(binding)
        row = rows.get((description, where))
        if row is None:
            rows[(description, where)] = HelpRow(key, description, where, enabled)
        elif key not in row.key.split(" / "):
            rows[(description, where)] = replace(row, key=f"{row.key} / {key}")

    pane_where = f"in {pane_title}" if pane_title else ""
    if pane is not None:
        # all of the pane's keys (the footer shows a few; help lists every one), then those of its parts
        # (the findings list's f and enter) wherever the focus is: they are a key press away
        for binding in type(pane).BINDINGS:
            if isinstance(binding, Binding):
                add(binding, pane_where, _enabled(pane, binding))
        for part in pane.query("*"):
            for binding in _own_bindings(part):
                add(binding, f"in {where_name(part)}", _enabled(part, binding))
    for active in screen.active_bindings.values():
        if pane is not None and active.node is pane:
            continue  # listed above
        add(active.binding, _where(app, active), active.enabled)
    order = {pane_where: 0, "everywhere": 1}
    return sorted(rows.values(), key=lambda r: order.get(r.where, 2))


def _own_bindings(node: Widget) -> list[Binding]:
    """The keys this project's widget classes declare (not Textual's own: scrolling, a list's cursor)."""
    found: list[Binding] = []
    for cls in type(node).__mro__:
        if cls.__module__.split(".")[0] in ("app", "widgets"):
            found += [b for b in cls.__dict__.get("BINDINGS", ()) if isinstance(b, Binding)]
    return found


def _enabled(node: Widget, binding: Binding) -> bool:
    name, _, _ = binding.action.partition("(")
    try:
        return node.check_action(name, ()) is True
    except Exception:  # noqa: BLE001 - a screen's check_action that fails leaves the key listed, not the help broken
        return True


def _where(app: App, active: ActiveBinding) -> str:
    node = active.node
    if node is app or isinstance(node, Screen):
        return "everywhere"
    return f"in {where_name(node)}"


def where_name(node: object) -> str:
    """The user's name for a widget that holds keys: its ``HELP_WHERE`` ("the offers table"), else its class
    name in words ("the checkpoint table" for CheckpointTable), never a bare class name."""
    named = getattr(node, "HELP_WHERE", None)
    if isinstance(named, str) and named:
        return named
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", type(node).__name__)
    return "the " + " ".join(w.lower() for w in words)


class HelpScreen(ModalScreen[None]):
    # the dialog takes the height it may (help is longer than any terminal's) and the table scrolls inside it,
    # so the closing hint below it is always on screen
    DEFAULT_CSS = """
    HelpScreen .dialog { height: 90%; }
    HelpScreen .help-body { height: 1fr; }
    """
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
            yield Static("↑ ↓ PgUp PgDn scroll · escape closes", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(".help-body", VerticalScroll).focus()  # the arrow keys scroll the help at once

    @property
    def text(self) -> str:
        """The help as plain text (what tests read)."""
        return "\n".join(f"{r.key} {r.description} {r.where}" for r in self.rows)

    def action_close(self) -> None:
        self.dismiss(None)
