"""Where each step's time goes, what limits the run, and what to change (pure computation).

The trainer's ``time/step`` is the wall clock of one step. It splits into waiting for a batch (the
rollout pipeline: generation on the inference GPUs + tool/environment execution), loading data,
forward/backward/optimizer, weight broadcast and checkpoint saves; what is left is "other". When the
orchestrator logs rollout timing stats (``train/agg/.../timing/<phase>/mean``) the wait is split
between generation and tools by their per-rollout ratio. The orchestrator's ``time/wait_for_policy``
(ready batches held until the trainer publishes a policy) is on the orchestrator's own clock and is
shown against its ``time/step``.

Diagnosis over the last K steps: the largest group (rollout wait, trainer compute, I/O) must hold at
least ``DOMINANT`` of the step, otherwise the run is "balanced". A dominant rollout wait is
latency-bound when tools take more of a rollout than generation (or, without rollout timing, when the
inference GPUs idle), else throughput-bound. Recommendations come from ``rules.toml`` (beside this module).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from services.bottleneck.rules import Recommendation, load_rules, recommend
from services.monitor.metrics import MetricsParser, ParsedRun, StepTiming

DIAGNOSES = ("latency-bound", "throughput-bound", "trainer-bound", "io-bound", "balanced")
DOMINANT = 0.40
DEFAULT_STEPS = 20

# name, label, parent, timeline
COMPONENTS: tuple[tuple[str, str, str | None, str], ...] = (
    ("wait_for_batch", "Trainer waiting for a batch", None, "trainer"),
    ("inference", "Generating rollouts (inference)", "wait_for_batch", "trainer"),
    ("tools", "Tool / environment execution", "wait_for_batch", "trainer"),
    ("load_data", "Loading data", None, "trainer"),
    ("forward_backward", "Forward / backward / optimizer", None, "trainer"),
    ("broadcast_weights", "Weight broadcast to inference", None, "trainer"),
    ("save_ckpt", "Checkpoint saves", None, "trainer"),
    ("other", "Other", None, "trainer"),
    ("wait_for_policy", "Orchestrator holding a batch for the policy", None, "orchestrator"),
)
LABELS = {name: label for name, label, _p, _t in COMPONENTS}
_TRAINER_PARTS = ("wait_for_batch", "load_data", "forward_backward", "broadcast_weights", "save_ckpt")


@dataclass(frozen=True)
class Component:
    name: str
    label: str
    seconds: float  # mean per step over the window (saves are amortised over all steps)
    share: float  # of the trainer's step (orchestrator timeline: of the orchestrator's step)
    parent: str | None = None  # "wait_for_batch" for its inference/tools split
    timeline: str = "trainer"
    series: tuple[float | None, ...] = ()  # seconds per step, oldest first (the trend)


@dataclass(frozen=True)
class GpuEvidence:
    inference_util: float | None = None  # mean util % of GPUs running vLLM/inference
    trainer_util: float | None = None  # of GPUs running the trainer
    all_util: float | None = None
    gpus: int = 0
    samples: int = 0


@dataclass(frozen=True)
class Breakdown:
    steps: int
    first_step: int | None
    last_step: int | None
    step_seconds: float | None  # mean trainer step
    components: tuple[Component, ...]
    diagnosis: str
    confidence: str  # "high" (per-component timings) | "low" (console only / partial)
    evidence: tuple[str, ...]
    recommendations: tuple[Recommendation, ...]
    source: str  # "metrics.jsonl" | "console" | "none"
    skipped: int = 0
    trend: str = ""
    gpu: GpuEvidence = field(default_factory=GpuEvidence)
    step_series: tuple[float | None, ...] = ()

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The ``profile --json`` document (contract: steps, components[name, seconds, share],
        diagnosis, recommendations; the other fields are additions)."""
        return {
            "steps": self.steps,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "step_seconds": _r(self.step_seconds),
            "components": [
                {"name": c.name, "label": c.label, "seconds": _r(c.seconds), "share": _r(c.share, 4),
                 "parent": c.parent, "timeline": c.timeline}
                for c in self.components
            ],
            "diagnosis": self.diagnosis,
            "confidence": self.confidence,
            "evidence": list(self.evidence),
            "recommendations": [r.text for r in self.recommendations],
            "recommendation_ids": [r.id for r in self.recommendations],
            "gpu": {"inference_util": _r(self.gpu.inference_util, 1), "trainer_util": _r(self.gpu.trainer_util, 1),
                    "all_util": _r(self.gpu.all_util, 1), "gpus": self.gpu.gpus},
            "trend": self.trend,
            "source": self.source,
            "skipped_lines": self.skipped,
        }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------------------------- analysis
