"""The Rollouts pane (key 6) driven through Pilot on a real sshd pod and on the demo pod: the newest step's
list, a filter, an episode opened (its turns, tool calls, rewards) and found in, a search run on the pod, back
to the list; the model's text shown as plain text, never markup."""

from __future__ import annotations

import signal
from dataclasses import replace

from textual.widgets import DataTable, Static

from app.panes.rollouts import RolloutsPane
from app.settings import data_dir
from app.tui import PrimeTrainApp
from services.demo.pod import DemoPod
from services.models import Pod, PodKind
from services.monitor.worker import MonitorSettings
from tests.app.helpers import panes_mounted, wait_for
from tests.app.layout_app import screen_text
from tests.services.monitor.test_rollouts import record, write_step


def texts(pane: RolloutsPane) -> str:
    return "\n".join(str(s.render()) for s in pane.query("#ro-episode Static").results(Static))


async def test_list_filter_open_find_and_search_over_sshd(pod, tmp_path) -> None:
    run = tmp_path / "run"
    write_step(run, 1, [record(1, i) for i in range(3)])
    markup = record(2, 1)
    markup["traces"][0]["nodes"][1]["message"]["content"] = "[bold red]not markup[/] \x1b[2J and a needle"
    broken = record(2, 2)
    broken["ok"], broken["errors"] = False, [{"type": "ToolError", "message": "search timed out"}]
    write_step(run, 2, [record(2, 0), markup, broken, record(2, 3)], tail=b'{"id":"e2-4"')
    app = PrimeTrainApp([replace(pod, run_dir=str(run))], pods_path=tmp_path / "pods.toml")
    async with app.run_test(size=(100, 30)) as pilot:
        await panes_mounted(pilot)
        await pilot.press("6")
        pane = app.query_one(RolloutsPane)
        table = pane.query_one("#ro-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 4)
        assert [e.id for e in pane.shown] == ["e2-0", "e2-1", "e2-2", "e2-3"]
        assert "step 2" in str(pane.query_one("#ro-title", Static).render())
        assert "reward" in str(pane.query_one("#ro-dist", Static).render())
        await pilot.press("e")  # errors only
        assert [e.id for e in pane.shown] == ["e2-2"]
        await pilot.press("e", "up", "enter")  # the cursor stayed on e2-2 through the filter
        await wait_for(pilot, lambda: pane.view is not None and not table.display)
        assert pane.view.summary.id == "e2-1"
        # the footer offers the open episode's keys, not the list's (they did nothing here)
        await wait_for(pilot, lambda: "Find" in screen_text(pilot)[-1])
        footer = screen_text(pilot)[-1]
        assert all(k in footer for k in ("Back", "Find", "Next match", "Fold")), footer
        assert not any(k in footer for k in ("Errors only", "Sort", "Older step", "Search")), footer
        shown = texts(pane)
        assert "[bold red]not markup[/]" in shown and "\x1b" not in shown and "▌ user" in shown
        await pilot.press("slash")
        await pilot.press(*"needle", "enter")
        await wait_for(pilot, lambda: pane.hits)
        assert "needle" in pane.blocks[pane.hits[0]][0]
        await pilot.press("escape")
        await wait_for(pilot, lambda: pane.view is None and table.display)
        await wait_for(pilot, lambda: "Errors only" in screen_text(pilot)[-1])
        assert "Next match" not in screen_text(pilot)[-1] and "Find" not in screen_text(pilot)[-1]
        await pilot.press("slash")
        await pilot.press(*"search timed", "enter")  # matched on the pod: only e2-2's summary comes back
        await wait_for(pilot, lambda: pane.grep and not pane.loading)
        assert [e.id for e in pane.shown] == ["e2-2"] and pane.shown[0].snippet
        await pilot.press("comma")  # the older step; a search stays with it
        await wait_for(pilot, lambda: pane.listing is not None and pane.listing.step == 1 and not pane.loading)


async def test_the_demo_pods_episodes_show_and_open(tmp_path) -> None:
    settings = MonitorSettings(interval=0.2, demo_step_seconds=2.0, demo_max_steps=0, stale_after=30.0)
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=settings, pods_path=tmp_path / "pods.toml")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await panes_mounted(pilot)
            await pilot.press("6")
            pane = app.query_one(RolloutsPane)
            await wait_for(pilot, lambda: pane.listing is not None and len(pane.shown) == 16, timeout=30)
            assert {e.env for e in pane.shown} == {"reverse-text", "wiki-search"}
            await pilot.press("v")
            assert {e.env for e in pane.shown} == {"reverse-text"}
            await pilot.press("v", "v")
            await pilot.press("s", "s")  # reward, highest first
            rewards = [e.reward for e in pane.shown]
            assert rewards == sorted(rewards, reverse=True)
            searching = next(i for i, e in enumerate(pane.shown) if e.tool_calls)
            pane.query_one("#ro-table", DataTable).move_cursor(row=searching)
            await pilot.press("enter")
            await wait_for(pilot, lambda: pane.view is not None and texts(pane))
            assert "→ search(" in texts(pane) and "rewards:" in texts(pane)
    finally:
        DemoPod(root=data_dir() / "demo-pod").stop_runs(signal.SIGKILL, wait=5.0)


async def test_t_lists_the_eval_episodes_and_back(pod, tmp_path) -> None:
    """prime-rl writes train and eval episodes side by side (rollouts/step_N/{train,eval}/...): `t` lists the
    evals' newest step, `t` again the training rollouts. Before, the pane listed train only (the CLI had --eval)."""
    run = tmp_path / "run"
    write_step(run, 3, [record(3, i) for i in range(2)])
    write_step(run, 2, [record(2, 100 + i) for i in range(3)], kind="eval")
    app = PrimeTrainApp([replace(pod, run_dir=str(run))], pods_path=tmp_path / "pods.toml")
    async with app.run_test(size=(80, 24)) as pilot:
        await panes_mounted(pilot)
        await pilot.press("6")
        pane = app.query_one(RolloutsPane)
        await wait_for(pilot, lambda: pane.listing is not None and not pane.loading)
        assert [e.id for e in pane.shown] == ["e3-0", "e3-1"]
        await pilot.press("t")
        await wait_for(pilot, lambda: pane.listing is not None and pane.listing.kind == "eval" and not pane.loading)
        assert [e.id for e in pane.shown] == ["e2-100", "e2-101", "e2-102"]
        assert "step 2 (eval/" in str(pane.query_one("#ro-title", Static).render())
        await pilot.press("t")
        await wait_for(pilot, lambda: pane.listing is not None and pane.listing.kind == "train" and not pane.loading)
        assert [e.id for e in pane.shown] == ["e3-0", "e3-1"]
