"""The last of the TUI at 80x24 (issue 33, items 6, 8, 10, 11): what was broken and what must hold now.

- `e` in the Bottleneck pane wrote the profile into the current directory, wherever the App was started, and
  said only the file's name; it goes into the data dir now and the pane says the whole path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.app.helpers import wait_for
from tests.app.layout_app import isolate, layout_app, metrics_snapshot, screen_text, settle


async def test_the_profile_export_goes_into_the_data_dir_and_says_where(tmp_path: Path, monkeypatch) -> None:
    from app.panes.bottleneck import BottleneckPane
    from app.settings import data_dir

    isolate(tmp_path, monkeypatch)  # the working directory is tmp_path
    full = metrics_snapshot(tmp_path)
    first = replace(full, metrics=full.metrics[:10], metrics_total=10)
    app = layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.on_snapshot(first)
        await settle(pilot)
        await pilot.press("4")
        pane = app.screen_stack[0].query_one(BottleneckPane)
        await wait_for(pilot, lambda: pane.breakdown is not None and pane.breakdown.steps > 0)
        await pilot.press("p")
        app.on_snapshot(full)
        await wait_for(pilot, lambda: pane.report is not None)
        await pilot.press("e")
        folder = data_dir() / "profiles"
        await wait_for(pilot, lambda: any(folder.glob("bottleneck-*.md")))
        (path,) = folder.glob("bottleneck-*.md")
        assert "**Diagnosis" in path.read_text()
        assert not list(tmp_path.glob("bottleneck-*.md"))  # never the current directory
        app.clear_notifications()  # the pane itself says where, not only a toast that goes
        await settle(pilot)
        shown = "".join(row.split("│", 1)[-1].strip(" ▁▂▃▄▅▆▇█") for row in screen_text(pilot))
        assert str(path) in shown, "\n".join(screen_text(pilot))
