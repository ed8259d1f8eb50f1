"""Item 2: provider billing keys never go to a pod.

A launch used to pass PRIME_API_KEY (and OPENAI/ANTHROPIC/VLLM keys) from this machine's environment to
every trainer by default: on a rented box anyone with root reads /proc/<pid>/environ, and the Prime key
rents and terminates pods on the user's account. Now nothing goes but what the user lists, and a provider
key listed in settings is refused before anything reaches the pod. Over the real sshd, with the simulated
trainer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import load_lifecycle_settings
from services.errors import SettingsError
from services.lifecycle.actions import kill, launch
from services.lifecycle.preflight import DEFAULT_SECRETS, NEVER_TO_POD, PROVIDER_KEYS, LifecycleSettings
from services.offers.providers import PROVIDERS
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import TRAINER, trainer_pids, wait_for, write_config

REPO = Path(__file__).resolve().parents[2]
# what a developer's shell typically holds: every one of them used to reach the trainer by default
LOCAL_KEYS = {
    name: f"{name.lower()}-value-{os.urandom(4).hex()}"
    for name in (
        "PRIME_API_KEY",
        "VAST_API_KEY",
        "LAMBDA_API_KEY",
        "RUNPOD_API_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "VLLM_API_KEY",
        "WANDB_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
    )
}


def settings_for(tmp_path: Path, **kw) -> LifecycleSettings:
    """The simulated trainer with the [lifecycle] defaults for everything about secrets."""
    return LifecycleSettings(
        command=f"python3 {TRAINER} --run-dir {{run_dir}} --max-steps 0 --step-seconds 0.2 --ckpt-interval 2",
        min_nofile=1024,
        min_free_bytes=1,
        cuda_check=False,
        tmux="setsid",
        grace_seconds=3.0,
        runs_dir=tmp_path / "records",
        start_watch_seconds=0.3,
        **kw,
    )


@pytest.fixture
def run_dir(tmp_path):
    """The run's dir; whatever runs from it is ended at teardown, whatever the test's outcome."""
    run = tmp_path / "run"
    yield run
    for pid in trainer_pids(run):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass


def test_the_provider_key_names_are_the_providers_own():
    assert set(PROVIDER_KEYS) == {p.key_env for p in PROVIDERS.values()}


def test_by_default_no_secret_at_all_goes_to_a_pod():
    assert DEFAULT_SECRETS == () and LifecycleSettings().secrets == ()


@pytest.mark.parametrize("name", ["PRIME_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "RUNPOD_API_KEY", "prime_api_key"])
def test_listing_a_provider_key_is_refused_with_the_reason(name):
    with pytest.raises(ValueError) as info:
        LifecycleSettings(secrets=("WANDB_API_KEY", name))
    message = str(info.value)
    assert f"{name} rents and terminates pods on your account: it never goes to a pod" in message
    assert "\n" not in message


def test_aws_keys_are_still_refused_for_their_own_reason():
    assert set(NEVER_TO_POD) >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    with pytest.raises(ValueError, match="long-lived S3 credentials never go to a pod"):
        LifecycleSettings(secrets=("AWS_SECRET_ACCESS_KEY",))


def test_settings_toml_listing_the_prime_key_is_a_settings_error(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('[lifecycle]\nsecrets = ["WANDB_API_KEY", "PRIME_API_KEY"]\n')
    with pytest.raises(SettingsError) as info:
        load_lifecycle_settings(path)
    assert "PRIME_API_KEY rents and terminates pods on your account" in str(info.value)
    path.write_text('[lifecycle]\nsecrets = ["WANDB_API_KEY", "HF_TOKEN"]\n')
    assert load_lifecycle_settings(path).secrets == ("WANDB_API_KEY", "HF_TOKEN")


@pytest.mark.ssh
async def test_keys_in_this_machines_environment_do_not_reach_the_trainer(pod, tmp_path, run_dir, monkeypatch):
    for name, value in LOCAL_KEYS.items():
        monkeypatch.setenv(name, value)
    settings = settings_for(tmp_path)  # default secrets; environ = this process's environment
    async with SSHConnection(pod) as conn:
        events = [e async for e in launch(conn, write_config(tmp_path), settings=settings, run_dir=str(run_dir))]
    assert events[-1].kind == "done", [e.message for e in events]
    assert wait_for(lambda: len(trainer_pids(run_dir)) == 1, 15)
    environ = Path(f"/proc/{trainer_pids(run_dir)[0]}/environ").read_bytes()
    assert b"PYTHONUNBUFFERED=1" in environ  # the run's environment is there ...
    for name, value in LOCAL_KEYS.items():  # ... and none of this machine's keys
        assert name.encode() + b"=" not in environ and value.encode() not in environ, name
    assert events[-1].data["secret_names"] == []
    async with SSHConnection(pod) as conn:
        assert [e async for e in kill(conn, settings=settings)][-1].kind == "done"


@pytest.mark.ssh
async def test_a_listed_secret_goes_and_the_prime_key_beside_it_does_not(pod, tmp_path, run_dir, monkeypatch):
    for name, value in LOCAL_KEYS.items():
        monkeypatch.setenv(name, value)
    settings = settings_for(tmp_path, secrets=("WANDB_API_KEY",))
    async with SSHConnection(pod) as conn:
        events = [e async for e in launch(conn, write_config(tmp_path), settings=settings, run_dir=str(run_dir))]
    assert events[-1].kind == "done", [e.message for e in events]
    assert events[-1].data["secret_names"] == ["WANDB_API_KEY"]
    assert wait_for(lambda: len(trainer_pids(run_dir)) == 1, 15)
    environ = Path(f"/proc/{trainer_pids(run_dir)[0]}/environ").read_bytes()
    assert f"WANDB_API_KEY={LOCAL_KEYS['WANDB_API_KEY']}".encode() in environ
    assert LOCAL_KEYS["PRIME_API_KEY"].encode() not in environ


@pytest.mark.ssh
def test_the_cli_refuses_a_listed_prime_key_before_anything_reaches_the_pod(pod, client_home, tmp_path, run_dir):
    cfg_dir = client_home.home / ".config" / "prime-train-tui"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "pods.toml").write_text(
        f'[pods.gpu]\ntarget = "testpod"\nrun_dir = "{run_dir}"\nprobe_dir = "{pod.probe_dir}"\n'
    )
    (cfg_dir / "settings.toml").write_text(
        f'[lifecycle]\ncommand = "python3 {TRAINER} --run-dir {{run_dir}} --max-steps 0"\n'
        'cuda_check = false\nmin_nofile = 1024\nsecrets = ["WANDB_API_KEY", "PRIME_API_KEY"]\n'
    )
    env = {
        **os.environ,
        **LOCAL_KEYS,
        "HOME": str(client_home.home),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(cfg_dir),
        "PRIME_TRAIN_TUI_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("SSH_AUTH_SOCK", None)
    r = subprocess.run(
        [sys.executable, "-m", "app.cli", "launch", "gpu", str(write_config(tmp_path))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "PRIME_API_KEY rents and terminates pods on your account: it never goes to a pod" in r.stderr
    assert "Traceback" not in r.stderr
    assert LOCAL_KEYS["PRIME_API_KEY"] not in r.stdout + r.stderr
    # nothing reached the pod: no helper uploaded, no run dir, no trainer
    assert not Path(pod.probe_dir).exists() and not run_dir.exists()
    assert trainer_pids(run_dir) == []
