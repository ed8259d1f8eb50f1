"""The Config pane's editor (widgets/config_editor.py) draws what Textual's TextArea draws, cell for cell.

The editor highlights only the rows around the viewport and keeps its rendered rows across edits (keyed by
their content), where Textual re-highlights the whole document and re-renders every row on each key (~25 ms a
key in a 1,000-line config). A wrong window or a stale row would show a string's colour where the string has
been closed, or an old line: each test runs the same steps on a stock TextArea and on the editor and compares
every frame. The editor also relies on Textual internals (pinned < 9): the last test fails when they change.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable

from textual.app import App, ComposeResult
from textual.document._wrapped_document import WrappedDocument
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import TextArea
from textual.widgets.text_area import Selection

from widgets.config_editor import ConfigEditor

SIZE = (90, 24)
Step = Callable[[Pilot, TextArea], Awaitable[None] | None]


def toml_text(sections: int = 40) -> str:
    """A config with every kind of token the TOML highlighting knows, and a long line."""
    parts = ['# a config\ntitle = "rl"\n']
    for i in range(sections):
        parts.append(
            f"\n[section_{i}]  # comment {i}\n"
            f'name = "run-{i}"\n'
            f"steps = {i * 10}\nlr = {i}.5e-6\nenabled = {'true' if i % 2 else 'false'}\n"
            f"when = 2024-01-0{i % 9 + 1}T10:00:00Z\n"
            f"sizes = [1, 2, [3, 4]]\nlayers = [\n  1,\n  2,\n]\ninline = {{ a = 1, b.c = 'x' }}\n"
            f'notes = """\nline one {i}\n  "quoted" line\n"""\n'
        )
    parts.append('\n[[runs]]\nlong = "' + "x" * 150 + '"\n')
    return "".join(parts)


class EditorApp(App[None]):
    def __init__(self, cls: type[TextArea], text: str) -> None:
        super().__init__()
        self.cls = cls
        self.text = text

    def compose(self) -> ComposeResult:
        # as the Config pane builds it
        yield self.cls.code_editor(self.text, language="toml", id="ed", soft_wrap=False, tab_behavior="focus")


def cells(editor: TextArea) -> list[list[tuple[str, object]]]:
    """What the editor draws: each cell's character and style."""
    width, height = editor.outer_size
    return [
        [(char, segment.style) for segment in strip for char in segment.text]
        for strip in editor.render_lines(Region(0, 0, width, height))
    ]


async def frames(cls: type[TextArea], text: str, steps: list[Step]) -> list[list[list[tuple[str, object]]]]:
    out = []
    async with EditorApp(cls, text).run_test(size=SIZE) as pilot:
        editor = pilot.app.query_one("#ed", TextArea)
        editor.cursor_blink = False  # a blink would make the two runs' frames differ by timing
        editor.focus()
        await pilot.pause()
        out.append(cells(editor))
        for step in steps:
            result = step(pilot, editor)
            if result is not None:
                await result
            await pilot.pause()
            out.append(cells(editor))
    return out


async def assert_same(steps: list[Step], text: str | None = None) -> None:
    text = toml_text() if text is None else text
    stock = await frames(TextArea, text, steps)
    ours = await frames(ConfigEditor, text, steps)
    assert len(stock) == len(ours)
    for i, (a, b) in enumerate(zip(stock, ours)):
        assert a == b, f"frame {i} differs from a stock TextArea's"


def move(row: int, column: int = 0) -> Step:
    return lambda pilot, editor: editor.move_cursor((row, column), center=True)


def move_to(start: str, after: int, column: int) -> Step:
    """The cursor to ``column`` of the first row from ``after`` on that starts with ``start``."""

    def step(pilot: Pilot, editor: TextArea) -> None:
        lines = editor.document.lines
        row = next(i for i in range(after, len(lines)) if lines[i].startswith(start))
        editor.move_cursor((row, column), center=True)

    return step


def insert(text: str, where: tuple[int, int]) -> Step:
    return lambda pilot, editor: editor.insert(text, where) and None


def keys(*names: str) -> Step:
    return lambda pilot, editor: pilot.press(*names)


def scroll(y: int) -> Step:
    return lambda pilot, editor: editor.scroll_to(y=y, animate=False, immediate=True)


def call(name: str) -> Step:
    return lambda pilot, editor: getattr(editor, name)()


async def test_a_string_opened_and_closed_far_above_the_viewport() -> None:
    await assert_same(
        [
            move(200),
            insert("x = '''\n", (3, 0)),  # a literal string left open: an error up to the end
            insert("'''\n", (400, 0)),  # closed far below: the viewport is the middle of one string
            call("undo"),
            call("undo"),
            insert('x = """\n', (3, 0)),  # everything below is a string now, the viewport included
            insert('"""\n', (6, 0)),  # closed again: the viewport's keys and values come back
            insert("'''", (1, 8)),  # an unterminated literal string: an ERROR node up to the end
            keys("a", "b"),
            call("undo"),
            call("undo"),
            call("redo"),
        ]
    )


