"""The Checkpoints pane under a bucket prefix shared by two runs: the pod table's "backed up" counts only
this run's verified backups, and the bucket table names each step's source. Real sshd pods, moto S3."""

from __future__ import annotations

import re
import time

import pytest

from app.panes.checkpoints import CheckpointsPane
from services.backup.transfer import backup_checkpoint
from services.pod.ssh import SSHConnection
from tests.app.checkpoints.test_pane import PaneApp, snapshot
from tests.app.helpers import wait_for
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint


@pytest.mark.ssh
async def test_another_runs_backup_of_the_same_step_is_not_this_pods_backup(sshd, client_home, s3env, tmp_path):
    client_home.trust()
    run_a, run_b = tmp_path / "a" / "run", tmp_path / "b" / "run"  # both: prime-train/run/
    write_checkpoint(run_a, 100, shard_bytes=20 * 1024)
    for step in (100, 200):
        write_checkpoint(run_b, step, shard_bytes=20 * 1024)
    pod_a = sshd.pod(name="pod-a", run_dir=str(run_a), probe_dir=str(tmp_path / "state-a"))
    pod_b = sshd.pod(name="pod-b", run_dir=str(run_b), probe_dir=str(tmp_path / "state-b"))
    async with SSHConnection(pod_a) as conn:
        assert (await backup_checkpoint(conn, s3env.settings(), str(run_a), 100)).verified
    async with SSHConnection(pod_b) as conn:
        assert (await backup_checkpoint(conn, s3env.settings(), str(run_b), 200)).verified
    app = PaneApp(s3env.settings())
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(CheckpointsPane)
        pane.show(snapshot(pod_b, run_b, time.time()), 1000.0)
        await wait_for(pilot, lambda: len(pane.bucket.get("pod-b", ())) == 2 and "pod-b" in pane.sources, 30)
        assert pane.backup_candidate() == 100  # pod A's step 100 is not pod B's
        await pilot.pause()
        rows = shown_rows(pane)
        # the pod table (left) and the bucket table (right), newest first: pod A's verified step 100 is
        # named as pod A's, and this pod's step_100 is not backed up
        assert re.search(r"200 .* verified .* 200 .* this run .* verified", rows[0]), rows
        assert re.search(r"100 .* no .* 100 .* " + re.escape(f"pod-a:{run_a}") + " .* verified", rows[1]), rows


def shown_rows(pane) -> list[str]:
    """The data rows of the tables the pane shows, as text."""
    from rich.console import Console
    from textual.widgets import Static

    static = pane.query_one("#ck-tables", Static)
    console = Console(width=400, record=True, color_system=None)
    console.print(getattr(static, "renderable", None) or static.content)
    return [ln for ln in console.export_text().splitlines() if re.match(r"\W*\d+ ", ln)]
