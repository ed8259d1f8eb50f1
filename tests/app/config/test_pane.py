"""The Config pane in a small App driven by Pilot: live validation after the debounce, jump, fix,
save with backup, parse errors that keep the text, on-disk changes, and a snapshot."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import TextArea

from app.panes.config import ConfigPane
from tests.app.helpers import wait_for
from tests.services.config.test_rules import RL_BASE
from widgets.findings import FindingsList

SIZE = (140, 36)


class PaneApp(App[None]):
    def __init__(self, path: Path | None, **kw) -> None:
        super().__init__()
        self.path = path
        self.kw = kw

    def compose(self) -> ComposeResult:
        yield ConfigPane(self.path, **self.kw)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))


def ids(pane: ConfigPane) -> list[tuple[str, int]]:
    return [(f.id, f.line) for f in pane.findings_list.findings]


def config_file(tmp_path: Path, text: str = RL_BASE) -> Path:
    path = tmp_path / "rl.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def test_typo_produces_its_finding_after_the_debounce(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    # a debounce long enough that a loaded machine's slow key presses never let it fire mid-typing
    async with PaneApp(path, debounce=1.5).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        assert ids(pane) == []
        editor = pane.editor
        editor.focus()
        editor.move_cursor((6, 0))  # the empty line after [trainer]
        await pilot.press(*"max_step = 3", "enter")
        await pilot.pause(0.1)
        assert ids(pane) == []  # not yet: the debounce has not fired
        await wait_for(pilot, lambda: ids(pane) == [("unknown-key", 7)], timeout=6)
        assert "did you mean 'max_steps'" in pane.findings_list.findings[0].message
        assert "0 warning(s)" in str(pane.query_one("#config-summary").render())
        assert "modified" in str(pane.query_one("#config-status").render())


async def test_jump_fix_and_save_with_backup(tmp_path: Path) -> None:
    text = RL_BASE.replace("batch_size = 16", "batch_size = 20  # per step") + "\n# the end\n"
    path = config_file(tmp_path, text)
    async with PaneApp(path, debounce=0.05).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: ids(pane) == [("xc-batch-group", 9)])
        fl = pane.query_one(FindingsList)
        fl.focus()
        fl.highlighted = 0
        await pilot.press("enter")  # jump
        await pilot.pause()
        assert pane.editor.cursor_location == (8, 0) and pane.editor.has_focus
        fl.focus()
        await pilot.press("f")  # apply the fix through tomlkit
        await wait_for(pilot, lambda: ids(pane) == [])
        assert "batch_size = 24  # per step" in pane.editor.text and "# the end" in pane.editor.text
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: path.read_text() == pane.editor.text)
        assert (tmp_path / "rl.toml.bak").read_text() == text
        await wait_for(pilot, lambda: "saved" in str(pane.query_one("#config-status").render()))


async def test_invalid_toml_keeps_the_text_and_reports_line_and_column(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    async with PaneApp(path, debounce=0.05).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        pane.editor.focus()
        pane.editor.move_cursor((0, 0))
        await pilot.press(*"[[[ oops", "enter")
        await wait_for(pilot, lambda: [f for f, _ in ids(pane)] == ["toml-syntax"])
        finding = pane.findings_list.findings[0]
        assert finding.line == 1 and finding.column >= 1
        assert pane.editor.text == "[[[ oops\n" + RL_BASE
        pane.findings_list.focus()
        await pilot.press("f")  # no fix for a parse error: nothing changes
        await pilot.pause()
        assert pane.editor.text == "[[[ oops\n" + RL_BASE


async def test_change_on_disk_is_noticed_and_reload_keeps_unsaved_edits(tmp_path: Path) -> None:
    from services.config import versions

    path = config_file(tmp_path)
    async with PaneApp(path, debounce=0.05, disk_check=0.1).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        pane.editor.focus()
        pane.editor.move_cursor((0, 0))
        await pilot.press(*"# mine", "enter")
        new = RL_BASE.replace("max_steps = 20", "max_steps = 99")
        path.write_text(new)
        import os

        os.utime(path, (time.time() + 5, time.time() + 5))
        await wait_for(pilot, lambda: "CHANGED ON DISK" in str(pane.query_one("#config-status").render()))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: pane.editor.text == new)
        store = tmp_path / "data" / "versions"
        # the edits are kept by a thread worker beside the reload's: wait for it, not only for the reload
        await wait_for(pilot, lambda: versions.list_versions(path, store), timeout=10)
        saved = versions.list_versions(path, store)
        assert [v.name for v in saved] == ["unsaved edits before reload"]
        assert versions.text_of(path, store, saved[0].id).startswith("# mine\n")


async def test_no_file_and_missing_file(tmp_path: Path) -> None:
    async with PaneApp(None).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "no file" in str(pane.query_one("#config-status").render())
    target = tmp_path / "new.toml"
    async with PaneApp(target, debounce=0.05).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        pane.editor.insert(RL_BASE)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: target.exists() and target.read_text() == RL_BASE)


def test_config_pane_snapshot(snap_compare, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = RL_BASE.replace("[trainer]\n", "[trainer]\nmax_step = 3\n") + "[ckpt]\ninterval = 10\n"
    config_file(tmp_path, text)
    monkeypatch.chdir(tmp_path)  # the status line shows the path: keep it the same on every run
    path = Path("rl.toml")

    async def settle(pilot: Pilot) -> None:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: len(pane.findings_list.findings) == 2)
        pane.query_one(TextArea).cursor_blink = False
        await pilot.pause()

    app = PaneApp(path, debounce=0.05, disk_check=0)
    assert snap_compare(app, terminal_size=SIZE, run_before=settle)


async def click(pilot: Pilot, selector: str) -> None:
    """Click, then wait out the Button's "active" flash (a click during it is ignored)."""
    await pilot.click(selector)
    await pilot.pause(0.25)


