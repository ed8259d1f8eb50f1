"""The Config pane's versions panel: saved versions of the file, a name box to save the buffer, and a
side-by-side diff (key, old in red, new in green) of the highlighted version against the buffer.

A view: it is handed versions and changes, and posts :class:`VersionsView.Save`, ``.Diff`` (a
version highlighted) and ``.Restore`` (``r`` on a version); the pane controller does the I/O.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable, Input, Label, OptionList
from textual.widgets.option_list import Option

from services.config.versions import Change, Version


class VersionList(OptionList):
    BINDINGS = [Binding("r", "restore", "Restore version", id="config.restore_version")]

    class Restore(Message):
        def __init__(self, version: Version) -> None:
            super().__init__()
            self.version = version

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.versions: tuple[Version, ...] = ()

    def show(self, versions: Sequence[Version]) -> None:
        self.versions = tuple(reversed(versions))  # newest first
        self.clear_options()
        self.add_options(
            [
                Option(
                    f"{time.strftime('%m-%d %H:%M', time.localtime(v.created))}  {v.name}"
                    + (f" — {v.notes}" if v.notes else ""),
                    id=v.id,
                )
                for v in self.versions
            ]
        )

    @property
    def current(self) -> Version | None:
        h = self.highlighted
        return self.versions[h] if h is not None and 0 <= h < len(self.versions) else None

    def action_restore(self) -> None:
        if self.current is not None:
            self.post_message(self.Restore(self.current))


HEADING = "versions (r restores into the editor)"


class VersionsView(Vertical):
    DEFAULT_CSS = """
    VersionsView { height: 1fr; }
    VersionsView #versions-list { height: 8; }
    VersionsView #versions-diff { height: 1fr; }
    VersionsView Label { text-style: bold; }
    """

    class Save(Message):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    class Diff(Message):
        def __init__(self, version: Version) -> None:
            super().__init__()
            self.version = version

    def compose(self) -> ComposeResult:
        yield Input(placeholder="name this version, Enter saves (notes after ' - ')", id="versions-name")
        yield Label(HEADING, id="versions-heading")
        yield VersionList(id="versions-list")
        yield Label("", id="versions-diff-title")
        yield DataTable(id="versions-diff", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("key", "version", "editor")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.post_message(self.Save(event.value.strip()))
            event.input.value = ""

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        version = self.query_one(VersionList).current
        if version is not None:
            self.post_message(self.Diff(version))

    def show_versions(self, versions: Sequence[Version]) -> None:
        self.query_one(VersionList).show(versions)

    def say(self, text: str) -> None:
        """What a save or a restore did, in the panel the user is looking at (a toast covered the list at
        80x24): first on the heading, before its key hint."""
        self.query_one("#versions-heading", Label).update(Content(f"{text} · {HEADING}"))

    def show_diff(self, version: Version, changes: Sequence[Change] | None) -> None:
        table = self.query_one(DataTable)
        table.clear()
        title = self.query_one("#versions-diff-title", Label)
        if changes is None:
            title.update(f"{version.name} → editor: the editor text does not parse")
            return
        title.update(f"{version.name} → editor: {len(changes)} change(s)")
        for c in changes:
            table.add_row(
                c.key,
                Text("" if c.kind == "added" else repr(c.old), style="red"),
                Text("" if c.kind == "removed" else repr(c.new), style="green"),
            )
