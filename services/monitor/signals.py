"""Alerts from prime-rl's own signals (pure: no I/O, no textual): the weight-broadcast markers, the
processes' roles, the local endpoints (services/pod/agent/signals.py reads them on the pod) and the
orchestrator's metrics.jsonl records.

Each rule is a plain function of what it needs and ``now`` (the pod's clock); :class:`SignalTracker`
keeps the little state they need and is fed from ``HealthTracker.observe``. Every rule is silent for a
run that is not active (``stopped``), while a checkpoint is written, and before the first broadcast.

* ``broadcast-stall`` — the newest ``broadcasts/step_N``: STABLE without NCCL_READY (the trainer waits for
  inference) or NCCL_READY without the trainer's step N (the transfer runs) for longer than
  max(floor, k x the p90 of the run's own recent handshakes / ``time/broadcast_weights``).
* ``inference-down`` — the inference engine's /health failed twice in a row after it had answered, or its
  PRIME-RL::Inference process is gone, while the trainer or orchestrator lives.
* ``trainer-hung`` — the trainer's metrics server answers /health but its last step is older than the
  stall budget: alive but hung (the no-progress rule then stays quiet: the same stall, said better).
* ``loop-lag``, ``stale-drops``, ``queue`` — warnings from the orchestrator's metrics.jsonl records.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.models import Alert, PodSignals, Severity
from services.units import short_duration as dur

LAG_KEY = "event_loop_lag/max"
DROPPED_KEY = "off_policy/dropped"
OFF_POLICY_KEY = "off_policy/max"
WAITING_KEY = "inference/agg/num_requests_waiting/mean"
RUNNING_KEY = "inference/agg/num_requests_running/mean"
BROADCAST_KEY = "time/broadcast_weights"
HTTP_FRESH_S = 60.0  # an endpoint answer older than this says nothing of now (the probe asks every 10 s)


class SignalSettings(Protocol):
    """The fields of services.monitor.health.HealthSettings these rules read (that module imports this one)."""

    @property
    def broadcast_k(self) -> float: ...
    @property
    def broadcast_floor_s(self) -> float: ...
    @property
    def inference_down_after_s(self) -> float: ...
    @property
    def inference_down_checks(self) -> int: ...
    @property
    def loop_lag_warn_s(self) -> float: ...
    @property
    def dropped_steps(self) -> int: ...
    @property
    def queue_ratio(self) -> float: ...
    @property
    def queue_after_s(self) -> float: ...


def p90(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def broadcast_bound(history: Sequence[float], s: SignalSettings) -> float:
    """How long one phase of a broadcast may take: k x the p90 of the run's own times, at least the floor."""
    top = p90(history)
    return s.broadcast_floor_s if top is None else max(s.broadcast_floor_s, s.broadcast_k * top)


def broadcast_stall_alert(
    sig: PodSignals | None, trainer_step: int | None, weights_times: Sequence[float], now: float, s: SignalSettings
) -> Alert | None:
    """``trainer_step``: the trainer's latest logged step (its "Step N" line comes after step N's transfer);
    None (not known yet) keeps the rule quiet: a fresh run's first broadcasts wait for vLLM to load."""
    b = sig.broadcast if sig is not None else None
    if b is None or b.stable is None or not b.handshakes or trainer_step is None or trainer_step >= b.step:
        return None  # no broadcast, none finished yet (filesystem transfer too), or step N is done / a restart's
    handshakes = [secs for _, secs in b.handshakes]
    if b.ready is None:
        bound, waited = broadcast_bound(handshakes, s), now - b.stable
        if waited <= bound:
            return None
        msg = (
            f"The trainer has waited {dur(waited)} for inference to get ready for step {b.step}'s weights "
            f"(its STABLE marker has no NCCL_READY beside it; this run's handshakes took up to "
            f"{dur(max(handshakes))}, bound {dur(bound)}). The orchestrator pauses the inference engines "
            "before it answers: a dead or stuck inference server or orchestrator leaves the trainer waiting "
            "until prime-rl's watchdog kills the job. Read the end of logs/latest/orchestrator.log and "
            "inference.log; if they are stuck, kill the run and resume from the last complete checkpoint."
        )
        return Alert(
            "broadcast-stall",
            Severity.CRITICAL,
            f"Weight broadcast of step {b.step} stalled",
            msg,
            since=b.stable + bound,
        )
    history = list(weights_times) or handshakes
    bound, ran = broadcast_bound(history, s), now - b.ready
    if ran <= bound:
        return None
    basis = "weight broadcasts" if weights_times else "handshakes"
    msg = (
        f"The weight transfer of step {b.step} has run {dur(ran)} (both sides met {dur(ran)} ago; this "
        f"run's {basis} took up to {dur(max(history))}, bound {dur(bound)}). A rank that never joined the "
        "NCCL transfer hangs every other one until NCCL's watchdog kills the job (about 10 min). Look for "
        "the rank or inference worker that stopped (its log, a dead GPU); kill the run and resume from the "
        "last complete checkpoint."
    )
    return Alert(
        "broadcast-stall", Severity.CRITICAL, f"Weight transfer of step {b.step} stalled", msg, since=b.ready + bound
    )


