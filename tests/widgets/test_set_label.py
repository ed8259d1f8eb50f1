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


class Sized(App[None]):
    CSS = "#wide { width: 100%; } #cells { width: 12; } #auto { width: auto; }"

    def compose(self) -> ComposeResult:
        for name in ("wide", "cells", "auto"):
            yield Label("", id=name)


async def test_a_layout_pass_only_when_the_label_may_change_size() -> None:
    """A label whose width does not follow its text (a share of the container, a number of cells) keeps
    its size while the text fits its one line: no layout pass for it. One of auto width, or a text that
    no longer fits, asks for one - and what is drawn is the new text in every case."""
    app = Sized()
    async with app.run_test(size=(40, 6)) as pilot:
        asked: list[tuple[str, bool]] = []
        for name in ("wide", "cells", "auto"):
            label = app.query_one(f"#{name}", Label)
            set_label(label, "12 %")
            await pilot.pause()
            original = label.update
            label.update = lambda content, *, layout=True, _o=original, _n=name: (
                asked.append((_n, layout)),
                _o(content, layout=layout),
            )[1]
            set_label(label, "100 %")  # longer, still fits
            set_label(label, "x" * 30)  # wider than the 12 cells, fits the 40-cell screen
            await pilot.pause()
            assert str(label.render()) == "x" * 30
        assert asked == [
            ("wide", False),
            ("wide", False),
            ("cells", False),
            ("cells", True),
            ("auto", True),
            ("auto", True),
        ]
