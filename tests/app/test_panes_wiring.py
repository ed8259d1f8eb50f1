"""The panes wired into the real app: each tab gets the selected pod's data, keys reach their modals."""

from __future__ import annotations

from pathlib import Path

from textual.app import App, ComposeResult

from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus
from services.monitor.worker import MonitorSettings
from tests.app.helpers import wait_for
from tests.app.test_shell import SIZE, isolated_home, make_app, refused  # noqa: F401  (fixture)
from widgets.pod_list import PodList


class TestBottleneckTab:
    async def test_demo_metrics_reach_the_bottleneck_tab_of_the_selected_pod(self) -> None:
        demo = Pod(name="demo", kind=PodKind.DEMO)
        app = make_app([demo, refused()], settings=MonitorSettings(interval=0.2))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("4")
            await wait_for(pilot, lambda: app.tabs.active == "bottleneck")
            diagnosis = lambda: str(app.query_one("#bn-diagnosis").render())  # noqa: E731
            # the simulated trainer's metrics.jsonl → probe → monitor → App → this pane
            await wait_for(pilot, lambda: "DIAGNOSIS: BALANCED" in diagnosis(), timeout=40)
            assert app.snapshots["demo"].metrics_total > 0
            # 4 put the focus in the pane; ] selects the next pod wherever the focus is. The other pod has no
            # run: the pane says so instead
            await pilot.press("right_square_bracket")
            await wait_for(pilot, lambda: "DIAGNOSIS" not in diagnosis())


class TestConfigTab:
    async def test_config_file_opens_in_the_config_tab_with_its_findings(self, tmp_path: Path) -> None:
        from app.panes.config import ConfigPane

        cfg = tmp_path / "rl.toml"
        cfg.write_text('max_stepz = 20\n\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
        app = make_app([], config_path=cfg)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("1")
            await wait_for(pilot, lambda: app.tabs.active == "config")
            pane = app.query_one(ConfigPane)
            await wait_for(pilot, lambda: pane.findings_list.findings)
            first = pane.findings_list.findings[0]
            assert first.line == 1 and "did you mean 'max_steps'" in first.message
        assert cfg.read_text().startswith("max_stepz")  # nothing written without ctrl+s


async def test_opening_a_config_in_the_pane_remembers_it(tmp_path: Path, monkeypatch) -> None:
    from app.settings import last_config

    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    cfg = tmp_path / "rl.toml"
    cfg.write_text("max_steps = 5\n")
    app = make_app([], config_path=cfg)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_config() == cfg.resolve())


class TestLifecycleKeys:
    async def test_kill_opens_the_lifecycle_modal_and_launch_needs_a_saved_config(self, tmp_path: Path) -> None:
        from app.screens.lifecycle import LifecycleScreen

        app = make_app([refused()])
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.selected == "gpu1")
            await pilot.press("L")  # no config open: refused with a reason, nothing pushed
            await wait_for(pilot, lambda: any("Config pane" in n.message for n in app._notifications))
            assert not isinstance(app.screen, LifecycleScreen)
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, LifecycleScreen))
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, LifecycleScreen))


class TestCheckpointsTab:
    async def test_the_pods_checkpoints_reach_the_checkpoints_tab(self, tmp_path: Path) -> None:
        from app.panes.checkpoints import CheckpointsPane

        run = tmp_path / "run"
        for step, whole in ((5, True), (10, True), (15, False)):  # step 15 is still being written
            d = run / "checkpoints" / f"step_{step}"
            (d / "trainer").mkdir(parents=True)
            (d / "trainer" / "__0_0.distcp").write_bytes(b"w" * 1024)
            if whole:
                (d / "trainer" / ".metadata").write_bytes(b"m")
                (d / "orchestrator").mkdir()
                (d / "orchestrator" / "progress.pt").write_bytes(b"p")
        pod = Pod(name="box", kind=PodKind.LOCAL, run_dir=str(run))
        app = make_app([pod])
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("5")
            await wait_for(pilot, lambda: app.tabs.active == "checkpoints")
            pane = app.query_one(CheckpointsPane)
            # probe (completeness by prime-rl's markers) → monitor → App → pane: newest COMPLETE step
            await wait_for(pilot, lambda: pane.backup_candidate() == 10)


async def test_a_row_keeps_a_snapshot_that_came_before_it_was_mounted_and_survives_removal() -> None:
    from widgets.pod_list import PodRow

    pod = refused()
    early = PodSnapshot(pod=pod, status=PodStatus(PodState.AUTH_FAILED, "Permission denied"))
    row = PodRow(pod)
    row.show(early, 0.0)  # before compose: nothing to draw yet, and no exception

    class RowApp(App[None]):
        def compose(self) -> ComposeResult:
            yield PodList(id="pods")

    async with RowApp().run_test(size=SIZE) as pilot:
        pods = pilot.app.query_one(PodList)
        pods._rows[pod.name] = row
        await pods.append(row)
        # a pod that failed once and then went quiet must not stay "connecting" for ever
        await wait_for(pilot, lambda: "auth failed" in row.text and "Permission denied" in row.text)
        pods.remove_pod(pod.name)
        row.tick(1.0)
        row.show(early, 2.0)  # updates racing the removal are ignored, never raised
        await pilot.pause()
