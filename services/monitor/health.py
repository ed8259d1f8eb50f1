"""Health rules over a pod's samples, its run's log lines and a clock (pure: no I/O, no textual).

Each rule is a plain function of what it needs and ``now`` (tested one by one with an injected clock);
:class:`HealthTracker` keeps the little state they need (per-GPU "since when", the run's progress, the
log hits) and is fed one :class:`Sample` at a time, O(new data) per sample. The time axis is the pod's
own clock (``Sample.t``), so a slow link or W&B's upload lag never looks like a stalled run.

Rules (thresholds in :class:`HealthSettings`, all settable: docs/alerts.md):

* ``no-progress`` — no new step for longer than an adaptive budget: k × the recent step time, clamped
  to [floor, cap]; before the first step, a start budget (15 min) from the run's first log line, so an
  inference server that died while starting is caught in minutes, not after the 45-min cap. Paused while a checkpoint
  is being written (the budget restarts after it); silent
  once the run said it finished; never judged from W&B (its heartbeat is only quoted as context).
* ``gpu-dead`` — the run is active and a GPU it used sits at ~0 MiB / ~0 % for over 60 s:
  "inference server likely died at step N" (prime-rl gives inference the first GPUs).
* ``nccl-hang`` — GPUs at ~100 % util with near-idle power and no step for a while: NCCL busy-waits.
* ``disk`` — the run's volume over 85 %, with the checkpoints' share and the time to full.
* ``nofile`` — ``ulimit -n`` below 65536.
* prime-rl's own signals (``broadcast-stall``, ``inference-down``, ``trainer-hung``, ``loop-lag``,
  ``stale-drops``, ``queue``): services/monitor/signals.py; a stall one of them explains is not also said
  as no-progress.
* ``log:<id>`` — an error pattern (health_patterns.toml) in a log line; once per pattern, with the line.
"""

from __future__ import annotations

import functools
import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from services.models import Alert, CheckpointInfo, GpuSample, HostSample, RunProgress, Sample, Severity
from services.monitor.progress import RunTracker, split_line, time_lines, time_records
from services.monitor.runlife import LifeTracker, Phase, RunLife
from services.monitor.signals import SignalTracker
from services.text import plain
from services.units import short_duration as dur

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PATTERNS_FILE = Path(__file__).with_name("health_patterns.toml")
KILL_ECHO_S = 5.0  # log lines this close before a kill's record are its echo, not news
# the signal alerts that explain a stall better than no-progress does (which then stays quiet)
STALL_IDS = ("broadcast-stall", "trainer-hung", "inference-down")
GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class HealthSettings:
    stall_k: float = 6.0  # budget = k x the median recent step time ...
    stall_floor_s: float = 300.0  # ... at least this ...
    stall_cap_s: float = 2700.0  # ... at most this (45 min; also the budget before a step time is known)
    stall_start_s: float = 900.0  # no first step this long after the run's first log line: it died starting
    gpu_dead_after_s: float = 60.0
    gpu_dead_mem_bytes: int = 256 * MIB  # "~0 MiB"
    gpu_dead_util_pct: float = 2.0  # "~0 %"
    gpu_used_mem_bytes: int = 2 * GIB  # a GPU holding this much was in use by the run
    idle_minutes: float = 30.0  # every GPU ~0 % and ~0 MiB with no run this long: "idle", $ wasted (0: never)
    nccl_util_pct: float = 95.0
    nccl_power_w: float = 150.0  # near-idle for data-centre GPUs (an H100 idles at ~70 W)
    nccl_after_s: float = 180.0
    disk_pct: float = 85.0
    disk_critical_pct: float = 95.0
    disk_rate_window_s: float = 900.0  # the rate behind "time to full"
    nofile_min: int = 65536
    # an error line stays the run's latest news until the run moves past it (a later step, or progress in
    # metrics.jsonl / training.csv): a dead run's OOM is still the answer hours later, in the TUI as in
    # `status`. A number of seconds lets unmatched errors age out instead.
    log_alert_ttl_s: float = math.inf
    ckpt_stale_s: float = 600.0  # an incomplete checkpoint untouched this long is abandoned, not being written
    # prime-rl's own signals (services/monitor/signals.py): a broadcast phase may take k x the p90 of the
    # run's own recent ones, at least the floor
    broadcast_k: float = 5.0
    broadcast_floor_s: float = 120.0
    inference_down_after_s: float = 20.0  # its PRIME-RL::Inference process gone this long
    inference_down_checks: int = 2  # or its /health failed this many times in a row (asked every 10 s)
    loop_lag_warn_s: float = 60.0  # the orchestrator's event_loop_lag/max
    dropped_steps: int = 3  # off_policy/dropped above 0 this many steps in a row
    queue_ratio: float = 0.5  # inference requests waiting over this share of those running ...
    queue_after_s: float = 300.0  # ... this long (prime-rl cuts concurrency after 6 polls: it did not help)