async def test_typing_enter_backspace_and_brackets_in_the_viewport() -> None:
    await assert_same(
        [
            move(128, 8),  # sizes = [1, ...: the cursor on the bracket, its partner highlighted
            keys("x", "y", "left", "left"),  # typed before the bracket: both move right
            keys("enter", "backspace", "enter"),
            keys('"', '"', '"'),  # a multi-line string opened inside the viewport
            keys("down", "down", "end", "z"),
            keys(*'"""'),
            call("undo"),
            move(126, 0),
            keys("delete", "delete"),
            move_to("layers = [", 129, 9),  # layers = [ ... ]: the partner three rows below
            keys("x"),  # typed before the bracket: the cursor is on it again
            keys("right"),  # off the bracket: its partner is drawn plain again
            keys("up"),
        ]
    )


async def test_scrolling_away_and_back_after_edits() -> None:
    await assert_same(
        [
            move(100),
            keys("a"),
            scroll(0),
            insert('"""\n', (2, 0)),
            scroll(300),  # rows far below the highlighted window, now a string
            scroll(150),
            insert('"""\n', (4, 0)),
            scroll(10_000),  # the end of the document, with blank rows below it
            scroll(0),
        ]
    )


async def test_selection_undo_redo_and_a_long_line() -> None:
    await assert_same(
        [
            move(200),
            lambda pilot, editor: setattr(editor, "selection", Selection((195, 3), (205, 2))),
            keys("shift+down", "shift+down", "shift+right"),
            keys("x"),  # replaces the selection: rows go away
            call("undo"),
            call("redo"),
            move(editor_rows(toml_text()) - 1, 120),  # the long line, scrolled sideways
            keys("q"),
            lambda pilot, editor: setattr(editor, "selection", Selection((0, 0), (editor_rows(toml_text()), 0))),
        ]
    )


async def test_soft_wrap_on_and_off() -> None:
    await assert_same(
        [
            lambda pilot, editor: setattr(editor, "soft_wrap", True),
            move(editor_rows(toml_text()) - 1, 100),  # the long line, wrapped over two rows
            keys("a", "b", "enter"),
            insert('"""\n', (editor_rows(toml_text()) - 20, 0)),
            scroll(0),
            lambda pilot, editor: setattr(editor, "soft_wrap", False),
            move(50),
            keys("c"),
        ]
    )


async def test_replacing_the_whole_text_and_an_empty_document() -> None:
    await assert_same(
        [
            move(100),
            lambda pilot, editor: editor.replace(toml_text(5), (0, 0), editor.document.end) and None,
            lambda pilot, editor: editor.load_text(toml_text(60)),
            move(500),
            lambda pilot, editor: editor.load_text(""),
            keys("a", "=", "1"),
        ]
    )


def editor_rows(text: str) -> int:
    return text.count("\n")


def test_wrapped_height_is_textual_sum() -> None:
    """The O(1) height equals Textual's sum over every line's wrap offsets, after wraps and edits."""
    from textual.document._document import Document

    from widgets.config_editor import _WrappedDocument

    doc = Document(toml_text(5))
    ours = _WrappedDocument(doc, width=20)
    assert ours.height == WrappedDocument.height.fget(ours) > doc.line_count  # type: ignore[attr-defined]
    result = doc.replace_range((3, 0), (9, 0), "a = " + "y" * 70 + "\n")
    ours.wrap_range((3, 0), (9, 0), result.end_location)
    assert ours.height == WrappedDocument.height.fget(ours)  # type: ignore[attr-defined]
    ours.wrap(0)
    assert ours.height == WrappedDocument.height.fget(ours) == doc.line_count  # type: ignore[attr-defined]


# The parts of Textual the editor overrides or copies (render_line's cache key, the highlight map, the
# wrapped document's line map): a new Textual that changes them must be reviewed against ConfigEditor.
TEXTUAL_SOURCES = {
    "TextArea.render_line": "0fab1cf6e049e371",
    "TextArea._render_line": "11d1cc3274dc185b",
    "TextArea._build_highlight_map": "08a9cc360a6c5b62",
    "WrappedDocument.wrap": "7e67ba98b0c41976",
    "WrappedDocument.wrap_range": "87d7fcc7c34a0ab1",
    "WrappedDocument.height": "df977b98aa6a11c3",
}


def test_textual_internals_the_editor_relies_on_are_unchanged() -> None:
    objects = {
        "TextArea.render_line": TextArea.render_line,
        "TextArea._render_line": TextArea._render_line,
        "TextArea._build_highlight_map": TextArea._build_highlight_map,
        "WrappedDocument.wrap": WrappedDocument.wrap,
        "WrappedDocument.wrap_range": WrappedDocument.wrap_range,
        "WrappedDocument.height": WrappedDocument.height.fget,  # type: ignore[attr-defined]
    }
    found = {name: hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16] for name, obj in objects.items()}
    assert found == TEXTUAL_SOURCES, "Textual's TextArea changed: check widgets/config_editor.py against it"
