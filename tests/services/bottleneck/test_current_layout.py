"""The breakdown on metrics.jsonl in the key layout prime-rl writes today (orchestrator/metrics.py:
train/{agg|<env>}/{all|effective}/<agent>/timing/{setup,agent,agent/model,agent/harness,finalize,scoring,
total}/<stat>; inference_metrics.py: inference/{agg|<engine>}/<gauge>/<agg>), generated here line by line."""

from __future__ import annotations

import json
import random

import pytest

from services.bottleneck.analysis import analyze_lines
from services.monitor.metrics import parse_run


def rollout_keys(
    env: str,
    subset: str,
    agent: str,
    *,
    model: float,
    harness: float,
    setup: float = 0.2,
    scoring: float = 0.1,
    finalize: float = 0.05,
) -> dict[str, float]:
    agent_s = model + harness
    phases = {
        "setup": setup,
        "agent": agent_s,
        "agent/model": model,
        "agent/harness": harness,
        "finalize": finalize,
        "scoring": scoring,
        "total": setup + agent_s + finalize + scoring,
    }
    out: dict[str, float] = {}
    for phase, v in phases.items():
        base = f"train/{env}/{subset}/{agent}/timing/{phase}"
        out |= {
            f"{base}/mean": v,
            f"{base}/min": v * 0.5,
            f"{base}/max": v * 2,
            f"{base}/p10": v * 0.6,
            f"{base}/p90": v * 1.6,
        }
    out[f"train/{env}/{subset}/{agent}/reward/mean"] = 0.4
    return out


