"""The demo does everything, through the lifecycle, inside its sandbox: the App with the demo pod (as
``--demo``) launches the simulated run there as a task; `k` `y` kills it (the Monitor shows it stopped), `R`
`y` resumes it from the newest complete checkpoint (the Monitor shows steps advancing again), `c` previews
a cleanup of the sandbox's checkpoints. Nothing runs outside the sandbox."""

from __future__ import annotations

import os
import re
from pathlib import Path

from app.screens.lifecycle import LifecycleScreen
from app.settings import data_dir, last_config
from app.tui import PrimeTrainApp
from services.demo.pod import DemoPod
from services.models import Pod, PodKind
from services.monitor.worker import MonitorSettings
from tests.app.helpers import wait_for
from tests.app.layout_app import screen_text

SETTINGS = MonitorSettings(
    interval=0.2, demo_step_seconds=0.2, demo_ckpt_interval=2, demo_max_steps=0, stale_after=30.0
)


def step(app: PrimeTrainApp) -> int:
    snap = app.snapshots.get("demo")
    return (snap.run.step or 0) if snap is not None and snap.run is not None else 0


def seen(pilot) -> str:
    return "\n".join(screen_text(pilot))


def complete_steps(run: Path) -> list[int]:
    ckpts = run / "checkpoints"
    return sorted(
        int(p.name[5:])
        for p in ckpts.iterdir()
        if (p / "trainer" / ".metadata").is_file() and (p / "orchestrator" / "progress.pt").is_file()
    )


def inside(path: str, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


async def dialog(pilot, key: str) -> LifecycleScreen:
    """Press ``key`` on the main screen; the lifecycle dialog once its plan is there (or it failed)."""
    app = pilot.app
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, LifecycleScreen))
    screen = app.screen
    await wait_for(pilot, lambda: not screen.query_one("#lc-go").disabled or not screen.query_one("#lc-go").display)
    return screen


async def answer_yes(pilot, screen: LifecycleScreen) -> None:
    await pilot.press("y")
    await wait_for(pilot, lambda: screen.result is not None, timeout=30)
    assert screen.result.kind == "done", screen.lines
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, LifecycleScreen))


async def test_demo_kill_resume_cleanup_through_the_lifecycle_in_its_sandbox(tmp_path) -> None:
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=SETTINGS, pods_path=tmp_path / "pods.toml")
    root = data_dir() / "demo-pod"
    sandbox = DemoPod(root=root)
    async with app.run_test(size=(160, 48)) as pilot:
        pod = app.pods["demo"]
        assert pod.run_dir == str(root / "run") and pod.probe_dir == str(root / "state")
        # the run is launched through the lifecycle, as the task "launch on demo"
        await wait_for(
            pilot, lambda: any(t.pod == "demo" and t.action == "launch" and t.state == "done" for t in app.tasks.items)
        )
        await wait_for(pilot, lambda: step(app) >= 5)
        # it runs in the sandbox only: its cwd, its run dir, its config, the helper's records
        pids = sandbox.trainer_pids()
        assert len(pids) == 1
        cmd = Path(f"/proc/{pids[0]}/cmdline").read_bytes().decode().split("\0")
        assert inside(os.readlink(f"/proc/{pids[0]}/cwd"), root)
        assert inside(cmd[cmd.index("--run-dir") + 1], root) and inside(cmd[cmd.index("--config") + 1], root)
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().decode().split("\0")
        assert f"HOME={root / 'home'}" in environ
        assert [p.name for p in (root / "state" / "runs").iterdir()], "the run registry is the sandbox's"
        # the Config pane shows the sandbox's config (no --config was given)
        config = app.screen.query_one("#config-pane")
        assert config.path == root / "rl.toml"
        await wait_for(pilot, lambda: "[model]" in config.editor.text)
        await pilot.pause(0.2)
        assert last_config() is None  # never remembered: a plain start does not open the demo's config

        # k y: the run is killed, no trainer is left, the Monitor shows it stopped
        screen = await dialog(pilot, "k")
        assert "Kill run" in str(screen.query_one("#lc-plan").render()) and str(root / "run") in str(
            screen.query_one("#lc-plan").render()
        )
        await answer_yes(pilot, screen)
        assert sandbox.trainer_pids() == []
        await wait_for(pilot, lambda: "Received SIGTERM: the run stops after step" in seen(pilot))
        killed_at = int(re.search(r"Received SIGTERM: the run stops after step (\d+)", seen(pilot)).group(1))
        await wait_for(
            pilot, lambda: (s := app.snapshots["demo"].latest) is not None and all(g.util == 0 for g in s.gpus)
        )  # the killed run's GPUs are free
        newest = max(complete_steps(root / "run"))
        # the save the kill cut short is seen, and not taken for one being written: "last step … ago"
        await wait_for(
            pilot, lambda: any(c.step == killed_at + 1 and not c.complete for c in app.snapshots["demo"].latest.ckpts)
        )
        await wait_for(pilot, lambda: "last step" in seen(pilot))
        assert "writing checkpoint" not in seen(pilot)
        assert (root / "run" / "checkpoints" / f"step_{killed_at + 1}" / "trainer").is_dir()  # cut short mid-save
        assert killed_at + 1 not in complete_steps(root / "run")

        # R y: resumed from the newest complete checkpoint, the half-written one skipped
        screen = await dialog(pilot, "R")
        plan = str(screen.query_one("#lc-plan").render())
        assert f"from step_{newest} (newest complete checkpoint" in plan
        assert f"step_{killed_at + 1} is incomplete — skipped" in plan
        await answer_yes(pilot, screen)
        assert len(sandbox.trainer_pids()) == 1
        resumed = f"Resuming from checkpoint step_{newest}: starting from step {newest + 1}"
        await wait_for(pilot, lambda: any(resumed in line for line in app.snapshots["demo"].log_tail))
        await wait_for(pilot, lambda: step(app) >= killed_at + 3)  # steps advance again, past the kill
        await wait_for(
            pilot, lambda: (s := app.snapshots["demo"].latest) is not None and all(g.util > 0 for g in s.gpus)
        )

        # c: a cleanup preview of the sandbox's checkpoints (nothing deleted unless confirmed)
        before = sorted(p.name for p in (root / "run" / "checkpoints").iterdir())
        screen = await dialog(pilot, "c")
        plan = str(screen.query_one("#lc-plan").render())
        assert "DELETE step_" in plan and str(root / "run" / "checkpoints") in plan
        assert "keep the newest 2 complete" in plan and f"DELETE step_{newest - 2}" in plan
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, LifecycleScreen))
        assert set(before) <= {p.name for p in (root / "run" / "checkpoints").iterdir()}

        # the Checkpoints pane names the sandbox's run dir, lists its steps, never asks for pods.toml
        await pilot.press("5")
        await wait_for(
            pilot,
            lambda: (
                f"run {root / 'run'}" in seen(pilot) and re.search(rf"│ +{newest} │ .* │ yes ", seen(pilot)) is not None
            ),
        )
        assert "pods.toml" not in seen(pilot)

        # L (after k y): a launch with the Config pane's config, into the same run dir the pane names
        await answer_yes(pilot, await dialog(pilot, "k"))
        screen = await dialog(pilot, "L")
        assert f"run dir: {root / 'run'}" in str(screen.query_one("#lc-plan").render())
        await answer_yes(pilot, screen)
        assert screen.result.data["run_dir"] == str(root / "run") and inside(screen.result.data["config"], root)
        assert app.pods["demo"].run_dir == str(root / "run") and f"run {root / 'run'}" in seen(pilot)
        assert len(sandbox.trainer_pids()) == 1
    # the App's end stops the simulated run
    await wait_for_gone(sandbox)