def analyze(run: ParsedRun, last: int = DEFAULT_STEPS, gpu: GpuEvidence | None = None,
            rules: Sequence[dict] | None = None) -> Breakdown:
    """The breakdown of the last ``last`` steps of a parsed run."""
    gpu = gpu or GpuEvidence()
    window = [s for s in run.ordered() if _trainer_step(s) is not None or s.orchestrator]
    window = window[-last:] if last > 0 else window
    if not window:
        return Breakdown(0, None, None, None, (), "balanced", "low",
                         ("no step timings logged yet (metrics.jsonl or trainer/orchestrator console lines)",),
                         (), run.source, run.skipped, gpu=gpu)
    per_step = [_split(s) for s in window]
    n = len(window)
    steps_t = [p.get("step") for p in per_step]
    known_t = [t for t in steps_t if t is not None]
    step_s = sum(known_t) / len(known_t) if known_t else None
    orch_steps = [s.orchestrator.get("time/step") for s in window if s.orchestrator.get("time/step") is not None]
    orch_s = sum(orch_steps) / len(orch_steps) if orch_steps else None
    detailed = any(any(k in p for k in _TRAINER_PARTS) for p in per_step)

    components: list[Component] = []
    for name, label, parent, timeline in COMPONENTS:
        series = tuple(p.get(name) for p in per_step)
        values = [v for v in series if v is not None]
        if not values or (name == "other" and not detailed):
            continue
        mean = sum(values) / n  # a missing value counts as 0: e.g. save_ckpt only on save steps
        base = orch_s if timeline == "orchestrator" else step_s
        share = mean / base if base else 0.0
        components.append(Component(name, label, mean, share, parent, timeline, series))
    if not detailed and step_s is not None and not any(c.name == "save_ckpt" for c in components):
        components.insert(0, Component("step", "Whole step (console lines only)", step_s, 1.0,
                                       series=tuple(steps_t)))

    saves = [p["save_ckpt"] for p in per_step if p.get("save_ckpt")]
    shares = {c.name: c.share for c in components}
    secs = {c.name: c.seconds for c in components}
    diagnosis, confidence, evidence = _diagnose(shares, secs, window, per_step, gpu, detailed, step_s, orch_s)
    trend = _trend(steps_t)
    breakdown = Breakdown(
        steps=n, first_step=window[0].step, last_step=window[-1].step, step_seconds=step_s,
        components=tuple(components), diagnosis=diagnosis, confidence=confidence, evidence=tuple(evidence),
        recommendations=(), source=run.source, skipped=run.skipped, trend=trend, gpu=gpu,
        step_series=tuple(steps_t),
    )
    variables = _variables(breakdown, window, saves, per_step)
    recs = recommend(diagnosis, variables, rules if rules is not None else load_rules())
    return _replace_recs(breakdown, recs)


def _replace_recs(b: Breakdown, recs: tuple[Recommendation, ...]) -> Breakdown:
    from dataclasses import replace

    return replace(b, recommendations=recs)


def _trainer_step(s: StepTiming) -> float | None:
    t = s.trainer.get("time/step")
    if t is None:
        parts = [s.trainer[f"time/{p}"] for p in _TRAINER_PARTS if f"time/{p}" in s.trainer]
        t = sum(parts) if parts else None
    return t


def _split(s: StepTiming) -> dict[str, float]:
    """One step's seconds per component (only those known)."""
    out: dict[str, float] = {}
    tr = s.trainer
    for part in _TRAINER_PARTS:
        if f"time/{part}" in tr:
            out[part] = tr[f"time/{part}"]
    step = _trainer_step(s)
    if step is not None:
        out["step"] = step
        known = sum(out.get(p, 0.0) for p in _TRAINER_PARTS)
        if any(p in out for p in _TRAINER_PARTS):
            out["other"] = max(0.0, step - known)
    wait = out.get("wait_for_batch")
    gen, tools = s.rollout.get("generation"), s.rollout.get("tools")
    if wait is not None and (gen or tools):
        total = (gen or 0.0) + (tools or 0.0)
        out["inference"] = wait * (gen or 0.0) / total
        out["tools"] = wait * (tools or 0.0) / total
    if "time/wait_for_policy" in s.orchestrator:
        out["wait_for_policy"] = s.orchestrator["time/wait_for_policy"]
    if "time/save_ckpt" in s.orchestrator and "save_ckpt" not in out:
        pass  # the orchestrator's save (progress.pt) is small and on its own clock
    return out


