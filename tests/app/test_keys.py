"""Keys as a model: the visible pane's keys work whatever has the focus (no Tab needed), app keys never
shadow them, the number keys move the focus into the pane, help lists the pane's keys first, and the
palette holds every action (pane actions, pod actions, the wizard)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, TextArea

from app.panes.bottleneck import BottleneckPane
from app.panes.offers import OffersPane
from app.screens.help import HelpScreen
from app.screens.wizard import WizardScreen
from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from tests.app.helpers import Parked, wait_for
from widgets.pod_list import PodList

SIZE = (120, 36)


def parked_app(**kw) -> PrimeTrainApp:
    pods = [
        Pod(name="p1", kind=PodKind.SSH, host="127.0.0.1", user="root", port=1),
        Pod(name="p2", kind=PodKind.SSH, host="127.0.0.1", user="root", port=1),
    ]
    app = PrimeTrainApp(pods, monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)), **kw)
    app.animation_level = "none"
    return app


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.chdir(tmp_path)


async def test_number_keys_move_the_focus_into_the_pane_and_its_keys_work_without_tab():
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.focused, PodList)  # Monitor: the pod list (it follows the selected pod)
        calls: list[str] = []
        offers = app.screen.query_one(OffersPane)
        offers.action_refresh_offers = lambda: calls.append("offers.refresh")  # type: ignore[method-assign]
        await pilot.press("2")
        await wait_for(pilot, lambda: isinstance(app.focused, DataTable))
        await pilot.press("r")
        assert calls == ["offers.refresh"]  # the pane's r, not the App's reconnect
        # focus moved back to the pod list by hand: the visible pane's key still works
        app.pod_list.focus()
        await pilot.pause()
        await pilot.press("r")
        assert calls == ["offers.refresh", "offers.refresh"]
        # the App's r is hidden while Offers shows (it is the pane's key), back on Monitor
        assert app.check_action("reconnect", ()) is False
        await pilot.press("3")
        await pilot.pause()
        assert app.check_action("reconnect", ()) is True


async def test_bottleneck_p_works_from_the_pod_list():
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        pane = app.screen.query_one(BottleneckPane)
        calls: list[str] = []
        pane.action_profile = lambda: calls.append("profile")  # type: ignore[method-assign]
        await pilot.press("4")
        await pilot.pause()
        app.pod_list.focus()
        await pilot.press("p")
        assert calls == ["profile"]


async def test_config_opens_on_its_findings_e_edits_escape_leaves_and_text_keeps_its_keys():
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "config-findings")
        await pilot.press("2")  # not typed anywhere: the number keys switch panes
        await wait_for(pilot, lambda: app.tabs.active == "offers")
        await pilot.press("1", "e")
        await wait_for(pilot, lambda: isinstance(app.focused, TextArea))
        await pilot.press("r", "p", "2")
        assert app.focused.text.startswith("rp2")  # typed, not routed to a pane action
        assert app.tabs.active == "config"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "config-findings")
        await pilot.press("tab")  # Tab moves on, it does not indent: every part of the pane is reachable
        await pilot.pause()
        assert not isinstance(app.focused, TextArea) or app.focused.text.startswith("rp2")


async def test_brackets_select_pods_wherever_the_focus_is():
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        first = app.selected
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert app.selected != first and app.selected in ("p1", "p2")
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert app.selected == first


async def test_help_lists_the_visible_panes_keys_first():
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5", "question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        rows = app.screen.rows
        assert rows[0].where == "in Checkpoints pane"
        pane_rows = [r.description for r in rows if r.where == "in Checkpoints pane"]
        assert {"Back up", "Restore", "Refresh bucket"} <= set(pane_rows)
        # the App's reconnect (r) is the pane's key here: not listed as an app key
        assert not any(r.description == "Reconnect" for r in rows)


async def test_help_names_places_in_words_never_a_class_name():
    """The help's Where column is 'everywhere', the pane, or a place in words ('in the pod list'), with the
    focus in a table or in the sidebar."""
    import re

    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        for keys in (("2",), ("3",)):  # the offers table has the focus; then the Monitor (the pod list's keys)
            await pilot.press(*keys)
            await pilot.pause()
            if keys == ("2",):
                from widgets.offers_view import OffersView

                app.screen.query_one(OffersView).focus()
            else:
                app.pod_list.focus()
            await pilot.pause()
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            wheres = {r.where for r in app.screen.rows}
            assert {"in the offers table" if keys == ("2",) else "in the pod list"} <= wheres, wheres
            assert not [w for w in wheres if re.search(r"[a-z][A-Z]", w)], wheres  # no CamelCase class names
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_palette_holds_every_action_with_its_context():
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = [t for t, _, _ in app.palette_commands()]
        for wanted in (
            "Config: open the wizard",
            f"{app.selected}: kill run",
            f"{app.selected}: launch run",
            f"{app.selected}: resume run",
            "Offers: refresh offers",
            "Checkpoints: back up",
            "Bottleneck: profile steps",
        ):
            assert wanted in titles, (wanted, titles)


async def test_w_opens_the_wizard_from_anywhere_and_its_file_opens_in_the_config_pane(tmp_path):
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "w")
        await wait_for(pilot, lambda: isinstance(app.screen, WizardScreen))
        wizard = app.screen
        assert wizard.output == tmp_path / "rl.toml"
        for _ in range(4):
            await pilot.press("ctrl+n")
            await pilot.pause()
        await pilot.press("ctrl+n")  # the last step saves
        await wait_for(pilot, lambda: not isinstance(app.screen, WizardScreen), timeout=30)
        assert (tmp_path / "rl.toml").is_file()
        assert app.tabs.active == "config"
        config = app.screen.query_one("#config-pane")
        await wait_for(pilot, lambda: config.report is not None and config.editor.text)
        assert config.path == tmp_path / "rl.toml"
        assert config.report.errors == 0


async def test_the_palette_finds_the_wizard_by_typing_wizard(tmp_path):
    app = parked_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "ctrl+p")
        await pilot.pause()
        await pilot.press(*"wizard")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, WizardScreen))
        for _ in range(5):  # the defaults, step by step; the last step saves
            await pilot.press("ctrl+n")
            await pilot.pause()
        await wait_for(pilot, lambda: not isinstance(app.screen, WizardScreen), timeout=30)
        config = app.screen.query_one("#config-pane")
        await wait_for(pilot, lambda: config.report is not None and config.editor.text)
        assert app.tabs.active == "config" and config.path == tmp_path / "rl.toml"
        assert config.report.errors == 0


async def test_the_first_screen_is_the_monitor_pane_alone_and_a_key_for_another_pane_waits_for_it(tmp_path: Path):
    """Only the Monitor pane is composed for the first paint (the first screen comes sooner,
    tests/benchmarks/startup.py); the others mount right after it, and a key pressed before they are there
    still shows its pane with the focus in it, on the file the App was given."""
    from app.pane_registry import PANE_IDS
    from app.panes.config import ConfigPane

    cfg = tmp_path / "rl.toml"
    cfg.write_text("max_steps = 10\n")
    app = parked_app(config_path=cfg)
    painted: list[list[str]] = []
    display = app._display

    def first_paint(screen, renderable) -> None:  # what the terminal's first screen held
        if renderable is not None and not painted:
            painted.append(sorted(p for p, selector in PANE_IDS.items() if app.screen_stack[0].query(selector)))
        display(screen, renderable)

    app._display = first_paint  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")  # before the Config pane is mounted
        await wait_for(pilot, lambda: bool(app.screen_stack[0].query(ConfigPane)))
        pane = app.screen_stack[0].query_one(ConfigPane)
        await wait_for(
            pilot, lambda: pane.path == cfg and app.focused is not None and pane in app.focused.ancestors_with_self
        )
        assert painted == [["monitor"]]
        assert app.tabs.active == "config"
