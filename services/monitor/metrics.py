"""prime-rl's timing metrics: ``metrics.jsonl`` records and console log lines -> per-step timings.

Sources, best first:

* ``<run_dir>/metrics.jsonl`` — the file monitor, on by default. The trainer and the orchestrator both
  append one JSON object per call, ``{"step": N, "time": ..., <key>: <value>, ...}``. A record is the
  trainer's when it carries a trainer-only key (``time/wait_for_batch``, ``perf/*``, ``loss/*``...), the
  orchestrator's when it carries an orchestrator-only key (``time/wait_for_policy``, ``progress/*``,
  ``train/*``...). Records without ``step`` (the orchestrator's periodic ``inference/*``,
  ``dispatcher/*`` logger) are kept apart as periodic records.
* console lines (``logs/trainer.log``, ``logs/orchestrator.log``, or the probe's ``"<stem>: <line>"``
  form): only the step's wall time (``Step 5 |   12.3s | ...``; the historic ``Step 0 | Time: 42.77s``),
  checkpoint saves and "Holding batch" lines. ANSI colours (prime-rl forces them) and loguru's JSON
  mode are understood.

Garbled or partial lines are skipped and counted, never fatal. Everything here is pure computation.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

TRAINER_ONLY = {"time/wait_for_batch", "time/load_data", "time/forward_backward", "time/broadcast_weights"}
TRAINER_PREFIXES = ("perf/", "loss/", "optim/", "entropy/", "mismatch_kl/", "system/", "kl_ent_ratio/")
ORCH_ONLY = {"time/wait_for_policy", "time/pack"}
ORCH_PREFIXES = ("progress/", "off_policy/", "train/", "batch/", "eval/")
# train/{agg|<env>}/{all|effective}/[<agent>/]timing/<phase>/mean — seconds per rollout spent in <phase>.
# Current phases: setup, agent (= agent/model: generation + agent/harness: tools/environment), finalize,
# scoring, total. Older generations: any other phase name, classed by its words (tool_ms, agent/tools...).
_ROLLOUT_TIMING = re.compile(r"^train/([^/]+)/(all|effective)/(?:([^/]+(?:/[^/]+)*?)/)??timing/(.+)/mean$")
_PHASES = {
    "agent/model": "generation",
    "agent/harness": "tools",
    "setup": "setup",
    "finalize": "finalize",
    "scoring": "scoring",
    "agent": "agent",
    "total": "total",
}
_TOOL_WORDS = ("tool", "harness", "env", "sandbox", "exec", "scor", "reward", "judge")
_GEN_WORDS = ("model", "generat", "infer", "llm", "completion", "sampl")
# vLLM gauges the orchestrator scrapes: inference/{agg|<scope>}/<name>/{mean,min,max,...}
_GAUGES = {
    "kv_cache_usage_perc": "kv_cache",
    "gpu_cache_usage_perc": "kv_cache",
    "num_requests_running": "running",
    "num_requests_waiting": "waiting",
}

ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP_NOW_RE = re.compile(r"\bStep (\d+) \|\s*([^|]+?)\s*(?:\||$)")
STEP_OLD_RE = re.compile(r"\bStep (\d+) \| Time: ([\d.]+)\s*s\b")
SAVE_RE = re.compile(r"Saving checkpoint at step (\d+)")
_HOLD = re.compile(r"Holding batch (\d+) until the trainer publishes policy")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\b")
STEM_RE = re.compile(r"[\w.-]+")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float | None:
    """prime-rl's format_time back to seconds: '123ms', '12.3s', '2m 5s', '1h 3m', '2d 4h'."""
    text = text.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or _DURATION_PART.sub("", text).strip():
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)


@dataclass
class StepTiming:
    """What is known about one step. ``trainer`` / ``orchestrator`` hold their ``time/*`` keys (seconds);
    ``rollout`` holds per-rollout seconds by kind ("generation", "tools")."""

    step: int
    trainer: dict[str, float] = field(default_factory=dict)
    orchestrator: dict[str, float] = field(default_factory=dict)
    rollout: dict[str, float] = field(default_factory=dict)
    # per-rollout seconds by kind for each env (train/<env>/...), when the orchestrator logs envs apart
    rollout_envs: dict[str, dict[str, float]] = field(default_factory=dict)
    inference: dict[str, float] = field(default_factory=dict)  # vLLM gauges logged in the step's own record
    saved: bool = False  # a checkpoint was written at this step (console)
    held: bool = False  # the orchestrator held this batch for the policy (console)


@dataclass
class ParsedRun:
    steps: dict[int, StepTiming] = field(default_factory=dict)
    periodic: list[dict[str, float]] = field(default_factory=list)  # records without a step
    gauges: list[dict[str, float]] = field(default_factory=list)  # vLLM gauges of the periodic records
    metrics_lines: int = 0
    console_lines: int = 0
    skipped: int = 0  # garbled/partial lines (metrics.jsonl lines that are not a JSON object, ...)
    metrics_steps: int = 0  # steps that came from metrics.jsonl (the better source)

    @property
    def source(self) -> str:
        if self.metrics_steps:
            return "metrics.jsonl"
        return "console" if self.steps else "none"

    def ordered(self) -> list[StepTiming]:
        """Steps oldest first. When metrics.jsonl gave steps, console-only steps are dropped: mixing a
        full breakdown with a bare step time would skew the averages."""
        steps = [self.steps[k] for k in sorted(self.steps)]
        if self.metrics_steps:
            steps = [
                s
                for s in steps
                if s.trainer.keys() - {"time/step"} or s.rollout or s.orchestrator.keys() - {"time/step"}
            ]
        return steps