# ------------------------------------------------------------------------------------ pure rules
def stall_budget(step_time: float | None, s: HealthSettings) -> float:
    """How long without a new step is still normal: k x the recent step time in [floor, cap]."""
    if not step_time:
        return s.stall_cap_s
    return min(s.stall_cap_s, max(s.stall_floor_s, s.stall_k * step_time))


def no_progress_alert(
    run: RunProgress,
    progress_at: float | None,
    now: float,
    s: HealthSettings,
    wandb_note: str = "",
    started_at: float | None = None,
    paused: bool = False,
) -> Alert | None:
    """``progress_at``: the later of the last new step and the end of the last checkpoint write or eval;
    ``started_at``: the first line of the run seen (judged against the start budget until a step);
    ``paused``: a checkpoint or an eval runs now (the run's life says so)."""
    if run.finished or run.checkpointing or paused:
        return None
    if run.step is None:
        return _no_first_step_alert(started_at, now, s, wandb_note)
    if progress_at is None:
        return None
    budget = stall_budget(run.step_time_s, s)
    idle = now - progress_at
    if idle <= budget:
        return None
    basis = (
        f"{s.stall_k:g} x the recent step time of {dur(run.step_time_s)}"
        if run.step_time_s
        else "the cap, no step time known yet"
    )
    msg = (
        f"No new step for {dur(idle)} (last: step {run.step}; budget {dur(budget)} = "
        f"{basis}). "
        "Look at the end of logs/latest/{trainer,orchestrator,inference}.log and at the GPUs: a dead "
        "inference server or a hung collective stops the run without an error. If it is stuck, kill "
        "it and resume from the last complete checkpoint."
    )
    if wandb_note:
        msg += f" ({wandb_note}; shown for context only.)"
    return Alert("no-progress", Severity.CRITICAL, "No training progress", msg, since=progress_at + budget)


def _no_first_step_alert(started_at: float | None, now: float, s: HealthSettings, wandb_note: str) -> Alert | None:
    if started_at is None or now - started_at <= s.stall_start_s:
        return None
    msg = (
        f"No first step {dur(now - started_at)} after the run's logs started (start budget "
        f"{dur(s.stall_start_s)}). A run that never reaches step 1 usually lost its inference server "
        "while loading (OOM, a bad model name, a port in use) and the trainer is waiting for rollouts: read the end "
        "of logs/latest/inference.log and orchestrator.log, fix the cause, kill and relaunch."
    )
    if wandb_note:
        msg += f" ({wandb_note}; shown for context only.)"
    return Alert("no-progress", Severity.CRITICAL, "No first step yet", msg, since=started_at + s.stall_start_s)


def crash_alert(life: RunLife, last_error: str | None) -> Alert | None:
    """The run ended with a non-zero exit code and nobody killed it: one alert, for as long as it is the news."""
    if life.phase is not Phase.CRASHED:
        return None
    seen = f" The last error in its logs: {last_error}" if last_error else ""
    msg = (
        f"The run {life.reason}.{seen} Read the end of logs/latest/trainer.log (and orchestrator.log, "
        "inference.log) for the cause, fix it, then resume from the newest complete checkpoint."
    )
    title = f"Run crashed (exit code {life.exit_code})" if life.exit_code is not None else "Run crashed"
    return Alert("run-crashed", Severity.CRITICAL, title, msg, since=life.since or 0.0)


