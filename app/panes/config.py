"""The Config pane: a prime-rl TOML in a TextArea with live validation beside it.

Typing re-validates after a short debounce (validation takes a few ms: tomllib + a line scanner, see
services/config/validate.py), Enter on a finding jumps to its line, ``f`` applies its fix through
tomlkit, ``ctrl+s`` saves atomically with a ``.bak``. File reads, writes and the on-disk change check
run in thread workers. The user's text is never dropped: an unparsable buffer stays as it is (the
parse error is a finding), and reloading over unsaved edits first stores them as a version.
"""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Label, TextArea

from services.config.findings import ConfigError, Finding
from services.config.incremental import IncrementalParser
from services.config.validate import Report, validate_text
from services.text import plain
from widgets.config_editor import ConfigEditor
from widgets.findings import FindingsList, summary_text
from widgets.format import set_label
from widgets.versions import VersionList, VersionsView

DEBOUNCE = 0.3
DISK_CHECK = 2.0
# Above this many characters, or nested deeper than services/tomlfile.py allows, the editor shows plain
# text: tree-sitter's TOML highlighting of 200 KB nested 100,000 deep blocks the App for over a minute.
HIGHLIGHT_MAX_CHARS = 100_000


def plain_reason(text: str) -> str | None:
    """Why ``text`` is shown without syntax highlighting (None: it is highlighted)."""
    from services.tomlfile import too_deep

    if len(text) > HIGHLIGHT_MAX_CHARS:
        return f"large file ({len(text.encode('utf-8', 'replace')) // 1024} KB): no syntax highlighting"
    if too_deep(text) is not None:
        return "nested too deeply: no syntax highlighting"
    return None


