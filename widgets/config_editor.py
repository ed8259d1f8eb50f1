"""The Config pane's editor: Textual's TextArea, doing per keystroke only the work the visible rows need.

Textual's TextArea, on every edit, queries the syntax tree for the highlights of the WHOLE document and then,
for every drawn line, sums the wrap data of every line to know the document's height: a 1,000-line config
spent ~25 ms a key on work for rows nobody sees (tests/benchmarks/editor_latency.py). Here:

- the tree is still parsed whole (tree-sitter does it incrementally), so a multi-line string opened far above
  the screen still colours the screen right; only the highlight *query* is limited to the rows around the
  viewport, and done again when a row outside them is drawn;
- the document's height is the length of the wrapped document's line map, which has one entry per drawn row
  (the sum Textual computes, kept in step by every wrap);
- rendered rows stay cached across edits (the cache key holds each row's text and highlights), and an edit
  repaints only the rows whose key changed, where Textual repaints the whole editor on every selection change.

What is drawn is the stock TextArea's, cell for cell (tests/app/config/test_editor.py compares them after edits
that change highlighting far away, scrolling, undo/redo, selections and soft wrap). All of it overrides
Textual internals (pinned < 9); the same tests fail loudly if Textual changes them.
"""

from __future__ import annotations

from typing import Any

from textual.document._document import EditResult
from textual.document._edit import Edit
from textual.document._wrapped_document import WrappedDocument
from textual.reactive import Reactive, reactive
from textual.strip import Strip
from textual.widgets import TextArea
from textual.widgets.text_area import Selection

MARGIN = 0.5  # of the viewport's height, queried above and below it: a short scroll needs no new query


class _WrappedDocument(WrappedDocument):
    """Textual's wrapped document with an O(1) height (Textual's sums every line's wrap offsets per call)."""

    @property
    def height(self) -> int:
        return len(self._offset_to_line_info)