async def test_wizard_walks_through_steps_and_saves_a_clean_config(tmp_path: Path) -> None:
    from textual.widgets import Input

    from app.screens.wizard import WizardScreen
    from services.config.validate import validate_text

    target = tmp_path / "wizard.toml"
    results: list = []

    class WizApp(App[None]):
        def on_mount(self) -> None:
            self.push_screen(WizardScreen(target, model="Qwen/Qwen3-0.6B", preset="rtx4090", gpus=2), results.append)

    async with WizApp().run_test(size=(120, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, WizardScreen)
        await pilot.pause()
        for step in (1, 2, 3):
            await click(pilot, "#wizard-next")
            await pilot.pause()
            assert screen.step == step
        await click(pilot, "#wizard-back")
        await pilot.pause()
        assert screen.step == 2
        await click(pilot, "#wizard-next")
        gpus = screen.query_one("#wizard-gpus", Input)
        gpus.value = "0"
        await click(pilot, "#wizard-next")
        assert screen.step == 3 and "≥ 1" in str(screen.query_one("#wizard-error").render())
        gpus.value = "1"
        await click(pilot, "#wizard-next")
        assert screen.step == 4 and "0 error(s)" in str(screen.query_one("#wizard-estimate").render())
        await click(pilot, "#wizard-next")  # Save
        await wait_for(pilot, lambda: results == [target])
    text = target.read_text()
    assert 'name = "Qwen/Qwen3-0.6B"' in text and "gpu_memory_utilization = 0.5" in text
    assert validate_text(text, preset="rtx4090", gpus=1).errors == 0


async def test_versions_panel_save_diff_restore(tmp_path: Path) -> None:
    from textual.widgets import DataTable, Input

    from widgets.versions import VersionList

    path = config_file(tmp_path)
    async with PaneApp(path, debounce=0.05, disk_check=0).run_test(size=SIZE) as pilot:
        pane = pilot.app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        await pilot.press("f2")
        name = pane.query_one("#versions-name", Input)
        assert name.has_focus
        await pilot.press(*"baseline - first try", "enter")
        vlist = pane.query_one(VersionList)
        await wait_for(pilot, lambda: len(vlist.versions) == 1)
        assert (vlist.versions[0].name, vlist.versions[0].notes) == ("baseline", "first try")
        pane.editor.replace("max_steps = 50", (0, 0), (0, len("max_steps = 20")))
        vlist.focus()
        vlist.highlighted = None
        vlist.highlighted = 0
        table = pane.query_one("#versions-diff", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        assert [str(c) for c in table.get_row_at(0)] == ["max_steps", "20", "50"]
        await pilot.press("r")
        await wait_for(pilot, lambda: pane.editor.text == RL_BASE)
        await wait_for(pilot, lambda: [v.name for v in vlist.versions] == ["before restore", "baseline"])
        assert path.read_text() == RL_BASE  # restore fills the editor; ctrl+s writes
