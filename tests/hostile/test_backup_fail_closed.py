"""Issue 13 item 9: a typo in backup.toml's table name (``[bakup]``), or backup.toml being a directory, used to
turn backup off silently, and cleanup then deleted checkpoints that were never backed up. Now a backup
configuration that cannot be read makes cleanup refuse (fail closed) — the command, the TUI's modal and the
cleanup daemon alike — and says why; a missing backup.toml still means "no backup configured"."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from app.cli import main
from services.demo.trainer import write_checkpoint
from services.lifecycle.auto_cleanup import CleanupDaemon
from services.lifecycle.preflight import LifecycleSettings
from services.pod.ssh import SSHConnection

pytestmark = pytest.mark.ssh

REFUSAL = "cleanup deletes nothing until it is fixed"


def _dangling(p: Path) -> None:
    p.symlink_to(p.with_name("gone.toml"))


BROKEN = {
    "a directory": (lambda p: p.mkdir(), "it is a directory"),
    "[bakup]": (lambda p: p.write_text('[bakup]\nbucket = "ckpts"\n'), "did you mean [backup]?"),
    "a key typo": (lambda p: p.write_text('[backup]\nbukcet = "ckpts"\n'), "did you mean bucket?"),
    "not TOML": (lambda p: p.write_text('[backup\nbucket = "ckpts"\n'), "not valid TOML"),
    "500 levels deep": (lambda p: p.write_text("x = " + "[" * 500 + "]" * 500 + "\n"), "nested deeper"),
    "a dangling link": (_dangling, "does not exist"),
}


@pytest.fixture
def setup(pod, tmp_path):
    """Three complete checkpoints on the sshd pod, the pod saved as ``gpu`` in pods.toml."""
    cfg = Path(os.environ["PRIME_TRAIN_TUI_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    run = tmp_path / "run"
    for step in (10, 20, 30):
        write_checkpoint(str(run), step, 0)
    (cfg / "pods.toml").write_text(
        f'[pods.gpu]\ntarget = "testpod"\nrun_dir = "{run}"\nprobe_dir = "{pod.probe_dir}"\n'
    )
    return cfg, run, replace(pod, run_dir=str(run))


def steps(run: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in (run / "checkpoints").iterdir())


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_cleanup_command_refuses_when_backup_toml_cannot_be_read(setup, capsys, case):
    cfg, run, _ = setup
    make, why = BROKEN[case]
    make(cfg / "backup.toml")
    assert main(["cleanup", "gpu", "--keep", "1", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "backup.toml cannot be read" in err and REFUSAL in err and why in err, err
    assert steps(run) == [10, 20, 30]


def test_without_backup_toml_cleanup_still_deletes(setup, capsys):
    """The control: the same pod and command delete when no backup is configured at all."""
    _, run, _ = setup
    assert main(["cleanup", "gpu", "--keep", "1", "--yes"]) == 0, capsys.readouterr().err
    assert steps(run) == [30]


async def test_the_cleanup_daemon_refuses_too(setup, tmp_path):
    from app.screens.lifecycle import backup_settings

    cfg, run, pod = setup
    settings = LifecycleSettings(keep_last=1, disk_threshold_pct=100.0, runs_dir=tmp_path / "records")
    (cfg / "backup.toml").write_text('[bakup]\nbucket = "ckpts"\n')
    events = []
    daemon = CleanupDaemon(
        pod, settings, connect=SSHConnection, backup=backup_settings(None), on_event=events.append, approved=True
    )
    rnd = await daemon.run_once()
    assert "backup.toml cannot be read" in rnd.error and REFUSAL in rnd.error and "[backup]" in rnd.error
    assert any(ev.kind == "error" and REFUSAL in ev.message for ev in events)
    assert steps(run) == [10, 20, 30] and not rnd.deleted

    (cfg / "backup.toml").unlink()  # fixed (no backup configured): the daemon deletes as before
    daemon = CleanupDaemon(pod, settings, connect=SSHConnection, backup=backup_settings(None), approved=True)
    rnd = await daemon.run_once()
    assert rnd.error == "" and steps(run) == [30]
