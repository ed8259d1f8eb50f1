"""Where each step's time goes, what limits the run, and what to change (pure computation).

The trainer's ``time/step`` is the wall clock of one step. It splits into waiting for a batch (the
rollout pipeline: generation on the inference GPUs + tool/environment execution), loading data,
forward/backward/optimizer, weight broadcast and checkpoint saves; what is left is "other". When the
orchestrator logs rollout timing stats (``train/agg/.../timing/<phase>/mean``) the wait is split
between generation and tools by their per-rollout ratio. The orchestrator's ``time/wait_for_policy``
(ready batches held until the trainer publishes a policy) is on the orchestrator's own clock and is
shown against its ``time/step``.

Diagnosis over the last K steps: the largest group (rollout wait, trainer compute, I/O) must hold at
least ``diagnose.DOMINANT`` of the step, otherwise the run is "balanced". A dominant rollout wait is
latency-bound when tools take more of a rollout than generation (or, without rollout timing, when the
inference GPUs idle), else throughput-bound. Recommendations come from ``rules.toml`` (beside this module).

When the run's traces.jsonl timings are known (the probe's per-trace records), the tool time per env is
summarised as p50/p95/max over the window's steps (``tail.py``); a slow tail is a finding of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.bottleneck.diagnose import InferenceLoad, diagnose, inference_load, pct as _pct
from services.bottleneck.rules import Recommendation, load_rules, recommend
from services.bottleneck.tail import ToolTail, tail_variables, tool_tails
from services.models import PodSnapshot, Sample
from services.monitor.metrics import EpisodeTiming, MetricsParser, ParsedRun, StepTiming

DIAGNOSES = ("latency-bound", "throughput-bound", "trainer-bound", "io-bound", "stalled", "balanced")
__all__ = [
    "DIAGNOSES",
    "Breakdown",
    "Component",
    "GpuEvidence",
    "analyze",
    "analyze_lines",
    "analyze_snapshot",
    "gpu_evidence",
]
DEFAULT_STEPS = 20

# name, label, parent, timeline
COMPONENTS: tuple[tuple[str, str, str | None, str], ...] = (
    ("wait_for_batch", "Trainer waiting for a batch", None, "trainer"),
    ("inference", "Generating rollouts (inference)", "wait_for_batch", "trainer"),
    ("tools", "Tool / environment execution", "wait_for_batch", "trainer"),
    ("env_overhead", "Env setup / finalize / scoring", "wait_for_batch", "trainer"),
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
    inference: InferenceLoad = field(default_factory=InferenceLoad)
    rollout: dict[str, float] = field(default_factory=dict)  # mean per-rollout seconds by phase kind
    tool_tail: tuple[ToolTail, ...] = ()  # tool time per env from traces.jsonl, slowest p95 first

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
                {
                    "name": c.name,
                    "label": c.label,
                    "seconds": _r(c.seconds),
                    "share": _r(c.share, 4),
                    "parent": c.parent,
                    "timeline": c.timeline,
                }
                for c in self.components
            ],
            "diagnosis": self.diagnosis,
            "confidence": self.confidence,
            "evidence": list(self.evidence),
            "recommendations": [r.text for r in self.recommendations],
            "recommendation_ids": [r.id for r in self.recommendations],
            "changes": [dict(r.change.to_json(), id=r.id) for r in self.recommendations if r.change is not None],
            "inference": self.inference.to_json(),
            "rollout": {f"{k}_s": _r(self.rollout.get(k)) for k in ("generation", "tools", "overhead", "total")},
            "gpu": {
                "inference_util": _r(self.gpu.inference_util, 1),
                "trainer_util": _r(self.gpu.trainer_util, 1),
                "all_util": _r(self.gpu.all_util, 1),
                "gpus": self.gpu.gpus,
            },
            "tool_tail": [t.to_json() for t in self.tool_tail],
            "trend": self.trend,
            "source": self.source,
            "skipped_lines": self.skipped,
        }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# ---------------------------------------------------------------------------------------- analysis
def analyze(
    run: ParsedRun,
    last: int = DEFAULT_STEPS,
    gpu: GpuEvidence | None = None,
    rules: Sequence[dict] | None = None,
    episodes: Iterable[EpisodeTiming] = (),
    until_step: int | None = None,
) -> Breakdown:
    """The breakdown of the last ``last`` steps of a parsed run; ``episodes``: per-trace timings from the
    run's traces.jsonl (those of the window's steps, up to ``until_step`` when given, are summarised)."""
    gpu = gpu or GpuEvidence()
    rules = rules if rules is not None else load_rules()
    window = [s for s in run.ordered() if _trainer_step(s) is not None or s.orchestrator]
    window = window[-last:] if last > 0 else window
    tails = tool_tails(episodes, window[0].step if window else None, until_step)
    if not window:
        empty = Breakdown(
            0,
            None,
            None,
            None,
            (),
            "balanced",
            "low",
            ("no step timings logged yet (metrics.jsonl or trainer/orchestrator console lines)",),
            (),
            run.source,
            run.skipped,
            gpu=gpu,
            tool_tail=tails,
        )
        return _replace_recs(empty, recommend("balanced", tail_variables(tails), rules))
    per_step = [_split(s) for s in window]
    n = len(window)
    steps_t = [p.get("step") for p in per_step]
    known_t = [t for t in steps_t if t is not None]
    step_s = sum(known_t) / len(known_t) if known_t else None
    orch_steps = [t for s in window if (t := s.orchestrator.get("time/step")) is not None]
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
        components.insert(0, Component("step", "Whole step (console lines only)", step_s, 1.0, series=tuple(steps_t)))

    saves = [p["save_ckpt"] for p in per_step if p.get("save_ckpt")]
    shares = {c.name: c.share for c in components}
    secs = {c.name: c.seconds for c in components}
    gauges = [s.inference for s in window if s.inference] or run.gauges[-max(n, 10) :]
    load = inference_load(gauges)
    rollout = _rollout_means(window)
    diagnosis, confidence, evidence = diagnose(
        shares, secs, window, per_step, gpu, load, rollout, detailed, step_s, orch_s
    )
    trend = _trend(steps_t)
    breakdown = Breakdown(
        steps=n,
        first_step=window[0].step,
        last_step=window[-1].step,
        step_seconds=step_s,
        components=tuple(components),
        diagnosis=diagnosis,
        confidence=confidence,
        evidence=tuple(evidence),
        recommendations=(),
        source=run.source,
        skipped=run.skipped,
        trend=trend,
        gpu=gpu,
        step_series=tuple(steps_t),
        inference=load,
        rollout=rollout,
        tool_tail=tails,
    )
    variables = _variables(breakdown, window, saves, per_step) | tail_variables(tails)
    recs = recommend(diagnosis, variables, rules)
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
    parts = _rollout_parts(s.rollout)
    total = sum(parts.values())
    if wait is not None and total > 0:
        for name, kind in (("inference", "generation"), ("tools", "tools"), ("env_overhead", "overhead")):
            if kind in parts:
                out[name] = wait * parts[kind] / total
    if "time/wait_for_policy" in s.orchestrator:
        out["wait_for_policy"] = s.orchestrator["time/wait_for_policy"]
    if "time/save_ckpt" in s.orchestrator and "save_ckpt" not in out:
        pass  # the orchestrator's save (progress.pt) is small and on its own clock
    return out


def _rollout_parts(rollout: dict[str, float]) -> dict[str, float]:
    """One step's per-rollout seconds as generation / tools / overhead (setup, finalize, scoring and the
    agent time neither in the model nor in the harness); only the kinds that were measured."""
    out: dict[str, float] = {k: rollout[k] for k in ("generation", "tools") if k in rollout}
    extra = [rollout[k] for k in ("setup", "finalize", "scoring") if k in rollout]
    if "agent" in rollout and out:
        extra.append(max(0.0, rollout["agent"] - sum(out.values())))
    if extra:
        out["overhead"] = sum(extra)
    return out


def _rollout_means(window: Sequence[StepTiming]) -> dict[str, float]:
    """Mean per-rollout seconds by kind over the steps that logged it (not measured: left out)."""
    rows = [_rollout_parts(s.rollout) | ({"total": s.rollout["total"]} if "total" in s.rollout else {}) for s in window]
    kinds = {k for r in rows for k in r}
    return {k: sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r) for k in kinds}


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


def gpu_evidence(samples: Iterable[Sample], last: int = 60) -> GpuEvidence:
    """Mean GPU utilisation over the last samples (``services.models.Sample``), split into inference
    and trainer GPUs by the command of the processes on them (when the probe sees processes)."""
    recent = list(samples)[-last:]
    role: dict[int, str] = {}
    for s in recent:
        for p in s.procs:
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
        gpus = [(g.index, g.util) for g in s.gpus if g.util is not None]
        if gpus:
            used += 1
        for index, util in gpus:
            indices.add(index)
            by["all"].append(util)
            if index in role:
                by[role[index]].append(util)

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return GpuEvidence(mean(by["inference"]), mean(by["trainer"]), mean(by["all"]), len(indices), used)


def _variables(b: Breakdown, window, saves, per_step) -> dict[str, Any]:
    v: dict[str, Any] = {"step_s": b.step_seconds, "steps": b.steps, "diagnosis": b.diagnosis, "two": 2.0}
    for c in b.components:
        v[f"{c.name}_s"] = c.seconds
        v[f"{c.name}_share"] = c.share
        v[f"{c.name}_pct"] = _pct(c.share)
    top = max(
        (c for c in b.components if c.parent is None and c.timeline == "trainer"), key=lambda c: c.share, default=None
    )
    if top is not None:
        v["top_label"], v["top_pct"] = top.label.lower(), _pct(top.share)
    ro = b.rollout
    gen, tools = ro.get("generation"), ro.get("tools")
    v["generation_per_rollout_s"], v["tools_per_rollout_s"] = gen, tools
    rollout_s = ro.get("total") or (sum(ro.get(k, 0.0) for k in ("generation", "tools", "overhead")) or None)
    v["rollout_s"] = rollout_s
    if tools is not None and rollout_s:
        v["tools_of_rollout_pct"] = _pct(tools / rollout_s)
    if gen and rollout_s:  # rollouts spend gen/rollout_s of their time at the server: keep that many more in flight
        v["inflight_factor"] = round(min(8.0, max(2.0, rollout_s / gen)), 2)
    load = b.inference
    if load.kv_cache is not None:
        v["kv_pct"], v["kv_n"] = _pct(load.kv_cache), load.kv_cache
    if load.running is not None:
        v["running"] = load.running
    if load.waiting is not None:
        v["waiting"] = load.waiting
    v["server_clause"] = f" ({load.describe().split(': ', 1)[1].split(' (')[0]})" if load.measured else ""
    if load.running and load.waiting is not None:  # capacity for the queued requests too
        v["infer_gpu_factor"] = round(min(4.0, max(1.1, (load.running + load.waiting) / load.running)), 2)
    fb, hold = v.get("forward_backward_s"), v.get("wait_for_policy_s")
    if fb and hold is not None:  # a step shorter by the hold would not keep ready batches waiting
        v["train_gpu_factor"] = round(min(4.0, max(1.25, fb / max(fb - hold, 0.25 * fb))), 2)
    if saves:
        v["saves"] = len(saves)
        v["save_each_s"] = sum(saves) / len(saves)
        v["interval_factor"] = max(2, math.ceil((v.get("save_ckpt_share") or 0) / 0.05))
    for key, val in (("inference_util", b.gpu.inference_util), ("trainer_util", b.gpu.trainer_util)):
        if val is not None:
            v[key], v[f"{key}_n"] = f"{val:.0f}%", val
    if "inference_util" not in v and b.gpu.all_util is not None:
        v["inference_util"] = f"{b.gpu.all_util:.0f}% (all GPUs)"
    v["inference_util_clause"] = (
        f" while inference GPUs average {v['inference_util']} util" if "inference_util" in v else ""
    )
    return v


# ---------------------------------------------------------------------------------------- entry points
def analyze_lines(
    metrics_lines: Iterable[str] = (),
    console_lines: Iterable[str] = (),
    last: int = DEFAULT_STEPS,
    samples: Iterable[Any] = (),
    since_step: int | None = None,
    until_step: int | None = None,
    episodes: Iterable[EpisodeTiming] = (),
) -> Breakdown:
    """``since_step`` < step <= ``until_step``: only those steps count (a profile of given steps);
    ``episodes``: per-trace timings from traces.jsonl."""
    parser = MetricsParser()
    for line in metrics_lines:
        parser.feed_metrics(line)
    for line in console_lines:
        parser.feed_console(line)
    if since_step is not None or until_step is not None:
        lo = float("-inf") if since_step is None else since_step
        hi = float("inf") if until_step is None else until_step
        parser.run.steps = {n: s for n, s in parser.run.steps.items() if lo < n <= hi}
    return analyze(parser.run, last, gpu_evidence(samples), episodes=episodes, until_step=until_step)


def analyze_snapshot(
    snapshot: PodSnapshot, last: int = DEFAULT_STEPS, since_step: int | None = None, until_step: int | None = None
) -> Breakdown:
    """The breakdown of one pod's :class:`~services.models.PodSnapshot`: its metrics.jsonl history, the
    console lines in its sample history (used when there are no metrics), its GPU samples and, from the
    monitor's snapshot, its traces.jsonl timings (``episodes``)."""
    metrics = snapshot.metrics
    console: list[str] = []
    if not metrics:
        for s in snapshot.history:
            console.extend(s.log)
    return analyze_lines(metrics, console, last, snapshot.history, since_step, until_step, snapshot.episodes)