class ConfigPane(Widget):
    """``ConfigPane(path)``: edit and validate one prime-rl config (``open(path)`` switches files)."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save", id="config.save"),
        Binding("ctrl+r", "reload", "Reload from disk", id="config.reload"),
        Binding("f8", "next_finding", "Next finding", id="config.next_finding"),
        Binding("f2", "toggle_versions", "Versions", id="config.versions"),
        Binding("ctrl+f", "apply_fix", "Apply fix", id="config.apply_fix_here"),
        Binding("e", "edit", "Edit", id="config.edit"),
        Binding("escape", "leave_editor", "Leave the editor", id="config.leave_editor", show=False),
    ]

    DEFAULT_CSS = """
    ConfigPane { height: 1fr; layout: vertical; }
    ConfigPane #config-status { height: 1; padding: 0 1; background: $boost; }
    ConfigPane #config-body { height: 1fr; }
    ConfigPane #config-editor { width: 3fr; }
    ConfigPane #config-side { width: 2fr; min-width: 30; border-left: solid $primary-background; }
    ConfigPane #config-summary { height: 1; padding: 0 1; text-style: bold; }
    ConfigPane #config-versions { display: none; height: 2fr; }
    ConfigPane.-versions #config-versions { display: block; }
    ConfigPane.-versions #config-findings { height: 1fr; }
    """

    class Validated(Message):
        """Posted after each validation (the App may show the counts on the tab)."""

        def __init__(self, report: Report) -> None:
            super().__init__()
            self.report = report

    def __init__(
        self,
        path: Path | None = None,
        *,
        debounce: float = DEBOUNCE,
        disk_check: float = DISK_CHECK,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.path = Path(path) if path is not None else None
        self.debounce = debounce
        self.disk_check = disk_check
        self.report: Report | None = None
        self._timer: Timer | None = None
        self._disk_timer: Timer | None = None  # the disk check, while the pane is shown
        self._saved_text: str | None = None  # the text on disk as we last read or wrote it
        self._disk_mtime: float | None = None
        self._disk_changed = False
        self._validated_text: str | None = None
        self._parser = IncrementalParser()  # re-parses only the sections a keystroke touched
        self._plain: str | None = None  # why the text is shown without highlighting (plain_reason)
        self._before_versions: Widget | None = None  # what had the focus when f2 opened the versions

    def compose(self) -> ComposeResult:
        yield Label("", id="config-status")
        with Horizontal(id="config-body"):
            # Tab leaves the editor for the findings (TOML needs no tab indentation): every part is reachable
            yield ConfigEditor.code_editor(
                "", language="toml", id="config-editor", soft_wrap=False, tab_behavior="focus"
            )
            with Vertical(id="config-side"):
                yield Label("", id="config-summary")
                yield FindingsList(id="config-findings")
                yield VersionsView(id="config-versions")

    def on_mount(self) -> None:
        if self.path is not None:
            self.open(self.path)
        else:
            self._status()

    @property
    def editor(self) -> TextArea:
        return self.query_one("#config-editor", TextArea)

    @property
    def findings_list(self) -> FindingsList:
        return self.query_one("#config-findings", FindingsList)

    @property
    def modified(self) -> bool:
        return self._saved_text is not None and self.editor.text != self._saved_text

    # ------------------------------------------------------------------ files (thread workers)

    def open(self, path: Path) -> None:
        self.path = Path(path)
        self._load(self.path)

    @work(thread=True, exclusive=True, group="config-io")
    def _load(self, path: Path) -> None:
        from app.settings import remember_config
        from services.config.validate import read_config

        try:
            text = read_config(path)
            mtime = path.stat().st_mtime
        except ConfigError as exc:
            self.app.call_from_thread(self._load_failed, path, exc)
            return
        self.app.call_from_thread(self._loaded, path, text, mtime, plain_reason(text))
        try:
            remember_config(path)  # the next plain start opens it again
        except OSError:
            pass  # a read-only data dir only costs the convenience

    def _loaded(self, path: Path, text: str, mtime: float, plain: str | None = None) -> None:
        if path != self.path:
            return
        self._saved_text = text
        self._disk_mtime = mtime
        self._disk_changed = False
        self._highlight(plain)
        self.editor.load_text(text)
        self.validate_now()
        self._status()

    def _load_failed(self, path: Path, exc: ConfigError) -> None:
        if not path.exists():  # a new file: start empty, saving creates it
            self._saved_text = ""
            self._status(f"new file {path}")
            self.validate_now()
            return
        self.notify(f"{exc} {exc.hint}".strip(), severity="error", title="Config")
        self._status(f"cannot read {path}")

    def action_save(self) -> None:
        if self.path is None:  # typed without a file: ask for a new one, then it is this pane's file
            from app.screens.save_as import SaveAsScreen, free_name

            def chosen(path: Path | None) -> None:
                if path is not None:
                    self.path = path
                    self._save(path, self.editor.text)

            self.app.push_screen(SaveAsScreen(free_name(Path.cwd())), chosen)
            return
        self._save(self.path, self.editor.text)

    @work(thread=True, exclusive=True, group="config-io")
    def _save(self, path: Path, text: str) -> None:
        from services.atomic import atomic_write_text

        try:
            atomic_write_text(path, text, backup=True)
            mtime = path.stat().st_mtime
        except OSError as exc:
            self.app.call_from_thread(self.notify, f"cannot save {path}: {exc.strerror}", severity="error")
            return
        self.app.call_from_thread(self._saved, path, text, mtime)

    def _saved(self, path: Path, text: str, mtime: float) -> None:
        self._saved_text = text
        self._disk_mtime = mtime
        self._disk_changed = False
        errors = self.report.errors if self.report else 0
        self.notify(
            f"saved {path.name}" + (f" with {errors} error(s)" if errors else ""),
            severity="warning" if errors else "information",
        )
        self._status()

    def action_reload(self) -> None:
        if self.path is None:
            return
        if self.modified:
            self._keep_unsaved(self.path, self.editor.text)
        self._load(self.path)

    @work(thread=True, group="config-versions")
    def _keep_unsaved(self, path: Path, text: str) -> None:
        from app.settings import data_dir
        from services.config import versions

        versions.save(path, data_dir() / "versions", "unsaved edits before reload", text=text)

    def on_show(self) -> None:
        """The file on disk is looked at while the pane is shown (a change made meanwhile is told on coming back):
        a hidden pane's timer woke the App every few seconds for a toast nobody was looking at the file for."""
        if self.disk_check > 0 and self._disk_timer is None:
            self._check_disk()
            self._disk_timer = self.set_interval(self.disk_check, self._check_disk)

    def on_hide(self) -> None:
        if self._disk_timer is not None:
            self._disk_timer.stop()
            self._disk_timer = None

    def _check_disk(self) -> None:
        if self.path is not None and self._disk_mtime is not None:
            self._stat(self.path, self._disk_mtime)

    @work(thread=True, exclusive=True, group="config-disk")
    def _stat(self, path: Path, known: float) -> None:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if mtime != known:
            self.app.call_from_thread(self._changed_on_disk, path, mtime)

    def _changed_on_disk(self, path: Path, mtime: float) -> None:
        if path != self.path or self._disk_changed or mtime == self._disk_mtime:
            return
        self._disk_changed = True
        self.notify(
            f"{path.name} changed on disk: ctrl+r reloads it"
            + (" (your unsaved edits are kept as a version)" if self.modified else ""),
            severity="warning",
            title="Config",
            timeout=10,
        )
        self._status()

    # ------------------------------------------------------------------ validation

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        if event.text_area is not self.editor:
            return
        if self.report is not None and self.editor.text == self._validated_text:
            self._status()
            return
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(self.debounce, self.validate_now)
        self._status()

    def validate_now(self) -> Report:
        self._timer = None
        name = str(self.path) if self.path else None
        text = self.editor.text
        report = validate_text(text, filename=name, parser=self._parser)
        self._validated_text = text
        self.report = report
        self.findings_list.show(report.findings)
        set_label(self.query_one("#config-summary", Label), summary_text(report.findings, report.kind))
        self.post_message(self.Validated(report))
        return report

    # ------------------------------------------------------------------ findings

    def on_findings_list_jump(self, event: FindingsList.Jump) -> None:
        self.jump_to(event.finding)

    def jump_to(self, finding: Finding) -> None:
        editor = self.editor
        line = max(0, min(finding.line - 1, editor.document.line_count - 1))
        col = max(0, min(finding.column - 1, len(editor.document.get_line(line))))
        editor.move_cursor((line, col), center=True)
        editor.focus()

    def action_edit(self) -> None:
        """e: into the editor (the pane opens on its findings, so the number keys still switch panes)."""
        self.editor.focus()

    def action_leave_editor(self) -> None:
        """escape in the editor: back to the findings, where 1-5 and the pane's keys work again."""
        if self.editor.has_focus:
            self.findings_list.focus()

    def action_apply_fix(self) -> None:
        """ctrl+f from anywhere in the pane: the highlighted finding's fix (the first with a fix if none)."""
        findings = self.findings_list
        finding = findings.current
        if finding is None or finding.edit is None:
            finding = next((f for f in findings.findings if f.edit is not None), None)
        if finding is None:
            self.notify("No finding here has an automatic fix.", title="Config")
            return
        self.apply_fix(finding)

    def on_findings_list_apply_fix(self, event: FindingsList.ApplyFix) -> None:
        self.apply_fix(event.finding)

    def apply_fix(self, finding: Finding) -> bool:
        from services.config.fixes import apply_fix

        try:
            new = apply_fix(self.editor.text, finding)
        except ConfigError as exc:
            self.notify(f"{exc} {exc.hint}".strip(), severity="warning", title="Fix")
            return False
        editor = self.editor
        editor.replace(new, (0, 0), editor.document.end)  # undoable, unlike load_text
        self.validate_now()
        self.notify(f"applied: {finding.fix}", title="Fix")
        return True

    def action_next_finding(self) -> None:
        fl = self.findings_list
        if fl.findings:
            fl.highlighted = 0 if fl.highlighted is None else (fl.highlighted + 1) % len(fl.findings)
            self.jump_to(fl.findings[fl.highlighted])

    # ------------------------------------------------------------------ versions (F2)

    def action_toggle_versions(self) -> None:
        self.toggle_class("-versions")
        if self.has_class("-versions"):
            self._before_versions = self.app.focused
            self._list_versions()
            self.query_one("#versions-name").focus()
        elif (focused := self.app.focused) is not None and self.query_one(VersionsView) in focused.ancestors:
            # a hidden widget never keeps the focus (the next keys would go into it unseen): back where it was
            before, self._before_versions = self._before_versions, None
            if before is not None and before.is_attached and before.focusable:
                before.focus()
            else:
                self.findings_list.focus()

    def _versions_root(self) -> Path:
        from app.settings import data_dir

        return data_dir() / "versions"

    @work(thread=True, exclusive=True, group="config-versions")
    def _list_versions(self) -> None:
        from services.config import versions

        if self.path is None:
            return
        items = versions.list_versions(self.path, self._versions_root())
        self.app.call_from_thread(self.query_one(VersionsView).show_versions, items)

    def on_versions_view_save(self, event: VersionsView.Save) -> None:
        if self.path is None:
            self.notify("versions belong to a file: save the config first", severity="warning")
            return
        name, _, notes = event.name.partition(" - ")
        self._save_version(self.path, name.strip(), notes.strip(), self.editor.text)

    @work(thread=True, exclusive=True, group="config-versions")
    def _save_version(self, path: Path, name: str, notes: str, text: str) -> None:
        from services.config import versions

        v = versions.save(path, self._versions_root(), name, notes, text=text)
        items = versions.list_versions(path, self._versions_root())
        self.app.call_from_thread(self.query_one(VersionsView).show_versions, items)
        self.app.call_from_thread(self.query_one(VersionsView).say, plain(f"saved version {v.id}"))

    def on_versions_view_diff(self, event: VersionsView.Diff) -> None:
        if self.path is not None:
            self._diff(self.path, event.version, self.editor.text)

    @work(thread=True, exclusive=True, group="config-versions-diff")
    def _diff(self, path: Path, version, text: str) -> None:
        from services.config import versions

        old = versions.text_of(path, self._versions_root(), version.id)
        try:
            changes = versions.diff(old, text)
        except ConfigError:
            changes = None
        self.app.call_from_thread(self.query_one(VersionsView).show_diff, version, changes)

    def on_version_list_restore(self, event: VersionList.Restore) -> None:
        if self.path is not None:
            self._restore(self.path, event.version, self.editor.text)

    @work(thread=True, exclusive=True, group="config-versions")
    def _restore(self, path: Path, version, current: str) -> None:
        """Put a version into the editor (ctrl+s writes it); the buffer is saved as a version first."""
        from services.config import versions

        versions.save(path, self._versions_root(), "before restore", f"editor text before {version.id}", text=current)
        text = versions.text_of(path, self._versions_root(), version.id)
        items = versions.list_versions(path, self._versions_root())
        self.app.call_from_thread(self._restored, version, text, items)

    def _highlight(self, plain: str | None) -> None:
        """Highlighting on, or off for a large or deep text (set before the text goes in: that is the cost)."""
        self._plain = plain
        language = None if plain else "toml"
        if self.editor.language != language:
            self.editor.language = language

    def _restored(self, version, text: str, items) -> None:
        editor = self.editor
        self._highlight(plain_reason(text))
        editor.replace(text, (0, 0), editor.document.end)
        self.validate_now()
        self.query_one(VersionsView).show_versions(items)
        self.query_one(VersionsView).say(plain(f"restored {version.name}: ctrl+s writes it"))
        self._status()

    def _status(self, text: str | None = None) -> None:
        if text is None:
            if self.path is None:
                text = "no file yet · w: the config wizard writes one · e: type one here, ctrl+s saves it"
            else:
                flags = []
                if self.modified:
                    flags.append("modified")
                if self._disk_changed:
                    flags.append("CHANGED ON DISK · ctrl+r reload")
                # the state first: a long path is what a narrow terminal cuts, never "saved"/"modified"
                text = f"{' · '.join(flags) if flags else 'saved'} · {self.path}"
            if self._plain:
                text += f" · {self._plain}"
        set_label(self.query_one("#config-status", Label), text)
