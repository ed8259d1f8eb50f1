"""Keys and words of the dialogs at 80x24 (issue 33, item 9): what was broken and what must hold now.

- The host-key dialog ignored `y` although every other dialog takes it.
- The wizard's ctrl+n / ctrl+b were said nowhere (a modal hides the App's footer).
- The Config pane's help listed ctrl+f but not `f` and `enter` of the findings list nor `escape`.
- Inside the TUI a failed pre-flight said "kill it first: prime-train-tui kill POD" (and "prime-train-tui
  cleanup POD --keep 2") where a key does it, and the failure's text showed twice (the log and a status line).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from textual.app import App

from app.screens.host_key import HostKeyScreen
from app.tui import STYLES
from services.models import HostKeyPrompt
from tests.app.helpers import wait_for
from tests.app.layout_app import screen_text
from tests.services.config.test_rules import RL_BASE

REPO = Path(__file__).resolve().parents[2]
PROMPT = HostKeyPrompt("10.0.0.1", 22, "ssh-ed25519", "SHA256:abc", "10.0.0.1 ssh-ed25519 AAAA", "/root/.ssh/kh", False)


class Asker(App):
    CSS_PATH = STYLES

    def __init__(self, screen) -> None:
        super().__init__()
        self._screen = screen
        self.answers: list = []

    def on_resize(self, event) -> None:  # the App's size classes (app/tui.py on_resize)
        self.set_class(event.size.width < 130, "-narrow")
        self.set_class(event.size.width < 100, "-compact")
        self.set_class(event.size.height < 32, "-short")

    def on_mount(self) -> None:
        self.push_screen(self._screen, self.answers.append)


async def test_the_host_key_dialog_takes_y_and_n_and_says_so() -> None:
    for key, answer in (("y", True), ("n", False)):
        app = Asker(HostKeyScreen("h100-a", PROMPT))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            text = "\n".join(screen_text(pilot))
            assert "y trusts" in text and "Trust" in text, text
            await pilot.press(key)
            await wait_for(pilot, lambda a=answer, asked=app: asked.answers == [a])


async def test_the_wizard_says_its_keys_at_80x24(tmp_path: Path) -> None:
    from app.screens.wizard import WizardScreen

    app = Asker(WizardScreen(tmp_path / "rl.toml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = "\n".join(screen_text(pilot))
        assert "ctrl+n next" in text and "ctrl+b back" in text, text
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: "2/5 Environment" in "\n".join(screen_text(pilot)))


async def test_config_help_lists_f_enter_and_escape(tmp_path, monkeypatch) -> None:
    from app.panes.config import ConfigPane
    from app.screens.help import HelpScreen
    from tests.app.layout_app import isolate, layout_app

    isolate(tmp_path, monkeypatch)
    app = layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("1")
        pane = app.screen.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        pane.query_one("#config-editor").focus()  # the findings list's keys are not live: help lists them still
        await pilot.pause()
        app.call_later(app.action_help)  # (? would be typed into the editor)
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        rows = {(r.key, r.description) for r in app.screen.rows}
        wanted = {("f", "Apply fix"), ("^f", "Apply fix"), ("⏎", "Go to its line"), ("esc", "Leave the editor")}
        assert wanted <= rows, app.screen.text


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(RL_BASE, id="one-failure"),  # a whole rl config: the disk is the one check that fails
        # no [trainer]: a second failing check, the log outgrows its box and must still end on its outcome (it
        # scrolled to its old end before the new lines were laid out, leaving the outcome below the fold)
        pytest.param('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n', id="two-failures"),
    ],
)
async def test_a_failed_preflight_names_the_key_and_says_its_failure_once(tmp_path, monkeypatch, config) -> None:
    from app.screens.lifecycle import launch_screen
    from services.lifecycle.preflight import LifecycleSettings
    from services.models import Pod, PodKind

    monkeypatch.setenv("PATH", f"{REPO / 'services' / 'demo' / 'bin'}:/usr/local/bin:/usr/bin:/bin")
    cfg = tmp_path / "rl.toml"
    cfg.write_text(config)
    trainer = REPO / "services" / "demo" / "trainer.py"
    s = LifecycleSettings(
        command=f"python3 {trainer} --run-dir {{run_dir}} --max-steps 2",
        min_nofile=1024,
        min_free_bytes=10**18,
        cuda_check=False,
        tmux="setsid",
    )
    pod = Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(tmp_path / "state"))
    screen = launch_screen(pod, cfg, run_dir=str(tmp_path / "run"), settings=s)
    app = Asker(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        go = screen.query_one("#lc-go")
        await wait_for(pilot, lambda: not go.disabled)
        await pilot.press("y")
        await wait_for(pilot, lambda: screen.result is not None)
        await pilot.pause()
        assert screen.result.kind == "error"
        fix = next(line for line in screen.lines if line.strip().startswith("fix: free space"))
        assert "(press c)" in fix and "prime-train-tui" not in fix, fix
        failure = f"✗ {screen.result.message}"
        rows = [row.strip(" █▌│") for row in screen_text(pilot)]
        assert sum(failure[:40] in row for row in rows) == 1, "\n".join(rows)
        assert screen.lines.count(failure) == 1, screen.lines


def _tui_strings() -> list[tuple[str, int, str]]:
    """Every string literal (docstrings aside) of the modules whose text the TUI shows."""
    files = [p for p in (REPO / "app").rglob("*.py") if "commands" not in p.parts and p.name != "cli.py"]
    files += list((REPO / "widgets").rglob("*.py"))
    files += [REPO / "services" / "offers" / "rentals.py", REPO / "services" / "pod" / "agent" / "preflight.py"]
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found.append((str(path.relative_to(REPO)), node.lineno, node.value))
    return found


def test_no_command_line_advice_in_the_tuis_texts() -> None:
    """A hint inside the TUI names a key or a view, never a `prime-train-tui SUBCOMMAND` to type elsewhere.
    (app/demo.py's ensure_run serves the headless commands only.)"""
    commands = "|".join(p.stem for p in (REPO / "app" / "commands").glob("*.py") if not p.stem.startswith("_"))
    advice = re.compile(rf"prime-train-tui ({commands})\b")
    bad = [(f, n, s) for f, n, s in _tui_strings() if advice.search(s) and f != "app/demo.py"]
    assert not bad, bad
