"""The lifecycle modal, driven with Pilot against the real `local` pod (the same pod-side helper)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App

from app.screens.lifecycle import LifecycleScreen, cleanup_screen, launch_screen
from services.demo.trainer import write_checkpoint
from services.lifecycle.preflight import LifecycleSettings
from services.models import Pod, PodKind
from tests.app.helpers import wait_for

REPO = Path(__file__).resolve().parents[3]
TRAINER = REPO / "services" / "demo" / "trainer.py"


class Host(App):
    def __init__(self, screen: LifecycleScreen) -> None:
        super().__init__()
        self._screen = screen
        self.dismissed: list = []

    def on_mount(self) -> None:
        self.push_screen(self._screen, self.dismissed.append)


async def wait_until(pilot, pred):
    await wait_for(pilot, pred)


def local_pod(tmp_path) -> Pod:
    return Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(tmp_path / "state"))


async def test_cleanup_shows_the_preview_then_deletes_on_confirm(tmp_path):
    run = tmp_path / "run"
    for step in (1, 2, 3, 4):
        write_checkpoint(str(run), step, 0)
    (run / "checkpoints" / "step_5" / "trainer").mkdir(parents=True)
    s = LifecycleSettings(runs_dir=tmp_path / "records")
    screen = cleanup_screen(local_pod(tmp_path), keep=2, run_dir=str(run), settings=s)
    app = Host(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        go = screen.query_one("#lc-go")
        await wait_until(pilot, lambda: not go.disabled)
        plan = str(screen.query_one("#lc-plan").render())
        assert "DELETE step_1" in plan and "DELETE step_2" in plan and "step_5 (incomplete" in plan
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"step_{i}" for i in range(1, 6)]
        await pilot.click("#lc-go")
        await wait_until(pilot, lambda: screen.result is not None)
        assert screen.result.kind == "done"
        assert any("freed" in line for line in screen.lines)
        await pilot.press("escape")
        await pilot.pause()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_3", "step_4", "step_5"]
    assert app.dismissed and app.dismissed[0].kind == "done"


async def test_launch_shows_failed_checks_with_fixes_and_can_force(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{REPO / 'services' / 'demo' / 'bin'}:/usr/local/bin:/usr/bin:/bin")
    cfg = tmp_path / "rl.toml"
    cfg.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
    s = LifecycleSettings(
        command=f"python3 {TRAINER} --run-dir {{run_dir}} --max-steps 2 --step-seconds 0.05",
        min_nofile=1024,
        min_free_bytes=10**18,
        cuda_check=False,
        tmux="setsid",
    )
    screen = launch_screen(local_pod(tmp_path), cfg, run_dir=str(tmp_path / "run"), settings=s)
    app = Host(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        go = screen.query_one("#lc-go")
        await wait_until(pilot, lambda: not go.disabled)
        await pilot.click("#lc-go")
        await wait_until(pilot, lambda: screen.result is not None)
        assert screen.result.kind == "error"
        assert any(line.startswith("✗ free disk") for line in screen.lines)
        assert any(line.strip().startswith("fix:") for line in screen.lines)
        assert any(line.startswith("✓ GPUs visible") for line in screen.lines)
        force = screen.query_one("#lc-force")
        assert force.display
        screen.result = None
        await pilot.click("#lc-force")
        await wait_until(pilot, lambda: screen.result is not None)
        assert screen.result.kind == "done", screen.lines
    log = tmp_path / "run" / "logs" / "trainer.log"
    for _ in range(100):
        if log.exists() and "finished" in log.read_text():
            break
        await asyncio.sleep(0.05)
    assert "RL trainer finished" in log.read_text()
