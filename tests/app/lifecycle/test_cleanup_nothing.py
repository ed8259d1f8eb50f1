"""The cleanup preview that finds nothing to delete offers no Delete button (and y does nothing): only
Close. Against the real `local` pod and real checkpoints on disk."""

from __future__ import annotations

from app.screens.lifecycle import cleanup_screen
from services.demo.trainer import write_checkpoint
from services.lifecycle.preflight import LifecycleSettings
from tests.app.helpers import wait_for
from tests.app.lifecycle.test_screen import Host, local_pod


async def test_nothing_to_delete_offers_no_delete_button(tmp_path):
    run = tmp_path / "run"
    for step in (1, 2):
        write_checkpoint(str(run), step, 0)
    screen = cleanup_screen(
        local_pod(tmp_path), keep=2, run_dir=str(run), settings=LifecycleSettings(runs_dir=tmp_path / "records")
    )
    app = Host(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        plan = screen.query_one("#lc-plan")
        await wait_for(pilot, lambda: "nothing to delete" in str(plan.render()))
        await pilot.pause()
        go = screen.query_one("#lc-go")
        assert not go.display, "a Delete button for nothing to delete"
        assert str(screen.query_one("#lc-cancel").label) == "Close"
        await pilot.press("y")  # y answers nothing: there is no question
        await pilot.pause()
        assert screen.run_task is None and screen.is_current
        await pilot.press("escape")
        await pilot.pause()
    assert app.dismissed == [None]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1", "step_2"]