def gpu_dead_alert(
    dead_since: dict[int, float],
    step_at_death: dict[int, int | None],
    run_active: bool,
    now: float,
    s: HealthSettings,
    survivors: int | None = None,
) -> Alert | None:
    """GPUs the run used that sit at ~0 MiB / ~0 % (``dead_since``: index -> since when).
    ``survivors``: how many of the run's GPUs still hold memory (None: not known). When none does, the
    whole run went down together (a kill, a crash): that is not one dead component, and a stalled run is
    the no-progress rule's to say, so no claim is made here."""
    if not run_active or survivors == 0:
        return None
    dead = sorted(i for i, t in dead_since.items() if now - t >= s.gpu_dead_after_s)
    if not dead:
        return None
    first = min(dead_since[i] for i in dead)
    step = next((step_at_death.get(i) for i in dead if step_at_death.get(i) is not None), None)
    at = f"at step {step}" if step is not None else "before the first step we saw"
    names = ", ".join(f"GPU {i}" for i in dead)
    who = "inference server" if min(dead) == 0 else "process on " + names
    msg = (
        f"{names} dropped to ~0 MiB / 0 % for {dur(now - first)} while the run is active: "
        f"{who} likely died {at}. The trainer keeps waiting for rollouts. Check "
        "logs/latest/inference.log for the error, then kill the run and resume from the last "
        "complete checkpoint."
    )
    return Alert("gpu-dead", Severity.CRITICAL, f"{who.capitalize()} likely died {at}", msg, since=first)


def nccl_hang_alert(
    hang_since: float | None, progress_at: float | None, gpus: int, now: float, s: HealthSettings
) -> Alert | None:
    """All busy GPUs at ~100 % util with near-idle power since ``hang_since`` and no step since then."""
    if hang_since is None or now - hang_since < s.nccl_after_s:
        return None
    if progress_at is not None and progress_at > hang_since:
        return None
    msg = (
        f"{gpus} GPU(s) at ~100 % util but near-idle power (<= {s.nccl_power_w:g} W) for "
        f"{dur(now - hang_since)} with no new step: the NCCL-hang signature (kernels busy-wait on a "
        "collective a rank never joins). Find the rank that stopped (its log, a dead GPU, a traceback); "
        "NCCL's own watchdog kills the job only after 10 min. Kill and resume from the last checkpoint."
    )
    return Alert("nccl-hang", Severity.CRITICAL, "NCCL hang suspected", msg, since=hang_since)


def disk_alert(
    host: HostSample,
    ckpts: Sequence[CheckpointInfo],
    rate_bytes_per_s: float | None,
    now: float,
    s: HealthSettings,
    since: float | None = None,
) -> Alert | None:
    pct = host.disk_pct
    if pct is None or pct <= s.disk_pct or host.disk_used is None or host.disk_total is None:
        return None
    ckpt_bytes = sum(c.bytes or 0 for c in ckpts)
    share = (
        f"checkpoints {ckpt_bytes / GIB:.1f} GiB ({100.0 * ckpt_bytes / host.disk_used:.0f} % of used)"
        if ckpts
        else "no checkpoints under the run dir"
    )
    free = host.disk_total - host.disk_used
    if rate_bytes_per_s and rate_bytes_per_s > 0:
        eta = free / rate_bytes_per_s
        full = f"full in ~{dur(eta)} at the current {rate_bytes_per_s * 3600 / GIB:.1f} GiB/h"
    else:
        eta, full = None, "not growing right now"
    critical = pct >= s.disk_critical_pct or (eta is not None and eta < 3600)
    msg = (
        f"Run volume {pct:.0f} % full ({free / GIB:.1f} GiB free); {share}; {full}. Delete old "
        "checkpoints (keep the last complete one) or set [ckpt] keep_last, and move finished ones to S3."
    )
    return Alert(
        "disk",
        Severity.CRITICAL if critical else Severity.WARNING,
        "Disk almost full",
        msg,
        since=now if since is None else since,
    )