def gauges(scope: str, *, kv: float, running: float, waiting: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, v in (("kv_cache_usage_perc", kv), ("num_requests_running", running), ("num_requests_waiting", waiting)):
        out |= {
            f"inference/{scope}/{name}/mean": v,
            f"inference/{scope}/{name}/min": v * 0.5,
            f"inference/{scope}/{name}/max": min(1.0, v * 1.5) if "kv" in name else v * 1.5,
        }
    return out


def run_lines(
    *,
    wait: float,
    fb: float,
    model: float,
    harness: float,
    kv: float | None,
    running: float,
    waiting: float,
    hold: float = 0.3,
    env: str = "wiki-search",
    agent: str = "searcher",
    steps: int = 20,
    gauges_in: str = "periodic",
    seed: int = 0,
) -> list[str]:
    r = random.Random(seed)
    j = lambda x: x * r.uniform(0.95, 1.05)  # noqa: E731
    lines = []
    for step in range(1, steps + 1):
        tr = {
            "time/wait_for_batch": j(wait),
            "time/load_data": j(0.3),
            "time/forward_backward": j(fb),
            "time/broadcast_weights": j(1.0),
            "time/save_ckpt": 0.0,
        }
        tr["time/step"] = sum(tr.values()) + 0.2
        tr |= {"loss/mean": 0.1, "perf/mfu": 30.0}
        orch = {
            "time/step": tr["time/step"],
            "time/pack": 0.05,
            "time/save_ckpt": 0.0,
            "time/wait_for_policy": j(hold),
            "progress/rollouts": 128,
        }
        for e in ("agg", env):
            for subset in ("all", "effective"):
                orch |= rollout_keys(e, subset, agent, model=j(model), harness=j(harness))
        if kv is not None and gauges_in == "step":
            orch |= gauges("agg", kv=kv, running=running, waiting=waiting)
        lines.append(json.dumps({"step": step, "time": 100.0 + step, **orch}))
        lines.append(json.dumps({"step": step, "time": 100.5 + step, **tr}))
        if kv is not None and gauges_in == "periodic":
            lines.append(
                json.dumps(
                    {
                        "_timestamp": 100.7 + step,
                        **gauges("agg", kv=kv, running=running, waiting=waiting),
                        **gauges("server0.0", kv=kv, running=running, waiting=waiting),
                    }
                )
            )
    return lines


LATENCY = dict(wait=60.0, fb=8.0, model=1.5, harness=12.0, kv=0.03, running=2.0, waiting=0.0)
THROUGHPUT = dict(wait=50.0, fb=8.0, model=25.0, harness=0.4, kv=0.96, running=240.0, waiting=35.0)
TRAINER = dict(wait=1.0, fb=40.0, model=3.0, harness=0.5, kv=0.4, running=30.0, waiting=0.0, hold=25.0)


def top_share_sum(b) -> float:
    return sum(c.share for c in b.components if c.parent is None and c.timeline == "trainer")


# ---------------------------------------------------------------------------------------- parsing
def test_current_layout_parses_phases_per_agent_env_and_subset():
    lines = run_lines(**LATENCY, steps=2)
    run = parse_run(lines)
    st = run.steps[1]
    assert st.rollout["tools"] == pytest.approx(12.0, rel=0.06)  # agent/harness
    assert st.rollout["generation"] == pytest.approx(1.5, rel=0.06)  # agent/model
    assert {"setup", "scoring", "finalize", "total", "agent"} <= st.rollout.keys()
    assert st.rollout_envs["wiki-search"]["tools"] == pytest.approx(12.0, rel=0.06)
    assert run.gauges[-1] == {"kv_cache": 0.03, "running": 2.0, "waiting": 0.0}


def test_only_effective_subset_and_several_agents_are_averaged():
    keys = {f"train/agg/effective/{a}/timing/agent/harness/mean": v for a, v in (("solver", 4.0), ("judge", 2.0))}
    keys["train/agg/effective/solver/timing/agent/model/mean"] = 1.0
    run = parse_run([json.dumps({"step": 1, "time/wait_for_policy": 0.0, **keys})])
    assert run.steps[1].rollout == {"tools": 3.0, "generation": 1.0}


def test_missing_phases_and_gauges_are_not_measured_never_zero():
    lines = [
        json.dumps({"step": 1, "time/wait_for_policy": 0.1, "train/agg/all/a/timing/agent/model/mean": 2.0}),
        json.dumps({"step": 1, "time/step": 10.0, "time/wait_for_batch": 8.0, "time/forward_backward": 1.5}),
    ]
    run = parse_run(lines)
    assert run.steps[1].rollout == {"generation": 2.0} and run.gauges == [] and run.steps[1].inference == {}
    doc = analyze_lines(lines).to_json()
    assert doc["inference"] == {"kv_cache": None, "running": None, "waiting": None, "samples": 0}
    assert doc["rollout"]["tools_s"] is None and doc["rollout"]["generation_s"] == 2.0


def test_older_generations_still_work():
    old = {
        "step": 1,
        "time/wait_for_policy": 0.1,
        "train/agg/all/timing/agent/model/mean": 2.0,
        "train/agg/all/solver/timing/tool_ms/mean": 13000,
        "inference/gpu_cache_usage_perc": 55.0,
    }
    run = parse_run([json.dumps(old)])
    assert run.steps[1].rollout == {"generation": 2.0, "tools": 13.0}
    assert run.steps[1].inference == {"kv_cache": 0.55}


# ---------------------------------------------------------------------------------------- diagnosis
def test_harness_dominated_with_idle_inference_is_latency_bound_with_tools_named():
    b = analyze_lines(run_lines(**LATENCY))
    assert b.diagnosis == "latency-bound" and b.confidence == "high"
    kids = [c for c in b.components if c.parent == "wait_for_batch"]
    assert max(kids, key=lambda c: c.share).name == "tools"
    assert top_share_sum(b) == pytest.approx(1.0)
    text = " ".join(b.evidence)
    assert "tools/environment (agent/harness)" in text and "KV cache 3%" in text and "0.0 waiting" in text
    rec = b.recommendations[0]
    assert rec.id == "local-executor" and "12.0 s" in rec.text  # the measured harness time per rollout
    change = next(r.change for r in b.recommendations if r.change is not None)
    assert change.key == "orchestrator.concurrency.max_inflight" and change.factor == pytest.approx(8.0)


def test_generation_dominated_saturated_inference_is_throughput_bound():
    b = analyze_lines(run_lines(**THROUGHPUT))
    assert (b.diagnosis, b.confidence) == ("throughput-bound", "high")
    assert top_share_sum(b) == pytest.approx(1.0)
    assert b.component("inference").share > b.component("tools").share
    assert any("KV cache 96%" in e and "35.0 waiting" in e for e in b.evidence)
    change = b.recommendations[0].change
    assert b.recommendations[0].id == "more-inference-gpus"
    assert change.key == "deployment.num_infer_gpus" and change.factor == pytest.approx(275 / 240, rel=0.01)
    assert "96%" in b.recommendations[0].text and "35" in b.recommendations[0].text


def test_forward_backward_dominated_is_trainer_bound():
    b = analyze_lines(run_lines(**TRAINER))
    assert (b.diagnosis, b.confidence) == ("trainer-bound", "high")
    assert top_share_sum(b) == pytest.approx(1.0)
    rec = b.recommendations[0]
    assert rec.id == "trainer-gpus" and rec.change.key == "deployment.num_train_gpus" and rec.change.factor > 1


def test_idle_inference_without_harness_time_points_at_the_orchestrator():
    b = analyze_lines(run_lines(wait=60.0, fb=8.0, model=0.3, harness=0.0, kv=0.01, running=0.0, waiting=0.0))
    assert b.diagnosis == "stalled"
    assert b.recommendations[0].id == "orchestrator-stalled" and "env server" in b.recommendations[0].text


def test_gauges_in_the_step_record_count_too():
    b = analyze_lines(run_lines(**THROUGHPUT, gauges_in="step"))
    assert b.diagnosis == "throughput-bound" and b.inference.waiting == pytest.approx(35.0)


def test_without_gauges_the_confidence_says_what_is_missing():
    b = analyze_lines(run_lines(**{**LATENCY, "kv": None}))
    assert (b.diagnosis, b.confidence) == ("latency-bound", "medium")
    assert any("no inference server gauges" in e for e in b.evidence)
