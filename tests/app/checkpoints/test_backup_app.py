"""Auto-backup in the real App: a pod without run_dir is backed up through its recorded launch (the real
monitor and probe on the `local` pod); a backup made with `b` is not sent again by the auto-backup; a pod
removed during its auto-backup leaves nothing behind (no planner state, no "cancelled" toast). moto's S3
server and the real sshd pod as in tests/app/checkpoints/test_auto.py."""

from __future__ import annotations

import time

import pytest

from app.panes.checkpoints import CheckpointsPane
from app.screens.confirm import ConfirmScreen
from app.tui import PrimeTrainApp
from services import runs
from services.models import Pod, PodKind
from services.monitor.worker import MonitorSettings
from tests.app.checkpoints.test_auto import backup_toml, notes_of, parked_app
from tests.app.checkpoints.test_pane import snapshot
from tests.app.helpers import wait_for
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint


async def test_a_pod_without_run_dir_is_auto_backed_up_through_its_recorded_launch(s3env, tmp_path, monkeypatch):
    backup_toml(tmp_path / "cfg", s3env, s3env.bucket, auto=True)
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    run = tmp_path / "pod" / "followed"
    write_checkpoint(run, 2, shard_bytes=80 * 1024)
    runs.save_record(tmp_path / "data" / "runs", {"id": "r1", "pod": "local", "started": 1.0, "run_dir": str(run)})
    pod = Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(tmp_path / "podstate"))  # no run_dir
    app = PrimeTrainApp([pod], settings=MonitorSettings(interval=0.3))
    async with app.run_test(size=(160, 50)) as pilot:
        notes = notes_of(app)
        await wait_for(pilot, lambda: any(n[1] == "Auto-backup" for n in notes), timeout=45)
        assert "step 2 backed up and verified" in notes[-1][2], notes
        assert app.snapshots["local"].pod.run_dir == str(run)  # the pane's b/u/r have the run dir as well
        assert app.pods["local"].run_dir is None  # pods.toml's pod is not changed by following a record
    assert "prime-train/followed/step_2/manifest.json" in s3env.keys()


@pytest.mark.ssh
async def test_a_b_backup_is_not_sent_again_by_the_auto_backup(sshd, client_home, s3env, tmp_path, monkeypatch):
    client_home.trust()
    backup_toml(tmp_path / "cfg", s3env, s3env.bucket, auto=True)
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    run = tmp_path / "pod" / "manual"
    write_checkpoint(run, 2, shard_bytes=50 * 1024)
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = parked_app(pod)
    async with app.run_test(size=(160, 50)) as pilot:
        notes = notes_of(app)
        end = time.monotonic() + 30
        while not any(n[1] == "Auto-backup" for n in notes):  # step 2 by the auto-backup: the bucket is listed
            app.on_snapshot(snapshot(pod, run, time.time()))
            assert time.monotonic() < end, notes
            await pilot.pause(0.1)
        write_checkpoint(run, 4, shard_bytes=300 * 1024)
        pane = app.screen_stack[0].query_one(CheckpointsPane)
        pane.show(snapshot(pod, run, time.time()), time.time())  # only the pane sees step 4 so far
        await wait_for(pilot, lambda: pane.backup_candidate() == 4)
        pane.action_backup()
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: "step 4 backed up" in pane.last_message, 30)
        await wait_for(pilot, lambda: app.tasks.busy(pod.name, "transfer") is None and not pane._busy)
        for _ in range(10):  # the monitor's snapshots now show step 4 too: nothing is sent again
            app.on_snapshot(snapshot(pod, run, time.time()))
            assert app.auto_backup.running(pod.name) is None
            await pilot.pause(0.05)
        assert app.auto_backup.planner.failures(pod.name) == 0
    assert sum(n[1] == "Auto-backup" for n in notes) == 1, notes


@pytest.mark.ssh
async def test_removing_a_pod_during_its_auto_backup_leaves_nothing_behind(
    sshd, client_home, s3env, tmp_path, monkeypatch
):
    client_home.trust()
    cfg = tmp_path / "cfg"
    backup_toml(cfg, s3env, s3env.bucket, auto=True)
    with (cfg / "backup.toml").open("a") as fh:
        fh.write("max_bandwidth = 262144\n")  # 256 KiB/s: the backup of 2 MiB runs for seconds
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    run = tmp_path / "pod" / "gone"
    write_checkpoint(run, 2, shard_bytes=2 * 1024 * 1024)
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = parked_app(pod)
    async with app.run_test(size=(160, 50)) as pilot:
        notes = notes_of(app)
        auto = app.auto_backup
        app.on_snapshot(snapshot(pod, run, time.time()))
        await wait_for(pilot, lambda: (p := auto.progress.get(pod.name)) is not None and p.done > 0, 30)
        worker = auto._workers[pod.name]
        app.forget_pod(pod.name)
        await wait_for(pilot, lambda: worker.is_finished, 15)
        await pilot.pause(0.2)
        assert pod.name not in auto.planner._pods and pod.name not in auto.progress  # nothing recreated
        assert not [n for n in notes if "cancelled" in n[2] or n[1].startswith("Auto-backup")], notes
    assert not [k for k in s3env.keys() if k.endswith("manifest.json")]