def inference_down_alert(
    gone_since: float | None,
    failed_since: float | None,
    failures: int,
    others_live: bool,
    now: float,
    s: SignalSettings,
) -> Alert | None:
    """``gone_since``: since when no PRIME-RL::Inference process lives (after one did); ``failed_since`` and
    ``failures``: the engine's /health failing in a row after it had answered."""
    if not others_live:
        return None
    gone = gone_since is not None and now - gone_since >= s.inference_down_after_s
    failing = failed_since is not None and failures >= s.inference_down_checks
    if not (gone or failing):
        return None
    since = min(t for t in (gone_since if gone else None, failed_since if failing else None) if t is not None)
    evidence = []
    if failing:
        evidence.append(f"its /health failed {failures} times in a row")
    if gone:
        evidence.append("its PRIME-RL::Inference process is gone")
    msg = (
        f"The inference server is down ({' and '.join(evidence)}, for {dur(now - since)}) while the trainer "
        "and orchestrator still run: they wait for rollouts and weights that never come. Read the end of "
        "logs/latest/inference.log for why (CUDA OOM, an engine error), fix it, then kill the run and resume "
        "from the last complete checkpoint."
    )
    return Alert("inference-down", Severity.CRITICAL, "Inference server down", msg, since=since)


def trainer_hung_alert(sig: PodSignals | None, progress_at: float | None, budget: float, now: float) -> Alert | None:
    """The metrics server answers /health (a thread of the trainer) while its last step ages past the
    stall ``budget`` (no-progress's): the training loop is stuck in a live process."""
    t = sig.trainer if sig is not None else None
    if (
        t is None
        or not t.health
        or not t.last_step_ts
        or sig is None
        or sig.http_at is None
        or now - sig.http_at > HTTP_FRESH_S
    ):
        return None  # no server, no answer, or no step yet (the gauge is 0 until the first)
    last = max(t.last_step_ts, progress_at or 0.0)
    idle = now - last
    if idle <= budget:
        return None
    step = f"step {t.step}" if t.step is not None else "its last step"
    msg = (
        f"The trainer is alive but hung: its metrics server answers, yet {step} was {dur(idle)} ago "
        f"(budget {dur(budget)}). The process lives and does nothing useful: a collective waiting on a rank "
        "that stopped, a deadlock, or a wait on data that never comes. Look at the end of "
        "logs/latest/trainer.log (and py-spy dump of the trainer if you can), then kill the run and resume "
        "from the last complete checkpoint."
    )
    return Alert("trainer-hung", Severity.CRITICAL, "Trainer alive but hung", msg, since=last + budget)


def loop_lag_alert(lag: float | None, since: float | None, s: SignalSettings) -> Alert | None:
    if lag is None or since is None or lag <= s.loop_lag_warn_s:
        return None
    msg = (
        f"The orchestrator's event loop lagged {dur(lag)} in its latest report (event_loop_lag/max, warning "
        f"above {dur(s.loop_lag_warn_s)}); a prime-rl run saw over 700 s right before it hung silently. "
        "Something blocks the loop: a slow environment (reward or tool code that does not await), an env "
        "server that stopped answering. Read logs/latest/orchestrator.log and the env servers' logs."
    )
    return Alert("loop-lag", Severity.WARNING, "Orchestrator event loop lagging", msg, since=since)


def stale_drops_alert(
    dropped: Sequence[tuple[float, float]], off_policy: float | None, s: SignalSettings
) -> Alert | None:
    """``dropped``: (when, rollouts) of the latest steps' off_policy/dropped, oldest first."""
    steps = max(1, s.dropped_steps)
    if len(dropped) < steps or any(n <= 0 for _, n in dropped[-steps:]):
        return None
    recent = dropped[-steps:]
    total = int(sum(n for _, n in recent))
    lag = f"; the oldest rollout used was {off_policy:g} steps behind" if off_policy is not None else ""
    msg = (
        f"{total} rollouts were dropped as too stale over the last {len(recent)} steps (off_policy/dropped){lag}: "
        "inference falls behind the trainer and its work is thrown away. Give inference more GPUs or lower "
        "the rollouts in flight, or allow more off-policy steps."
    )
    return Alert("stale-drops", Severity.WARNING, "Stale rollouts dropped", msg, since=recent[0][0])


def queue_alert(
    waiting: float | None, running: float | None, since: float | None, now: float, s: SignalSettings
) -> Alert | None:
    if since is None or waiting is None or running is None or now - since < s.queue_after_s:
        return None
    msg = (
        f"The inference engines have {waiting:g} requests waiting for {running:g} running (over "
        f"{s.queue_ratio:.0%} for {dur(now - since)}): prime-rl cuts its concurrency when this lasts, and it "
        "still does. Inference is the bottleneck: lower the rollouts in flight or give inference more GPUs."
    )
    return Alert("queue", Severity.WARNING, "Inference queue backed up", msg, since=since)


def _number(obj: dict, key: str) -> float | None:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


