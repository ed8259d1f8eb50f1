"""Stopping a backup from the Checkpoints pane (x, then a confirm) over the real sshd pod and moto's S3
server: the agent on the pod exits with its SSH channel, the multipart upload stays in the bucket, and
the next backup resumes without re-sending the parts already there."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import psutil
import pytest

from app.panes.checkpoints import CheckpointsPane
from app.screens.confirm import ConfirmScreen
from tests.app.checkpoints.test_pane import PaneApp, snapshot
from tests.app.helpers import wait_for
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

PART = 64 * 1024


def agents(marker: str) -> list[psutil.Process]:
    """The backup agents running from this test's probe dir (started by sshd, not by this process)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if marker in cmd and "backup-agent-" in cmd and "backup.py" in (proc.info["cmdline"] or ()):
            found.append(proc)
    return found


@pytest.mark.ssh
async def test_x_stops_a_backup_the_agent_exits_and_the_next_backup_resumes(sshd, client_home, s3env, tmp_path):
    client_home.trust()
    run = tmp_path / "pod" / "cancelrun"
    write_checkpoint(run, 5, shard_bytes=32 * PART)  # 32 parts at 8 parts/s: ~4 s unless stopped
    cache = str(tmp_path / "agent-cache")
    pod = sshd.pod(run_dir=str(run), probe_dir=cache)
    app = PaneApp(s3env.settings(max_bandwidth=8 * PART, part_size=PART, min_part=PART, jobs=2))
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(CheckpointsPane)
        pane.show(snapshot(pod, run, time.time()), time.time())
        pane.focus()
        await wait_for(pilot, lambda: pane.bucket.get(pod.name) == ())
        await pilot.press("escape")  # nothing runs: nothing asked, nothing said
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)

        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.transfer is not None and pane.transfer.done >= 6 * PART, 30)
        assert agents(cache), "the agent should be running on the pod"
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "Stop the backup of step 5" in app.screen.question
        await pilot.press("y")
        await wait_for(pilot, lambda: app.finished, 15)
        assert (app.finished[0].ok, app.finished[0].step) == (False, 5) and "stopped" in app.finished[0].message
        assert pane._busy is None and pane.transfer is None
        await wait_for(pilot, lambda: not agents(cache), 10)  # the channel closed: the agent is gone

        key = "prime-train/cancelrun/step_5/trainer/__0_0.distcp"
        uploads = s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads", [])
        assert [u["Key"] for u in uploads] == [key]  # left for the resume, not aborted
        sent = s3env.client.list_parts(Bucket=s3env.bucket, Key=key, UploadId=uploads[0]["UploadId"])["Parts"]
        assert 6 <= len(sent) < 32
        assert not s3env.keys("prime-train/cancelrun/step_5/manifest.json")

        pane.with_settings(replace(pane.settings, max_bandwidth=0))
        await pilot.press("r")
        await wait_for(pilot, lambda: pod.name in pane.bucket)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: len(app.finished) == 2, 30)
        done = app.finished[1]
        assert done.ok, done.message
        uploaded, skipped = map(int, re.search(r"\((\d+) parts sent, (\d+) already there\)", done.message).groups())
        assert skipped >= len(sent) and uploaded + skipped == 32 + 2, done.message  # + .metadata, progress.pt
    assert s3env.get(key) == (run / "checkpoints/step_5/trainer/__0_0.distcp").read_bytes()


@pytest.mark.ssh
async def test_x_in_the_pane_stops_the_selected_pods_auto_backup_which_is_not_retried(
    sshd, client_home, s3env, tmp_path, monkeypatch
):
    from tests.app.checkpoints.test_auto import backup_toml, notes_of, parked_app

    client_home.trust()
    backup_toml(tmp_path / "cfg", s3env, s3env.bucket, auto=True)
    with (tmp_path / "cfg" / "backup.toml").open("a") as fh:
        fh.write(f"max_bandwidth = {8 * PART}\n")
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    run = tmp_path / "pod" / "autocancel"
    write_checkpoint(run, 7, shard_bytes=32 * PART)
    cache = str(tmp_path / "agent-cache")
    pod = sshd.pod(run_dir=str(run), probe_dir=cache)
    app = parked_app(pod)
    async with app.run_test(size=(160, 50)) as pilot:
        notes = notes_of(app)
        await pilot.press("5")  # the Checkpoints tab
        app.on_snapshot(snapshot(pod, run, time.time()))
        pane = app.query_one(CheckpointsPane)
        await wait_for(
            pilot, lambda: (p := app.auto_backup.progress.get(pod.name)) is not None and p.done >= 4 * PART, 30
        )
        await wait_for(pilot, lambda: pane._transfer_of(pod.name) is not None)  # its progress is in the pane
        pane.focus()
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "auto-backup of step 7" in app.screen.question
        await pilot.press("y")
        await wait_for(pilot, lambda: app.auto_backup.running(pod.name) is None and not agents(cache), 15)
        assert [n for n in notes if n[1] == "Auto-backup"] and "cancelled" in notes[-1][2], notes
        for _ in range(5):  # the stopped step is not sent again by itself
            app.on_snapshot(snapshot(pod, run, time.time()))
            await pilot.pause(0.05)
            assert app.auto_backup.running(pod.name) is None
    assert not s3env.keys("prime-train/autocancel/step_7/manifest.json")


@pytest.mark.ssh
async def test_a_pane_backup_is_a_task_in_the_transfer_lane_stopped_from_the_task_list(
    sshd, client_home, s3env, tmp_path
):
    """In the App a backup is a task (t lists it with its progress), a lifecycle action on the same pod is not
    held up by it, and stopping it from the task list stops the agent like x does."""
    from app.tasks import Tasks

    client_home.trust()
    run = tmp_path / "pod" / "taskrun"
    write_checkpoint(run, 5, shard_bytes=32 * PART)
    cache = str(tmp_path / "agent-cache")
    pod = sshd.pod(run_dir=str(run), probe_dir=cache)
    app = PaneApp(s3env.settings(max_bandwidth=8 * PART, part_size=PART, min_part=PART, jobs=2))
    app.tasks = Tasks(app)
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(CheckpointsPane)
        pane.show(snapshot(pod, run, time.time()), time.time())
        pane.focus()
        await wait_for(pilot, lambda: pane.bucket.get(pod.name) == ())
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.transfer is not None and pane.transfer.done >= 6 * PART, 30)
        [task] = app.tasks.running(pod.name)
        assert (task.action, task.lane) == ("backup", "transfer")
        assert 0 < task.progress < 1 and task.status.startswith("upload step 5")
        assert app.tasks.busy(pod.name) is None  # the lifecycle lane is free: a kill would start at once
        await pilot.press("b")  # a second transfer on the same pod is refused while this one runs
        await wait_for(pilot, lambda: any("still running" in str(n.message) for n in app._notifications))
        assert not isinstance(app.screen, ConfirmScreen) and len(app.tasks.items) == 1
        app.tasks.cancel(task)
        await wait_for(pilot, lambda: app.finished, 15)
        assert task.state == "cancelled" and not app.finished[0].ok and "stopped" in app.finished[0].message
        await wait_for(pilot, lambda: not agents(cache), 10)
        assert pane._busy is None and pane.transfer is None
