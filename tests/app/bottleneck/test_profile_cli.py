"""``prime-train-tui profile`` as a real process: local run dirs the simulated trainer wrote, --follow on
a trainer that is still running, and the same over a real OpenSSH sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def write_run(run_dir: Path, profile: str, steps: int = 12, *extra: str) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run_dir),
            "--step-seconds",
            "0.001",
            "--max-steps",
            str(steps),
            "--profile",
            profile,
            *extra,
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    return run_dir


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def test_json_contract_on_a_local_run(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", "generation-bound")
    out = cli("profile", "local", "--run-dir", str(run), "--steps", "5", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["steps"] == 5 and (doc["first_step"], doc["last_step"]) == (8, 12)
    assert doc["diagnosis"] == "throughput-bound" and doc["source"] == "metrics.jsonl"
    names = [c["name"] for c in doc["components"]]
    assert names[:3] == ["wait_for_batch", "inference", "tools"] and "forward_backward" in names
    for c in doc["components"]:
        assert isinstance(c["seconds"], float) and 0.0 <= c["share"] <= 1.0
    assert doc["recommendations"] and all(isinstance(r, str) for r in doc["recommendations"])
    assert doc["recommendation_ids"][0] == "more-inference-gpus"


def test_human_output_and_markdown(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", "checkpoint-heavy", 20)
    md = tmp_path / "report.md"
    out = cli("profile", "local", "--run-dir", str(run), "--markdown", str(md))
    assert out.returncode == 0, out.stderr
    assert "DIAGNOSIS: IO-BOUND" in out.stdout and "BOTTLENECK" in out.stdout
    assert "[ckpt] interval" in out.stdout  # rich markup did not eat the TOML table name
    assert "**Diagnosis: IO-BOUND**" in md.read_text()


def test_console_only_run_and_errors(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", "trainer-bound", 12, "--no-metrics")
    doc = json.loads(cli("profile", "local", "--run-dir", str(run), "--json").stdout)
    assert (doc["source"], doc["diagnosis"], doc["confidence"]) == ("console", "trainer-bound", "low")

    missing = cli("profile", "local", "--run-dir", str(tmp_path / "nope"))
    assert missing.returncode == 1 and "no such run dir" in missing.stderr
    empty = tmp_path / "empty"
    (empty / "logs").mkdir(parents=True)
    (empty / "metrics.jsonl").write_text('garbage\n{"step": 1, "time/st')
    none = cli("profile", "local", "--run-dir", str(empty), "--json")
    assert none.returncode == 1 and json.loads(none.stdout)["steps"] == 0
    assert json.loads(none.stdout)["skipped_lines"] == 2  # the prose and the cut-off record
    usage = cli("profile", "local")
    assert usage.returncode == 2 and "--run-dir" in usage.stderr


def test_follow_waits_for_new_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.1",
            "--max-steps",
            "0",
            "--profile",
            "latency-bound",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):  # let it log a few steps first: --follow must report only newer ones
            metrics = run / "metrics.jsonl"
            if metrics.exists() and metrics.read_text().count("time/wait_for_batch") >= 2:
                break
            time.sleep(0.05)
        out = cli("profile", "local", "--run-dir", str(run), "--steps", "4", "--follow", "--poll", "0.2", "--json")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["steps"] == 4 and doc["last_step"] - doc["first_step"] == 3 and doc["first_step"] > 1
        assert doc["diagnosis"] == "latency-bound"
    finally:
        trainer.kill()
        trainer.wait()


@pytest.mark.ssh
def test_profile_over_real_sshd(sshd, client_home, tmp_path: Path) -> None:
    client_home.trust()
    run = write_run(tmp_path / "pod run", "latency-bound", 15)  # a space: the path is shell-quoted
    out = cli("profile", "testpod", "--run-dir", str(run), "--steps", "10", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["steps"] == 10 and doc["diagnosis"] == "latency-bound"
    assert doc["recommendation_ids"][:1] == ["local-executor"]


def test_json_documents_the_evidence_and_the_config_change(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", "latency", 8)
    out = cli("profile", "local", "--run-dir", str(run), "--steps", "5", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["diagnosis"], doc["confidence"]) == ("latency-bound", "high")
    assert 0.0 < doc["inference"]["kv_cache"] < 0.1 and doc["inference"]["waiting"] == 0.0
    assert doc["inference"]["samples"] >= 5
    assert doc["rollout"]["tools_s"] > doc["rollout"]["generation_s"] > 0 and doc["rollout"]["total_s"]
    (change,) = doc["changes"]
    assert (
        change
        == {
            "id": "more-in-flight",
            "key": "orchestrator.concurrency.max_inflight",
            "value": None,
            "factor": change["factor"],
        }
        and 2.0 <= change["factor"] <= 8.0
    )
    human = cli("profile", "local", "--run-dir", str(run), "--steps", "5")
    assert "config: orchestrator.concurrency.max_inflight x" in human.stdout
