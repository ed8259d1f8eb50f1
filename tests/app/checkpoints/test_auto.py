"""Auto-backup through the real App (fed every snapshot, whatever tab or dialog is showing) over the real
sshd pod and moto's S3 server, and a snapshot of the Checkpoints pane with checkpoints on the pod and in
the bucket and a transfer running."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from app import auto_backup
from app.panes.checkpoints import CheckpointsPane
from app.tui import PrimeTrainApp
from services.backup.manifest import BucketCheckpoint, PodCheckpoint, RunSource, TransferProgress
from services.backup.s3 import BackupSettings
from services.models import CheckpointInfo, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from services.monitor.service import MonitorService
from tests.app.checkpoints.test_pane import snapshot
from tests.app.helpers import Parked
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

GIB = 1024**3


def backup_toml(cfg: Path, s3env, bucket: str, auto: bool) -> None:
    cfg.mkdir(exist_ok=True)
    (cfg / "backup.toml").write_text(
        f'[backup]\nbucket = "{bucket}"\nendpoint = "{s3env.endpoint}"\nregion = "us-east-1"\n'
        f"part_size = 65536\nmin_part = 65536\njobs = 4\nkeep_last = 0\nauto_backup = {str(auto).lower()}\n"
    )


def parked_app(pod: Pod) -> PrimeTrainApp:
    """The real App; the monitor's connection is parked and the test feeds the snapshots the probe would
    send (built from the files on the pod) through the App's own on_snapshot."""
    return PrimeTrainApp([pod], monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))


def notes_of(app: PrimeTrainApp) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    real = app.notify

    def spy(message, *, title="", severity="information", **kw):
        seen.append((str(severity), str(title), str(message)))
        return real(message, title=title, severity=severity, **kw)

    app.notify = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.ssh
async def test_auto_backup_runs_with_the_monitor_tab_showing_and_a_failure_is_reported_once(
    sshd, client_home, s3env, tmp_path, monkeypatch
):
    client_home.trust()
    monkeypatch.setattr(auto_backup, "RETRY_BASE", 0.3)
    monkeypatch.setattr(auto_backup, "RETRY_MAX", 0.6)
    later = s3env.bucket + "-later"  # does not exist yet: the first attempts fail
    backup_toml(tmp_path / "cfg", s3env, later, auto=True)
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    run = tmp_path / "pod" / "autorun"
    write_checkpoint(run, 2, shard_bytes=100 * 1024)
    write_checkpoint(run, 4, shard_bytes=100 * 1024, complete=False)  # the trainer is still writing it
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = parked_app(pod)
    async with app.run_test(size=(160, 50)) as pilot:
        notes = notes_of(app)
        assert app.tabs.active == "monitor"  # the Checkpoints pane is never shown in this test

        async def fed_until(pred, timeout=30.0) -> None:
            end = time.monotonic() + timeout
            while not pred():
                app.on_snapshot(snapshot(pod, run, time.time()))  # what the monitor does at 1 Hz
                assert time.monotonic() < end, f"timed out; notifications: {notes}"
                await pilot.pause(0.1)

        await fed_until(lambda: app.auto_backup.planner.failures(pod.name) >= 3)
        failed = [n for n in notes if n[1] == "Auto-backup failed"]
        assert len(failed) == 1 and "does not exist" in failed[0][2] and failed[0][0] == "error", notes

        s3env.client.create_bucket(Bucket=later)  # fixed: the next retry works
        await fed_until(lambda: any(n[1] == "Auto-backup" for n in notes))
        assert "step 2 backed up and verified" in notes[-1][2] and "working again" in notes[-1][2], notes
        keys = sorted(o["Key"] for o in s3env.client.list_objects_v2(Bucket=later).get("Contents", []))
        assert "prime-train/autorun/step_2/manifest.json" in keys and not [k for k in keys if "/step_4/" in k]

        app.action_help()  # a dialog open: snapshots still reach the auto-backup
        await pilot.pause()
        for _ in range(5):  # more snapshots: step 2 is not sent twice, the half-written step 4 never
            app.on_snapshot(snapshot(pod, run, time.time()))
            assert app.auto_backup.running(pod.name) is None
            await pilot.pause(0.05)
        write_checkpoint(run, 6, shard_bytes=100 * 1024)  # a new complete checkpoint appears
        await fed_until(lambda: sum(n[1] == "Auto-backup" for n in notes) == 2)
        assert "step 6 backed up and verified" in notes[-1][2], notes
        assert len([n for n in notes if n[1] == "Auto-backup failed"]) == 1
    body = s3env.client.get_object(Bucket=later, Key="prime-train/autorun/step_6/trainer/__0_0.distcp")["Body"]
    assert body.read() == (run / "checkpoints/step_6/trainer/__0_0.distcp").read_bytes()
    keys = [o["Key"] for o in s3env.client.list_objects_v2(Bucket=later).get("Contents", [])]
    assert not [k for k in keys if "/step_4/" in k]


