"""The dialogs at 80x24 (issue 33, "Safety and focus"): what was broken and what must hold now.

- A cleanup that deletes more than its dialog shows: 4 DELETE lines shown, "frees …" cut off, and `y` deleted
  5 directories. Now the plan box says how many lines it holds and how many show, and the confirm key waits
  until the user has scrolled to its last line; everything it deletes is then on screen.
- Help cut at "3 Go to Monitor" with no way to scroll and its closing line never shown.
- The versions list showed zero rows at 80x24, so `r` restored a version nobody could see; and closing versions
  with f2 left the focus in the hidden name field, so the next keys were typed into it.
"""

from __future__ import annotations

import re
from pathlib import Path

from textual import events
from textual.app import App

from app.screens.lifecycle import LifecycleScreen, cleanup_screen
from app.tui import STYLES
from services.demo.trainer import write_checkpoint
from services.lifecycle.preflight import LifecycleSettings
from services.models import Pod, PodKind
from tests.app.helpers import wait_for
from tests.app.layout_app import screen_text


class Host(App):
    """The App's stylesheet and its size classes (app/tui.py on_resize), around one dialog."""

    CSS_PATH = STYLES

    def __init__(self, screen: LifecycleScreen) -> None:
        super().__init__()
        self._screen = screen
        self.dismissed: list = []

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < 130, "-narrow")
        self.set_class(event.size.width < 100, "-compact")
        self.set_class(event.size.height < 32, "-short")

    def on_mount(self) -> None:
        self.push_screen(self._screen, self.dismissed.append)


async def test_cleanup_at_80x24_shows_all_it_deletes_before_y_deletes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in range(1, 11):
        write_checkpoint(str(run), step, 0)
    pod = Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(tmp_path / "state"))
    screen = cleanup_screen(pod, keep=2, run_dir=str(run), settings=LifecycleSettings(runs_dir=tmp_path / "rec"))
    app = Host(screen)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "frees" in str(screen.query_one("#lc-plan").render()))
        plan = str(screen.query_one("#lc-plan").render()).splitlines()
        deletes = [line.strip() for line in plan if "DELETE" in line]
        assert len(deletes) == 8
        await pilot.pause(0.1)
        seen: set[str] = {row.strip(" █▌") for row in screen_text(pilot)}
        text = "\n".join(screen_text(pilot))
        assert "Delete" in text and "Cancel" in text, text  # the buttons stay on screen
        if not all(any(d in row for row in seen) for d in deletes):
            # it does not all fit: the dialog says so, and y waits for the rest to be seen
            assert "shown: scroll ↓ to the end to confirm" in text and " lines, 1–" in text, text
            await pilot.press("y")
            await pilot.pause(0.2)
            assert screen.result is None and len(list((run / "checkpoints").iterdir())) == 10
            for _ in range(len(plan)):
                await pilot.press("down")
                seen |= {row.strip(" █▌") for row in screen_text(pilot)}
        assert all(any(d in row for row in seen) for d in deletes), seen
        assert any("frees" in row for row in seen)
        await pilot.press("y")
        await wait_for(pilot, lambda: screen.result is not None)
        assert screen.result.kind == "done"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_10", "step_9"]


async def test_a_long_confirmation_waits_until_its_end_was_seen() -> None:
    """Terminate / restore / quit ask through ConfirmScreen: a question taller than the dialog scrolls, says
    so, and `y` answers only once its last line has been on screen."""
    from app.screens.confirm import ConfirmScreen

    lines = [f"line {i}: this goes" for i in range(1, 31)] + ["LAST: 2 pods terminated"]
    answers: list[bool] = []

    class Asker(App):
        CSS_PATH = STYLES

        def on_mount(self) -> None:
            self.push_screen(ConfirmScreen("\n".join(lines), yes="Terminate"), answers.append)

    async with Asker().run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
        text = "\n".join(screen_text(pilot))
        assert "Terminate" in text and "LAST" not in text, text
        assert re.search(r"31 lines, 1–\d+ shown", text), text
        await pilot.press("y")
        await pilot.pause(0.1)
        assert answers == []
        for _ in range(40):
            await pilot.press("down")
        assert "LAST: 2 pods terminated" in "\n".join(screen_text(pilot))
        await pilot.press("y")
        await wait_for(pilot, lambda: answers == [True])


