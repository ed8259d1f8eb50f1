"""The one confirmation modal for anything destructive or that spends money."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from widgets.read_to_end import ReadToEnd


class ConfirmScreen(ModalScreen[bool]):
    """Ask a yes/no question; dismisses with True only on an explicit yes. Focus starts on "No"."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm_yes"),
        Binding("n", "answer(False)", "No", id="confirm_no"),
        Binding("escape", "answer(False)", "Cancel", id="confirm_cancel"),
    ]

    def __init__(self, question: str, *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self._yes, self._no = yes, no

    def compose(self) -> ComposeResult:
        hint = Static("", classes="dialog-hint", markup=False)
        with Vertical(classes="dialog"):
            with ReadToEnd(id="confirm-box", hint=hint, classes="dialog-question"):
                yield Static(self.question, markup=False)
            yield hint
            with Horizontal(classes="dialog-buttons"):
                yield Button(self._yes, id="yes", variant="error")
                yield Button(self._no, id="no", variant="primary")

    DEFAULT_CSS = """
    ConfirmScreen #confirm-box { max-height: 50vh; }
    """

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()
        self.query_one(ReadToEnd).content_changed()

    def on_read_to_end_changed(self, event: ReadToEnd.Changed) -> None:
        """A question longer than the dialog: Yes waits until the user has scrolled to its end."""
        event.stop()
        self.query_one("#yes", Button).disabled = not event.box.seen_end
        if not event.box.seen_end:
            event.box.focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        if answer and not self.query_one(ReadToEnd).seen_end:
            self.query_one(ReadToEnd).focus()  # the rest of the question first (the hint under it says so)
            return
        self.dismiss(answer)
