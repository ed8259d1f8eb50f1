"""widgets.format.set_label shows text as written: much of what the labels carry comes from pods (process command
lines, probe errors, GPU model names, log lines), and as markup '[/x]' raised MarkupError inside a message
handler (the Monitor pane went down with the app) while '[bold]' silently vanished."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Label

from widgets.format import set_label

TEXTS = ("GPU processes: python -c print('[/x]')", "model [bold]H100[/bold]", "q [red", "plain 87 %")


class One(App[None]):
    def compose(self) -> ComposeResult:
        yield Label("", id="l")


async def test_pod_text_is_shown_as_written() -> None:
    app = One()
    async with app.run_test(size=(80, 4)) as pilot:
        label = app.query_one("#l", Label)
        for text in TEXTS:
            set_label(label, text)
            await pilot.pause()
            assert str(label.render()) == text
