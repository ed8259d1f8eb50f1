"""``prime-train-tui status`` as a real process: a stale run directory over the real sshd, a live-looking
run on ``local``, and a pod that cannot be reached (exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def write_run(run: Path, steps: int = 8) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.001",
            "--max-steps",
            str(steps),
            "--ckpt-interval",
            "0",
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    log = run / "logs" / "trainer.log"
    lines = log.read_text().splitlines()
    assert lines[-1].endswith("RL trainer finished!")
    log.write_text("\n".join(lines[:-1]) + "\n")  # it did not finish: it died
    return run


def age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "config"
    cfg.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(cfg))
    return cfg


def test_stale_run_dir_over_real_sshd(sshd, client_home, tmp_path: Path) -> None:
    client_home.trust()
    config = Path(os.environ["PRIME_TRAIN_TUI_CONFIG_DIR"])  # client_home's
    config.mkdir(parents=True, exist_ok=True)
    run = write_run(tmp_path / "run", steps=8)
    with open(run / "logs" / "trainer.log", "a") as f:
        f.write(OOM + "\n")
    for p in [*(run / "logs").glob("*.log"), run / "metrics.jsonl"]:
        age(p, 2 * 3600)
    (config / "pods.toml").write_text(
        f'[pods.h100]\nhost = "127.0.0.1"\nuser = "{sshd.user}"\nport = {sshd.port}\n'
        f'run_dir = "{run}"\nprice_per_hr = 20.0\nprobe_dir = "{tmp_path / "pc"}"\n'
    )
    out = cli("status", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    [pod] = doc["pods"]
    assert (pod["name"], pod["state"]) == ("h100", "online")
    assert len(pod["gpus"]) == 8 and {"index", "name", "util", "mem_used", "mem_total"} <= set(pod["gpus"][0])
    r = pod["run"]
    assert r["step"] == 8 and r["loss"] is not None and r["tokens_per_s"] > 0
    assert 7100 < r["last_step_age_s"] < 7400
    alerts = {a["id"]: a for a in pod["alerts"]}
    assert {"no-progress", "log:cuda-oom"} <= set(alerts)
    assert "No new step for 2 h" in alerts["no-progress"]["message"] and "step 8" in alerts["no-progress"]["message"]
    assert alerts["log:cuda-oom"]["line"] == f"trainer: {OOM}" and alerts["log:cuda-oom"]["severity"] == "critical"
    assert ("nofile" in alerts) == (pod["host"]["nofile_soft"] is not None and pod["host"]["nofile_soft"] < 65536)
    for a in pod["alerts"]:
        assert set(a) >= {"id", "severity", "message"} and a["message"]

    human = cli("status", "h100")
    assert human.returncode == 0 and "No training progress" in human.stdout and "h100" in human.stdout


def test_a_hung_trainer_is_seen_while_the_orchestrator_keeps_logging(tmp_path: Path) -> None:
    """trainer.log untouched for 2 h at step 8 (with an OOM), orchestrator.log fresh: it shipped step 9 two
    hours ago and has been holding batches since. Each line is timed by its own stamp, the trainer's steps
    are the run's progress, and the orchestrator's lines never clear the trainer's error."""
    run = write_run(tmp_path / "run", steps=8)
    with open(run / "logs" / "trainer.log", "a") as f:
        f.write(OOM + "\n")
    age(run / "logs" / "trainer.log", 2 * 3600)
    age(run / "metrics.jsonl", 2 * 3600)
    with open(run / "logs" / "orchestrator.log", "a") as f:
        f.write("12:00:05 SUCCESS Step 9 |    9.8s | Reward 0.4123 | Trainable 96/128 (75.0%) | Turns 1.0\n")
        for k in range(60):
            m = 2 + 2 * k
            f.write(
                f"{12 + m // 60:02d}:{m % 60:02d}:00    INFO Holding batch 10 until the trainer publishes "
                "policy v9 (currently v8)\n"
            )
    out = cli("status", "local", "--run-dir", str(run), "--json")
    assert out.returncode == 0, out.stderr
    [pod] = json.loads(out.stdout)["pods"]
    assert pod["run"]["step"] == 8
    assert 7100 < pod["run"]["last_step_age_s"] < 7400
    alerts = {a["id"]: a for a in pod["alerts"]}
    assert "no-progress" in alerts and "step 8" in alerts["no-progress"]["message"]
    assert alerts["log:cuda-oom"]["line"] == f"trainer: {OOM}"


