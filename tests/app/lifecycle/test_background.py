"""The App runs a cleanup daemon for a pod with cleanup enabled in settings: its dry run is shown first and
nothing is deleted until it is approved; the preemption tracker is fed the monitor's snapshots."""

from __future__ import annotations

from pathlib import Path

from app.screens.lifecycle import CleanupPreviewScreen
from app.tui import PrimeTrainApp
from services.demo.trainer import write_checkpoint
from services.models import Pod, PodKind
from tests.app.helpers import laid_out, wait_for


def steps(d: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in d.iterdir())


async def test_daemon_preview_then_deletions_after_approval(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "settings.toml").write_text(
        '[lifecycle]\ncleanup_pods = ["local"]\nkeep_last = 2\ndisk_threshold_pct = 100\ncleanup_interval = 3600\n'
    )
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    run = tmp_path / "run"
    for step in (1, 2, 3, 4):
        write_checkpoint(str(run), step, 0)
    ck = run / "checkpoints"
    pod = Pod(name="local", kind=PodKind.LOCAL, run_dir=str(run), probe_dir=str(tmp_path / "state"))
    app = PrimeTrainApp([pod])
    async with app.run_test(size=(140, 45)) as pilot:
        assert app.lifecycle_bg.tracker is not None and "local" in app.lifecycle_bg.daemons
        await wait_for(pilot, lambda: isinstance(app.screen, CleanupPreviewScreen))
        text = "\n".join(app.screen.lines)
        assert "DELETE step_1" in text and "DELETE step_2" in text and "DELETE step_3" not in text
        assert steps(ck) == [1, 2, 3, 4]  # shown, not done
        await laid_out(pilot, "#cp-approve")
        await pilot.click("#cp-approve")
        await wait_for(pilot, lambda: steps(ck) == [3, 4])
        assert app.lifecycle_bg.daemons["local"].approved
        await wait_for(pilot, lambda: app.lifecycle_bg.daemons["local"].rounds[-1].deleted)
    log = (app.lifecycle_bg.settings.runs_dir / "lifecycle.log").read_text()
    assert f"deleted {ck / 'step_1'} (" in log and "bytes)" in log


async def test_no_daemon_without_settings_and_not_now_keeps_everything(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    run = tmp_path / "run"
    for step in (1, 2, 3, 4, 5):
        write_checkpoint(str(run), step, 0)
    pod = Pod(name="local", kind=PodKind.LOCAL, run_dir=str(run), probe_dir=str(tmp_path / "state"))
    app = PrimeTrainApp([pod])
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause(0.5)
        assert app.lifecycle_bg.daemons == {}  # cleanup is off unless enabled for the pod
        (cfg / "settings.toml").write_text('[lifecycle]\ncleanup_pods = ["*"]\nkeep_last = 1\n')
        from app.lifecycle_bg import BackgroundLifecycle

        bg = BackgroundLifecycle(app)
        bg.add(pod)
        await wait_for(pilot, lambda: isinstance(app.screen, CleanupPreviewScreen))
        await laid_out(pilot, "#cp-later")
        await pilot.click("#cp-later")
        await wait_for(pilot, lambda: not isinstance(app.screen, CleanupPreviewScreen))
        assert not bg.daemons["local"].approved
        bg.remove("local")
    assert steps(run / "checkpoints") == [1, 2, 3, 4, 5]