async def wait_for_gone(sandbox: DemoPod) -> None:
    import asyncio

    for _ in range(100):
        if not sandbox.trainer_pids():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the demo's trainer outlived the App: {sandbox.trainer_pids()}")


async def test_a_headless_kill_reaches_the_run_the_tui_owns(tmp_path) -> None:
    import asyncio
    import sys

    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=SETTINGS, pods_path=tmp_path / "pods.toml")
    sandbox = DemoPod(root=data_dir() / "demo-pod")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: step(app) >= 2)
        assert len(sandbox.trainer_pids()) == 1
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.cli",
            "kill",
            "demo",
            "--yes",
            cwd=str(Path(__file__).resolve().parents[2]),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert "killed" in out.decode() and sandbox.trainer_pids() == []
        await wait_for(pilot, lambda: "Received SIGTERM: the run stops after step" in seen(pilot))


def on_screen(pilot, selector: str) -> bool:
    """The widget is visible at 80x24: what the terminal shows at its centre is the widget itself."""
    screen = pilot.app.screen
    widget = screen.query_one(selector)
    region = widget.region
    if not widget.display or not region.area:
        return False
    x, y = region.x + region.width // 2, region.y + region.height // 2
    if not (0 <= x < pilot.app.size.width and 0 <= y < pilot.app.size.height):
        return False
    hit, _ = screen.get_widget_at(x, y)
    return hit is widget or widget in hit.ancestors


async def test_the_dialogs_keep_their_buttons_at_80x24(tmp_path) -> None:
    """On a 24-row terminal the kill and resume dialogs' plans and logs scroll: Kill/Cancel before, Close
    after are on screen (they were pushed below the dialog's edge)."""
    app = PrimeTrainApp([Pod(name="demo", kind=PodKind.DEMO)], settings=SETTINGS, pods_path=tmp_path / "pods.toml")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: step(app) >= 5)
        for key in ("k", "R"):
            screen = await dialog(pilot, key)
            await pilot.pause(0.1)
            assert on_screen(pilot, "#lc-go") and on_screen(pilot, "#lc-cancel"), (key, screen.lines)
            await pilot.press("y")
            await wait_for(pilot, lambda screen=screen: screen.result is not None, timeout=30)
            await pilot.pause(0.1)
            assert str(screen.query_one("#lc-cancel").label) == "Close"
            assert on_screen(pilot, "#lc-cancel"), (key, screen.lines)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(pilot.app.screen, LifecycleScreen))
