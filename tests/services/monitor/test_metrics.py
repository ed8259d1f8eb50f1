"""Parsing prime-rl's metrics.jsonl records and console lines (current, historic, JSON, coloured, garbled)."""

from __future__ import annotations

import json

import pytest

from services.monitor.metrics import MetricsParser, parse_duration, parse_run


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("123ms", 0.123),
        ("12.3s", 12.3),
        ("2m 5s", 125.0),
        ("1h 3m", 3780.0),
        ("2d 4h", 187200.0),
        ("0ms", 0.0),
    ],
)
def test_format_time_round_trips(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "fast", "12.3 parsecs", "s12", "1.2.3s"])
def test_garbage_durations_are_none(text):
    assert parse_duration(text) is None


def test_trainer_and_orchestrator_records_merge_by_step():
    trainer = {
        "step": 3,
        "time": 100.0,
        "time/step": 40.0,
        "time/wait_for_batch": 30.0,
        "time/load_data": 0.5,
        "time/forward_backward": 6.0,
        "time/broadcast_weights": 1.5,
        "time/save_ckpt": 0.0,
        "loss/mean": 0.1,
    }
    orch = {
        "step": 3,
        "time": 99.0,
        "time/step": 39.0,
        "time/wait_for_policy": 0.3,
        "progress/rollouts": 128,
        "train/agg/all/solver/timing/agent/model/mean": 2.0,
        "train/agg/all/solver/timing/tool_ms/mean": 13000,
        "train/agg/effective/timing/agent/model/mean": 99.0,
    }
    periodic = {"_timestamp": 5.0, "inference/agg/kv_cache_usage_perc/mean": 0.4}
    run = parse_run([json.dumps(orch), json.dumps(trainer), json.dumps(periodic)])
    assert run.source == "metrics.jsonl" and run.skipped == 0
    (st,) = run.ordered()
    assert st.step == 3
    assert st.trainer["time/wait_for_batch"] == 30.0 and st.trainer["time/step"] == 40.0
    assert st.orchestrator == {"time/step": 39.0, "time/wait_for_policy": 0.3}
    # "all" wins over "effective"; *_ms is milliseconds; model -> generation, tool -> tools
    assert st.rollout == {"generation": 2.0, "tools": 13.0}
    assert run.periodic == [{"inference/agg/kv_cache_usage_perc/mean": 0.4}]


def test_garbled_and_partial_metrics_lines_are_skipped_and_counted():
    good = json.dumps({"step": 1, "time/step": 10.0, "time/forward_backward": 9.0})
    lines = [
        good,
        '{"step": 2, "time/step": 1',
        "not json",
        "[1, 2]",
        '{"step": "two", "time/step": 3}',
        "",
        "   ",
        '{"step": 2, "time/step": NaN, "time/forward_backward": Infinity}',
    ]
    run = parse_run(lines)
    assert run.skipped == 4  # truncated object, prose, a list, a non-numeric step; blank lines are not counted
    steps = run.ordered()
    assert [s.step for s in steps] == [1]  # step 2 carried no finite trainer timing
    assert steps[0].trainer == {"time/step": 10.0, "time/forward_backward": 9.0}


def test_current_console_lines_with_probe_prefix_colours_and_json_logging():
    p = MetricsParser()
    p.feed_console(
        "trainer: \x1b[32m14:03:12\x1b[0m \x1b[1mSUCCESS\x1b[0m Step 5 |   12.3s | Loss 0.0123 | "
        "Entropy 0.4567 | Throughput 25341 tokens/s | MFU 31.2% | Peak Mem. 41.3 GiB"
    )
    p.feed_console("orchestrator: 14:03:10 SUCCESS Step 5 |    9.8s | Reward 0.4123 | Trainable 96/128 (75.0%)")
    p.feed_console(
        json.dumps(
            {
                "timestamp": "2026-01-01T00:00:00",
                "level": "SUCCESS",
                "module": "train",
                "message": "Step 6 | 2m 5s | Loss 0.1 | Throughput 1 tokens/s",
            }
        ),
        "trainer",
    )
    p.feed_console(
        "orchestrator: 14:03:20    INFO Holding batch 6 until the trainer publishes policy v4 (currently v3)"
    )
    p.feed_console("trainer: 14:03:30    INFO Saving checkpoint at step 6")
    p.feed_console("trainer: 14:03:31 SUCCESS Step 7 | soon | Loss 0.1")  # garbled duration
    p.feed_console('trainer: {"timestamp": "cut')  # a JSON line cut in half
    run = p.run
    assert run.source == "console" and run.skipped == 2
    s5, s6 = run.steps[5], run.steps[6]
    assert s5.trainer == {"time/step": 12.3} and s5.orchestrator == {"time/step": 9.8}
    assert s6.trainer == {"time/step": 125.0} and s6.held and s6.saved
    assert 7 not in run.steps


def test_historic_console_line():
    run = parse_run(
        console_lines=[
            "orchestrator: Step 0 | Time: 42.77s | Reward: 0.2938 | Throughput: 3966.9 tokens/s | "
            "Seq. Length: 328.5 tokens/sample | Async Level: 0 | Max. Off-Policy Level: 0",
            "trainer: 12:00:01 SUCCESS Step 1 | Time: 7.50s | Loss: 0.0123",
        ]
    )
    assert run.steps[0].orchestrator == {"time/step": 42.77}
    assert run.steps[1].trainer == {"time/step": 7.5}


def test_console_steps_do_not_dilute_metrics_steps():
    run = parse_run(
        [json.dumps({"step": 2, "time/step": 10.0, "time/forward_backward": 8.0})],
        ["trainer: 14:00:00 SUCCESS Step 1 |   99.0s | Loss 0.1"],
    )
    assert [s.step for s in run.ordered()] == [2]