@pytest.mark.ssh
async def test_without_auto_backup_nothing_is_sent(sshd, client_home, s3env, tmp_path, monkeypatch):
    client_home.trust()
    backup_toml(tmp_path / "cfg", s3env, s3env.bucket, auto=False)
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    run = tmp_path / "pod" / "manual"
    write_checkpoint(run, 3, shard_bytes=50 * 1024)
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = parked_app(pod)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(10):
            app.on_snapshot(snapshot(pod, run, time.time()))
            await pilot.pause(0.05)
        assert app.auto_backup.running(pod.name) is None and not app.workers and s3env.keys() == []


class SnapApp(App):
    def compose(self) -> ComposeResult:
        yield CheckpointsPane(BackupSettings(bucket="team-ckpts", prefix="prime-train/rl-7b/"), id="ck")

    def on_mount(self) -> None:
        pane = self.query_one(CheckpointsPane)
        pod = Pod(name="pod-a", kind=PodKind.SSH, host="pod-a", run_dir="/workspace/rl-7b")
        now = 1_700_000_000.0
        ckpts = (
            CheckpointInfo(100, "/workspace/rl-7b/checkpoints/step_100", 47 * GIB, now - 3600, True),
            CheckpointInfo(200, "/workspace/rl-7b/checkpoints/step_200", 47 * GIB, now - 1200, True),
            CheckpointInfo(300, "/workspace/rl-7b/checkpoints/step_300", 12 * GIB, now - 30, False),
        )
        sample = Sample(t=now, gpus=(), host=HostSample(disk_used=180 * GIB, disk_total=400 * GIB), ckpts=ckpts)
        pane._bucket_at["pod-a"] = now  # listed just now: no worker goes to the network
        never = ("no manifest: the backup never finished",)
        mine = RunSource("pod-a", "/workspace/rl-7b", "r7")
        other = RunSource("pod-b", "/workspace/rl-7b", "r9", ("r7",), (100,))  # a resume of it elsewhere
        pane.sources["pod-a"] = mine
        pane.on_pod["pod-a"] = {100: PodCheckpoint(100, ckpts[0].path, 47 * GIB, now - 3600, True, fingerprint="f100")}
        pane.bucket["pod-a"] = (
            BucketCheckpoint(50, 47 * GIB, 37 * GIB, False, never),
            BucketCheckpoint(100, 47 * GIB, 37 * GIB, True, (), now - 3000, mine, "f100"),
            BucketCheckpoint(200, 47 * GIB, 37 * GIB, True, (), now - 900, other),
        )
        pane._busy = "pod-a"
        pane.transfer = TransferProgress("backup", 200, "upload", 20 * GIB, 47 * GIB, 100.0)
        pane.last_message = "step 100 backed up and verified (752 parts sent, 0 already there)"
        pane.show(PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE, since=0.0), history=(sample,)), now)


def test_checkpoints_pane_snapshot(snap_compare, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASNAPSHOTKEY00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "snapshot-secret-never-shown")
    assert snap_compare(SnapApp(), terminal_size=(130, 30))


async def test_auto_backup_follows_the_panes_settings_and_backup_toml_without_it(tmp_path, monkeypatch):
    """Auto-backup reads its settings for every snapshot of every pod: from the Checkpoints pane it holds on to
    (not looked up again per snapshot), so settings changed there apply to the next snapshot, and backup.toml's
    again once that pane is gone."""
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "backup.toml").write_text('[backup]\nbucket = "from-toml"\nauto_backup = false\n')
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    pod = Pod("gpu", kind=PodKind.SSH, host="gpu")
    app = parked_app(pod)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        pane = app.query_one(CheckpointsPane)
        backup = app.auto_backup
        assert backup.settings.bucket == "from-toml"
        pane.with_settings(BackupSettings(bucket="changed-here", auto_backup=True))
        assert (backup.settings.bucket, backup.settings.auto_backup) == ("changed-here", True)
        await pane.remove()
        assert (backup.settings.bucket, backup.settings.auto_backup) == ("from-toml", False)
