"""CheckpointsPane in a small App: real sshd pod, moto's S3 server; b/u behind a confirm, progress."""

from __future__ import annotations

import time

import pytest
from textual.app import App, ComposeResult

from app.panes.checkpoints import CheckpointsPane, credential_source
from app.screens.confirm import ConfirmScreen
from services.backup.manifest import TransferProgress
from services.models import CheckpointInfo, HostSample, PodSnapshot, PodState, PodStatus, Sample
from tests.app.helpers import wait_for
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import SECRET_KEY, write_checkpoint
from widgets.checkpoints_view import CheckpointsModel, disk_line, transfer_line


class PaneApp(App):
    def __init__(self, settings) -> None:
        super().__init__()
        self.settings = settings
        self.finished: list[CheckpointsPane.TransferFinished] = []

    def compose(self) -> ComposeResult:
        yield CheckpointsPane(self.settings, id="ck")

    def on_checkpoints_pane_transfer_finished(self, message: CheckpointsPane.TransferFinished) -> None:
        self.finished.append(message)


def snapshot(pod, run_dir, now: float) -> PodSnapshot:
    ckpts = []
    for d in sorted((run_dir / "checkpoints").glob("step_*")):
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        ckpts.append(
            CheckpointInfo(int(d.name[5:]), str(d), size, d.stat().st_mtime, (d / "trainer" / ".metadata").exists())
        )
    sample = Sample(
        t=now, gpus=(), host=HostSample(disk_used=40 * 1024**3, disk_total=100 * 1024**3), ckpts=tuple(ckpts)
    )
    return PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE), history=(sample,))


def text_of(app) -> str:
    from textual.widgets import Label, Static

    return "\n".join(str(w.render()) for w in app.query(Label)) + "\n".join(
        str(getattr(w, "renderable", "")) for w in app.query(Static)
    )


@pytest.mark.ssh
async def test_backup_and_restore_from_the_pane(sshd, client_home, s3env, tmp_path):
    client_home.trust()
    run = tmp_path / "pod" / "paner"
    write_checkpoint(run, 2, shard_bytes=150 * 1024)
    write_checkpoint(run, 4, shard_bytes=150 * 1024)
    write_checkpoint(run, 6, complete=False)
    pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "cache"))
    app = PaneApp(s3env.settings())
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(CheckpointsPane)
        pane.clear()
        assert app.query_one("#ck-empty").display
        pane.show(snapshot(pod, run, time.time()), 1000.0)
        pane.focus()
        await wait_for(pilot, lambda: pane.bucket.get(pod.name) == ())
        assert pane.backup_candidate() == 4  # newest complete, not step 6 (still being written)

        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")  # declined: nothing happens
        await pilot.pause()
        assert s3env.keys() == [] and not app.finished

        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: app.finished, 30)
        assert app.finished[0].ok and app.finished[0].step == 4, app.finished[0].message
        await wait_for(pilot, lambda: any(c.verified for c in pane.bucket.get(pod.name, ())))
        assert [(c.step, c.verified) for c in pane.bucket[pod.name]] == [(4, True)]
        assert pane.backup_candidate() == 2
        await pilot.pause()
        shown = text_of(app)
        assert "verified" in shown and SECRET_KEY not in shown

        # the pod lost its checkpoints: restore puts step 4 back, verified
        lost = tmp_path / "newpod" / "paner"
        (lost / "checkpoints").mkdir(parents=True)
        pod2 = sshd.pod(name="pod2", run_dir=str(lost), probe_dir=str(tmp_path / "cache"))
        pane.show(snapshot(pod2, lost, time.time()), 2000.0)
        await wait_for(pilot, lambda: pane.bucket.get("pod2"))
        await pilot.press("u")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: len(app.finished) == 2, 30)
        assert app.finished[1].ok and app.finished[1].action == "restore", app.finished[1].message
    assert (lost / "checkpoints/step_4/trainer/__0_0.distcp").read_bytes() == (
        run / "checkpoints/step_4/trainer/__0_0.distcp"
    ).read_bytes()


def test_view_lines_show_bytes_rate_eta_and_disk_share():
    p = TransferProgress("backup", 40, "upload", 512 * 1024**2, 2 * 1024**3, 4.0)
    line = transfer_line(p)
    assert "512.0 MiB / 2.0 GiB" in line and "134.2 MB/s" in line and "ETA 12 s" in line and "25%" in line
    m = CheckpointsModel(
        title="t",
        pod_ckpts=(CheckpointInfo(1, "/x", 10 * 1024**3, 0.0, True),),
        disk_used=40 * 1024**3,
        disk_total=100 * 1024**3,
    )
    assert "checkpoints 10.0 GiB (10%)" in disk_line(m) and "40.0 GiB / 100.0 GiB" in disk_line(m)
    assert (
        credential_source({"AWS_ACCESS_KEY_ID": "AKIAVERYSECRETID", "AWS_SECRET_ACCESS_KEY": "s"})
        == "credentials: environment (AKIA…****)"
    )


async def test_pane_reads_settings_from_the_config_dir_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    (tmp_path / "backup.toml").write_text('[backup]\nbucket = "file-bucket"\nkeep_last = 4\n')
    monkeypatch.delenv("PRIME_TRAIN_TUI_BUCKET", raising=False)
    assert CheckpointsPane().settings.bucket == "file-bucket"
    monkeypatch.setenv("PRIME_TRAIN_TUI_BUCKET", "env-bucket")
    pane = CheckpointsPane()
    assert (pane.settings.bucket, pane.settings.keep_last) == ("env-bucket", 4)
    (tmp_path / "backup.toml").write_text("[backup\n")
    pane = CheckpointsPane()
    assert pane.last_message.startswith("backup settings: cannot read") and pane.settings.bucket == ""


async def test_an_unexpected_failure_while_listing_is_a_toast_not_the_end_of_the_app(tmp_path):
    """A pod answering something the pane does not expect (here: a connection raising RuntimeError) while
    the bucket is listed: the App's worker hub says so and the App keeps running."""
    from services.backup.s3 import BackupSettings
    from services.models import Pod, PodKind

    tried: list[str] = []

    class Broken:
        async def connect(self):
            tried.append("connect")
            raise RuntimeError("garbage from the pod")

        async def close(self):
            return None

    app = PaneApp(BackupSettings(bucket="b"))
    async with app.run_test(size=(140, 40)) as pilot:
        pane = app.query_one(CheckpointsPane)
        pane._connect = lambda pod: Broken()
        run = tmp_path / "run"
        write_checkpoint(run, 1, shard_bytes=1024)
        pod = Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run))
        pane.show(snapshot(pod, run, time.time()), time.time())
        await wait_for(pilot, lambda: tried)
        for _ in range(10):  # time for an uncaught worker error to end the App (it did before)
            await pilot.pause(0.05)
        assert app.is_running and app.return_code is None
