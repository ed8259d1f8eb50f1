"""The watcher's auto-backup, backup age and preemption tracking (services/watch/backups.py, watcher.py) with
the TUI's own services: the real sshd pod's newest complete checkpoint goes to moto's S3 server while the
watcher runs, ``/metrics`` (parsed with prometheus_client's parser) shows its age; a pod down longer than
``preempt_after_s`` gets its running run record marked interrupted, said once."""

from __future__ import annotations

import asyncio

import pytest

from services import runs
from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus
from services.watch.watcher import Watcher, WatchOptions
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint
from tests.services.watch.test_watcher import scrape, until


@pytest.mark.ssh
async def test_the_watcher_backs_up_the_newest_checkpoint_and_exports_its_age(pod, s3env, tmp_path):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, 2, shard_bytes=8 * 1024)
    write_checkpoint(run_dir, 4, shard_bytes=8 * 1024)
    the_pod = Pod(
        "testpod",
        PodKind.SSH,
        host="127.0.0.1",
        user=pod.user,
        port=pod.port,
        probe_dir=pod.probe_dir,
        run_dir=str(run_dir),
    )
    w = Watcher(
        [the_pod], WatchOptions(tmp_path / "data", metrics_port=0, tick_s=0.1, backup=s3env.settings(auto_backup=True))
    )
    stop = asyncio.Event()
    task = asyncio.ensure_future(w.run(stop))
    try:
        await until(lambda: "testpod" in w.backups.newest, 40, "the auto-backup")
        assert "prime-train/run/step_4/manifest.json" in s3env.keys()
        assert not any(k.startswith("prime-train/run/step_2/") for k in s3env.keys())  # only the newest
        ages = dict((lb["pod"], v) for lb, v in scrape(w.exporter.port)["ptt_backup_age_seconds"])
        assert set(ages) == {"testpod"} and 0 <= ages["testpod"] < 120
        assert [a["step"] for a in w.state.actions if a["what"] == "backup done"] == [4]
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_without_auto_backup_nothing_is_sent_and_no_age_is_made_up(tmp_path):
    w = Watcher([], WatchOptions(tmp_path / "data"))
    assert not w.backups.enabled and w.view().backup_age == {}


async def test_a_pod_down_too_long_marks_its_run_interrupted_once(tmp_path):
    data = tmp_path / "data"
    now = [1_700_000_000.0]
    runs.save_record(
        data / "runs", {"id": "r1", "pod": "p", "state": "running", "started": now[0] - 60, "run_dir": "/r"}
    )
    pod = Pod("p", PodKind.SSH, host="127.0.0.1", run_dir="/r")
    w = Watcher([pod], WatchOptions(data, preempt_after_s=600), clock=lambda: now[0])
    w._acting = True  # as in run(), without its monitor: the snapshots are handed in
    w._on_snapshot(PodSnapshot(pod, PodStatus(PodState.OFFLINE, "connection refused")))
    w.evaluate()
    assert runs.load_record(data / "runs", "r1")["state"] == "running"  # not yet: 0 s down
    now[0] += 601
    w.evaluate()
    w.evaluate()
    rec = runs.load_record(data / "runs", "r1")
    assert rec["state"] == "interrupted" and "SSH down for 10 min" in rec["interrupted_reason"]
    said = [a for a in w.state.actions if a["what"] == "preempted interrupted"]
    assert len(said) == 1 and said[0]["run_id"] == "r1" and said[0]["pod"] == "p"