def _pct(x: float | None) -> str:
    return "N/A" if x is None else f"{100 * x:.0f}%"


def _diagnose(shares, secs, window, per_step, gpu: GpuEvidence, detailed: bool,
              step_s: float | None, orch_s: float | None) -> tuple[str, str, list[str]]:
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

    if not detailed:
        return _diagnose_console(window, per_step, step_s, ev)

    groups = {
        "rollout": shares.get("wait_for_batch", 0.0),
        "trainer": shares.get("forward_backward", 0.0),
        "io": sum(shares.get(k, 0.0) for k in ("load_data", "save_ckpt", "broadcast_weights")),
    }
    top = max(groups, key=lambda g: groups[g])
    ev.append("trainer waits for batches {} ({:.1f} s), forward/backward {} ({:.1f} s), I/O (load, broadcast, "
              "saves) {}".format(_pct(groups["rollout"]), secs.get("wait_for_batch", 0.0), _pct(groups["trainer"]),
                                 secs.get("forward_backward", 0.0), _pct(groups["io"])))
    if "wait_for_policy" in shares:
        ev.append(f"orchestrator holds ready batches {secs['wait_for_policy']:.1f} s per step "
                  f"({_pct(shares['wait_for_policy'])} of its {orch_s or 0:.1f} s step)")
    if groups[top] < DOMINANT:
        if shares.get("wait_for_policy", 0.0) >= 0.5 and groups["trainer"] >= 0.3:
            ev.append("the orchestrator spends most of its step holding batches for the trainer")
            return "trainer-bound", "high", ev
        return "balanced", "high", ev
    if top == "trainer":
        return "trainer-bound", "high", ev
    if top == "io":
        return "io-bound", "high", ev
    inf, tools = shares.get("inference"), shares.get("tools")
    if inf is not None and tools is not None:
        ev.append(f"of that wait, tools/environment {_pct(tools)} ({secs['tools']:.1f} s) vs generation "
                  f"{_pct(inf)} ({secs['inference']:.1f} s)")
        if tools > inf:
            if gpu.inference_util is not None and gpu.inference_util < 50:
                ev.append(f"inference GPUs idle between requests ({gpu.inference_util:.0f}% util)")
            return "latency-bound", "high", ev
        return "throughput-bound", "high", ev
    idle = gpu.inference_util if gpu.inference_util is not None else None
    if idle is not None:
        if idle < 50:
            ev.append(f"no rollout timing stats; inference GPUs mostly idle ({idle:.0f}%) while the trainer waits")
            return "latency-bound", "low", ev
        ev.append(f"no rollout timing stats; inference GPUs busy ({idle:.0f}%) while the trainer waits")
        return "throughput-bound", "low", ev
    ev.append("no rollout timing stats and no per-role GPU evidence: generation and tool time cannot be told apart")
    return "throughput-bound", "low", ev


def _diagnose_console(window, per_step, step_s, ev: list[str]) -> tuple[str, str, list[str]]:
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
        ev.append(f"{len(saved)} checkpoint steps took {excess:.1f} s more than a typical {typical:.1f} s step "
                  f"({_pct(excess / total)} of the time)")
        if excess / total >= 0.25:
            return "io-bound", "low", ev
    if held * 2 >= len(window) and held:
        return "trainer-bound", "low", ev
    return "balanced", "low", ev


def _trend(series: Sequence[float | None]) -> str:
    vals = [v for v in series if v is not None]
    if len(vals) < 4:
        return ""
    half = len(vals) // 2
    a, b = sum(vals[:half]) / half, sum(vals[half:]) / (len(vals) - half)
    if not a:
        return ""
    change = (b - a) / a
    if abs(change) < 0.1:
        return f"step time steady ({b:.1f} s)"
    return f"step time {'rising' if change > 0 else 'falling'} {abs(change) * 100:.0f}% ({a:.1f} s -> {b:.1f} s)"


# ---------------------------------------------------------------------------------------- GPUs
_INFER_CMD = re.compile(r"vllm|inference", re.I)
_TRAIN_CMD = re.compile(r"torchrun|trainer|prime_rl\.trainer|\btrain\b", re.I)


