"""The demo trainer writes prime-rl's current key layout and can be switched between the three profiles
(by $PTT_DEMO_PROFILE, or a <run dir>/demo-profile file read every step), each giving its diagnosis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.bottleneck.analysis import analyze_lines
from services.bottleneck.report import to_markdown

REPO = Path(__file__).resolve().parents[3]


def trainer(run_dir: Path, *extra: str, env: dict | None = None, steps: int = 12) -> list[str]:
    out = subprocess.run(
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
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return (run_dir / "metrics.jsonl").read_text().splitlines()


@pytest.mark.parametrize(
    "name, diagnosis", [("latency", "latency-bound"), ("throughput", "throughput-bound"), ("trainer", "trainer-bound")]
)
def test_env_var_picks_the_profile_and_keys_are_the_current_layout(tmp_path, name, diagnosis):
    lines = trainer(tmp_path / name, env={"PTT_DEMO_PROFILE": name})
    keys = {k for line in lines for k in json.loads(line)}
    assert "train/agg/all/solver/timing/agent/harness/mean" in keys
    assert "train/reverse-text/effective/solver/timing/agent/model/mean" in keys
    assert "inference/agg/kv_cache_usage_perc/mean" in keys and "inference/agg/num_requests_waiting/max" in keys
    b = analyze_lines(lines, last=10)
    assert (b.diagnosis, b.confidence) == (diagnosis, "high")
    print(f"\n===== demo profile {name} =====\n" + to_markdown(b, f"Bottleneck profile — demo ({name})"))


def test_a_file_in_the_run_dir_switches_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "demo-profile").write_text("trainer\n")
    lines = trainer(run, "--profile", "latency", steps=6)
    assert analyze_lines(lines).diagnosis == "trainer-bound"  # the file wins over --profile
    other = tmp_path / "b"
    other.mkdir()
    (other / "demo-profile").write_text("no-such-profile")  # an unknown name changes nothing
    assert analyze_lines(trainer(other, "--profile", "latency", steps=4)).diagnosis == "latency-bound"


def test_a_bad_env_profile_is_a_one_line_usage_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "services.demo.trainer", "--run-dir", str(tmp_path / "r"), "--max-steps", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PTT_DEMO_PROFILE": "fast"},
    )
    assert out.returncode == 2 and "PTT_DEMO_PROFILE='fast' is not a profile" in out.stderr
