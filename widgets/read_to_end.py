"""What a confirmation acts on, in a box that scrolls when the terminal is short, and that says so.

A dialog that confirms something irreversible (delete, kill, terminate, restore) shows everything it will do.
When that does not fit, the box says how much is shown ("12 lines, 9 shown") and ``seen_end`` stays False
until the user has scrolled to its last line: the dialog's confirm key waits for it.
"""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static


class ReadToEnd(VerticalScroll, can_focus=True):
    """Scrolls its content; posts :class:`ReadToEnd.Changed` when the end becomes seen or unseen."""

    HELP_WHERE = "the list to confirm"
    DEFAULT_CSS = """
    ReadToEnd { height: auto; }
    ReadToEnd:focus { background-tint: $foreground 5%; }
    """

    seen_end: reactive[bool] = reactive(True)

    class Changed(Message):
        def __init__(self, box: ReadToEnd) -> None:
            super().__init__()
            self.box = box

        @property
        def control(self) -> ReadToEnd:
            return self.box

    def __init__(self, *children, hint: Static | None = None, what: str = "lines", **kw) -> None:
        super().__init__(*children, **kw)
        self.hint = hint  # where "12 lines, 9 shown" goes (a line under the box, outside the scroll)
        self.what = what
        self._latched = False  # once the end was seen it stays seen, until the content changes

    def content_changed(self) -> None:
        """The text inside was replaced: the user has not seen this end yet."""
        self._latched = False
        self.call_after_refresh(self.check)

    def on_resize(self) -> None:
        self.call_after_refresh(self.check)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.check()

    def check(self) -> None:
        total = int(self.virtual_size.height)
        shown = int(self.scrollable_content_region.height)
        at_end = self.max_scroll_y <= 0 or self.scroll_y >= self.max_scroll_y - 0.5
        if at_end and total > 0:
            self._latched = True
        seen = self._latched or at_end
        if self.hint is not None:
            if self.max_scroll_y <= 0:
                self.hint.update("")
                self.hint.display = False
            else:
                first = int(self.scroll_y) + 1
                last = min(total, int(self.scroll_y) + shown)
                tail = "" if seen else ": scroll ↓ to the end to confirm"
                self.hint.update(f"{total} {self.what}, {first}–{last} shown{tail}")
                self.hint.display = True
        if seen != self.seen_end:
            self.seen_end = seen
            self.post_message(self.Changed(self))
