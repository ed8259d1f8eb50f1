"""The last of the TUI at 80x24 (issue 33, items 6, 8, 10, 11): what was broken and what must hold now.

- `e` in the Bottleneck pane wrote the profile into the current directory, wherever the App was started, and
  said only the file's name; it goes into the data dir now and the pane says the whole path.
- At 80 columns the Config status line lost "saved"/"modified" behind a long path; the footer cut a key's label
  mid-word ("d R"); a long pod name wrapped over three rows of the sidebar; the Offers table had no Spot column
  (with `m` not even $/hr).
- The Monitor's stale line said "no sample for 5 s" (the monitor's threshold) while the line below it said
  "last sample 58 s ago": both now count from the latest sample, on the same clock.
- Saving and restoring a config version raised a "Versions" toast over the versions list at 80x24 for
  seconds; the versions panel says it now, on its heading, and no toast covers it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from services.models import Pod, PodKind
from tests.app.helpers import wait_for
from tests.app.layout_app import (
    OFFLINE,
    PANES,
    TRAINING,
    isolate,
    layout_app,
    metrics_snapshot,
    prepare,
    screen_text,
    settle,
)


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory):
    return metrics_snapshot(tmp_path_factory.mktemp("metrics"))


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


async def test_the_config_status_keeps_saved_and_modified_at_80_columns(tmp_path: Path, monkeypatch) -> None:
    from app.panes.config import ConfigPane

    isolate(tmp_path, monkeypatch)
    deep = tmp_path / "experiments" / "2025-qwen3-reverse-text-long-context" / "configs"
    deep.mkdir(parents=True)
    (deep / "rl.toml").write_text((tmp_path / "rl.toml").read_text(), encoding="utf-8")
    app = layout_app(config=False)
    app.config_path = deep / "rl.toml"
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("1")
        pane = app.screen_stack[0].query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.path is not None and pane.report is not None)
        await settle(pilot)
        status = screen_text(pilot)[pane.query_one("#config-status").region.y]
        assert "saved" in status, status
        pane.editor.insert("# note\n", (0, 0))
        await wait_for(pilot, lambda: pane.modified)
        await settle(pilot)
        status = screen_text(pilot)[pane.query_one("#config-status").region.y]
        assert "modified" in status, status


async def test_the_footer_shows_whole_keys_at_80_columns(tmp_path: Path, monkeypatch, metrics) -> None:
    from textual.widgets._footer import FooterKey

    isolate(tmp_path, monkeypatch)
    app = layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await prepare(pilot, metrics=metrics, key=None)
        for key in (*PANES.values(), "6"):
            await pilot.press(key)
            await settle(pilot)
            await pilot.pause(0.1)
            row = screen_text(pilot)[-1]
            assert "^p Commands" in row, row
            keys = [k for k in app.screen.query(FooterKey) if "-command-palette" not in k.classes]
            entries = [f"{k.key_display} {k.description}" for k in keys]
            left = row.split("▏")[0].strip()
            assert left and left in {"  ".join(entries[:n]) for n in range(1, len(entries) + 1)}, (row, entries)


async def test_a_long_pod_name_ends_in_an_ellipsis_in_the_sidebar(tmp_path: Path, monkeypatch) -> None:
    isolate(tmp_path, monkeypatch)
    long = Pod(name="h100-us-east-reverse-text-sweep-7", kind=PodKind.SSH, host="10.0.0.3")
    app = layout_app([long, TRAINING, OFFLINE])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        rows = [row.split("│")[0] for row in screen_text(pilot)]
        first = next(i for i, row in enumerate(rows) if "h100-us" in row)
        assert rows[first].rstrip().endswith("…"), rows
        assert rows[first + 1].strip().startswith(("connecting", "offline")), rows  # the badge, no wrapped rest


async def test_the_offers_keep_spot_at_80x24_with_and_without_misfits(tmp_path: Path, monkeypatch, metrics) -> None:
    isolate(tmp_path, monkeypatch)
    app = layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await prepare(pilot, metrics=metrics, key="2")
        for key in ("", "m"):
            if key:
                await pilot.press(key)
            await settle(pilot)
            rows = screen_text(pilot)
            header = next(row for row in rows if "Provider" in row and "GPU" in row)
            for column in ("Spot", "Est. $", "$/hr", "Fit"):
                assert column in header, (key, header)
            assert any("spot" in row for row in rows[rows.index(header) + 1 :]), "\n".join(rows)


async def test_the_stale_line_agrees_with_the_line_below_it(tmp_path: Path, monkeypatch) -> None:
    from services.models import PodState, PodStatus
    from tests.app.layout_app import NOW, training_snapshot

    isolate(tmp_path, monkeypatch)
    app = layout_app()
    for reason, said in (
        ("no sample for 5 s", "no sample for 58 s"),
        ("no valid sample for 5 s (3 malformed lines)", "no valid sample for 58 s (3 malformed"),
    ):
        snapshot = replace(
            training_snapshot(TRAINING),
            last_received=NOW - 58,
            status=PodStatus(PodState.STALE, reason, since=NOW - 53),
        )
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.on_snapshot(snapshot)
            await settle(pilot)
            await pilot.press("3")
            await settle(pilot)
            text = " ".join(row.split("│", 1)[-1].strip() for row in screen_text(pilot))
            assert said in text and "last sample 58 s ago" in text, text
            assert "for 5 s" not in text, text
        app = layout_app()


async def test_versions_say_what_they_did_in_the_panel_not_in_a_toast(tmp_path: Path, monkeypatch) -> None:
    from textual.widgets import Input

    from app.panes.config import ConfigPane
    from widgets.versions import VersionList

    isolate(tmp_path, monkeypatch)
    app = layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("1")
        pane = app.screen_stack[0].query_one(ConfigPane)
        await wait_for(pilot, lambda: pane.report is not None)
        app.clear_notifications()
        await pilot.press("f2")
        await wait_for(pilot, lambda: pane.query_one("#versions-name", Input).has_focus)
        await pilot.press(*"baseline", "enter")
        vlist = pane.query_one(VersionList)
        await wait_for(pilot, lambda: len(vlist.versions) == 1)
        await settle(pilot)
        text = "\n".join(screen_text(pilot))
        assert "saved version" in text and not app._notifications, text
        vlist.focus()
        vlist.highlighted = 0
        await pilot.press("r")
        await wait_for(pilot, lambda: len(vlist.versions) == 2)  # "before restore" kept first
        await settle(pilot)
        text = "\n".join(screen_text(pilot))
        assert "restored baseline" in text and not app._notifications, text
