"""A pod removed from the App: the snapshots still in flight from its monitor start nothing (no auto-backup,
no preemption tracking) — before the guard, a late snapshot recreated the auto-backup's state and started a
backup of a pod that was gone."""

from __future__ import annotations

import time

from tests.app.checkpoints.test_auto import backup_toml, parked_app
from tests.app.checkpoints.test_pane import snapshot
from tests.app.helpers import wait_for
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint


async def test_a_late_snapshot_of_a_removed_pod_starts_no_backup(s3env, tmp_path, monkeypatch):
    from services.models import Pod, PodKind

    backup_toml(tmp_path / "cfg", s3env, s3env.bucket, auto=True)
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    run = tmp_path / "pod" / "gone"
    write_checkpoint(run, 2, shard_bytes=1024)
    pod = Pod(name="gone", kind=PodKind.LOCAL, run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = parked_app(pod)
    async with app.run_test(size=(140, 40)) as pilot:
        app.forget_pod("gone")
        await wait_for(pilot, lambda: "gone" not in app.pods)
        seen: list = []
        app.lifecycle_bg.observe = seen.append  # the preemption tracker is fed nothing either
        for _ in range(3):
            app.on_snapshot(snapshot(pod, run, time.time()))  # still in flight from its monitor
            await pilot.pause(0.05)
        assert app.auto_backup.running("gone") is None and not app.auto_backup._workers
        assert seen == [] and not any("Auto-backup" in str(n.title) for n in app._notifications)