class ConfigEditor(TextArea):
    """A TextArea whose per-edit work is bounded by the viewport, not the document (drawn output unchanged)."""

    # Textual repaints the whole editor whenever the selection is set (every key); here an edit repaints only
    # the rows it changed (_refresh_changed_rows), any other selection change the whole editor as Textual does
    selection: Reactive[Selection] = reactive(Selection(), init=False, always_update=True, repaint=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._hl_rows: tuple[int, int] | None = None  # document rows [first, end) whose highlights are built
        self._drawn: dict[int, tuple[object, ...] | None] = {}  # viewport row -> the key it was last drawn from
        self._editing = 0  # inside edit/undo/redo: the rows are compared once it is done
        super().__init__(*args, **kwargs)

    def _watch_selection(self, previous_selection: Selection, selection: Selection) -> None:
        super()._watch_selection(previous_selection, selection)
        if not self._editing:
            self.refresh()

    def edit(self, edit: Edit) -> EditResult:
        self._editing += 1
        try:
            return super().edit(edit)
        finally:
            self._editing -= 1
            self._refresh_changed_rows()

    def undo(self) -> None:
        self._editing += 1
        try:
            super().undo()
        finally:
            self._editing -= 1
            self._refresh_changed_rows()

    def redo(self) -> None:
        self._editing += 1
        try:
            super().redo()
        finally:
            self._editing -= 1
            self._refresh_changed_rows()

    def _refresh_changed_rows(self) -> None:
        """Repaint the viewport's rows whose key differs from the one they were drawn from (after an edit)."""
        if self._editing or not self.is_mounted:
            return
        drawn = self._drawn
        changed = [y for y in range(self.size.height) if y not in drawn or self._row_key(y) != drawn[y]]
        scroll_y = self.scroll_offset.y
        start = end = None
        for y in changed + [None]:
            if y is not None and end == y:
                end = y + 1
                continue
            if start is not None and end is not None:
                self.refresh_lines(scroll_y + start, end - start)
            start, end = (y, y + 1) if y is not None else (None, None)

    @property
    def wrapped_document(self) -> WrappedDocument:
        return self._wrapped

    @wrapped_document.setter
    def wrapped_document(self, value: WrappedDocument) -> None:
        # TextArea makes a new WrappedDocument whenever the document changes: every one gets the O(1) height
        # (same class layout, so switching the instance's class keeps its state and everyone's reference to it)
        if type(value) is WrappedDocument:
            value.__class__ = _WrappedDocument
        self._wrapped = value

    def _build_highlight_map(self) -> None:
        """After an edit (or a new document/language/theme): forget the highlights, build them when drawn.

        The line cache stays: its keys hold each row's text and highlights (render_line)."""
        self._highlights.clear()
        self._hl_rows = None

    def _highlight_rows(self, first: int, end: int) -> None:
        """The highlights of document rows [first, end), as Textual's whole-document query gives them there.

        The line cache stays: a row drawn before was drawn with its highlights, which are the same here."""
        highlights = self._highlights
        highlights.clear()
        self._hl_rows = (first, end)
        if not self._highlight_query:
            return
        # a node intersecting the rows is captured even when it starts above them (a multi-line string)
        captures = self.document.query_syntax_tree(self._highlight_query, (first, 0), (end, 0))
        for name, nodes in captures.items():
            for node in nodes:
                start_row, start_column = node.start_point
                end_row, end_column = node.end_point
                if start_row == end_row:
                    if first <= start_row < end:
                        highlights[start_row].append((start_column, end_column, name))
                    continue
                if first <= start_row < end:
                    highlights[start_row].append((start_column, None, name))
                for row in range(max(start_row + 1, first), min(end_row, end)):
                    highlights[row].append((0, None, name))
                if first <= end_row < end:
                    highlights[end_row].append((0, end_column, name))

    def render_line(self, y: int) -> Strip:
        """Textual's TextArea.render_line, its line cache keyed by the row's content too, not cleared by edits.

        Textual clears the cache on every edit, so each key re-renders every visible row; here a row whose text,
        highlights, wrapping and surroundings are unchanged is taken from the cache."""
        key = self._row_key(y)
        self._drawn[y] = key
        if key is None:  # a placeholder, or below the document: Textual's (cached) lines
            return super().render_line(y)
        if (cached_line := self._line_cache.get(key)) is not None:
            return cached_line
        line = self._render_line(y)
        self._line_cache[key] = line
        return line

    def _row_key(self, y: int) -> tuple[object, ...] | None:
        """All that the row at ``y`` (in the viewport) is drawn from (None: no document row is drawn there)."""
        if self.placeholder and not self.text:  # Textual asks "not self.text" first: a join of the whole text
            return None
        scroll_x, scroll_y = self.scroll_offset
        absolute_y = scroll_y + y
        wrapped = self.wrapped_document
        info = wrapped._offset_to_line_info
        if not 0 <= absolute_y < len(info):
            return None
        row, section = info[absolute_y]
        self._ensure_highlights(row, scroll_y)
        selection = self.selection
        _, cursor_y = self._cursor_offset
        bracket = self._matching_bracket_location  # drawn on its row and on the cursor's
        return (
            # Textual's key
            self.size,
            scroll_x,
            absolute_y,
            (selection if selection.contains_line(absolute_y) or self.soft_wrap else selection.end[0] == absolute_y),
            (selection.end if (self._cursor_visible and self.cursor_blink and absolute_y == cursor_y) else None),
            self.theme,
            # (Textual's key holds the bracket's place for every row: a key typed before a bracket drew them all)
            bracket if bracket is not None and row in (bracket[0], selection.end[0]) else None,
            self.match_cursor_bracket,
            self.soft_wrap,
            self.show_line_numbers,
            self.read_only,
            self.show_cursor,
            self.suggestion,
            # what an edit changes (Textual clears the cache instead)
            row,
            section,
            self.document[row],
            tuple(self._highlights.get(row, ())),
            tuple(wrapped._wrap_offsets[row]),
            tuple(wrapped._tab_width_cache[row]),
            self.virtual_size,
            self.gutter_width,
            self.line_number_start,
        )

    def _ensure_highlights(self, row: int, scroll_y: int) -> None:
        """The highlights are built for ``row`` (and the viewport around it)."""
        rows = self._hl_rows
        if self._highlight_query is None or (rows is not None and rows[0] <= row < rows[1]):
            return
        top = self._row_at(scroll_y)
        top = row if top is None else min(top, row)
        height = max(self.size.height, 1)
        margin = max(int(height * MARGIN), 1)
        self._highlight_rows(max(top - margin, 0), max(top, row) + height + margin)

    def _row_at(self, y: int) -> int | None:
        """The document row drawn at virtual line ``y`` (None below the document)."""
        info = self.wrapped_document._offset_to_line_info
        return info[y][0] if 0 <= y < len(info) else None
