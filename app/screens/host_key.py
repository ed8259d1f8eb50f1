"""Host-key decisions: trust an unknown key (only on the user's word), or refuse a changed one."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from services.models import HostKeyPrompt
from services.text import plain


def host_port(prompt: HostKeyPrompt) -> str:
    return f"[{prompt.host}]:{prompt.port}" if prompt.port != 22 else prompt.host


class HostKeyScreen(ModalScreen[bool]):
    """First contact with a pod: show the key and ask. Dismisses True only on "Trust" (or `y`, as every dialog)."""

    BINDINGS = [
        Binding("y", "trust", "Trust", id="hostkey_trust"),
        Binding("n", "cancel", "Cancel", id="hostkey_no"),
        Binding("escape", "cancel", "Cancel", id="hostkey_cancel"),
    ]

    def __init__(self, pod_name: str, prompt: HostKeyPrompt) -> None:
        super().__init__(classes="dialog-screen")
        self.pod_name = pod_name
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        p = self.prompt
        with Vertical(classes="dialog -wide"):
            # the pod's name is the user's text (pods.toml): never markup
            yield Static(
                Content.styled(plain(f"Unknown host key for pod {self.pod_name}", oneline=True), "bold"),
                classes="dialog-title",
            )
            yield Static(
                f"Host:        {p.host}:{p.port}\n"
                f"Key type:    {p.key_type}\n"
                f"Fingerprint: {p.fingerprint}\n\n"
                "Compare the fingerprint with the one your provider shows for this machine "
                "(or `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on it).\n"
                f"Trusting appends the key to {p.known_hosts_file}",
                classes="dialog-question",
                markup=False,
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Trust", id="trust", variant="warning")
                yield Button("Cancel", id="cancel", variant="primary")
            yield Static("y trusts · n or escape cancels", classes="dialog-hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "trust")

    def action_trust(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class HostKeyChangedScreen(ModalScreen[None]):
    """The pod's key differs from known_hosts. There is deliberately no way to trust it from here."""

    BINDINGS = [Binding("escape", "close", "Close", id="hostkey_changed_close")]

    def __init__(self, pod_name: str, prompt: HostKeyPrompt) -> None:
        super().__init__(classes="dialog-screen")
        self.pod_name = pod_name
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        p = self.prompt
        with Vertical(classes="dialog -wide -danger"):
            yield Static(
                Content.styled(
                    plain(f"Host key CHANGED for pod {self.pod_name} — connection refused", oneline=True), "bold"
                ),
                classes="dialog-title",
            )
            yield Static(
                f"{p.host}:{p.port} now presents a different {p.key_type} key than the one in "
                f"{p.known_hosts_file}:\n"
                f"  {p.fingerprint}\n\n"
                "Someone could be intercepting the connection (man-in-the-middle), or the machine "
                "was reinstalled or re-rented with new keys. Check with your provider first.\n\n"
                "If the change is expected, remove the old key and reconnect:\n"
                f"  ssh-keygen -f '{p.known_hosts_file}' -R '{host_port(p)}'\n"
                "then press r on the pod.",
                classes="dialog-question",
                markup=False,
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
