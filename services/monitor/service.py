"""One asyncio task per pod: connect, start the probe, parse its stream, keep history, reconnect.

Data flows one way: probe line -> :class:`Sample` -> bounded history -> immutable
:class:`PodSnapshot` -> ``on_snapshot`` callback (the App turns it into a Textual message).

States: CONNECTING until the first sample, ONLINE while samples arrive, STALE when none came for
``stale_after`` seconds (the channel is still up), OFFLINE when the connection or probe is gone —
then retried with backoff 1, 2, 4, ... ≤ ``backoff_max`` s. AUTH_FAILED and the host-key states wait
for the user (``reconnect`` / ``trust_host_key``): retrying them by ourselves would only spam the pod.
Every stretch without samples is recorded as a :class:`Gap` so the history shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import contextlib
import json
import logging
import shlex
import sys
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable

from services.errors import AuthError, HostKeyChanged, HostKeyError, PrimeTrainError, ProbeFormatError
from services.monitor.health import HealthSettings, HealthTracker
from services.models import (
    Alert,
    RunProgress,
    Gap,
    HostKeyPrompt,
    Pod,
    PodKind,
    PodSnapshot,
    PodState,
    PodStatus,
    Sample,
)
from services.pod.ssh import Connection, LocalConnection, SSHConnection, SSHOptions, trust_host_key
from services.monitor import wandb_status
from services.runs import newest_run_dir
from services.monitor.progress import TAIL_SCRIPT
from services.monitor.wandb_status import WandbPoller
from services.models import WandbStatus

log = logging.getLogger(__name__)

MAX_GAPS = 50


@dataclass(frozen=True)
class MonitorSettings:
    interval: float = 1.0  # NVML averages over ~1 s: sampling faster adds nothing
    stale_after: float = 5.0
    restart_after: float = 60.0  # a channel silent this long is torn down and reopened
    history_len: int = 600  # samples kept per pod (10 min at 1 Hz)
    metrics_len: int = 2000  # metrics.jsonl lines kept per pod (~3 records per step: the last ~600 steps)
    backoff_max: float = 60.0
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

    def demo_options(self) -> "DemoOptions":
        from services.demo.connection import DemoOptions

        return DemoOptions(seed=self.demo_seed, gpus=self.demo_gpus, scenario=self.demo_scenario,
                           max_ticks=self.demo_max_ticks, interval=self.interval, max_steps=self.demo_max_steps,
                           runbook=self.demo_runbook, step_seconds=self.demo_step_seconds)


if TYPE_CHECKING:
    from services.demo.connection import DemoOptions

ConnectionFactory = Callable[[Pod], Connection]
SnapshotCallback = Callable[[PodSnapshot], None]


def backoff_delay(attempt: int, cap: float) -> float:
    """1, 2, 4, ... seconds, never above ``cap`` (attempt counts from 0)."""
    return float(min(cap, 2 ** min(attempt, 16)))


class _PodWorker:
    """State of one pod; only its own task mutates it."""

    def __init__(self, pod: Pod, settings: MonitorSettings, clock: Callable[[], float]) -> None:
        self.pod = pod
        self.settings = settings
        self.clock = clock
        self.status = PodStatus(PodState.CONNECTING, "connecting", since=clock())
        self.history: deque[Sample] = deque(maxlen=settings.history_len)
        self.metrics: deque[str] = deque(maxlen=settings.metrics_len)
        self.metrics_total = 0
        self._metrics_view: tuple[str, ...] = ()  # rebuilt only when lines arrive
        self.gaps: deque[Gap] = deque(maxlen=MAX_GAPS)
        self.samples_total = 0
        self.malformed_total = 0
        self.bytes_total = 0
        self.last_received: float | None = None
        self.wake = asyncio.Event()
        self.stopped = False  # set by remove(): the loop ends even if a cancellation got lost
        self.pending_key: HostKeyPrompt | None = None
        self.task: asyncio.Task | None = None
        self.restart = asyncio.Event()  # set_run_dir: reopen the probe on the new run dir
        self.seeded: str | None = None  # the run dir whose tails seeded the health tracker
        self.followed = False  # pod.run_dir came from the run records (not pods.toml / set_run_dir)
        self.new_run()
        self.alerts: tuple[Alert, ...] = ()
        self.run: RunProgress | None = None
        self._tail_view: tuple[str, ...] = ()
        self.wandb_path: str | None = None  # "entity/project/run_id", from the W&B line in the run's logs
        self.wandb_poller: WandbPoller | None = None
        self.wandb: WandbStatus | None = None
        self.wandb_task: asyncio.Future | None = None
        self.snapshot = self._build()

    def new_run(self) -> None:
        """Fresh health rules and run progress (at start, and when the pod's run dir changes). They are
        evaluated per sample over that sample's new data only. The demo simulates GPUs and a run, not the
        host: its disk and open-files figures are this machine's."""
        price = self.pod.price_per_hr
        if price is None and self.pod.kind is PodKind.DEMO:
            price = self.settings.demo_price_per_hr
        self.health = HealthTracker(self.settings.health, price_per_hr=price, tail_len=self.settings.log_tail_len,
                                    host_rules=self.pod.kind is not PodKind.DEMO)
        self.run = None
        self._tail_view = ()

    def _build(self) -> PodSnapshot:
        return PodSnapshot(
            pod=self.pod,
            status=self.status,
            history=tuple(self.history),
            gaps=tuple(self.gaps),
            samples_total=self.samples_total,
            malformed_total=self.malformed_total,
            bytes_total=self.bytes_total,
            last_received=self.last_received,
            metrics=self._metrics_view,
            metrics_total=self.metrics_total,
            alerts=self.alerts,
            run=self.run,
            log_tail=self._tail_view,
            wandb=self.wandb,
        )

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

    def add_metrics(self, lines: tuple[str, ...]) -> None:
        if lines:
            self.metrics.extend(lines)
            self.metrics_total += len(lines)
            self._metrics_view = tuple(self.metrics)

    def open_gap(self) -> None:
        if self.samples_total and (not self.gaps or self.gaps[-1].end is not None):
            self.gaps.append(Gap(start=self.last_received or self.clock(), end=None))

    def close_gap(self, now: float) -> None:
        if self.gaps and self.gaps[-1].end is None:
            self.gaps[-1] = replace(self.gaps[-1], end=now)


class MonitorService:
    def __init__(
        self,
        on_snapshot: SnapshotCallback,
        *,
        settings: MonitorSettings = MonitorSettings(),
        clock: Callable[[], float] = time.time,
        connector: ConnectionFactory | None = None,
        wandb_api_factory: Callable[[], Any] | None = None,
    ) -> None:
        self._on_snapshot = on_snapshot
        self.settings = settings
        self._wandb_on = wandb_status.enabled() if settings.wandb is None else settings.wandb
        self._wandb_api = wandb_api_factory or wandb_status.default_api  # lazy: imports wandb on first use
        self._clock = clock
        self._connector = connector or self._default_connector
        self._workers: dict[str, _PodWorker] = {}
        # set by the App: where launches are recorded (a pod without run_dir follows its newest launch), and
        # when a rented pod was created (its "$ so far" counts from there); both called in a thread
        self.runs_dir: Any = None
        self.rented_at: Callable[[Pod], float | None] | None = None

    # ------------------------------------------------------------------ public API

    def add(self, pod: Pod) -> None:
        if pod.name in self._workers:
            raise ValueError(f"a pod named {pod.name!r} is already monitored")
        worker = _PodWorker(pod, self.settings, self._clock)
        self._workers[pod.name] = worker
        worker.task = asyncio.get_running_loop().create_task(
            self._run(worker), name=f"monitor:{pod.name}"
        )
        self._emit(worker)

    async def remove(self, name: str) -> None:
        worker = self._workers.pop(name, None)
        if worker is None or worker.task is None:
            return
        worker.stopped = True
        worker.wake.set()
        worker.task.cancel()
        if worker.wandb_task is not None:
            worker.wandb_task.cancel()
        # asyncio.wait never raises the task's exception and, unlike wait_for, has no timeout race.
        done, _ = await asyncio.wait({worker.task}, timeout=10.0)
        if not done:
            log.error("monitor task for %s did not stop within 10 s", name)

    def trust_host_key(self, name: str) -> None:
        """The user said yes to an unknown key: record it in known_hosts and reconnect now."""
        worker = self._workers[name]
        prompt = worker.pending_key
        if prompt is None or prompt.changed:
            raise PrimeTrainError("there is no new host key to trust for this pod")
        trust_host_key(prompt.key_line, prompt.known_hosts_file)
        worker.pending_key = None
        worker.wake.set()

    def reconnect(self, name: str) -> None:
        self._workers[name].wake.set()

    def set_run_dir(self, name: str, run_dir: str) -> Pod | None:
        """A launch or resume started a run in ``run_dir``: watch it from now on (fresh run progress and
        alerts, the GPU history kept; the probe reopened on it). Returns the updated pod (None: unknown
        pod or nothing changed)."""
        worker = self._workers.get(name)
        if worker is None or not run_dir or worker.pod.run_dir == run_dir:
            return None
        worker.pod = replace(worker.pod, run_dir=run_dir)
        worker.followed = False
        worker.new_run()
        worker.seeded = None
        worker.restart.set()
        worker.wake.set()
        self._emit(worker)
        return worker.pod

    def snapshot(self, name: str) -> PodSnapshot:
        return self._workers[name].snapshot

    def snapshots(self) -> list[PodSnapshot]:
        return [w.snapshot for w in self._workers.values()]

    def names(self) -> list[str]:
        return list(self._workers)

    async def aclose(self) -> None:
        for name in list(self._workers):
            await self.remove(name)

    # ------------------------------------------------------------------ internals

    def _default_connector(self, pod: Pod) -> Connection:
        if pod.kind is PodKind.SSH:
            return SSHConnection(pod, SSHOptions(keepalive_interval=self.settings.keepalive_interval))
        if pod.kind is PodKind.DEMO:
            from services.demo.connection import DemoConnection

            return DemoConnection(pod, self.settings.demo_options())
        return LocalConnection(pod)

    def _probe_args(self, pod: Pod, run_dir: str | None = None) -> list[str]:
        args = ["--interval", f"{self.settings.interval:g}"]
        if run_dir or pod.run_dir:
            args += ["--run-dir", run_dir or pod.run_dir]
        return args

    async def _run_dir(self, worker: _PodWorker) -> str | None:
        """The pod's run_dir, else the run dir of its newest launch recorded on this machine."""
        if (worker.pod.run_dir and not worker.followed) or self.runs_dir is None or worker.pod.kind is PodKind.DEMO:
            return worker.pod.run_dir
        try:
            return await asyncio.to_thread(newest_run_dir, self.runs_dir, worker.pod.name)
        except OSError:
            return None

    async def _seed(self, worker: _PodWorker, conn: Connection, run_dir: str) -> None:
        """One look at the run dir before the probe starts (the probe reads logs from their end): the logs'
        tails timed by their own stamps, so a run found stalled alerts at once and its last step is not
        taken as new. Billing: the rental's creation, else (a remote pod) its uptime. Best effort."""
        worker.seeded = run_dir
        health = worker.health  # set_run_dir may start a new run meanwhile: this look is then not its
        python = "python3" if isinstance(conn, SSHConnection) else shlex.quote(sys.executable)
        try:
            code, out, _ = await conn.run(f"{python} -c {shlex.quote(TAIL_SCRIPT)} {shlex.quote(run_dir)}",
                                          timeout=30.0)
            tails = json.loads(out) if code == 0 else None
        except (PrimeTrainError, OSError, ValueError, asyncio.TimeoutError) as exc:
            log.info("no first look at %s on %s: %s", run_dir, worker.pod.name, exc)
            tails = None
        rented = None
        if self.rented_at is not None:
            with contextlib.suppress(Exception):
                rented = await asyncio.to_thread(self.rented_at, worker.pod)
        if worker.health is not health:
            return  # another run dir was set while looking: its own first look follows
        try:
            if isinstance(tails, dict):  # ~0.1 ms a line: off the event loop (the probe is not started yet)
                await asyncio.to_thread(health.feed_tails, tails)
                up = tails.get("uptime")
                if rented is None and worker.pod.kind is PodKind.SSH and isinstance(up, (int, float)):
                    health.set_billing(float(tails.get("now") or time.time()) - up, "since the pod started")
                if worker.health is health:
                    worker._tail_view = tuple(health.tail)
            if rented is not None:
                health.set_billing(float(rented), "since rented")
        except Exception:  # a failing seed must never stop sampling
            log.exception("seeding the health rules failed for %s", worker.pod.name)

    def _set(self, worker: _PodWorker, state: PodState, reason: str = "", *,
             next_retry: float | None = None, host_key: HostKeyPrompt | None = None) -> None:
        now = self._clock()
        since = worker.status.since if worker.status.state is state else now
        worker.status = PodStatus(state, reason, since=since, next_retry=next_retry, host_key=host_key)
        self._emit(worker)

    def _emit(self, worker: _PodWorker) -> None:
        worker.snapshot = worker._build()
        try:
            self._on_snapshot(worker.snapshot)
        except Exception:  # a broken subscriber must not stop sampling
            log.exception("snapshot callback failed for %s", worker.pod.name)

    async def _run(self, worker: _PodWorker) -> None:
        attempt = 0
        while not worker.stopped:
            worker.wake.clear()
            if worker.status.state is not PodState.OFFLINE:
                self._set(worker, PodState.CONNECTING, "connecting")
            conn = self._connector(worker.pod)
            wait_for_user = False
            try:
                await conn.connect()
                run_dir = await self._run_dir(worker)
                if run_dir and run_dir != worker.pod.run_dir:  # followed from the records: the snapshots'
                    if worker.pod.run_dir:  # a newer launch than the one followed so far: a new run
                        worker.new_run()
                    worker.pod = replace(worker.pod, run_dir=run_dir)  # pod carries it (checkpoints, backups)
                    worker.followed = True
                if run_dir and worker.seeded != run_dir:
                    await self._seed(worker, conn, run_dir)
                stream = await conn.start_probe(self._probe_args(worker.pod, run_dir))
                reason = await self._pump(worker, stream)
                if worker.samples_total:
                    attempt = 0
                tail = stream.stderr_tail().strip().splitlines()
                if tail:
                    reason = f"{reason}: {tail[-1][:200]}"
            except HostKeyError as exc:
                wait_for_user = True
                worker.pending_key = HostKeyPrompt(
                    host=exc.host, port=exc.port, key_type=exc.key_type,
                    fingerprint=exc.fingerprint, key_line=exc.key_line,
                    known_hosts_file=exc.known_hosts_file,
                    changed=isinstance(exc, HostKeyChanged),
                )
                state = PodState.HOSTKEY_CHANGED if worker.pending_key.changed else PodState.HOSTKEY_UNKNOWN
                self._set(worker, state, str(exc), host_key=worker.pending_key)
            except AuthError as exc:
                wait_for_user = True
                self._set(worker, PodState.AUTH_FAILED, str(exc))
            except PrimeTrainError as exc:
                reason = str(exc)
            except (OSError, asyncio.TimeoutError) as exc:
                reason = f"connection error: {exc}"
            finally:
                await _quietly_close(conn)

            if worker.stopped:
                return
            if worker.restart.is_set():  # a new run dir: reopen at once, no backoff, not OFFLINE
                worker.restart.clear()
                attempt = 0
                continue
            if wait_for_user:
                worker.open_gap()
                await worker.wake.wait()
                attempt = 0
                continue

            worker.open_gap()
            delay = backoff_delay(attempt, self.settings.backoff_max)
            attempt += 1
            self._set(worker, PodState.OFFLINE, reason, next_retry=self._clock() + delay)
            await _wait_event(worker.wake, delay)

    async def _pump(self, worker: _PodWorker, stream) -> str:
        """Read samples until the stream ends; returns why it ended."""
        settings = self.settings
        silent_since = time.monotonic()
        read: asyncio.Future[bytes] | None = None
        restart = asyncio.ensure_future(worker.restart.wait())
        try:
            while not worker.stopped:
                # One pending read survives stale timeouts: a line is never cut by a cancellation.
                read = read or asyncio.ensure_future(stream.readline())
                done, _ = await asyncio.wait({read, restart}, timeout=settings.stale_after,
                                             return_when=asyncio.FIRST_COMPLETED)
                if restart in done:
                    return "the run dir changed"
                if not done:
                    if worker.status.state is PodState.ONLINE:
                        worker.open_gap()
                        self._set(worker, PodState.STALE,
                                  f"no sample for {settings.stale_after:g} s")
                    if time.monotonic() - silent_since > settings.restart_after:
                        return f"no sample for {settings.restart_after:g} s; reopening the channel"
                    continue
                line, read = read.result(), None
                if not line:
                    return "probe stream ended"
                if self._handle_line(worker, line):
                    silent_since = time.monotonic()
            return "monitoring stopped"
        finally:
            restart.cancel()
            if read is not None:
                read.cancel()

    def _handle_line(self, worker: _PodWorker, line: bytes) -> bool:
        """Count and parse one probe line; True when it was a valid sample (now in the history)."""
        worker.bytes_total += len(line)
        if not line.strip():
            return False
        try:
            sample = Sample.from_line(line)
        except ProbeFormatError:
            worker.malformed_total += 1
            return False
        now = self._clock()
        worker.close_gap(now)
        worker.history.append(sample)
        worker.add_metrics(sample.metrics)
        worker.observe_health(sample)
        self._poll_wandb(worker)
        worker.samples_total += 1
        worker.last_received = now
        if worker.status.state is not PodState.ONLINE:
            self._set(worker, PodState.ONLINE, sample.source and f"via {sample.source}")
        else:
            self._emit(worker)
        return True

    def _poll_wandb(self, worker: _PodWorker) -> None:
        """Ask W&B about the pod's run when due (rate-limited by the poller), in a thread: it is HTTP."""
        path = worker.wandb_path
        if not self._wandb_on or path is None or worker.wandb_task is not None:
            return
        if worker.wandb_poller is None or worker.wandb_poller.run_path != path:
            worker.wandb_poller = WandbPoller(path, min_interval=self.settings.wandb_interval, clock=self._clock,
                                              api_factory=self._wandb_api)
        poller = worker.wandb_poller
        if not poller.due():
            return

        def done(task: asyncio.Future) -> None:
            worker.wandb_task = None
            if task.cancelled() or worker.stopped or task.exception() is not None:
                return
            status = task.result()
            if status.run_path == worker.wandb_path:
                worker.wandb = status
                self._emit(worker)

        worker.wandb_task = asyncio.ensure_future(asyncio.to_thread(poller.fetch))
        worker.wandb_task.add_done_callback(done)


async def _wait_event(event: asyncio.Event, timeout: float) -> None:
    """Sleep until ``event`` is set or ``timeout`` passes. Built on asyncio.wait because Python
    3.11's wait_for can swallow a cancellation that lands together with its timeout (gh-86296),
    which left a removed pod's task running and ``remove()`` waiting for ever."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()


async def _quietly_close(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(conn.close(), 5.0)
