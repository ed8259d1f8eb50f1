"""Issue 13 item 6, the Config pane: a 200 KB config froze the pane (and the whole App) for over a minute in
syntax highlighting, and a config nested ~500 levels ended the App with RecursionError. Both now open at
once in the real App: the text is all there, highlighting is off for them (the status line says so), the
deep one is a finding, and the App answers the next key press."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.panes.config import ConfigPane
from app.tui import PrimeTrainApp
from tests.app.helpers import panes_mounted, wait_for
from tests.services.config.test_rules import RL_BASE

SIZE = (140, 45)
DEEP_200K = "x = " + "[" * 100_000 + "]" * 100_000 + "\n"
BIG_200K = RL_BASE + "\n[orchestrator.sampling]\nstop = [" + ", ".join(f'"s{i}"' for i in range(22_000)) + "]\n"


@pytest.mark.parametrize("text", [DEEP_200K, BIG_200K], ids=["deep", "big"])
async def test_a_200_kb_config_opens_without_freezing_the_app(tmp_path: Path, monkeypatch, text: str) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    path = tmp_path / "rl.toml"
    path.write_text(text)
    assert len(text) > 200_000
    app = PrimeTrainApp([], config_path=path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")
        pane = app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None, timeout=30)
        assert pane.editor.text == text and pane.editor.language is None
        status = str(pane.query_one("#config-status").render())
        assert "no syntax highlighting" in status, status
        if text is DEEP_200K:
            [finding] = [f for f in pane.report.findings if f.id == "toml-syntax"]
            assert "nested deeper than 64 levels" in finding.message and finding.line == 1
        pane.editor.focus()
        pane.editor.move_cursor((0, 0))
        await pilot.press("down")  # a key press is handled: the cursor moves a line down
        await wait_for(pilot, lambda: pane.editor.cursor_location == (1, 0))
        await pilot.press("x")  # and typing: the edit is in, plain text stays plain
        await wait_for(
            pilot,
            lambda: (
                pane.editor.text == text[: len(text.split("\n")[0]) + 1] + "x" + text[len(text.split("\n")[0]) + 1 :]
            ),
        )
        assert app.is_running and pane.editor.language is None


async def test_a_small_config_keeps_its_highlighting(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    path = tmp_path / "rl.toml"
    path.write_text(RL_BASE)
    app = PrimeTrainApp([], config_path=path)
    async with app.run_test(size=SIZE) as pilot:
        await panes_mounted(pilot)  # the panes besides Monitor mount after the first screen
        pane = app.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        assert pane.editor.language == "toml"
        assert "highlighting" not in str(pane.query_one("#config-status").render())
