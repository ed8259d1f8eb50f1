"""The App follows the run a launch starts (Pilot, the real `local` pod, the simulated trainer): a pod
without run_dir launches into prime-train-tui/runs/<config stem>, the launch's done event gives the
monitor that run dir, and the run's progress appears in the monitor pane; at the next start the pod
finds the run through its recorded launch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.screens.lifecycle import LifecycleScreen
from app.tui import PrimeTrainApp
from services.models import Pod, PodKind, PodState
from services.monitor.worker import MonitorSettings
from tests.app.helpers import laid_out, wait_for

REPO = Path(__file__).resolve().parents[3]
TRAINER = REPO / "services" / "demo" / "trainer.py"


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home, cfg = tmp_path / "home", tmp_path / "cfg"
    home.mkdir()
    cfg.mkdir()
    (cfg / "settings.toml").write_text(
        "[lifecycle]\n"
        f'command = "{sys.executable} {TRAINER} --run-dir {{run_dir}} --step-seconds 0.2 --max-steps 0 '
        '--ckpt-interval 0"\n'
        'min_nofile = 1024\nmin_free_bytes = 1\ncuda_check = false\ntmux = "setsid"\ngrace_seconds = 5\n'
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", f"{REPO / 'services' / 'demo' / 'bin'}:/usr/local/bin:/usr/bin:/bin")
    return tmp_path


async def test_a_launch_on_a_pod_without_run_dir_shows_its_progress(env: Path) -> None:
    config = env / "rl.toml"
    config.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
    pod = Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(env / "podstate"))
    app = PrimeTrainApp([pod], settings=MonitorSettings(interval=0.3), config_path=config)
    run_dir = None
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_for(
                pilot, lambda: (s := app.snapshots.get("local")) is not None and s.status.state is PodState.ONLINE
            )
            assert app.snapshots["local"].run is None  # no run dir, no recorded launch: nothing to show
            app.pod_list.select("local")
            await pilot.pause()
            await pilot.press("L")
            await laid_out(pilot, "#lc-go")
            screen = app.screen
            assert isinstance(screen, LifecycleScreen)
            go = screen.query_one("#lc-go")
            await wait_for(pilot, lambda: not go.disabled)
            go.press()
            await wait_for(pilot, lambda: screen.result is not None, timeout=60)
            assert screen.result.kind == "done", screen.lines
            run_dir = screen.result.data["run_dir"]
            assert run_dir.endswith("prime-train-tui/runs/rl") and Path(run_dir).is_absolute()
            await pilot.press("escape")
            await wait_for(
                pilot,
                lambda: (s := app.snapshots.get("local")) is not None and s.run is not None and (s.run.step or 0) >= 2,
                timeout=30,
            )
            assert app.pods["local"].run_dir == run_dir and app.snapshots["local"].pod.run_dir == run_dir
            pane = app.monitor_pane
            await wait_for(pilot, lambda: "step " in str(pane.query_one("#run-progress").render()), timeout=10)
    finally:
        _kill(run_dir)
    # the next start: the pod still has no run_dir, its recorded launch leads the monitor to the run
    app = PrimeTrainApp([pod], settings=MonitorSettings(interval=0.3), config_path=config)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(
            pilot,
            lambda: (s := app.snapshots.get("local")) is not None and s.run is not None and (s.run.step or 0) >= 2,
            timeout=30,
        )


def _kill(run_dir: str | None) -> None:
    """Stop the simulated trainer the launch started (its pid is in the run's record on the pod)."""
    import json
    import os
    import signal

    if run_dir is None:
        return
    rec = Path(run_dir) / ".ptt" / "run.json"
    try:
        pgid = int(json.loads(rec.read_text())["pgid"])
        os.killpg(pgid, signal.SIGKILL)
    except (OSError, ValueError, KeyError, TypeError):
        pass
