"""Lifecycle gaps found in review (issue #6): a bad config alone stops a launch; the user's AWS keys never
reach a pod; resume after a wiped volume sends the config again (or refuses), and a run that ends at
once is an error, not "started". Over the real sshd with the simulated trainer; the CLI as a subprocess."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from app.settings import load_lifecycle_settings
from services.errors import SettingsError
from services.lifecycle.actions import launch, resume
from services.lifecycle.preflight import DEFAULT_SECRETS, LifecycleSettings
from services.pod.ssh import SSHConnection
from tests.app.lifecycle.test_cli import cli  # noqa: F401  (fixture: the CLI over the real sshd)
from tests.services.lifecycle.test_actions import _kill, _launch, collect, make_settings, trainer_pids, wait_for

pytestmark = pytest.mark.ssh

AWS = {
    "AWS_ACCESS_KEY_ID": "AKIA" + os.urandom(8).hex().upper(),
    "AWS_SECRET_ACCESS_KEY": "aws-secret-" + os.urandom(12).hex(),
    "AWS_SESSION_TOKEN": "aws-token-" + os.urandom(12).hex(),
}
BAD_CONFIG = 'max_steps = "ten"\n[model]\nname = "Qwen/Qwen3-0.6B"\n'


@pytest.fixture(autouse=True)
def _no_trainer_left(tmp_path):
    yield
    for pid in trainer_pids(tmp_path / "run"):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ------------------------------------------------------------------ 1. the config check counts
async def test_an_invalid_config_alone_stops_the_launch_unless_forced(pod, tmp_path):
    settings = make_settings(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD_CONFIG)
    async with SSHConnection(pod) as conn:
        events = await collect(launch(conn, bad, settings=settings, run_dir=str(tmp_path / "run")))
    checks = {e.check.name: e.check.status for e in events if e.check}
    assert checks["config validates"] == "fail"
    # the pod's own checks are still shown, and they all pass: the config alone refuses the launch
    assert {n: s for n, s in checks.items() if n not in ("config validates", "CUDA context")} == {
        "ulimit -n": "ok",
        "GPUs visible": "ok",
        "free disk": "ok",
        "trainer command": "ok",
        "no other run active": "ok",
    }
    assert events[-1].kind == "error" and "pre-flight failed: config validates" in events[-1].message
    assert not any(e.kind == "done" for e in events)
    assert not (tmp_path / "run" / ".ptt" / "run.json").exists() and not trainer_pids(tmp_path / "run")
    # --force: shown, warned, started
    async with SSHConnection(pod) as conn:
        forced = await collect(launch(conn, bad, settings=settings, run_dir=str(tmp_path / "run"), force=True))
    assert forced[-1].kind == "done", [e.message for e in forced]
    assert any(e.kind == "warn" and "despite 1 failed check" in e.message for e in forced)
    assert wait_for(lambda: len(trainer_pids(tmp_path / "run")) == 1)
    await _kill(pod, settings)


def test_the_cli_exits_non_zero_when_only_the_config_is_bad(cli):
    cli.config.write_text(BAD_CONFIG)
    r = cli("launch", "gpu", str(cli.config))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "✗ config validates" in r.stdout and "pre-flight failed: config validates" in r.stderr
    assert "✓ free disk" in r.stdout and "started" not in r.stdout
    assert not (cli.run_dir / ".ptt" / "run.json").exists()


# ------------------------------------------------------------------ 2. AWS keys stay home
async def test_aws_keys_never_reach_the_trainer_nor_the_pods_disk(pod, tmp_path):
    settings = make_settings(tmp_path)  # default secrets
    assert not set(AWS) & set(settings.secrets) and not set(AWS) & set(DEFAULT_SECRETS)
    events = await _launch(pod, tmp_path, settings, environ={**AWS, "WANDB_API_KEY": "wandb-" + "x" * 12})
    assert events[-1].data["secret_names"] == ["WANDB_API_KEY"]
    run_dir = tmp_path / "run"
    assert wait_for(lambda: len(trainer_pids(run_dir)) == 1)
    environ = Path(f"/proc/{trainer_pids(run_dir)[0]}/environ").read_bytes()
    assert b"WANDB_API_KEY=wandb-" in environ
    for name, value in AWS.items():
        assert name.encode() + b"=" not in environ and value.encode() not in environ
    files = [p for d in (run_dir, tmp_path / "podstate", tmp_path / "records") for p in d.rglob("*") if p.is_file()]
    assert len(files) > 3
    for p in files:
        data = p.read_bytes()
        assert not any(v.encode() in data for v in AWS.values()), p
    await _kill(pod, settings)


def test_listing_aws_keys_as_secrets_is_refused_with_the_reason(tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        with pytest.raises(ValueError, match=f"{name}: long-lived S3 credentials never go to a pod"):
            LifecycleSettings(secrets=("WANDB_API_KEY", name))
    path = tmp_path / "settings.toml"
    path.write_text('[lifecycle]\nsecrets = ["WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY"]\n')
    with pytest.raises(SettingsError) as info:
        load_lifecycle_settings(path)
    assert "AWS_SECRET_ACCESS_KEY" in str(info.value) and "pod's own environment" in str(info.value)
    path.write_text('[lifecycle]\nsecrets = ["WANDB_API_KEY"]\n')
    assert load_lifecycle_settings(path).secrets == ("WANDB_API_KEY",)


# ------------------------------------------------------------------ 4. resume after a wiped volume
async def _launched_with_a_checkpoint(pod, tmp_path, settings):
    events = await _launch(pod, tmp_path, settings)
    ck = tmp_path / "run" / "checkpoints"
    assert wait_for(lambda: (ck / "step_2" / "orchestrator" / "progress.pt").exists(), 15)
    await _kill(pod, settings)
    return events[-1].data


async def test_resume_sends_the_config_again_when_the_pods_copy_is_gone(pod, tmp_path):
    settings = make_settings(tmp_path)
    record = await _launched_with_a_checkpoint(pod, tmp_path, settings)
    remote = Path(record["config"])
    original = remote.read_bytes()
    shutil.rmtree(tmp_path / "run" / ".ptt" / "config")
    async with SSHConnection(pod) as conn:
        events = await collect(resume(conn, settings=settings))
    assert events[-1].kind == "done", [e.message for e in events]
    assert remote.read_bytes() == original
    checks = {e.check.name: e.check.status for e in events if e.check}
    assert checks["config validates"] == "ok"  # this machine's copy, validated again
    assert wait_for(lambda: len(trainer_pids(tmp_path / "run")) == 1)
    assert not (tmp_path / "run" / ".ptt" / "exit_code").exists()
    await _kill(pod, settings)


async def test_a_run_forced_past_a_bad_config_is_resumed_without_force(pod, tmp_path):
    """Auto-resume never forces: the config the run was launched with (same hash) warns, it does not refuse."""
    settings = make_settings(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD_CONFIG + "\n# forced\n")
    async with SSHConnection(pod) as conn:
        events = await collect(launch(conn, bad, settings=settings, run_dir=str(tmp_path / "run"), force=True))
    assert events[-1].kind == "done", [e.message for e in events]
    ck = tmp_path / "run" / "checkpoints"
    assert wait_for(lambda: (ck / "step_2" / "orchestrator" / "progress.pt").exists(), 15)
    await _kill(pod, settings)
    async with SSHConnection(pod) as conn:
        events = await collect(resume(conn, settings=settings))
    assert events[-1].kind == "done", [e.message for e in events]
    [check] = [e.check for e in events if e.check and e.check.name == "config validates"]
    assert check.status == "warn" and "launched with" in check.detail
    bad.write_text(BAD_CONFIG + "\n# edited since\n")  # not what was launched: no longer the run's config
    await _kill(pod, settings)
    async with SSHConnection(pod) as conn:
        events = await collect(resume(conn, settings=settings))
    assert events[-1].kind == "done", [e.message for e in events]  # the pod's own copy, unchanged, is used
    assert not any(e.check and e.check.status == "fail" for e in events)
    await _kill(pod, settings)


async def test_resume_refuses_when_neither_the_pod_nor_this_machine_has_the_config(pod, tmp_path):
    settings = make_settings(tmp_path)
    await _launched_with_a_checkpoint(pod, tmp_path, settings)
    shutil.rmtree(tmp_path / "run" / ".ptt" / "config")
    (tmp_path / "rl.toml").unlink()
    async with SSHConnection(pod) as conn:
        events = await collect(resume(conn, settings=settings))
    assert events[-1].kind == "error"
    assert "config" in events[-1].message and "gone from the pod" in events[-1].message
    assert "rl.toml" in events[-1].message and "launch the run again with its config" in events[-1].message
    assert not trainer_pids(tmp_path / "run") and not any(e.kind == "done" for e in events)


async def test_a_run_that_keeps_running_is_done_after_the_watch(pod, tmp_path):
    settings = make_settings(tmp_path, start_watch_seconds=0.5)
    events = await _launch(pod, tmp_path, settings)
    assert events[-1].kind == "done" and events[-1].data["pid"]
    assert wait_for(lambda: len(trainer_pids(tmp_path / "run")) == 1)
    await _kill(pod, settings)
