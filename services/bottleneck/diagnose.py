"""The diagnosis of a breakdown from its evidence (pure computation; used by ``analysis``).

Evidence, strongest first: the trainer's per-component step timings (what dominates the step); the
orchestrator's per-rollout phase timing (``agent/model`` = generation vs ``agent/harness`` = tools and
environment); the inference server's load (vLLM's KV cache usage and running/waiting requests); the GPU
utilisation of the inference and trainer GPUs. A dominant rollout wait is

* LATENCY-BOUND when tools take more of a rollout than generation (the server is then unsaturated: low
  KV cache, ~0 waiting — more GPUs would not help, more rollouts in flight or faster tools would);
* THROUGHPUT-BOUND when generation dominates (high confidence with KV cache > 90 % and requests waiting);
* STALLED when the inference server idles and no tool time explains the wait (a stuck env server, a dead
  inference server: look at the orchestrator).

Confidence: "high" when the rollout timing and the server's load agree, "medium" with one of them,
"low" with neither (console lines, GPU utilisation only).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DOMINANT = 0.40
KV_SATURATED = 0.90
KV_UNSATURATED = 0.50
KV_IDLE = 0.10


@dataclass(frozen=True)
class InferenceLoad:
    """Mean vLLM gauges over the window; None = not measured (no ``inference/*`` keys logged)."""

    kv_cache: float | None = None  # fraction 0-1
    running: float | None = None
    waiting: float | None = None
    samples: int = 0

    @property
    def measured(self) -> bool:
        return self.kv_cache is not None or self.waiting is not None

    @property
    def saturated(self) -> bool:
        return (self.kv_cache or 0.0) > KV_SATURATED and (self.waiting or 0.0) >= 0.5

    @property
    def unsaturated(self) -> bool:
        return (
            self.measured and (self.kv_cache is None or self.kv_cache < KV_UNSATURATED) and (self.waiting or 0.0) < 0.5
        )

    @property
    def idle(self) -> bool:
        return self.unsaturated and (self.kv_cache is None or self.kv_cache < KV_IDLE) and (self.running or 0.0) < 1.0

    def describe(self) -> str:
        parts = []
        if self.kv_cache is not None:
            parts.append(f"KV cache {100 * self.kv_cache:.0f}%")
        if self.running is not None:
            parts.append(f"{self.running:.1f} requests running")
        if self.waiting is not None:
            parts.append(f"{self.waiting:.1f} waiting")
        return "inference server: " + ", ".join(parts) + f" (mean of {self.samples} readings)"

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_cache": None if self.kv_cache is None else round(self.kv_cache, 4),
            "running": None if self.running is None else round(self.running, 2),
            "waiting": None if self.waiting is None else round(self.waiting, 2),
            "samples": self.samples,
        }


def inference_load(gauges: Sequence[dict[str, float]]) -> InferenceLoad:
    def mean(name: str) -> float | None:
        xs = [g[name] for g in gauges if name in g]
        return sum(xs) / len(xs) if xs else None

    return InferenceLoad(mean("kv_cache"), mean("running"), mean("waiting"), len(gauges))


def pct(x: float | None) -> str:
    return "N/A" if x is None else f"{100 * x:.0f}%"


def diagnose(
    shares: dict,
    secs: dict,
    window,
    per_step,
    gpu: Any,
    load: InferenceLoad,
    rollout: dict,
    detailed: bool,
    step_s: float | None,
    orch_s: float | None,
) -> tuple[str, str, list[str]]:
    """(diagnosis, confidence, evidence). ``rollout``: mean per-rollout seconds by kind over the window."""
    ev: list[str] = []
    n = len(window)
    if step_s is not None:
        ev.append(f"{n} steps, {step_s:.1f} s per trainer step on average")
    util = []
    if gpu.inference_util is not None:
        util.append(f"inference GPUs {gpu.inference_util:.0f}%")
    if gpu.trainer_util is not None:
        util.append(f"trainer GPUs {gpu.trainer_util:.0f}%")
    if not util and gpu.all_util is not None:
        util.append(f"all {gpu.gpus} GPUs {gpu.all_util:.0f}%")
    if util:
        ev.append("GPU utilisation: " + ", ".join(util))
    if load.measured:
        ev.append(load.describe())

    if not detailed:
        return _console(window, per_step, ev)

    groups = {
        "rollout": shares.get("wait_for_batch", 0.0),
        "trainer": shares.get("forward_backward", 0.0),
        "io": sum(shares.get(k, 0.0) for k in ("load_data", "save_ckpt", "broadcast_weights")),
    }
    top = max(groups, key=lambda g: groups[g])
    ev.append(
        "trainer waits for batches {} ({:.1f} s), forward/backward {} ({:.1f} s), I/O (load, broadcast, "
        "saves) {}".format(
            pct(groups["rollout"]),
            secs.get("wait_for_batch", 0.0),
            pct(groups["trainer"]),
            secs.get("forward_backward", 0.0),
            pct(groups["io"]),
        )
    )
    if "wait_for_policy" in shares:
        ev.append(
            f"orchestrator holds ready batches {secs['wait_for_policy']:.1f} s per step "
            f"({pct(shares['wait_for_policy'])} of its {orch_s or 0:.1f} s step)"
        )
    if groups[top] < DOMINANT:
        if shares.get("wait_for_policy", 0.0) >= 0.5 and groups["trainer"] >= 0.3:
            ev.append("the orchestrator spends most of its step holding batches for the trainer")
            return "trainer-bound", "high", ev
        return "balanced", "high", ev
    if top == "trainer":
        return "trainer-bound", "high", ev
    if top == "io":
        return "io-bound", "high", ev
    return _rollout_wait(rollout, load, gpu, ev)


def _rollout_wait(rollout: dict, load: InferenceLoad, gpu: Any, ev: list[str]) -> tuple[str, str, list[str]]:
    gen, tools = rollout.get("generation"), rollout.get("tools")
    if gen is not None or tools is not None:
        total = rollout.get("total") or sum(v for k, v in rollout.items() if k in ("generation", "tools", "overhead"))
        parts = [
            f"tools/environment (agent/harness) {'N/A' if tools is None else f'{tools:.1f} s'}",
            f"generation (agent/model) {'N/A' if gen is None else f'{gen:.1f} s'}",
        ]
        if rollout.get("overhead"):
            parts.append(f"setup/scoring {rollout['overhead']:.1f} s")
        ev.append("per rollout: " + ", ".join(parts) + (f" of {total:.1f} s" if total else ""))
        if (tools or 0.0) > (gen or 0.0):
            if load.unsaturated:
                ev.append("the inference server is not saturated: more inference GPUs would not help")
                return "latency-bound", "high", ev
            if load.saturated:
                ev.append("but the inference server is saturated too: tools first, then inference capacity")
                return "latency-bound", "medium", ev
            ev.append("no inference server gauges (inference/agg/*) to confirm the server is unsaturated")
            return "latency-bound", "medium", ev
        if load.idle and (tools or 0.0) < 0.05 * max(total or 0.0, 1e-9):
            ev.append(
                "the inference server idles and no tool time explains the wait: the orchestrator is not sending work"
            )
            return "stalled", "high" if gen is not None else "medium", ev
        if load.saturated:
            ev.append("the inference server is saturated: KV cache nearly full with requests queued")
            return "throughput-bound", "high", ev
        if load.unsaturated:
            ev.append("generation dominates but the server is not saturated: it is under-fed")
            return "throughput-bound", "medium", ev
        ev.append("no inference server gauges (inference/agg/*) to confirm the server is saturated")
        return "throughput-bound", "medium", ev
    if load.measured:
        if load.idle or load.unsaturated:
            ev.append(
                "no rollout timing stats; the inference server is unsaturated while the trainer waits: "
                "tools or a stalled orchestrator (rollout timing would tell them apart)"
            )
            return "latency-bound", "low", ev
        ev.append("no rollout timing stats; the inference server is busy while the trainer waits")
        return "throughput-bound", "low", ev
    idle = gpu.inference_util
    if idle is not None:
        if idle < 50:
            ev.append(f"no rollout timing stats; inference GPUs mostly idle ({idle:.0f}%) while the trainer waits")
            return "latency-bound", "low", ev
        ev.append(f"no rollout timing stats; inference GPUs busy ({idle:.0f}%) while the trainer waits")
        return "throughput-bound", "low", ev
    ev.append("no rollout timing stats and no inference server gauges: generation and tool time cannot be told apart")
    return "throughput-bound", "low", ev


def _console(window, per_step, ev: list[str]) -> tuple[str, str, list[str]]:
    ev.append("console lines only: no per-component timings (metrics.jsonl missing)")
    times = [p.get("step") for p in per_step]
    held = sum(1 for s in window if s.held)
    if held:
        ev.append(f"the orchestrator held {held} of {len(window)} batches for the policy")
    plain = [t for s, t in zip(window, times) if t is not None and not s.saved]
    saved = [t for s, t in zip(window, times) if t is not None and s.saved]
    total = sum(t for t in times if t is not None)
    if saved and plain and total:
        typical = statistics.median(plain)
        excess = sum(max(0.0, t - typical) for t in saved)
        ev.append(
            f"{len(saved)} checkpoint steps took {excess:.1f} s more than a typical {typical:.1f} s step "
            f"({pct(excess / total)} of the time)"
        )
        if excess / total >= 0.25:
            return "io-bound", "low", ev
    if held * 2 >= len(window) and held:
        return "trainer-bound", "low", ev
    return "balanced", "low", ev
