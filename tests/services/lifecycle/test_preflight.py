"""Pre-flight checks, run for real by the pod-side helper (here on the `local` pod: same helper, no SSH)."""

from __future__ import annotations

import importlib.util
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.lifecycle.actions import launch
from services.lifecycle.preflight import LifecycleSettings, UserCheck, config_check
from services.lifecycle.shell import AGENT_PATH
from services.models import Pod, PodKind
from services.pod.local import LocalConnection

REPO = Path(__file__).resolve().parents[3]
FAKE_BIN = REPO / "services" / "demo" / "bin"
TRAINER = REPO / "services" / "demo" / "trainer.py"


def settings(**kw) -> LifecycleSettings:
    base = dict(
        command=f"python3 {TRAINER} --run-dir {{run_dir}} --max-steps 3 --step-seconds 0.05",
        min_nofile=1024,
        min_free_bytes=1,
        cuda_check=False,
        tmux="setsid",
        grace_seconds=2.0,
    )
    base.update(kw)
    return LifecycleSettings(**base)


async def checks_of(tmp_path, config, s, **kw):
    pod = Pod(name="local", kind=PodKind.LOCAL, probe_dir=str(tmp_path / "state"))
    async with LocalConnection(pod) as conn:
        events = [ev async for ev in launch(conn, config, settings=s, run_dir=str(tmp_path / "run"), **kw)]
    return events, {ev.check.name: ev.check for ev in events if ev.check is not None}


def good_config(tmp_path) -> Path:
    p = tmp_path / "rl.toml"
    p.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
    return p


async def test_each_failure_is_reported_with_its_fix(tmp_path, monkeypatch):
    if shutil.which("nvidia-smi", path="/usr/local/bin:/usr/bin:/bin"):
        pytest.skip("a real nvidia-smi is installed here")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    bad = tmp_path / "bad.toml"
    bad.write_text('max_steps = "ten"\n[model\n')
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    s = settings(
        command="no-such-trainer-xyz @ {config}",
        min_nofile=(hard + 1 if hard > 0 else 10**9),
        min_free_bytes=10**18,
        checks=(
            UserCheck(
                "dataset has 2 files", "test $(ls data 2>/dev/null | wc -l) -eq 2", "download the dataset into data/"
            ),
        ),
    )
    events, checks = await checks_of(tmp_path, bad, s)
    failed = {name for name, c in checks.items() if c.status == "fail"}
    assert failed == {
        "config validates",
        "ulimit -n",
        "GPUs visible",
        "free disk",
        "trainer command",
        "dataset has 2 files",
    }
    for name in failed:
        assert checks[name].fix, name
    assert "limits.conf" in checks["ulimit -n"].fix
    assert "not found" in checks["GPUs visible"].detail
    assert "no-such-trainer-xyz" in checks["trainer command"].detail
    assert checks["dataset has 2 files"].fix == "download the dataset into data/"
    assert events[-1].kind == "error" and "pre-flight failed" in events[-1].message
    assert not (tmp_path / "run" / ".ptt" / "run.json").exists()  # nothing was started


async def test_all_pass_then_the_run_starts_and_finishes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:/usr/local/bin:/usr/bin:/bin")
    monkeypatch.setenv("PTT_FAKE_GPUS", "2")
    data = tmp_path / "run" / "data"
    data.mkdir(parents=True)
    (data / "a.parquet").write_text("a")
    (data / "b.parquet").write_text("b")
    s = settings(cuda_check=True, checks=(UserCheck("dataset has 2 files", "test $(ls data | wc -l) -eq 2"),))
    events, checks = await checks_of(tmp_path, good_config(tmp_path), s)
    assert events[-1].kind == "done", [e.message for e in events]
    assert {c.status for n, c in checks.items() if n != "CUDA context"} == {"ok"}
    assert "2 GPU(s)" in checks["GPUs visible"].detail
    torch_here = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    assert checks["CUDA context"].status == ("ok" if torch_here else "skip") or torch_here
    # the simulated trainer runs its 3 steps detached and records its exit status
    exit_file = tmp_path / "run" / ".ptt" / "exit_code"
    import time

    deadline = time.monotonic() + 10
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exit_file.read_text().strip() == "0"
    assert "RL trainer finished" in (tmp_path / "run" / "logs" / "trainer.log").read_text()