def _layout_app():
    from tests.app.layout_app import layout_app

    return layout_app()


async def test_help_at_80x24_scrolls_to_its_last_row_and_says_how_to_close(tmp_path, monkeypatch) -> None:
    from app.screens.help import HelpScreen
    from tests.app.layout_app import isolate

    isolate(tmp_path, monkeypatch)
    app = _layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        assert "escape closes" in "\n".join(screen_text(pilot))
        last = help_screen.rows[-1].description
        for _ in range(len(help_screen.rows)):
            await pilot.press("down")
        await pilot.pause()
        text = "\n".join(screen_text(pilot))
        assert last in text and "escape closes" in text, text
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_versions_at_80x24_show_their_rows_and_f2_gives_the_focus_back(tmp_path, monkeypatch) -> None:
    from textual.widgets import Input

    from app.panes.config import ConfigPane
    from app.screens.help import HelpScreen
    from tests.app.layout_app import isolate
    from widgets.versions import VersionList, VersionsView

    isolate(tmp_path, monkeypatch)
    app = _layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("1")
        pane = app.screen.query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        await pilot.press("f2")
        name = pane.query_one("#versions-name", Input)
        assert name.has_focus
        vlist = pane.query_one(VersionList)
        for label in ("first", "second", "third"):
            await pilot.press(*label, "enter")
            await wait_for(pilot, lambda n=label: any(v.name == n for v in vlist.versions))
        await pilot.pause(0.1)
        assert vlist.region.height >= 3, vlist.region
        text = "\n".join(screen_text(pilot))
        assert all(n in text for n in ("first", "second", "third")), text  # what r would restore is on screen
        await pilot.press("f2")
        await pilot.pause()
        focused = app.focused
        assert focused is None or pane.query_one(VersionsView) not in focused.ancestors_with_self, focused
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert name.value == ""


async def test_bottleneck_without_a_run_at_80x24_names_the_keys_and_offers_no_fix(tmp_path, monkeypatch) -> None:
    """Item 8: the empty state names the pod keys `[` and `]` (markup ate them), and the footer offers no
    "f Apply the fix" when no recommendation changes a config key."""
    from services.models import PodSnapshot, PodState, PodStatus
    from tests.app.helpers import shown
    from tests.app.layout_app import NOW, OFFLINE, TRAINING, isolate

    isolate(tmp_path, monkeypatch)
    app = _layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for pod in (TRAINING, OFFLINE):
            app.on_snapshot(
                PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE, "via nvml", since=NOW - 60), last_received=NOW)
            )
        await shown(pilot)
        await pilot.press("4")
        await pilot.pause(0.1)
        text = "\n".join(screen_text(pilot))
        assert "is training ([ and ])" in " ".join(text.replace("│", " ").split()), text
        footer = screen_text(pilot)[-1]
        assert "Profile steps" in footer and "Apply the fix" not in footer, footer


async def test_a_pod_without_nvidia_smi_says_what_was_not_found_at_80x24(tmp_path, monkeypatch) -> None:
    """Item 5: "source none · GPUs: none reported" with no hint; a broken driver looked the same."""
    from services.models import HostSample, PodSnapshot, PodState, PodStatus, Sample
    from tests.app.helpers import shown
    from tests.app.layout_app import GIB, NOW, TRAINING, isolate

    isolate(tmp_path, monkeypatch)
    app = _layout_app()
    host = HostSample(3.0, 8 * GIB, 16 * GIB, 40 * GIB, 200 * GIB, 1048576)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.on_snapshot(
            PodSnapshot(
                pod=TRAINING,
                status=PodStatus(PodState.ONLINE, "", since=NOW - 60),
                history=(Sample(t=NOW, gpus=(), host=host, source="none"),),
                samples_total=1,
                last_received=NOW,
            )
        )
        await shown(pilot)
        await pilot.press("3")
        await pilot.pause(0.1)
        text = " ".join(" ".join(screen_text(pilot)).replace("│", " ").split())
        assert "Neither NVML nor nvidia-smi answered" in text, text
        assert "broken (reinstall it, or rent another pod)" in text, text
