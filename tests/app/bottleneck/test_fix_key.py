"""`f` in the Bottleneck pane: from verdict to fix. The recommended change lands in the Config pane's
open file as an unsaved edit (the file on disk untouched), and the app shows the Config pane; with no
config file open, one line says so."""

from __future__ import annotations

from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import TabbedContent, TabPane

from app.panes.bottleneck import BottleneckPane
from app.panes.config import ConfigPane
from services.bottleneck.analysis import analyze_lines
from tests.app.helpers import wait_for
from tests.services.bottleneck.test_current_layout import LATENCY, TRAINER, run_lines

CONFIG = """# the run's config
max_steps = 100

[deployment]
num_train_gpus = 2
num_infer_gpus = 6

[orchestrator.concurrency]
max_inflight = 32  # rollouts in flight
"""


class FixApp(App):
    def __init__(self, config: Path | None) -> None:
        super().__init__()
        self.config_path = config

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="bottleneck", id="panes"):
            with TabPane("Config", id="config"):
                yield ConfigPane(self.config_path, id="config-pane", disk_check=0)
            with TabPane("Bottleneck", id="bottleneck"):
                yield BottleneckPane(id="bottleneck-pane")

    def action_show_pane(self, pane: str) -> None:
        self.query_one(TabbedContent).active = pane


async def press_f(app: FixApp, pilot, lines: list[str]) -> BottleneckPane:
    pane = app.query_one(BottleneckPane)
    pane.breakdown = analyze_lines(lines)
    pane.focus()
    await pilot.pause()
    await pilot.press("f")
    await pilot.pause()
    return pane


async def test_f_applies_the_latency_fix_to_the_open_config_unsaved(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    path.write_text(CONFIG)
    app = FixApp(path)
    async with app.run_test(size=(140, 45)) as pilot:
        config = app.query_one(ConfigPane)
        await wait_for(pilot, lambda: config.editor.text == CONFIG)
        await press_f(app, pilot, run_lines(**LATENCY))
        await wait_for(pilot, lambda: "max_inflight = 256" in config.editor.text)  # 32 x 8 (rollout / model time)
        assert "# rollouts in flight" in config.editor.text and "num_infer_gpus = 6" in config.editor.text
        assert config.modified and path.read_text() == CONFIG  # an edit, not a save
        assert app.query_one(TabbedContent).active == "config"
        assert any("max_inflight = 256 (was 32)" in n.message for n in app._notifications)


async def test_f_on_a_trainer_bound_run_moves_gpus_to_the_trainer(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    path.write_text(CONFIG)
    app = FixApp(path)
    async with app.run_test(size=(140, 45)) as pilot:
        config = app.query_one(ConfigPane)
        await wait_for(pilot, lambda: config.editor.text == CONFIG)
        await press_f(app, pilot, run_lines(**TRAINER))
        await wait_for(pilot, lambda: "num_train_gpus = 2" not in config.editor.text)
        assert "num_train_gpus = 6" in config.editor.text  # 2 x 2.7 (40 s / (40 - 25 s)), rounded up


async def test_f_without_an_open_config_says_so_in_one_line(tmp_path: Path) -> None:
    app = FixApp(None)
    async with app.run_test(size=(140, 45)) as pilot:
        await press_f(app, pilot, run_lines(**LATENCY))
        await wait_for(pilot, lambda: any("No config file is open" in n.message for n in app._notifications))
        (note,) = [n.message for n in app._notifications if "No config file" in n.message]
        assert "\n" not in note and "orchestrator.concurrency.max_inflight" in note
        assert app.query_one(TabbedContent).active == "bottleneck"


async def test_f_with_a_key_the_file_does_not_set_asks_for_a_hand_edit(tmp_path: Path) -> None:
    path = tmp_path / "rl.toml"
    path.write_text("max_steps = 10\n")
    app = FixApp(path)
    async with app.run_test(size=(140, 45)) as pilot:
        config = app.query_one(ConfigPane)
        await wait_for(pilot, lambda: config.editor.text == "max_steps = 10\n")
        await press_f(app, pilot, run_lines(**LATENCY))
        await wait_for(pilot, lambda: any("by hand" in n.message for n in app._notifications))
        assert config.editor.text == "max_steps = 10\n" and not config.modified