def gpu_evidence(samples: Iterable[Any], last: int = 60) -> GpuEvidence:
    """Mean GPU utilisation over the last samples (``services.models.Sample``), split into inference
    and trainer GPUs by the command of the processes on them (when the probe sees processes)."""
    recent = list(samples)[-last:]
    role: dict[int, str] = {}
    for s in recent:
        for p in getattr(s, "procs", ()):
            if p.gpu is None:
                continue
            if _INFER_CMD.search(p.cmd or ""):
                role[p.gpu] = "inference"
            elif _TRAIN_CMD.search(p.cmd or ""):
                role.setdefault(p.gpu, "trainer")
    by: dict[str, list[float]] = {"inference": [], "trainer": [], "all": []}
    indices: set[int] = set()
    used = 0
    for s in recent:
        gpus = [g for g in getattr(s, "gpus", ()) if g.util is not None]
        if gpus:
            used += 1
        for g in gpus:
            indices.add(g.index)
            by["all"].append(g.util)
            if g.index in role:
                by[role[g.index]].append(g.util)

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return GpuEvidence(mean(by["inference"]), mean(by["trainer"]), mean(by["all"]), len(indices), used)


def _variables(b: Breakdown, window, saves, per_step) -> dict[str, Any]:
    v: dict[str, Any] = {"step_s": b.step_seconds, "steps": b.steps, "diagnosis": b.diagnosis}
    for c in b.components:
        v[f"{c.name}_s"] = c.seconds
        v[f"{c.name}_share"] = c.share
        v[f"{c.name}_pct"] = _pct(c.share)
    top = max((c for c in b.components if c.parent is None and c.timeline == "trainer"),
              key=lambda c: c.share, default=None)
    if top is not None:
        v["top_label"], v["top_pct"] = top.label.lower(), _pct(top.share)
    gens = [s.rollout["generation"] for s in window if "generation" in s.rollout]
    tools = [s.rollout["tools"] for s in window if "tools" in s.rollout]
    v["generation_per_rollout_s"] = sum(gens) / len(gens) if gens else None
    v["tools_per_rollout_s"] = sum(tools) / len(tools) if tools else None
    if saves:
        v["saves"] = len(saves)
        v["save_each_s"] = sum(saves) / len(saves)
        v["interval_factor"] = max(2, math.ceil((v.get("save_ckpt_share") or 0) / 0.05))
    for key, val in (("inference_util", b.gpu.inference_util), ("trainer_util", b.gpu.trainer_util)):
        if val is not None:
            v[key], v[f"{key}_n"] = f"{val:.0f}%", val
    if "inference_util" not in v and b.gpu.all_util is not None:
        v["inference_util"] = f"{b.gpu.all_util:.0f}% (all GPUs)"
    v["inference_util_clause"] = (f" while inference GPUs average {v['inference_util']} util"
                                  if "inference_util" in v else "")
    return v


# ---------------------------------------------------------------------------------------- entry points
def analyze_lines(metrics_lines: Iterable[str] = (), console_lines: Iterable[str] = (), last: int = DEFAULT_STEPS,
                  samples: Iterable[Any] = (), since_step: int | None = None,
                  until_step: int | None = None) -> Breakdown:
    """``since_step`` < step <= ``until_step``: only those steps count (a profile of given steps)."""
    parser = MetricsParser()
    for line in metrics_lines:
        parser.feed_metrics(line)
    for line in console_lines:
        parser.feed_console(line)
    if since_step is not None or until_step is not None:
        lo = float("-inf") if since_step is None else since_step
        hi = float("inf") if until_step is None else until_step
        parser.run.steps = {n: s for n, s in parser.run.steps.items() if lo < n <= hi}
    return analyze(parser.run, last, gpu_evidence(samples))


def analyze_snapshot(snapshot: Any, last: int = DEFAULT_STEPS, since_step: int | None = None,
                     until_step: int | None = None) -> Breakdown:
    """The breakdown of one pod's :class:`~services.models.PodSnapshot`: its metrics.jsonl history, the
    console lines in its sample history (used when there are no metrics), and its GPU samples."""
    metrics = getattr(snapshot, "metrics", ())
    console: list[str] = []
    if not metrics:
        for s in snapshot.history:
            console.extend(s.log)
    return analyze_lines(metrics, console, last, snapshot.history, since_step, until_step)