@dataclass
class SignalTracker:
    """The state behind the signal rules; ``observe`` each sample, then ``evaluate``."""

    settings: SignalSettings

    def __post_init__(self) -> None:
        self.signals: PodSignals | None = None
        self.weights_times: deque[float] = deque(maxlen=10)
        self._inference_seen = False  # a PRIME-RL::Inference process lived
        self._titled = False  # PRIME-RL:: titles were seen on this pod (this prime-rl sets them)
        self._healthy_once = False  # the engine's /health answered once
        self._gone_since: float | None = None
        self._stepped = False  # the trainer logged a step of this run: its inference server was up
        self._failed_since: float | None = None
        self._failures = 0
        self._http_at: float | None = None
        self.lag: float | None = None
        self._lag_since: float | None = None
        self.dropped: deque[tuple[float, float]] = deque(maxlen=20)
        self.off_policy: float | None = None
        self.waiting: float | None = None
        self.running: float | None = None
        self._queue_since: float | None = None

    def observe(self, sig: PodSignals | None, metrics: Sequence[str], now: float) -> None:
        for line in metrics:
            if any(k in line for k in (LAG_KEY, DROPPED_KEY, WAITING_KEY, BROADCAST_KEY)):
                self._record(line, now)
        if sig is None:
            return
        self.signals = sig
        self._titled = self._titled or bool(sig.roles)
        alive = sig.alive("Inference")
        if alive:
            self._inference_seen, self._gone_since = True, None
        elif alive is False and self._inference_seen and self._gone_since is None:
            self._gone_since = now
        inf = sig.inference
        if sig.http_at is not None and sig.http_at != self._http_at and inf is not None:
            self._http_at = sig.http_at
            if inf.health:
                self._healthy_once, self._failures, self._failed_since = True, 0, None
            elif self._healthy_once or self._stepped:  # it answered once, or the run stepped (it needed it)
                self._failures += 1
                self._failed_since = sig.http_at if self._failed_since is None else self._failed_since

    def _record(self, line: str, now: float) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        if (w := _number(obj, BROADCAST_KEY)) is not None and w > 0:
            self.weights_times.append(w)
        if (lag := _number(obj, LAG_KEY)) is not None:
            if lag <= self.settings.loop_lag_warn_s:
                self._lag_since = None
            elif self._lag_since is None:
                self._lag_since = now
            self.lag = lag
        if (dropped := _number(obj, DROPPED_KEY)) is not None:
            self.dropped.append((now, dropped))
            self.off_policy = _number(obj, OFF_POLICY_KEY)
        waiting, running = _number(obj, WAITING_KEY), _number(obj, RUNNING_KEY)
        if waiting is not None:
            self.waiting, self.running = waiting, running
            if running and waiting > self.settings.queue_ratio * running:
                self._queue_since = now if self._queue_since is None else self._queue_since
            else:
                self._queue_since = None

    def evaluate(
        self,
        now: float,
        *,
        stopped: bool,
        checkpointing: bool = False,
        trainer_step: int | None = None,
        budget: float = math.inf,
        progress_at: float | None = None,
        run_active: bool = True,
    ) -> list[Alert]:
        """The signal alerts now. ``stopped``: the run is not active (finished, killed, crashed, lost):
        every rule is silent; so while a checkpoint is written."""
        if stopped or checkpointing:
            return []
        s, sig = self.settings, self.signals
        if trainer_step is not None:
            self._stepped = True
            # the run stepped, so its inference server was up even if no sample caught its process alive (one
            # that died within seconds of the probe's start): a configured local server now gone is gone
            if (
                sig is not None
                and sig.inference is not None
                and self._titled
                and not self._inference_seen
                and sig.alive("Inference") is False
            ):
                self._inference_seen, self._gone_since = True, now
        t = sig.trainer if sig is not None else None
        if (
            t is not None
            and t.step is not None
            and sig is not None
            and sig.http_at is not None
            and now - sig.http_at <= HTTP_FRESH_S
        ):
            trainer_step = max(trainer_step or t.step, t.step)
        live = bool(
            t is not None
            and t.health
            and sig is not None
            and sig.http_at is not None
            and now - sig.http_at <= HTTP_FRESH_S
        )
        if sig is not None and sig.roles is not None and (sig.roles or self._titled):
            # prime-rl titles its processes: they say who lives (none left: the whole run went, e.g. a kill)
            live = live or bool(sig.alive("Trainer") or sig.alive("Orchestrator"))
        elif not live:  # an older prime-rl (no titles) or no roles read: the run's own activity
            live = run_active
        found = [
            broadcast_stall_alert(sig, trainer_step, self.weights_times, now, s),
            inference_down_alert(self._gone_since, self._failed_since, self._failures, live, now, s),
            loop_lag_alert(self.lag, self._lag_since, s),
            stale_drops_alert(list(self.dropped), self.off_policy, s),
            queue_alert(self.waiting, self.running, self._queue_since, now, s),
        ]
        if found[0] is None:  # a stalled broadcast is the more precise word for the same hang
            found.append(trainer_hung_alert(sig, progress_at, budget, now))
        return [a for a in found if a is not None]