def nofile_alert(host: HostSample, now: float, s: HealthSettings, since: float | None = None) -> Alert | None:
    limit = host.nofile_soft
    if limit is None or limit >= s.nofile_min:
        return None
    msg = (
        f"Open-files limit is {limit} (ulimit -n), below {s.nofile_min}: a reported prime-rl run died "
        f'with "Too many open files" at step 15. Run `ulimit -n {s.nofile_min}` in the shell that starts '
        "prime-rl (or raise nofile in /etc/security/limits.conf) before the next launch."
    )
    return Alert("nofile", Severity.WARNING, "Open-files limit too low", msg, since=now if since is None else since)


# ------------------------------------------------------------------------------------ log patterns
@dataclass(frozen=True)
class LogPattern:
    id: str
    severity: Severity
    title: str
    regex: re.Pattern[str]
    advice: str


def load_patterns(path: Path = PATTERNS_FILE) -> tuple[LogPattern, ...]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return tuple(
        LogPattern(
            p["id"],
            Severity(p.get("severity", "warning")),
            p["title"],
            re.compile(p["regex"]),
            " ".join(p["advice"].split()),
        )
        for p in data.get("pattern", [])
    )


@functools.lru_cache(maxsize=1)
def default_patterns() -> tuple[LogPattern, ...]:
    """The shipped pattern file, read once (on the first HealthTracker, i.e. in the monitor service)."""
    return load_patterns()


def match_line(line: str, patterns: Sequence[LogPattern]) -> LogPattern | None:
    """The first pattern that matches the line's text (ANSI and the "<file>: " prefix removed)."""
    _, text = split_line(line)
    for p in patterns:
        if p.regex.search(text):
            return p
    return None


def log_alert(p: LogPattern, line: str, since: float, count: int) -> Alert:
    shown = line.strip()
    if len(shown) > 300:
        shown = shown[:297] + "..."
    more = f" ({count} matching lines)" if count > 1 else ""
    msg = f"{p.title} in the logs{more}: {shown} — {p.advice}"
    return Alert(f"log:{p.id}", p.severity, p.title, msg, since=since, line=shown, count=count)


@dataclass
class _LogHit:
    pattern: LogPattern
    line: str
    since: float
    last: float
    count: int = 1


# ------------------------------------------------------------------------------------ the tracker
@dataclass
class _GpuState:
    used: bool = False  # held real memory at some point: the run uses it
    dead_since: float | None = None
    step_at_death: int | None = None


