"""``backup`` / ``restore`` on the command line: real sshd pod, moto's S3 server, exit codes, --json."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import SECRET_KEY, write_checkpoint

pytestmark = pytest.mark.ssh


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def target(sshd, client_home):
    client_home.trust()
    return f"{sshd.user}@127.0.0.1:{sshd.port}"


def test_backup_newest_then_restore_json(target, s3env, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run1"
    write_checkpoint(run, 2, shard_bytes=20 * 1024)
    write_checkpoint(run, 4, shard_bytes=20 * 1024)
    write_checkpoint(run, 6, complete=False)  # newest, but incomplete: not the default
    monkeypatch.setenv("PRIME_TRAIN_TUI_BUCKET", s3env.bucket)  # bucket from the environment
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3env.endpoint)  # boto3's own endpoint variable
    code, out, err = cli(capsys, "backup", target, "--run-dir", str(run), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step"] == 4 and doc["verified"] is True and doc["bucket"] == s3env.bucket
    assert doc["prefix"] == "prime-train/run1/" and {f["path"] for f in doc["files"]} == {
        "trainer/__0_0.distcp",
        "trainer/.metadata",
        "orchestrator/progress.pt",
    }
    assert SECRET_KEY not in out + err

    fresh = tmp_path / "elsewhere" / "run1"  # another run dir, same prefix: another run
    code, out, err = cli(capsys, "restore", target, "--run-dir", str(fresh), "--json")
    assert code == 1 and "no verified backup of this run" in err and "other runs' steps there: 4" in err
    assert "--step N" in err and out == ""
    code, out, err = cli(capsys, "restore", target, "--run-dir", str(fresh), "--step", "4", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step"] == 4 and doc["notes"] == [
        f"step 4 was backed up by another run: {target}:{run} (this is {target}:{fresh})"
    ]
    # that other run backing up its own step 4 under the same prefix: refused, nothing overwritten
    code, out, err = cli(capsys, "backup", target, "--run-dir", str(fresh), "--step", "4")
    assert code == 1 and "backed up by another run" in err and "set prefix in backup.toml" in err
    assert (fresh / "checkpoints/step_4/trainer/__0_0.distcp").read_bytes() == (
        run / "checkpoints/step_4/trainer/__0_0.distcp"
    ).read_bytes()


def test_backup_flags_override_and_failures_are_one_line(target, s3env, tmp_path, capsys):
    run = tmp_path / "run2"
    write_checkpoint(run, 3, shard_bytes=4096)
    code, out, err = cli(
        capsys,
        "backup",
        target,
        "--run-dir",
        str(run),
        "--step",
        "3",
        "--bucket",
        s3env.bucket,
        "--endpoint",
        s3env.endpoint,
        "--prefix",
        "custom/p",
        "--compress",
        "none",
    )
    assert code == 0, err
    assert "VERIFIED" in out and s3env.keys("custom/p/step_3/")

    code, _, err = cli(
        capsys,
        "backup",
        target,
        "--run-dir",
        str(run),
        "--step",
        "3",
        "--bucket",
        "missing-bkt",
        "--endpoint",
        s3env.endpoint,
    )
    assert code == 1 and "bucket 'missing-bkt' does not exist" in err.splitlines()[0]

    code, _, err = cli(
        capsys,
        "restore",
        target,
        "--run-dir",
        str(tmp_path / "x" / "run2"),
        "--bucket",
        s3env.bucket,
        "--endpoint",
        s3env.endpoint,
    )
    assert code == 1 and "no verified backup" in err  # nothing under prime-train/run2/

    code, _, err = cli(capsys, "backup", target, "--bucket", s3env.bucket)
    assert code == 2 and "no run directory" in err


def test_backup_refuses_an_incomplete_step(target, s3env, tmp_path, capsys):
    run = tmp_path / "run3"
    write_checkpoint(run, 8, complete=False)
    code, _, err = cli(
        capsys,
        "backup",
        target,
        "--run-dir",
        str(run),
        "--step",
        "8",
        "--bucket",
        s3env.bucket,
        "--endpoint",
        s3env.endpoint,
    )
    assert code == 1 and "incomplete" in err
    code, _, err = cli(
        capsys, "backup", target, "--run-dir", str(run), "--bucket", s3env.bucket, "--endpoint", s3env.endpoint
    )  # no --step: the newest complete one, and there is none
    assert (
        code == 1
        and err.splitlines()[0] == f"prime-train-tui: no complete checkpoint under {run}/checkpoints on {target}"
    )
    assert s3env.keys() == []
