"""Ask where to save a config typed without a file (ctrl+s in the Config pane before any file was open)."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from services.text import plain


def free_name(folder: Path, stem: str = "rl", suffix: str = ".toml") -> Path:
    """``folder/rl.toml``, else ``rl-2.toml``, ``rl-3.toml``, ...: a name no file has yet."""
    candidate = folder / f"{stem}{suffix}"
    n = 2
    while candidate.exists():
        candidate = folder / f"{stem}-{n}{suffix}"
        n += 1
    return candidate


class SaveAsScreen(ModalScreen["Path | None"]):
    """Dismisses with the path typed (a file that does not exist yet), or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="save_as_cancel")]

    def __init__(self, suggestion: Path) -> None:
        super().__init__(classes="dialog-screen")
        self.suggestion = suggestion

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("[b]Save the config as[/b]", classes="dialog-title")
            yield Static("A new file: an existing one is never overwritten from here.", classes="dialog-help")
            yield Input(str(self.suggestion), id="save-as-path")
            yield Static("", id="save-as-error", classes="dialog-help")
            yield Static("enter saves · escape cancels", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            return
        path = Path(text).expanduser()
        if path.exists():
            self.query_one("#save-as-error", Static).update(Content(plain(f"{path} exists: choose another name")))
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)
