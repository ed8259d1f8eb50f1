"""The Monitor pane's every-second labels (the sample count and age, what the run has spent) are TextLines, its
log tail a LogTail.

What could break: they draw their text from their own lines and styles instead of Textual's content pipeline;
a wrap or a cut placed differently, a padding cell in another style, a height not following the number of lines,
a severity's colour, or a line kept from an older text would show another picture than the widget replaced.

What must hold: for short, exact-width, wrapping, unbreakable and empty texts, updated one after another, a
TextLine is cell for cell (text and style) the ``width: 100%`` Label of the same text and CSS, and as tall; for
log lines short, too long, matching an error pattern or not, growing and shrinking, a LogTail is cell for cell the
Static of ``log_tail_text`` with the pane's CSS, border included.
"""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.widgets import Label, Static

from widgets.alerts import log_tail_text
from widgets.monitor_pane import LOG_TAIL_LINES, log_tail_lines
from widgets.monitor_rows import LogTail, TextLine

TEXTS = [
    "last sample 0 s ago · source nvml · 12 samples",
    "x" * 30,
    "run: step 12/100 · loss 0.4123 · 25,000 tok/s · $1.23 spent (since rented), ~$8.40 to go · ETA 14:02",
    "a" * 45 + " tail",
    "",
    "short",
    "[bold]not markup[/] · ok",
    "run: step 13/100 · loss 0.4100 · 25,100 tok/s · $1.25 spent (since rented), ~$8.38 to go · ETA 14:02",
]


class Pair(App[None]):
    CSS = """
    #a, #b { width: 100%; color: $text-muted; }
    .bold { text-style: bold; color: $text; }
    Vertical { padding: 0 1; }
    """

    def __init__(self, bold: bool) -> None:
        super().__init__()
        self.bold = bold

    def compose(self) -> ComposeResult:
        classes = "bold" if self.bold else ""
        with Vertical():
            yield Label("", id="a", classes=classes, markup=False)
            yield TextLine("", id="b", classes=classes)


def cells(widget) -> list[list[tuple[str, object]]]:
    widget.refresh()
    widget._styles_cache.clear()
    out = []
    for strip in widget.render_lines(Region(0, 0, *widget.outer_size)):
        out.append([(char, seg.style) for seg in strip for char in seg.text])
    return out


@pytest.mark.parametrize("width,bold", [(32, False), (80, True), (19, True)])
async def test_a_text_line_is_the_label_cell_for_cell(width: int, bold: bool) -> None:
    app = Pair(bold)
    async with app.run_test(size=(width, 12)) as pilot:
        label, line = app.query_one("#a", Label), app.query_one("#b", TextLine)
        for text in TEXTS:
            label.update(text)
            line.update(text)
            await pilot.pause()
            assert str(line.render()) == text
            assert line.size == label.size, text
            assert cells(line) == cells(label), text


LOGS = [
    ["trainer: step 1 | loss 0.5", "Traceback (most recent call last):"],
    ["trainer: step 1 | loss 0.5", "Traceback (most recent call last):", "x" * 90],
    ["CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)", "ok", "warning: slow", "é" * 70],
    [f"trainer: step {k} | loss {0.5 / k:.4f} | [bold]not markup[/]" for k in range(1, 12)],
    ["short"],
]


class Logs(App[None]):
    CSS = """
    #a, #b { height: auto; max-height: 10; border-top: solid $panel; color: $text-muted;
             text-wrap: nowrap; text-overflow: ellipsis; }
    Vertical { padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("", id="a")
            yield LogTail(id="b")


@pytest.mark.parametrize("width", [30, 100])
async def test_a_log_tail_is_the_static_cell_for_cell(width: int) -> None:
    app = Logs()
    async with app.run_test(size=(width, 40)) as pilot:
        static, tail = app.query_one("#a", Static), app.query_one("#b", LogTail)
        for lines in LOGS:
            static.update(log_tail_text(lines, LOG_TAIL_LINES))
            tail.show(log_tail_lines(lines, LOG_TAIL_LINES))
            await pilot.pause()
            assert tail.outer_size == static.outer_size, lines
            assert cells(tail) == cells(static), lines