def test_fresh_run_on_local_and_an_unreachable_pod(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=6)
    log = run / "logs" / "trainer.log"
    lines = log.read_text().splitlines()
    # an error the run got past: a traceback, then more steps
    log.write_text("\n".join(lines[:3] + ["Traceback (most recent call last):"] + lines[3:]) + "\n")
    out = cli("status", "local", "--run-dir", str(run), "--json")
    assert out.returncode == 0, out.stderr
    [pod] = json.loads(out.stdout)["pods"]
    ids = {a["id"] for a in pod["alerts"]}
    assert pod["run"]["step"] == 6 and pod["run"]["last_step_age_s"] < 60
    assert "no-progress" not in ids and "log:traceback" not in ids

    bad = cli("status", "local", "root@127.0.0.1:1", "--run-dir", str(run), "--json", "--timeout", "10")
    assert bad.returncode == 1
    pods = {p["name"]: p for p in json.loads(bad.stdout)["pods"]}
    assert pods["local"]["state"] == "online"
    unreachable = pods["root@127.0.0.1:1"]
    assert unreachable["state"] == "offline" and unreachable["reason"] and unreachable["alerts"] == []

    missing = cli("status", "local", "--run-dir", str(tmp_path / "nope"), "--json")
    assert missing.returncode == 0
    assert "no such run dir" in json.loads(missing.stdout)["pods"][0]["run"]["note"]

    none = cli("status")
    assert none.returncode == 2 and "no pods" in none.stderr


def test_wandb_state_is_information_beside_the_pods_evidence(tmp_path: Path, monkeypatch, capsys) -> None:
    """In-process, with a fake W&B client in place of ``wandb.Api()`` (the real one needs the network)."""
    from app.cli import main
    from services.monitor import wandb_status

    run = write_run(tmp_path / "run", steps=5)
    with open(run / "logs" / "orchestrator.log", "a") as f:
        f.write("wandb: \U0001f680 View run quiet-sun-7 at: https://wandb.ai/acme/rl-runs/runs/k3x9q2\n")
    calls: list[str] = []

    class Api:
        def run(self, path: str):
            calls.append(path)
            return type("Run", (), {"state": "crashed", "heartbeatAt": "2020-01-01T00:00:00Z"})()

    monkeypatch.setattr(wandb_status, "default_api", Api)
    monkeypatch.setenv("WANDB_API_KEY", "test-key-not-real")
    assert main(["status", "local", "--run-dir", str(run), "--json"]) == 0
    pod = json.loads(capsys.readouterr().out)["pods"][0]
    assert calls == ["acme/rl-runs/k3x9q2"]
    assert pod["wandb"]["state"] == "crashed" and pod["wandb"]["heartbeat_age_s"] > 3600 * 24 * 300
    assert pod["run"]["step"] == 5 and "no-progress" not in {a["id"] for a in pod["alerts"]}  # fresh logs win
    monkeypatch.delenv("WANDB_API_KEY")
    assert main(["status", "local", "--run-dir", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pods"][0]["wandb"] is None and len(calls) == 1  # off without a key


def test_health_thresholds_come_from_settings(tmp_path: Path, monkeypatch, capsys) -> None:
    """[health] in settings.toml moves a threshold (here the open-files minimum, decided in one look);
    a typo in it is named, not ignored."""
    import pytest

    from app.cli import main
    from app.settings import load_health_settings
    from services.errors import SettingsError

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(conf))
    run = write_run(tmp_path / "run", steps=5)

    def alert_ids() -> set[str]:
        assert main(["status", "local", "--run-dir", str(run), "--json"]) == 0
        return {a["id"] for a in json.loads(capsys.readouterr().out)["pods"][0]["alerts"]}

    (conf / "settings.toml").write_text("[health]\nnofile_min = 1000000000\nstall_cap_s = 60\n")
    assert load_health_settings().stall_cap_s == 60.0 and isinstance(load_health_settings().nofile_min, int)
    assert "nofile" in alert_ids()
    (conf / "settings.toml").write_text("[health]\nnofile_min = 0\n")
    assert "nofile" not in alert_ids()
    (conf / "settings.toml").write_text("[health]\nnofile_mni = 1\n")
    with pytest.raises(SettingsError, match="nofile_mni"):
        load_health_settings()
    (conf / "settings.toml").write_text('[health]\ndisk_pct = "high"\n')
    with pytest.raises(SettingsError, match="disk_pct"):
        load_health_settings()


def test_a_pod_without_run_dir_is_judged_by_its_recorded_launch(tmp_path: Path, monkeypatch) -> None:
    from services import runs

    run = write_run(tmp_path / "run", steps=4)
    data = tmp_path / "data"
    runs.save_record(data / "runs", {"id": "r1", "pod": "local", "started": 1.0, "run_dir": str(run)})
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(data))
    out = cli("status", "local", "--json")
    assert out.returncode == 0, out.stderr
    [pod] = json.loads(out.stdout)["pods"]
    assert pod["run"]["step"] == 4 and pod["run"]["last_step_age_s"] < 60