@dataclass
class HealthTracker:
    """Per-pod state for the rules. ``observe`` one sample at a time; read ``alerts`` and ``progress``."""

    settings: HealthSettings = field(default_factory=HealthSettings)
    patterns: Sequence[LogPattern] | None = None
    max_steps: int | None = None
    price_per_hr: float | None = None
    tail_len: int = 200
    host_rules: bool = True  # disk and open files; off for the demo pod, whose host is this machine

    def __post_init__(self) -> None:
        if self.patterns is None:
            self.patterns = default_patterns()
        self.run = RunTracker(max_steps=self.max_steps, price_per_hr=self.price_per_hr)
        self.tail: deque[str] = deque(maxlen=self.tail_len)
        self.tail_total = 0
        self.progress_at: float | None = None  # last new step, or end of a checkpoint write
        self.last_log_at: float | None = None
        self.started_at: float | None = None  # the first line of the run seen (log or metrics)
        self._gpus: dict[int, _GpuState] = {}
        self._hang_since: float | None = None
        self._hang_gpus = 0
        self._disk: deque[tuple[float, int]] = deque()
        self._since: dict[str, float] = {}  # alert id -> when its condition started (stable ids)
        self._hits: dict[str, _LogHit] = {}
        self.alerts: tuple[Alert, ...] = ()
        self.life = LifeTracker(self.settings.stall_cap_s)  # the run's phase (services.monitor.runlife)
        self._was_paused = False
        self._progress: tuple[RunProgress, RunLife, RunProgress] | None = None  # (view, life) -> progress
        self.signals = SignalTracker(self.settings)  # prime-rl's own signals (services.monitor.signals)

    # -- feeding ---------------------------------------------------------------------------------
    def feed_log(self, line: str, at: float) -> None:
        line = plain(line)  # the tail and the alerts show it; the back-fill's lines come here unparsed
        self.tail.append(line)
        self.tail_total += 1
        self.last_log_at = at
        if self.started_at is None:
            self.started_at = at
        if self.run.feed_log(line, at) == "step":
            self.progress_at = at
        self.life.feed_log(line, at)
        p = match_line(line, self.patterns or ())
        if p is not None:
            hit = self._hits.get(p.id)
            if hit is None:
                self._hits[p.id] = _LogHit(p, line, at, at)
            else:
                hit.count += 1
                hit.last = at

    def feed_metrics(self, line: str, at: float) -> None:
        if self.started_at is None:
            self.started_at = at
        if self.run.feed_metrics(line, at):
            self.progress_at = at

    def feed_tails(self, tails: dict) -> None:
        """One look at the run dir (``run_progress.TAIL_SCRIPT``'s answer): every log's tail, each line timed
        by its own stamp (``time_lines``), all files merged in time order, so a step in one file and an
        error in another keep their real order and age. metrics.jsonl / training.csv fill in when no log
        has steps (console-less runs). Garbled parts are skipped."""
        timed: list[tuple[float, int, int, str]] = []
        for n, log in enumerate(tails.get("logs") or []):
            if not isinstance(log, dict) or not isinstance(log.get("mtime"), (int, float)):
                continue
            lines = [str(x) for x in log.get("lines") or []]
            stem = str(log.get("stem") or "log")
            for i, at in enumerate(time_lines(lines, float(log["mtime"]))):
                timed.append((at, n, i, f"{stem}: {lines[i]}"))
        for at, _, _, line in sorted(timed):
            self.feed_log(line, at)
        for name in ("metrics.jsonl", "training.csv"):
            part = tails.get(name)
            if (
                self.run.step is not None
                or not isinstance(part, dict)
                or not isinstance(part.get("mtime"), (int, float))
            ):
                continue
            lines = [str(x) for x in part.get("lines") or []]
            mtime = float(part["mtime"])
            times = (
                time_records(lines, mtime)
                if name == "metrics.jsonl"
                else [mtime - (len(lines) - 1 - i) * 1e-3 for i in range(len(lines))]
            )
            for line, at in zip(lines, times):
                if name == "metrics.jsonl":
                    self.feed_metrics(line, at)
                    continue
                self.started_at = at if self.started_at is None else self.started_at
                if self.run.feed_csv(line, at):
                    self.progress_at = at

    def _restart(self, now: float) -> None:
        """Another run began in this run dir (a resume from a checkpoint, a relaunch): its steps start again below
        the old run's last one, and it is judged as a starting run -- the start budget from now -- until its
        first step. What the pod costs keeps counting from where it did."""
        old = self.run
        self.run = RunTracker(max_steps=old.max_steps, price_per_hr=old.price_per_hr)
        self.run.billed_since, self.run.billed_basis, self.run.now = old.billed_since, old.billed_basis, now
        self.progress_at, self.started_at = None, now

    def set_billing(self, since: float | None, basis: str | None) -> None:
        """Where "$ so far" counts from (the pod's clock): the rental's creation or the pod's start."""
        self.run.billed_since, self.run.billed_basis = since, basis
        self.run._view = None

    def observe(self, sample: Sample, now: float | None = None, *, wandb_note: str = "") -> tuple[Alert, ...]:
        """Take one sample (its new log and metrics lines, GPUs, host, checkpoints) and re-evaluate."""
        now = sample.t if now is None else now
        self.run.now = now
        if sample.max_steps and sample.max_steps != self.run.max_steps:
            self.run.max_steps = sample.max_steps  # the run's configs say where it ends: ETA, $ to go
        if sample.life is not None:
            before = self.life.record
            if before is not None and sample.life.id and sample.life.id != before.id:
                self._restart(now)  # a new run in this dir (a resume, a relaunch): it starts again
            self.life.record = sample.life
        for line in sample.log:
            self.feed_log(line, now)
        for line in sample.metrics:
            self.feed_metrics(line, now)
        self.run.feed_ckpts(sample.ckpts, now, self.settings.ckpt_stale_s)
        paused = self.run.checkpointing or self.life.evaluating(now)
        if self._was_paused and not paused and self.progress_at is not None:
            self.progress_at = max(self.progress_at, now)  # the budget restarts after a write or an eval
        self._was_paused = paused
        self._track_gpus(sample.gpus, now)
        self._track_disk(sample.host, now)
        self.signals.observe(sample.signals, sample.metrics, now)
        return self.evaluate(now, host=sample.host, ckpts=sample.ckpts, gpus=sample.gpus, wandb_note=wandb_note)

    def _track_gpus(self, gpus: Sequence[GpuSample], now: float) -> None:
        s = self.settings
        states = self._gpus
        used_bytes, dead_bytes, dead_util = s.gpu_used_mem_bytes, s.gpu_dead_mem_bytes, s.gpu_dead_util_pct
        busy = busy_low_power = 0
        for g in gpus:
            st = states.get(g.index)
            if st is None:
                st = states[g.index] = _GpuState()
            mem, util = g.mem_used, g.util
            if mem is not None and mem >= used_bytes:
                st.used = True
                busy += 1  # holds real memory now: a GPU of the run (an NCCL hang is all of them waiting)
            zero = mem is not None and mem <= dead_bytes and util is not None and util <= dead_util
            if zero and st.used:
                if st.dead_since is None:
                    st.dead_since, st.step_at_death = now, self.run.progress().step
            else:
                st.dead_since, st.step_at_death = None, None
            if util is not None and util >= s.nccl_util_pct and g.power_w is not None and g.power_w <= s.nccl_power_w:
                busy_low_power += 1
        hang = busy > 0 and busy_low_power >= busy
        if not hang:
            self._hang_since = None
        elif self._hang_since is None:
            self._hang_since = now
        self._hang_gpus = busy_low_power

    def _track_disk(self, host: HostSample, now: float) -> None:
        if host.disk_used is None:
            return
        d = self._disk
        if not d or now - d[-1][0] >= 10.0:  # one point per 10 s is plenty for a rate
            d.append((now, host.disk_used))
        while len(d) > 2 and now - d[0][0] > self.settings.disk_rate_window_s:
            d.popleft()

    def disk_rate(self) -> float | None:
        d = self._disk
        if len(d) < 2 or d[-1][0] - d[0][0] < 30.0:
            return None
        return (d[-1][1] - d[0][1]) / (d[-1][0] - d[0][0])

    def run_active(self, now: float) -> bool:
        """Steps (or log lines) are still coming: a dead GPU then means a dead component, not the end."""
        run = self.run.progress()
        if run.finished or self.life.life.ended:
            return False
        budget = stall_budget(run.step_time_s, self.settings)
        recent_step = self.progress_at is not None and now - self.progress_at <= budget
        if run.step is None:  # starting: its logs are moving (a GPU dying now = "died before step 1")
            budget = self.settings.stall_start_s
        recent_log = self.last_log_at is not None and now - self.last_log_at <= budget
        return recent_step or recent_log

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(
        self,
        now: float,
        *,
        host: HostSample | None = None,
        ckpts: Sequence[CheckpointInfo] = (),
        gpus: Sequence[GpuSample] = (),
        wandb_note: str = "",
    ) -> tuple[Alert, ...]:
        s = self.settings
        run = self.run.progress()
        life = self.life.update(run, now)
        found: list[Alert | None] = []
        active = self.run_active(now)
        if not life.ended:  # a run that ended cannot stall, lose a GPU or hang: a crash is said once, below
            dead_since = {i: g.dead_since for i, g in self._gpus.items() if g.dead_since is not None}
            found += [
                no_progress_alert(run, self.progress_at, now, s, wandb_note, self.started_at, life.phase.paused),
                gpu_dead_alert(  # no GPU at ~0 (every healthy sample): nothing to say, nothing to gather
                    dead_since,
                    {i: g.step_at_death for i, g in self._gpus.items()},
                    active,
                    now,
                    s,
                    survivors=sum(1 for g in self._gpus.values() if g.used and g.dead_since is None),
                )
                if dead_since
                else None,
                nccl_hang_alert(self._hang_since, self.progress_at, self._hang_gpus, now, s),
            ]
        found.append(crash_alert(life, self._last_error()))
        if host is not None and self.host_rules:
            found.append(disk_alert(host, ckpts, self.disk_rate(), now, s, self._since.get("disk")))
            if self.started_at is not None:  # a machine running no run (this laptop as `local`) needs no
                # warning about a trainer's limit: the launch's pre-flight checks it before one starts
                found.append(nofile_alert(host, now, s, self._since.get("nofile")))
        for key, hit in list(self._hits.items()):
            if self._moved_past(hit) or now - hit.last > s.log_alert_ttl_s:
                del self._hits[key]  # the run moved on (or it is old news): cleared, may fire again
                continue
            if life.phase is Phase.KILLED and life.since is not None and hit.since >= life.since - KILL_ECHO_S:
                continue  # what the processes said while a user's kill stopped them (a traceback, "Terminated")
            if life.phase is Phase.CRASHED and hit.pattern.id == "traceback":
                continue  # the crash alert quotes it
            found.append(log_alert(hit.pattern, hit.line, hit.since, hit.count))
        signal_alerts = self.signals.evaluate(
            now,
            stopped=life.ended,
            checkpointing=life.phase.paused,
            trainer_step=self.run.trainer_step,
            budget=stall_budget(run.step_time_s, s),
            progress_at=self.progress_at,
            run_active=active,
        )
        found.extend(signal_alerts)
        alerts = [a for a in found if a is not None]
        ids = {a.id for a in signal_alerts}
        if ids & set(STALL_IDS):  # the same stall, said with its cause: not twice
            hidden = {"no-progress", "gpu-dead"} if "inference-down" in ids else {"no-progress"}
            alerts = [a for a in alerts if a.id not in hidden]
        self._since = {a.id: a.since for a in alerts}
        alerts.sort(key=lambda a: (-a.severity.rank, a.since, a.id))
        if tuple(alerts) != self.alerts:
            self.alerts = tuple(alerts)
        return self.alerts

    def _last_error(self) -> str | None:
        """The newest error line the patterns matched (a crash's likely cause), shortened."""
        if not self._hits:
            return None
        # the newest; of lines seen together, a named error (an OOM) before the generic traceback it ends
        hit = max(self._hits.values(), key=lambda h: (h.last, h.pattern.id != "traceback"))
        line = hit.line.strip()
        return line if len(line) <= 300 else line[:297] + "..."

    def _moved_past(self, hit: _LogHit) -> bool:
        """A step after the error line (from the logs, metrics.jsonl or training.csv — a checkpoint write
        ending is not one): of the line's own component, or of the trainer (the run's progress);
        without trainer steps, any step clears a non-trainer error. Another file's progress never clears
        a trainer error (the orchestrator keeps logging while the trainer is dead)."""
        lines = self.run.step_lines
        component, _ = split_line(hit.line)
        if component is None:
            return any(t > hit.last for t in lines.values())
        if lines.get(component, -1.0) > hit.last or lines.get("trainer", -1.0) > hit.last:
            return True
        return component != "trainer" and "trainer" not in lines and any(t > hit.last for t in lines.values())

    @property
    def progress(self) -> RunProgress:
        """The run's progress with its phase; once the run ended, no ETA and no "$ to go" (nothing is to go)."""
        view = self.run.progress()
        life = self.life.life
        cached = self._progress
        if cached is not None and cached[0] is view and cached[1] == life:
            return cached[2]
        if life.ended:
            progress = replace(view, phase=life.phase.value, eta_s=None, cost_to_finish=None)
        else:
            progress = replace(view, phase=life.phase.value)
        self._progress = (view, life, progress)
        return progress


def worst(alerts: Iterable[Alert]) -> Severity | None:
    ranked = [a.severity for a in alerts]
    return max(ranked, key=lambda s: s.rank) if ranked else None