def test_nofile_is_raised_for_the_run_when_the_hard_limit_allows(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("hard limit too low to test raising")
    want = 2048

    def lower():
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))

    out = subprocess.run(
        [sys.executable, str(AGENT_PATH), "preflight", "--run-dir", str(tmp_path), "--min-nofile", str(want)],
        capture_output=True,
        text=True,
        preexec_fn=lower,
        env={"PATH": "/usr/bin:/bin", "PTT_STATE_DIR": str(tmp_path / "state")},
    )
    check = next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "ulimit -n")
    assert check["status"] == "ok" and "raised to 2048" in check["detail"]
    # the run's leader really raises it before exec'ing the command
    (tmp_path / ".ptt").mkdir()
    record = tmp_path / ".ptt" / "run.json"
    record.write_text(
        json.dumps(
            {
                "run_dir": str(tmp_path),
                "command": f"ulimit -n > {tmp_path / 'n'}",
                "nofile": want,
                "env": {},
                "cwd": str(tmp_path),
            }
        )
    )
    subprocess.run(
        [sys.executable, str(AGENT_PATH), "child", "--record", str(record)],
        input=b"{}",
        preexec_fn=lower,
        check=True,
        timeout=20,
    )
    assert (tmp_path / "n").read_text().strip() == "2048"


def test_config_check_without_the_validator_is_skipped_not_passed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "services.config.validate", None)  # import fails
    check = config_check(good_config(tmp_path))
    assert check.status == "skip" and "validator not available" in check.detail


def test_config_check_with_the_validator(tmp_path):
    if importlib.util.find_spec("services.config.validate") is None:
        pytest.skip("validator not in this tree")
    assert config_check(good_config(tmp_path)).status == "ok"
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    c = config_check(bad)
    assert c.status == "fail" and c.fix


# ------------------------------------------------------------------ credentials the config needs (issue 32, item 9)

WANDB_CONFIG = 'max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n[monitors.wandb]\nproject = "p"\n'


def _no_logins(monkeypatch, home: Path) -> None:
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    for name in ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:/usr/local/bin:/usr/bin:/bin")
    monkeypatch.setenv("PTT_FAKE_GPUS", "2")


async def test_wandb_without_a_key_sent_or_a_login_on_the_pod_is_warned_with_the_fix(tmp_path, monkeypatch):
    """A config that logs to W&B started a run that failed at its first log call (or waited on wandb's
    login prompt) when WANDB_API_KEY was neither sent ([lifecycle] secrets) nor logged in on the pod."""
    _no_logins(monkeypatch, tmp_path / "home")
    config = tmp_path / "rl.toml"
    config.write_text(WANDB_CONFIG)
    events, checks = await checks_of(tmp_path, config, settings())
    check = checks["WANDB_API_KEY on the pod"]
    assert check.status == "warn" and "[monitors.wandb]" in check.detail
    assert "[lifecycle] secrets" in check.fix and "log in on the pod" in check.fix
    assert events[-1].kind == "done"  # a warning: the launch goes on


async def test_wandb_login_on_the_pod_or_the_key_in_secrets_passes(tmp_path, monkeypatch):
    _no_logins(monkeypatch, tmp_path / "home")
    (tmp_path / "home" / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password x\n")
    config = tmp_path / "rl.toml"
    config.write_text(WANDB_CONFIG)
    _, checks = await checks_of(tmp_path, config, settings())
    assert checks["WANDB_API_KEY on the pod"].status == "ok" and ".netrc" in checks["WANDB_API_KEY on the pod"].detail
    (tmp_path / "home" / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "k")  # sent from this machine
    _, checks = await checks_of(tmp_path / "again", config, settings(secrets=("WANDB_API_KEY",)))
    assert "WANDB_API_KEY on the pod" not in checks


async def test_a_gated_model_needs_hf_token(tmp_path, monkeypatch):
    _no_logins(monkeypatch, tmp_path / "home")
    config = tmp_path / "rl.toml"
    config.write_text('max_steps = 10\n[model]\nname = "meta-llama/Llama-3.1-8B-Instruct"\n')
    _, checks = await checks_of(tmp_path, config, settings())
    check = checks["HF_TOKEN on the pod"]
    assert check.status == "warn" and "gated" in check.detail and "HF_TOKEN" in check.fix
    token = tmp_path / "home" / ".cache" / "huggingface" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("hf_x")
    _, checks = await checks_of(tmp_path / "again", config, settings())
    assert checks["HF_TOKEN on the pod"].status == "ok"


def test_what_needs_a_login_is_known_from_the_file_alone() -> None:
    from services.config.credentials import needed
    from services.tomlfile import loads

    assert set(needed(loads(WANDB_CONFIG))) == {"WANDB_API_KEY"}
    assert needed(loads("[monitors.wandb]\noffline = true\n")) == {}
    assert set(needed(loads('[orchestrator.wandb]\nproject = "p"\n'))) == {"WANDB_API_KEY"}  # the older table
    assert needed(loads('[model]\nname = "Qwen/Qwen3-8B"\n')) == {}
    # a mirror under another account is not known to be gated: nothing is claimed
    assert needed(loads('[model]\nname = "unsloth/Llama-3.1-8B-Instruct"\n')) == {}
    assert set(needed(loads('[vllm]\nmodel = "google/gemma-3-4b-it"\n'))) == {"HF_TOKEN"}
