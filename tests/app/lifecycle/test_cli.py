"""launch / kill / resume / cleanup as commands, as a user runs them: subprocesses over the real sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ssh

REPO = Path(__file__).resolve().parents[3]
TRAINER = REPO / "services" / "demo" / "trainer.py"


@pytest.fixture
def cli(sshd, client_home, tmp_path):
    client_home.trust()
    cfg_dir = client_home.home / ".config" / "prime-train-tui"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "pods.toml").write_text(
        f'[pods.gpu]\ntarget = "testpod"\nrun_dir = "{tmp_path / "run"}"\nprobe_dir = "{tmp_path / "state"}"\n'
    )
    (cfg_dir / "settings.toml").write_text(
        "[lifecycle]\n"
        f'command = "python3 {TRAINER} --run-dir {{run_dir}} --max-steps 0 --step-seconds 0.2 --ckpt-interval 2"\n'
        'resume_args = "--seed {step}"\n'
        'min_nofile = 1024\nmin_free_bytes = 1\ncuda_check = false\ntmux = "setsid"\ngrace_seconds = 3\n'
        'secrets = ["WANDB_API_KEY"]\n'
    )
    env = {
        **os.environ,
        "HOME": str(client_home.home),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(cfg_dir),
        "PRIME_TRAIN_TUI_DATA_DIR": str(tmp_path / "data"),
        "WANDB_API_KEY": "cli-secret-value-123",
    }
    env.pop("SSH_AUTH_SOCK", None)
    config = tmp_path / "rl.toml"
    config.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=REPO,
            env=env,
            input=stdin or "",
            capture_output=True,
            text=True,
            timeout=60,
        )

    run.config = config  # type: ignore[attr-defined]
    run.run_dir = tmp_path / "run"  # type: ignore[attr-defined]
    run.data = tmp_path / "data"  # type: ignore[attr-defined]
    run.cfg_dir = cfg_dir  # type: ignore[attr-defined]
    return run


def test_launch_kill_resume_cleanup_from_the_command_line(cli):
    r = cli("launch", "gpu", str(cli.config), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["result"]["method"] == "setsid"
    assert doc["target"]["config"] == cli.config.name and doc["target"]["pod"] == "gpu"  # the launch's plan
    assert "cli-secret-value-123" not in r.stdout + r.stderr
    checks = {e["check"]["name"]: e["check"]["status"] for e in doc["events"] if "check" in e}
    assert checks["ulimit -n"] == "ok" and checks["GPUs visible"] == "ok" and checks["config validates"] == "ok"
    records = list((cli.data / "runs").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["secret_names"] == ["WANDB_API_KEY"]

    r = cli("launch", "gpu", str(cli.config))
    assert r.returncode == 1
    assert "no other run active" in r.stderr and "✗ no other run active" in r.stdout

    ck = cli.run_dir / "checkpoints"
    deadline = time.monotonic() + 15
    while not (ck / "step_6" / "orchestrator" / "progress.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)

    r = cli("kill", "gpu")  # stdin is not a terminal: refused without --yes
    assert r.returncode == 2 and "--yes" in r.stderr
    r = cli("kill", "gpu", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["target"]["pids"]
    for pid in doc["target"]["pids"]:
        assert not Path(f"/proc/{pid}").exists() or " Z " in Path(f"/proc/{pid}/stat").read_text()

    steps = sorted(int(p.name[5:]) for p in ck.iterdir())
    (ck / f"step_{steps[-1] + 2}" / "trainer").mkdir(parents=True)  # half-written newest
    r = cli("resume", "gpu", "--yes")
    assert r.returncode == 0, r.stderr
    assert f"step_{steps[-1]}" in r.stdout and "incomplete" in r.stdout
    r = cli("kill", "gpu", "--yes")
    assert r.returncode == 0, r.stderr

    before = sorted(p.name for p in ck.iterdir())
    r = cli("cleanup", "gpu", "--keep", "2", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert sorted(p.name for p in ck.iterdir()) == before  # dry run deletes nothing
    complete = sorted(c["step"] for c in plan["kept"] + plan["delete"])
    assert [c["step"] for c in plan["kept"]] == complete[-2:]
    assert plan["bytes"] == sum(c["bytes"] for c in plan["delete"]) > 0

    r = cli("cleanup", "gpu", "--keep", "2")
    assert r.returncode == 2 and "--yes" in r.stderr
    r = cli("cleanup", "gpu", "--keep", "2", "--yes")
    assert r.returncode == 0, r.stderr
    left = sorted(int(p.name[5:]) for p in ck.iterdir())
    deleted = {c["step"] for c in plan["delete"]}
    assert not deleted & set(left)
    assert set(complete[-2:]) <= set(left)
    assert "freed" in r.stdout


def test_failed_preflight_names_the_check_and_its_fix(cli):
    text = (
        (cli.cfg_dir / "settings.toml")
        .read_text()
        .replace("min_free_bytes = 1\n", "min_free_bytes = 1000000000000000000\n")
    )
    (cli.cfg_dir / "settings.toml").write_text(text)
    r = cli("launch", "gpu", str(cli.config))
    assert r.returncode == 1
    assert "free disk" in r.stderr.splitlines()[0]
    assert "fix:" in r.stdout and "cleanup" in r.stdout
    assert not (cli.run_dir / ".ptt" / "run.json").exists()  # nothing started
    r = cli("launch", "gpu", "/nonexistent.toml")
    assert r.returncode == 2


def test_after_a_kill_status_and_the_watcher_say_killed_and_raise_nothing(cli):
    """A user's kill is recorded on the pod itself (its run record: "killed"), so `status` and the watcher --
    any machine that looks, long after -- say the run was killed and raise no stall alert, even with a stall
    budget of 2 s. Before, the pod's record still said "running": after k x the step time (here 2 s, by default
    5 min) a critical "No training progress" opened, and the watcher would have paged someone at night."""
    with open(cli.cfg_dir / "settings.toml", "a") as fh:
        # (nofile_min: this machine's open-files limit is not what this test is about)
        fh.write("[health]\nstall_floor_s = 1\nstall_k = 1\nstall_cap_s = 2\nstall_start_s = 2\nnofile_min = 1024\n")
    assert cli("launch", "gpu", str(cli.config), "--json").returncode == 0
    log = cli.run_dir / "logs" / "trainer.log"
    deadline = time.monotonic() + 15
    while not (log.exists() and "Step 3 " in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    r = cli("kill", "gpu", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    record = json.loads((cli.run_dir / ".ptt" / "run.json").read_text())
    assert record["state"] == "killed" and record["ended"] > record["started"]
    time.sleep(3)  # past the stall budget
    r = cli("status", "gpu", "--json")
    assert r.returncode == 0, r.stderr
    (pod,) = json.loads(r.stdout)["pods"]
    assert pod["run"]["phase"] == "killed" and pod["run"]["eta_s"] is None
    assert pod["alerts"] == [], pod["alerts"]
    r = cli("watch", "--once", "--interval", "0.2")
    assert r.returncode == 0, r.stderr
    (watched,) = json.loads(r.stdout)["pods"]
    assert watched["run"]["phase"] == "killed" and watched["alerts"] == [], watched
