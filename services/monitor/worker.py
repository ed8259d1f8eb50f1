"""The monitor's settings and one pod's state (history, gaps, counters, health), which only that pod's task
in :class:`services.monitor.service.MonitorService` mutates."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from services.models import (
    Alert,
    Gap,
    HostKeyPrompt,
    IdleFigure,
    Pod,
    PodSnapshot,
    PodStatus,
    RunProgress,
    Sample,
    WandbStatus,
)
from services.monitor import wandb_status
from services.monitor.health import HealthSettings, HealthTracker
from services.monitor.idle import IdleTracker, run_active
from services.monitor.metrics import EpisodeTiming, episode_timings
from services.monitor.trend import HISTORY_LEN, TrendBuilder
from services.monitor.wandb_status import WandbPoller

if TYPE_CHECKING:
    from services.demo.connection import DemoOptions
    from services.monitor.cluster import ClusterState

log = logging.getLogger("services.monitor.service")

MAX_GAPS = 50
MAX_LOG_FILES = 64  # a run's logs whose read positions are kept (a run has a handful)


@dataclass(frozen=True)
class MonitorSettings:
    interval: float = 1.0  # NVML averages over ~1 s: sampling faster adds nothing
    stale_after: float = 5.0
    restart_after: float = 60.0  # a channel silent this long is torn down and reopened
    history_len: int = HISTORY_LEN  # full samples kept per pod (5 min at 1 Hz; ~2.4 KB each with 8 GPUs parsed)
    history_bytes: int = 8 << 20  # ... and at most this much of the pod's sample lines: a pod sending huge samples
    # keeps fewer of them (a real sample line is ~1.3 KB with 8 GPUs)
    trend_s: float = 3600.0  # the GPU graphs' downsampled history (services.monitor.trend: ~0.6 KB per 10 s)
    max_rate: float = 10.0  # samples accepted per second per pod (a burst of as many); more are dropped, counted
    metrics_len: int = 2000  # metrics.jsonl lines kept per pod (~3 records per step: the last ~600 steps)
    episodes_len: int = 4000  # per-trace timings from traces.jsonl kept per pod (the tool-time percentiles)
    backoff_max: float = 60.0
    unsupported_retry: float = 1800.0  # a pod lacking what monitoring needs (no python3, no exec): r retries sooner
    keepalive_interval: float = 15.0
    demo_seed: int = 0
    demo_gpus: int = 8
    demo_scenario: str = "training"
    demo_max_ticks: int | None = None
    demo_max_steps: int = 3600  # the simulated run's length (2 h at 2 s a step): step N/max and an ETA
    demo_runbook: bool = False  # the simulated trainer writes training.csv, not prime-rl's logs
    demo_price_per_hr: float = 23.92  # 8 x H100 at ~$2.99/GPU-hour: "$ so far / to go" on the SIMULATED pod
    health: HealthSettings = HealthSettings()  # thresholds of the health rules (services.monitor.health)
    log_tail_len: int = 200  # run log lines kept per pod for the monitor pane
    wandb: bool | None = None  # poll W&B for runs whose logs name one; None: when WANDB_API_KEY is set
    wandb_interval: float = 60.0  # at most one W&B request per run per this many seconds
    demo_step_seconds: float = 2.0
    demo_ckpt_interval: int = 5  # the simulated trainer saves every N steps (10 s at 2 s a step: R soon works)
    slurm_interval: float = 10.0  # a Slurm login node: its jobs and nodes looked at every this many seconds
    slurm_timeout: float = 20.0  # ... each Slurm command bounded so (a busy controller answers slowly)

    def demo_options(self) -> DemoOptions:
        from services.demo.connection import DemoOptions

        return DemoOptions(
            seed=self.demo_seed,
            gpus=self.demo_gpus,
            scenario=self.demo_scenario,
            max_ticks=self.demo_max_ticks,
            interval=self.interval,
            max_steps=self.demo_max_steps,
            runbook=self.demo_runbook,
            step_seconds=self.demo_step_seconds,
            ckpt_interval=self.demo_ckpt_interval,
        )


class PodMonitorState:
    """The monitor's state of one pod; only the pod's own task (MonitorService) mutates it."""

    def __init__(self, pod: Pod, settings: MonitorSettings, clock: Callable[[], float]) -> None:
        self.pod = pod
        self.settings = settings
        self.clock = clock
        self.status = PodStatus.connecting(clock())
        self.history: deque[Sample] = deque(maxlen=settings.history_len)
        self._history_sizes: deque[int] = deque()  # each kept sample's line length, oldest first
        self.history_bytes = 0
        self.trend = TrendBuilder(settings.trend_s)  # the GPU graphs' hour, downsampled
        self.metrics: deque[str] = deque(maxlen=settings.metrics_len)
        self.metrics_total = 0
        self._metrics_view: tuple[str, ...] = ()  # rebuilt only when lines arrive
        self.episodes: deque[EpisodeTiming] = deque(maxlen=settings.episodes_len)
        self._episodes_view: tuple[EpisodeTiming, ...] = ()
        self.gaps: deque[Gap] = deque(maxlen=MAX_GAPS)
        self.samples_total = 0
        self.malformed_total = 0
        self.dropped_total = 0
        self.bytes_total = 0
        self.cut_bytes = self.cut_lines = 0  # what the probe left out of its samples (Sample.cut_*), in all
        self.last_received: float | None = None
        self.wake = asyncio.Event()
        self.stopped = False  # set by remove(): the loop ends even if a cancellation got lost
        self.pending_key: HostKeyPrompt | None = None
        self.task: asyncio.Task | None = None
        self.restart = asyncio.Event()  # set_run_dir: reopen the probe on the new run dir
        self.first_look_done: str | None = None  # the run dir whose tails filled the health tracker
        self.followed = False  # pod.run_dir came from the run records (not pods.toml / set_run_dir)
        self.new_run()
        self.alerts: tuple[Alert, ...] = ()
        self.run: RunProgress | None = None
        self._tail_view: tuple[str, ...] = ()
        self.wandb_path: str | None = None  # "entity/project/run_id", from the W&B line in the run's logs
        self.wandb_poller: WandbPoller | None = None
        self.wandb: WandbStatus | None = None
        self.wandb_task: asyncio.Future | None = None
        # a Slurm login node's cluster (services.monitor.cluster), looked at beside the samples
        self.cluster: ClusterState | None = None
        if pod.scheduler == "slurm":
            from services.monitor.cluster import ClusterState  # (its Slurm modules: not for any other pod)

            self.cluster = ClusterState()
        self.cluster_task: asyncio.Task | None = None
        self.idle_tracker = IdleTracker(self.settings.health, self._price())
        self.idle: IdleFigure | None = None
        self.snapshot = self._build()

    def new_run(self) -> None:
        """Fresh health rules and run progress (at start, and when the pod's run dir changes). They are
        evaluated per sample over that sample's new data only. The demo simulates GPUs and a run, not the
        host: its disk and open-files figures are this machine's."""
        self.health = HealthTracker(
            self.settings.health,
            price_per_hr=self._price(),
            tail_len=self.settings.log_tail_len,
            host_rules=self.pod.host_rules,
        )
        self.run = None
        self._tail_view = ()
        self.log_pos: dict[str, tuple[int, int]] = {}  # the run's logs read up to (note_log_positions)
        self.episodes.clear()  # another run's traces
        self._episodes_view = ()

    def note_log_positions(self, items: object) -> None:
        """Where the probe (its sample's "logpos") or the first look has read each of the run's logs up to:
        [[realpath, ino, offset], ...]. The next probe started on this run goes on from there (--log-from),
        so the lines a log got while no probe read it (a reconnect, the moment between the first look and
        the probe's start) still come. Malformed entries (a pod we do not control) are ignored; at most
        MAX_LOG_FILES logs are kept."""
        if not isinstance(items, list):
            return
        pos = self.log_pos
        for item in items[:MAX_LOG_FILES]:
            if (
                isinstance(item, list)
                and len(item) == 3
                and isinstance(path := item[0], str)
                and 0 < len(path) <= 4096
                and all(type(x) is int and 0 <= x < 1 << 63 for x in item[1:])
                and (path in pos or len(pos) < MAX_LOG_FILES)
            ):
                pos[path] = (item[1], item[2])

    def log_from_arg(self) -> list[str]:
        """The probe's --log-from for this run's logs (none known: no argument)."""
        if not self.log_pos:
            return []
        return ["--log-from", json.dumps([[p, ino, off] for p, (ino, off) in self.log_pos.items()])]

    def _price(self) -> float | None:
        price = self.pod.price_per_hr
        if price is None and self.pod.simulated:
            price = self.settings.demo_price_per_hr
        return price

    def _build(self) -> PodSnapshot:
        return PodSnapshot(
            pod=self.pod,
            status=self.status,
            history=tuple(self.history),
            trend=self.trend.view,
            gaps=tuple(self.gaps),
            samples_total=self.samples_total,
            malformed_total=self.malformed_total,
            dropped_total=self.dropped_total,
            bytes_total=self.bytes_total,
            cut_bytes=self.cut_bytes,
            cut_lines=self.cut_lines,
            last_received=self.last_received,
            metrics=self._metrics_view,
            metrics_total=self.metrics_total,
            alerts=self._alerts(),
            run=self.run,
            log_tail=self._tail_view,
            wandb=self.wandb,
            episodes=self._episodes_view,
            cluster=None if self.cluster is None else self.cluster.view,
            idle=self.idle,
        )

    def _alerts(self) -> tuple[Alert, ...]:
        """The health rules' alerts, and a cluster's beside them, worst first."""
        if self.cluster is None or not self.cluster.alerts:
            return self.alerts
        return tuple(sorted(self.cluster.alerts + self.alerts, key=lambda a: -a.severity.rank))

    def observe_health(self, sample: Sample) -> None:
        """Rules over this sample (the pod's clock); a failing rule must never stop sampling."""
        for line in sample.log:
            if (path := wandb_status.run_path_in(line)) is not None and path != self.wandb_path:
                self.wandb_path, self.wandb = path, None  # a new run (or the first we saw)
        note = self.wandb.note(sample.t) if self.wandb is not None else ""
        try:
            self.alerts = self.health.observe(sample, wandb_note=note)
            self.run = self.health.progress if self.health.progress.step is not None else None
        except Exception:
            log.exception("health rules failed for %s", self.pod.name)
        if sample.log:
            self._tail_view = tuple(self.health.tail)
        try:
            health = self.health
            active = run_active(health.life.life.phase, health.life.record, health.started_at is not None)
            self.idle = self.idle_tracker.observe(sample, active=active)
        except Exception:
            log.exception("idle check failed for %s", self.pod.name)

    def keep(self, sample: Sample, size: int) -> None:
        """Add a sample (``size``: its line's length) to the history, dropping the oldest ones past
        ``history_len`` samples or ``history_bytes`` (the newest always stays)."""
        history, sizes = self.history, self._history_sizes
        if len(history) == history.maxlen:
            history.popleft()
            self.history_bytes -= sizes.popleft()
        history.append(sample)
        self.trend.add(sample)
        sizes.append(size)
        self.history_bytes += size
        while self.history_bytes > self.settings.history_bytes and len(history) > 1:
            history.popleft()
            self.history_bytes -= sizes.popleft()

    def add_metrics(self, lines: tuple[str, ...]) -> None:
        if lines:
            self.metrics.extend(lines)
            self.metrics_total += len(lines)
            self._metrics_view = tuple(self.metrics)

    def add_episodes(self, raw: object) -> None:
        """The probe's "traces" entries of one sample (absent from older probes: nothing)."""
        if raw and (found := episode_timings(raw)):
            self.episodes.extend(found)
            self._episodes_view = tuple(self.episodes)

    def open_gap(self) -> None:
        if self.samples_total and (not self.gaps or self.gaps[-1].end is not None):
            self.gaps.append(Gap(start=self.last_received or self.clock(), end=None))

    def close_gap(self, now: float) -> None:
        if self.gaps and self.gaps[-1].end is None:
            self.gaps[-1] = replace(self.gaps[-1], end=now)
