"""services.monitor.progress against prime-rl's line formats (current and historic), metrics.jsonl
records, a runbook training.csv, and the simulated trainer's real output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.models import CheckpointInfo
from services.monitor.progress import RunTracker, split_line

REPO = Path(__file__).resolve().parents[3]
TRAINER = (
    "14:03:12 SUCCESS Step 5 |   12.3s | Loss 0.0123 | Entropy 0.4567 | Mismatch KL 0.0012 | Grad. Norm "
    "0.2345 | LR 3.00e-06 | Throughput 25341 tokens/s | MFU 31.2% | Peak Mem. 41.3 GiB"
)
ORCH = (
    "14:03:10 SUCCESS Step 5 |    9.8s | Reward 0.4123 | Trainable 96/128 (75.0%) | Turns 1.0 | Branches 1.0 "
    "| Max Off-Policy 1 | Error 0.0% | Cancelled 0.0% | Truncation 2.3%"
)
HISTORIC = (
    "Step 0 | Time: 42.77s | Reward: 0.2938 | Throughput: 3966.9 tokens/s | Seq. Length: 328.5 "
    "tokens/sample | Async Level: 0 | Max. Off-Policy Level: 0"
)
SFT = (
    "Step 7 |    3.1s | Loss 1.2345 | Grad. Norm 0.8 | LR 2.00e-05 | Throughput 51234 tokens/s | MFU 40.1% | "
    "Peak Mem. 30.2/79.6 GiB (37.9%)"
)


def test_current_trainer_and_orchestrator_lines() -> None:
    r = RunTracker()
    assert r.feed_log("orchestrator: " + ORCH, 100.0) == "step"
    # the trainer's own line is the run's progress from now on (the orchestrator works ahead of it)
    assert r.feed_log("trainer: \x1b[32m" + TRAINER + "\x1b[0m", 101.0) == "step"
    p = r.progress()
    assert (p.step, p.loss, p.reward, p.tokens_per_s, p.mfu) == (5, 0.0123, 0.4123, 25341.0, 31.2)
    assert p.step_time_s == 12.3  # the trainer's wall time, not the orchestrator's
    assert p.steps_per_hr == pytest.approx(3600 / 12.3) and p.source == "console"
    assert p.last_step_at == 101.0
    assert r.feed_log("trainer: " + TRAINER, 102.0) is None  # the same step again: no new progress
    # an orchestrator step ahead of the trainer is not training progress
    assert r.feed_log("orchestrator: " + ORCH.replace("Step 5", "Step 6"), 200.0) is None
    assert (r.progress().step, r.progress().last_step_at) == (5, 101.0)
    assert r.feed_log("trainer: " + TRAINER.replace("Step 5", "Step 6"), 300.0) == "step"
    assert (r.progress().step, r.progress().last_step_at) == (6, 300.0)


def test_historic_sft_and_json_mode_lines() -> None:
    r = RunTracker()
    r.feed_log(HISTORIC, 1.0)
    p = r.progress()
    assert (p.step, p.reward, p.tokens_per_s, p.step_time_s) == (0, 0.2938, 3966.9, 42.77)
    r.feed_log("trainer: " + SFT, 2.0)
    assert (r.progress().step, r.progress().loss, r.progress().mfu) == (7, 1.2345, 40.1)
    r.feed_log(
        "trainer: " + json.dumps({"timestamp": "x", "level": "SUCCESS", "message": SFT.replace("Step 7", "Step 8")}),
        3.0,
    )
    assert r.progress().step == 8


def test_durations_in_every_format_time_unit() -> None:
    r = RunTracker()
    for n, d in enumerate(("123ms", "12.3s", "2m 5s", "1h 3m"), 1):
        r.feed_log(f"trainer: 14:00:00 SUCCESS Step {n} | {d:>7} | Loss 0.1", float(n))
    assert sorted(r.step_times) == [0.123, 12.3, 125.0, 3780.0]


def test_garbled_and_partial_lines_are_skipped() -> None:
    r = RunTracker()
    for line in (
        "",
        "trainer: ",
        "trainer: Step 3 |   xx.s | Loss 0.1",
        "trainer: {not json",
        "trainer: \x00\xff\xfe",
        "Step | 1.0s",
        b"\xff\xfeStep",
    ):
        r.feed_log(line, 1.0)
    for line in ('{"step": 1, "loss/me', "[1,2]", "null", '{"step": "x"}'):
        r.feed_metrics(line, 1.0)
    assert r.progress().step is None and r.skipped >= 2


def test_metrics_jsonl_records() -> None:
    r = RunTracker(max_steps=100, price_per_hr=20.0)
    r.feed_metrics(
        json.dumps(
            {"step": 9, "time": 1.0, "time/step": 36.0, "loss/mean": 0.25, "perf/throughput": 9000, "perf/mfu": 30.5}
        ),
        50.0,
    )
    r.feed_metrics(
        json.dumps(
            {"step": 10, "time/step": 30.0, "time/wait_for_policy": 1.0, "train/agg/all/agent/reward/mean": 0.75}
        ),
        51.0,
    )
    r.feed_metrics(json.dumps({"_timestamp": 3.0, "inference/agg/num_requests_running/mean": 5}), 52.0)
    p = r.progress()
    # the orchestrator runs a step ahead; the run's step is the trainer's
    assert (p.step, p.loss, p.reward, p.tokens_per_s, p.mfu, p.source) == (9, 0.25, 0.75, 9000.0, 30.5, "metrics.jsonl")
    assert p.step_time_s == 36.0  # only the trainer's record times the step
    assert p.eta_s == pytest.approx(91 * 36.0)
    assert p.cost_to_finish == pytest.approx(20.0 * 91 * 36.0 / 3600)
    assert p.cost_so_far == pytest.approx(20.0 * 9 * 36.0 / 3600)


def test_training_csv() -> None:
    r = RunTracker()
    for t, line in enumerate(
        ("step,loss,lr,toks_per_s", "1,2.5,1e-5,1000", "2,2.4,1e-5,1100", "garbage,,", "3,2.3,1e-5,", "4,2.2"), 1
    ):
        r.feed_csv(line, 10.0 * t)
    p = r.progress()
    assert (p.step, p.loss, p.tokens_per_s, p.source) == (4, 2.2, 1100.0, "training.csv")
    assert p.loss_history == (2.5, 2.4, 2.3, 2.2) and p.step_time_s == 10.0


def test_training_csv_header_in_any_order_and_the_probes_rows() -> None:
    r = RunTracker()
    for t, line in enumerate(("step,toks_per_s,loss,lr", "1,900,2.5,1e-5", "2,950,2.4,1e-5,extra"), 1):
        r.feed_csv(line, 10.0 * t)
    p = r.progress()
    assert (p.step, p.loss, p.tokens_per_s) == (1, 2.5, 900.0) and r.skipped == 1  # the too-long row
    # the probe sends training.csv rows inside "metrics", keyed by the file's header
    q = RunTracker()
    q.feed_metrics('{"source":"training.csv","step":7,"loss":1.5,"lr":1e-5,"toks_per_s":1200.0}', 5.0)
    q.feed_metrics('{"source":"training.csv","step":8,"loss":1.4,"lr":1e-5,"toks_per_s":1300.0}', 17.0)
    q.feed_metrics('{"source":"training.csv","raw":"garbage"}', 18.0)
    p = q.progress()
    assert (p.step, p.loss, p.tokens_per_s, p.source, p.step_time_s) == (8, 1.4, 1300.0, "training.csv", 12.0)
    assert q.skipped == 1


def test_checkpoint_and_finish_lines() -> None:
    r = RunTracker()
    r.feed_log("trainer: " + TRAINER, 1.0)
    assert r.feed_log("trainer: 14:03:13    INFO Saving checkpoint at step 5", 2.0) == "save"
    assert r.progress().checkpointing
    r.feed_ckpts([CheckpointInfo(5, "/r/checkpoints/step_5", 1, 2.0, True)], 3.0, 600)
    assert not r.progress().checkpointing
    r.feed_ckpts([CheckpointInfo(6, "/r/checkpoints/step_6", 1, 3.0, False)], 4.0, 600)
    assert r.progress().checkpointing
    r.feed_ckpts([CheckpointInfo(6, "/r/checkpoints/step_6", 1, 3.0, False)], 700.0, 600)
    assert not r.progress().checkpointing  # abandoned, not being written
    assert r.feed_log("trainer: 14:05:00 SUCCESS RL trainer finished!", 5.0) == "finished"
    assert r.progress().finished


def test_the_simulated_trainers_real_output(tmp_path: Path) -> None:
    run = tmp_path / "run"
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
            "12",
            "--step-seconds",
            "0.001",
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    r = RunTracker()
    for name in ("orchestrator", "trainer"):
        for line in (run / "logs" / f"{name}.log").read_text().splitlines():
            r.feed_log(f"{name}: {line}", 1.0)
    p = r.progress()
    assert p.step == 12 and p.finished and p.loss is not None and p.reward is not None and p.mfu is not None
    assert len(p.loss_history) == 12
    m = RunTracker()
    for line in (run / "metrics.jsonl").read_text().splitlines():
        m.feed_metrics(line, 1.0)
    assert m.progress().step == 12 and m.progress().loss == pytest.approx(p.loss, abs=1e-4)


def test_split_line() -> None:
    assert split_line("orchestrator: x") == ("orchestrator", "x")
    assert split_line("inference: y") == ("inference", "y")
    assert split_line("no prefix here") == (None, "no prefix here")