class MetricsParser:
    """Incremental: feed lines as they arrive, read :attr:`run` at any time."""

    PERIODIC_MAX = 500

    def __init__(self) -> None:
        self.run = ParsedRun()
        self._console_step_seen: set[tuple[str, int]] = set()
        self._from_metrics: set[int] = set()

    def _step(self, n: int) -> StepTiming:
        st = self.run.steps.get(n)
        if st is None:
            st = self.run.steps[n] = StepTiming(n)
        return st

    # ------------------------------------------------------------------ metrics.jsonl
    def feed_metrics(self, line: str | bytes) -> None:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not line.strip():
            return
        self.run.metrics_lines += 1
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # garbage, or nested past the recursion limit
            self.run.skipped += 1
            return
        if not isinstance(obj, dict):
            self.run.skipped += 1
            return
        if obj.get("source") == "training.csv":  # the probe's training.csv rows: progress, no timings
            return
        values = {k: f for k, v in obj.items() if isinstance(k, str) and (f := _finite(v)) is not None}
        step = obj.get("step")
        if (
            step is not None
            and not isinstance(step, bool)
            and isinstance(step, (int, float))
            and (_finite(step) is None or abs(step) > 2**53)
        ):  # NaN, 1e400, a 300-digit int: no step
            self.run.skipped += 1
            return
        if step is None or isinstance(step, bool) or not isinstance(step, (int, float)):
            if step is not None:
                self.run.skipped += 1
                return
            values.pop("_timestamp", None)
            self.run.periodic.append(values)
            del self.run.periodic[: -self.PERIODIC_MAX]
            if gauges := inference_gauges(values):
                self.run.gauges.append(gauges)
                del self.run.gauges[: -self.PERIODIC_MAX]
            return
        n = int(step)
        keys = values.keys()
        is_trainer = bool(keys & TRAINER_ONLY) or any(k.startswith(TRAINER_PREFIXES) for k in keys)
        is_orch = bool(keys & ORCH_ONLY) or any(k.startswith(ORCH_PREFIXES) for k in keys)
        timings = {k: v for k, v in values.items() if k.startswith("time/") and v >= 0}
        rollout, envs = _rollout_timing(values) if is_orch else ({}, {})
        gauges = inference_gauges(values)
        if not (is_trainer or is_orch) and set(timings) <= {"time/save_ckpt"} and timings:
            is_trainer = True  # a lone save time: the trainer's save is the one that costs
        if gauges and not (is_trainer and is_orch):
            self._step(n).inference.update(gauges)
        if not (is_trainer or is_orch) or (is_trainer and is_orch):
            return  # nothing we can attribute (e.g. a lone time/step); not an error
        st = self._step(n)
        (st.trainer if is_trainer else st.orchestrator).update(timings)
        st.rollout.update(rollout)
        st.rollout_envs.update(envs)
        if timings or rollout:
            self._from_metrics.add(n)
            self.run.metrics_steps = len(self._from_metrics)

    # ------------------------------------------------------------------ console
    def feed_console(self, line: str | bytes, component: str | None = None) -> None:
        """One console line; ``component`` is "trainer" or "orchestrator" when the file is known. Lines in
        the probe's form ``"<file stem>: <line>"`` name their file themselves."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        text = ANSI_RE.sub("", line).strip()
        if not text:
            return
        if component is None:
            stem, sep, rest = text.partition(": ")
            if sep and STEM_RE.fullmatch(stem):
                component, text = component_of(stem), rest
        if text.startswith("{"):
            try:
                obj = json.loads(text)
                text = str(obj.get("message", "")) if isinstance(obj, dict) else ""
            except (ValueError, RecursionError):
                self.run.skipped += 1
                return
        self.run.console_lines += 1
        m = STEP_OLD_RE.search(text)
        seconds = float(m.group(2)) if m else None
        if m is None:
            m = STEP_NOW_RE.search(text)
            seconds = parse_duration(m.group(2)) if m else None
            if m is not None and seconds is None:
                self.run.skipped += 1
                return
        if m is not None and seconds is not None:
            who = component or ("orchestrator" if "Reward" in text else "trainer")
            n = int(m.group(1))
            if (who, n) in self._console_step_seen:
                return
            self._console_step_seen.add((who, n))
            st = self._step(n)
            target = st.orchestrator if who == "orchestrator" else st.trainer
            target.setdefault("time/step", seconds)
            return
        if (m := SAVE_RE.search(text)) is not None:
            self._step(int(m.group(1))).saved = True
        elif "Writing final checkpoint" in text and self.run.steps:
            self.run.steps[max(self.run.steps)].saved = True
        elif (m := _HOLD.search(text)) is not None:
            self._step(int(m.group(1))).held = True


def component_of(stem: str) -> str | None:
    s = stem.lower()
    if "orch" in s:
        return "orchestrator"
    if "train" in s or s in ("rl", "sft"):
        return "trainer"
    return None


def _finite(value: object) -> float | None:
    """A JSON number as a finite float; None for anything else (bools, NaN, Infinity, ints past float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _rollout_timing(values: dict[str, float]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Per-rollout seconds by kind ("generation", "tools", "setup", "finalize", "scoring", "agent",
    "total") from ``train/{agg|<env>}/{all|effective}/[<agent>/]timing/<phase>/mean``: the mean over
    agents, the ``all`` subset over ``effective``, ``agg`` over the mean of the envs. Returns (the run's,
    per env). A phase that is not logged is left out (not measured), never 0."""
    # (env, subset) -> agent -> kind -> seconds
    found: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for key, value in values.items():
        m = _ROLLOUT_TIMING.match(key)
        if m is None or value < 0:
            continue
        env, subset, agent, phase = m.group(1), m.group(2), m.group(3) or "", m.group(4).lower()
        seconds = value / 1000.0 if phase.endswith("_ms") else value
        kind = _PHASES.get(phase)
        if kind is None:
            if phase.endswith(("total", "total_ms")):
                continue
            kind = (
                "tools"
                if any(w in phase for w in _TOOL_WORDS)
                else "generation"
                if any(w in phase for w in _GEN_WORDS)
                else None
            )
            if kind is None:
                continue
        bucket = found.setdefault((env, subset), {}).setdefault(agent, {})
        bucket[kind] = bucket.get(kind, 0.0) + seconds

    def over_agents(agents: dict[str, dict[str, float]]) -> dict[str, float]:
        kinds = {k for a in agents.values() for k in a}
        return {
            k: sum(a[k] for a in agents.values() if k in a) / sum(1 for a in agents.values() if k in a) for k in kinds
        }

    per_env: dict[str, dict[str, float]] = {}
    for env in {e for e, _s in found}:
        agents = found.get((env, "all")) or found.get((env, "effective")) or {}
        if merged := over_agents(agents):
            per_env[env] = merged
    overall = per_env.pop("agg", None)
    if overall is None and per_env:
        overall = over_agents(per_env)
    return overall or {}, per_env


def inference_gauges(values: dict[str, float]) -> dict[str, float]:
    """The inference server's load from ``inference/agg/<gauge>/mean`` (else the mean over the scopes
    that logged one): ``kv_cache`` (fraction 0-1), ``running``, ``waiting`` (requests). Only what was
    logged."""
    scopes: dict[str, dict[str, float]] = {}
    for key, value in values.items():
        if not key.startswith("inference/"):
            continue
        parts = key.split("/")[1:]
        if parts and parts[-1] in ("mean", "sum", "value"):
            parts.pop()
        if not 1 <= len(parts) <= 2 or parts[-1] not in _GAUGES or value < 0:
            continue
        scope, name = (parts[0] if len(parts) == 2 else "agg"), _GAUGES[parts[-1]]
        if name == "kv_cache" and value > 1.0:
            if value > 100.0:  # a percentage; past 100 % is garbage
                continue
            value = value / 100.0
        scopes.setdefault(scope, {}).setdefault(name, value)
    out = scopes.pop("agg", {})
    for n in {n for sc in scopes.values() for n in sc} - out.keys():
        have = [sc[n] for sc in scopes.values() if n in sc]
        out[n] = sum(have) / len(have)
    return out


@dataclass(frozen=True)
class EpisodeTiming:
    """One trace's timing from prime-rl's ``rollouts/step_N/train/.../traces.jsonl``, as the probe extracts
    it on the pod (its "traces" field): seconds in tools/environment (agent/harness), in the model
    (agent/model) and in all (setup + agent + finalize + scoring); None = not measured."""

    step: int
    env: str  # the episode's env name ("" when the record named none)
    tool_s: float | None
    model_s: float | None
    total_s: float | None


def episode_timings(raw: object) -> list[EpisodeTiming]:
    """The probe's "traces" entries -> EpisodeTiming; anything malformed is skipped (never raises: the
    list comes from a pod we do not control)."""
    out: list[EpisodeTiming] = []
    for rec in raw if isinstance(raw, list) else ():
        if not isinstance(rec, dict):
            continue
        step = rec.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**53:
            continue
        env = rec.get("env")
        secs = [_finite(rec.get(k)) for k in ("tool", "model", "total")]
        out.append(
            EpisodeTiming(
                step,
                env[:100] if isinstance(env, str) else "",
                *(v if v is not None and v >= 0 else None for v in secs),
            )
        )
    return out


def parse_run(metrics_lines=(), console_lines=()) -> ParsedRun:
    """Parse everything at once (the CLI's path); the pane feeds a :class:`MetricsParser` instead."""
    parser = MetricsParser()
    for line in metrics_lines:
        parser.feed_metrics(line)
    for line in console_lines:
        parser.feed_console(line)
    return parser.run
