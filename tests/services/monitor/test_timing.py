"""Timing a run's evidence by its own clock (services.monitor.progress.time_lines / time_records) and judging
one look at a run dir (HealthTracker.feed_tails) with an injected clock: lines are timed by their loguru
stamps anchored to the file's mtime (midnight included), the trainer's steps are the run's progress, an
error is cleared only by its own component's or the trainer's later step, a run found stalled at start
alerts at once, and "$ so far" counts from the pod's billing start when it is known."""

from __future__ import annotations

import json
import math

import pytest

from services.models import HostSample, Sample
from services.monitor.health import HealthSettings, HealthTracker
from services.monitor.progress import RunTracker, time_lines, time_records

T0 = 1_700_000_000.0
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def trainer(n: int, stamp: str, seconds: str = "10.0s") -> str:
    return f"{stamp} SUCCESS Step {n} | {seconds:>7} | Loss 0.{n:04d} | Throughput 25341 tokens/s | MFU 31.2%"


def orch(n: int, stamp: str) -> str:
    return f"{stamp} SUCCESS Step {n} |    9.8s | Reward 0.4123 | Trainable 96/128 (75.0%)"


def holding(stamp: str) -> str:
    return f"{stamp}    INFO Holding batch 10 until the trainer publishes policy v9 (currently v8)"


def tails(now: float, logs: dict[str, tuple[float, list[str]]], **extra) -> dict:
    return {
        "now": now,
        "exists": True,
        "logs": [{"stem": stem, "mtime": mtime, "lines": lines} for stem, (mtime, lines) in logs.items()],
        **extra,
    }


ONE_LOOK = HealthSettings(log_alert_ttl_s=math.inf)  # as `status` judges: whatever the tails hold


def look(t: dict, now: float, **kw) -> HealthTracker:
    h = HealthTracker(ONE_LOOK, **kw)
    h.feed_tails(t)
    h.observe(Sample(t=now, gpus=(), host=HostSample()), now)
    return h


# ------------------------------------------------------------------------------------ line timing
def test_lines_are_timed_by_their_stamps_anchored_to_the_mtime() -> None:
    lines = [
        trainer(1, "14:00:00"),
        trainer(2, "14:10:00"),
        "Traceback (most recent call last):",
        "  File x.py, line 3",
        trainer(3, "14:20:00"),
    ]
    t = time_lines(lines, T0)
    assert t[4] == T0 and t[1] == pytest.approx(T0 - 600, abs=1e-2) and t[0] == pytest.approx(T0 - 1200, abs=1e-2)
    assert t[1] < t[2] < t[3] < t[4]  # the traceback belongs to step 2's time, in file order
    assert t[2] == pytest.approx(T0 - 600, abs=1e-2)


def test_midnight_and_json_mode_and_lines_without_stamps() -> None:
    t = time_lines([trainer(1, "23:59:50"), trainer(2, "00:00:10")], T0)
    assert t[0] == pytest.approx(T0 - 20, abs=1e-3) and t[1] == T0  # 20 s across midnight, not 24 h
    # A stamp later than the next line's is a clock that stepped back (a restarted run's simulated or reset
    # clock, an NTP step), not 23 h between two lines: the demo pod's restarted run once read "no new step for
    # 23 h 59 min" seconds after it began. Only a step back of over 12 h is a day (midnight) between them.
    t = time_lines([trainer(40, "14:01:20"), trainer(1, "14:00:02")], T0)
    assert t[0] == pytest.approx(T0, abs=1e-3) and t[1] == T0
    t = time_lines([trainer(1, "13:00:00"), trainer(2, "12:00:00")], T0)
    assert t[0] == pytest.approx(T0, abs=1e-3)
    js = [
        json.dumps({"timestamp": "2023-11-14T22:03:20+00:00", "level": "SUCCESS", "message": "Step 3 | 1.0s"}),
        json.dumps({"timestamp": "2023-11-14T22:13:20+00:00", "level": "INFO", "message": "x"}),
    ]
    assert time_lines(js, T0 + 3600) == [T0 - 600, T0]  # absolute: their own time (T0 is 22:13:20 UTC)
    assert time_lines(js, T0 - 60)[1] == T0 - 60  # never later than the file's mtime
    plain = time_lines(["step 1 loss 0.5", "step 2 loss 0.4"], T0)  # a runbook script: no stamps
    assert plain == [T0 - 1e-3, T0]
    assert time_lines([], T0) == []


def test_metrics_records_by_their_own_time_field() -> None:
    recs = [json.dumps({"step": 1, "time": 100.0}), json.dumps({"step": 2, "time": 160.0}), "garbled{"]
    t = time_records(recs, T0)
    assert t[0] == T0 - 60 and t[1] == T0 and t[2] == T0
    assert time_records(["{}", "{}"], T0) == [T0 - 1e-3, T0]


