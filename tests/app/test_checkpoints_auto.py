"""CheckpointsPane: auto-backup over the real sshd pod and moto's S3 server (no key pressed), and a
snapshot of the pane with checkpoints on the pod and in the bucket and a transfer running."""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.app import App, ComposeResult

from app.panes.checkpoints import CheckpointsPane
from services.backup import TransferProgress
from services.manifest import BucketCheckpoint
from services.models import CheckpointInfo, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from services.s3 import BackupSettings
from tests.app.helpers import wait_for
from tests.app.test_checkpoints_pane import PaneApp, snapshot
from tests.services.backup_fixtures import *  # noqa: F401,F403 (fixtures)
from tests.services.backup_fixtures import write_checkpoint

GIB = 1024**3


@pytest.mark.ssh
async def test_auto_backup_backs_up_each_new_complete_checkpoint_without_a_key(sshd, client_home, s3env, tmp_path):
    client_home.trust()
    run = tmp_path / "pod" / "autorun"
    write_checkpoint(run, 2, shard_bytes=100 * 1024)
    write_checkpoint(run, 4, shard_bytes=100 * 1024, complete=False)  # the trainer is still writing it
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = PaneApp(s3env.settings(auto_backup=True))
    async with app.run_test(size=(160, 50)):
        pane = app.query_one(CheckpointsPane)

        def tick() -> None:  # what the App does at 1 Hz with the probe's snapshot
            pane.show(snapshot(pod, run, time.time()), time.time())

        async def settled(pred, timeout=30.0) -> None:
            end = time.monotonic() + timeout
            while True:
                tick()
                if pred():
                    return
                assert time.monotonic() < end, f"timed out; finished: {[m.message for m in app.finished]}"
                await asyncio.sleep(0.1)

        await settled(lambda: len(app.finished) == 1 and pane._busy is None)
        assert (app.finished[0].action, app.finished[0].step, app.finished[0].ok) == ("backup", 2, True), \
            app.finished[0].message
        await settled(lambda: any(c.step == 2 and c.verified for c in pane.bucket.get(pod.name, ())))
        for _ in range(5):  # more ticks: the half-written step 4 is never picked up, step 2 not sent twice
            tick()
            assert pane._busy is None  # a transfer would have started synchronously in show()
            await asyncio.sleep(0.1)
        assert len(app.finished) == 1 and not [k for k in s3env.keys() if "/step_4/" in k]

        write_checkpoint(run, 6, shard_bytes=100 * 1024)  # a new complete checkpoint appears
        await settled(lambda: len(app.finished) == 2 and pane._busy is None)
        assert (app.finished[1].step, app.finished[1].ok) == (6, True), app.finished[1].message
        await settled(lambda: {c.step for c in pane.bucket.get(pod.name, ()) if c.verified} == {2, 6})
    assert not [k for k in s3env.keys() if "/step_4/" in k]
    assert s3env.get("prime-train/autorun/step_6/trainer/__0_0.distcp") == \
        (run / "checkpoints/step_6/trainer/__0_0.distcp").read_bytes()


@pytest.mark.ssh
async def test_without_auto_backup_nothing_is_sent(sshd, client_home, s3env, tmp_path):
    client_home.trust()
    run = tmp_path / "pod" / "manual"
    write_checkpoint(run, 3, shard_bytes=50 * 1024)
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = PaneApp(s3env.settings(auto_backup=False))
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(CheckpointsPane)
        pane.show(snapshot(pod, run, time.time()), time.time())
        await wait_for(pilot, lambda: pane.bucket.get(pod.name) == ())
        for _ in range(5):
            pane.show(snapshot(pod, run, time.time()), time.time())
            await pilot.pause()
        assert pane._busy is None and not app.finished and s3env.keys() == []


class SnapApp(App):
    def compose(self) -> ComposeResult:
        yield CheckpointsPane(BackupSettings(bucket="team-ckpts", prefix="prime-train/rl-7b/"), id="ck")

    def on_mount(self) -> None:
        pane = self.query_one(CheckpointsPane)
        pod = Pod(name="pod-a", kind=PodKind.SSH, host="pod-a", run_dir="/workspace/rl-7b")
        now = 1_700_000_000.0
        ckpts = (CheckpointInfo(100, "/workspace/rl-7b/checkpoints/step_100", 47 * GIB, now - 3600, True),
                 CheckpointInfo(200, "/workspace/rl-7b/checkpoints/step_200", 47 * GIB, now - 1200, True),
                 CheckpointInfo(300, "/workspace/rl-7b/checkpoints/step_300", 12 * GIB, now - 30, False))
        sample = Sample(t=now, gpus=(), host=HostSample(disk_used=180 * GIB, disk_total=400 * GIB), ckpts=ckpts)
        pane._bucket_at["pod-a"] = now  # listed just now: no worker goes to the network
        never = ("no manifest: the backup never finished",)
        pane.bucket["pod-a"] = (BucketCheckpoint(50, 47 * GIB, 37 * GIB, False, never),
                                BucketCheckpoint(100, 47 * GIB, 37 * GIB, True, (), now - 3000))
        pane._busy = "pod-a"
        pane.transfer = TransferProgress("backup", 200, "upload", 20 * GIB, 47 * GIB, 100.0)
        pane.last_message = "step 100 backed up and verified (752 parts sent, 0 already there)"
        pane.show(PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE, since=0.0), history=(sample,)), now)


def test_checkpoints_pane_snapshot(snap_compare, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASNAPSHOTKEY00001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "snapshot-secret-never-shown")
    assert snap_compare(SnapApp(), terminal_size=(130, 30))
