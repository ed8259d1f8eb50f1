"""Ask for a pod: ``user@host[:port]``, an ssh alias, ``local`` or ``demo``."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class AddPodScreen(ModalScreen["str | None"]):
    """Dismisses with the spec the user typed (stripped), or None when cancelled or empty."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="add_pod_cancel")]

    def __init__(self) -> None:
        super().__init__(classes="dialog-screen")

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("[b]Add a pod[/b]", classes="dialog-title")
            yield Static(
                "user@host[:port], an alias from ~/.ssh/config, local or demo. SSH pods are saved to pods.toml.",
                classes="dialog-help",
            )
            yield Input(placeholder="root@203.0.113.7:22", id="pod-spec")
            yield Static("enter adds · escape cancels", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        spec = event.value.strip()
        self.dismiss(spec or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