# ------------------------------------------------------------------------------------ one look
def test_a_hung_trainer_behind_a_busy_orchestrator() -> None:
    now = T0 + 7200
    t = tails(
        now,
        {
            "trainer": (T0, [trainer(7, "12:00:00"), trainer(8, "12:00:10"), OOM]),
            "orchestrator": (
                now,
                [orch(9, "12:00:12")] + [holding(f"{12 + m // 60:02d}:{m % 60:02d}:00") for m in range(2, 122, 2)],
            ),
        },
    )
    h = look(t, now)
    assert h.progress.step == 8 and h.progress.last_step_at == pytest.approx(T0, abs=1e-2)
    assert {"no-progress", "log:cuda-oom"} <= {a.id for a in h.alerts}


def test_an_error_is_cleared_by_a_later_step_of_its_own_component_or_the_trainer() -> None:
    now = T0 + 60
    # an orchestrator error, then the trainer moved on: cleared
    h = look(
        tails(
            now,
            {
                "orchestrator": (T0, [orch(1, "12:00:00"), "Traceback (most recent call last):"]),
                "trainer": (T0 + 30, [trainer(1, "12:00:05"), trainer(2, "12:00:30")]),
            },
        ),
        now,
    )
    assert "log:traceback" not in {a.id for a in h.alerts}
    # a trainer OOM, then orchestrator steps: still there
    h = look(
        tails(
            now,
            {
                "trainer": (T0, [trainer(1, "12:00:00"), OOM]),
                "orchestrator": (T0 + 30, [orch(2, "12:00:10"), orch(3, "12:00:30")]),
            },
        ),
        now,
    )
    assert "log:cuda-oom" in {a.id for a in h.alerts}
    # a trainer OOM, then more trainer steps: the run got past it
    h = look(tails(now, {"trainer": (T0, [trainer(1, "12:00:00"), OOM, trainer(2, "12:00:20")])}), now)
    assert "log:cuda-oom" not in {a.id for a in h.alerts}


def test_a_run_found_stalled_alerts_at_once_and_a_fresh_one_does_not() -> None:
    lines = [trainer(n, f"12:{n:02d}:00", "1m 0s") for n in range(1, 9)]
    stale = look(tails(T0 + 7200, {"trainer": (T0, lines)}), T0 + 7200)
    assert "no-progress" in {a.id for a in stale.alerts}
    fresh = look(tails(T0 + 30, {"trainer": (T0, lines)}), T0 + 30)
    assert "no-progress" not in {a.id for a in fresh.alerts}
    # the live monitor seeds with the same look, then the probe's re-read metrics records (old steps)
    # do not count as new progress
    seeded = HealthTracker(HealthSettings())
    seeded.feed_tails(tails(T0 + 7200, {"trainer": (T0, lines)}))
    old = tuple(json.dumps({"step": n, "time": n * 60.0, "loss/mean": 0.1}) for n in range(1, 9))
    seeded.observe(Sample(t=T0 + 7200, gpus=(), host=HostSample(), metrics=old))
    assert seeded.progress.last_step_at == pytest.approx(T0, abs=1e-2)
    assert "no-progress" in {a.id for a in seeded.alerts}


def test_a_console_only_run_gone_silent_before_its_first_step_in_view() -> None:
    quiet = look(tails(T0 + 3600, {"trainer": (T0, ["12:00:00    INFO Loading model Qwen/Qwen3-0.6B"])}), T0 + 3600)
    assert "no-progress" in {a.id for a in quiet.alerts}  # no first step an hour after its logs started


def test_metrics_fill_in_when_no_log_has_steps() -> None:
    recs = [json.dumps({"step": n, "time": 100.0 * n, "loss/mean": 0.5, "time/step": 100.0}) for n in range(1, 6)]
    h = look({"now": T0 + 7200, "exists": True, "logs": [], "metrics.jsonl": {"mtime": T0, "lines": recs}}, T0 + 7200)
    assert h.progress.step == 5 and h.progress.last_step_at == T0
    assert "no-progress" in {a.id for a in h.alerts}


# ------------------------------------------------------------------------------------ $ so far
def test_cost_so_far_counts_from_the_billing_start_when_known() -> None:
    r = RunTracker(price_per_hr=36.0)
    for n in range(1, 5):
        r.feed_log("trainer: " + trainer(n, "12:00:00", "1m 0s"), T0 + 60 * n)
    assert r.progress().cost_so_far == pytest.approx(36.0 * 4 * 60 / 3600)  # steps x step time: an estimate
    assert r.progress().cost_basis == "est. from the run's steps"
    r.billed_since, r.billed_basis, r.now = T0 - 3600, "since rented", T0 + 240
    r._view = None
    p = r.progress()
    assert p.cost_so_far == pytest.approx(36.0 * (3600 + 240) / 3600) and p.cost_basis == "since rented"
    r.now = T0 + 3600 - 3600 + 240 + 100  # the bill grows with the pod's clock, without new steps
    assert r.progress().cost_so_far == pytest.approx(36.0 * (3600 + 340) / 3600)
    h = HealthTracker(HealthSettings(), price_per_hr=36.0)
    h.set_billing(T0 - 7200, "since the pod started")
    h.feed_log("trainer: " + trainer(1, "12:00:00"), T0)
    h.observe(Sample(t=T0, gpus=(), host=HostSample()))
    assert h.progress.cost_so_far == pytest.approx(72.0) and h.progress.cost_basis == "since the pod started"
