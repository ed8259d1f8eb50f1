"""One asyncio task per pod: connect, start the probe, parse its stream, keep history, reconnect.

Data flows one way: probe line -> :class:`Sample` -> bounded history -> immutable
:class:`PodSnapshot` -> ``on_snapshot`` callback (the App turns it into a Textual message).

States: CONNECTING until the first sample, ONLINE while samples arrive, STALE when no VALID one came for
``stale_after`` seconds (the channel is still up: silent, or sending only lines that are not samples;
a line over services.monitor.lines.MAX_LINE is skipped unread), OFFLINE when the connection or probe is gone —
then retried with backoff 1, 2, 4, ... ≤ ``backoff_max`` s. AUTH_FAILED and the host-key states wait
for the user (``reconnect`` / ``trust_host_key``): retrying them by ourselves would only spam the pod. A pod
that lacks what monitoring needs (:class:`PodUnsupported`: an SSH endpoint that runs no commands, no python3)
is OFFLINE with that reason and retried only after ``unsupported_retry`` s, or when the user asks.
Every stretch without samples is recorded as a :class:`Gap` so the history shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from services.connect import open_connection
from services.errors import AuthError, HostKeyChanged, HostKeyError, PodUnsupported, PrimeTrainError, ProbeFormatError
from services.models import HostKeyPrompt, Pod, PodSnapshot, PodState, PodStatus, Sample, loads_line
from services.monitor import wandb_status
from services.monitor.lines import LineReader
from services.monitor.progress import TAIL_SCRIPT
from services.monitor.wandb_status import WandbPoller
from services.monitor.worker import MonitorSettings, PodMonitorState
from services.pod.agent.tails import look as look_at
from services.pod.connection import Connection
from services.pod.known_hosts import trust_host_key
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection, SSHOptions
from services.runs import newest_run_dir
from services.text import plain

log = logging.getLogger(__name__)

PROBE_ENDED = "probe stream ended"
ConnectionFactory = Callable[[Pod], Connection]
SnapshotCallback = Callable[[PodSnapshot], None]


def backoff_delay(attempt: int, cap: float) -> float:
    """1, 2, 4, ... seconds, never above ``cap`` (attempt counts from 0)."""
    return float(min(cap, 2 ** min(attempt, 16)))


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
        self._workers: dict[str, PodMonitorState] = {}
        # set by the App: where launches are recorded (a pod without run_dir follows its newest launch), and
        # when a rented pod was created (its "$ so far" counts from there); both called in a thread
        self.runs_dir: Any = None
        self.rented_at: Callable[[Pod], float | None] | None = None

    # ------------------------------------------------------------------ public API

    def add(self, pod: Pod) -> None:
        if pod.name in self._workers:
            raise ValueError(f"a pod named {pod.name!r} is already monitored")
        worker = PodMonitorState(pod, self.settings, self._clock)
        self._workers[pod.name] = worker
        worker.task = asyncio.get_running_loop().create_task(self._run(worker), name=f"monitor:{pod.name}")
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
        worker.first_look_done = None
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
        """services.connect's connection with this monitor's keepalive and demo settings."""
        return open_connection(
            pod,
            demo=self.settings.demo_options(),
            ssh_options=SSHOptions(keepalive_interval=self.settings.keepalive_interval),
        )

    def _probe_args(self, pod: Pod, run_dir: str | None = None) -> list[str]:
        args = ["--interval", f"{self.settings.interval:g}"]
        if run_dir := run_dir or pod.run_dir:
            args += ["--run-dir", run_dir]
        return args

    async def _run_dir(self, worker: PodMonitorState) -> str | None:
        """The pod's run_dir, else the run dir of its newest launch recorded on this machine."""
        if (worker.pod.run_dir and not worker.followed) or self.runs_dir is None or worker.pod.simulated:
            return worker.pod.run_dir
        try:
            return await asyncio.to_thread(newest_run_dir, self.runs_dir, worker.pod.name)
        except OSError:
            return None

    async def _first_look(
        self, worker: PodMonitorState, conn: Connection, run_dir: str
    ) -> tuple[bool, tuple[Any, Any] | None]:
        """One look at the run dir before the probe starts (the probe reads logs from their end): the logs'
        tails, for _back_fill. Returns whether it looked and found no log yet (what the run writes from now on is
        new: the probe reads it from its start; a failed look says False: replaying an old log from its start
        would make it news), and what _back_fill takes (None: another run dir was set while looking). A run dir
        on this machine is looked at by the script's own function (services/pod/agent/tails.py) on the event
        loop, relative paths under the directory the script would run in: a few tails of at most 128 KB, and
        no await before the probe's start (a thread's hop let a ~130 ms layout of the first screen go first)."""
        worker.first_look_done = run_dir
        health = worker.health  # set_run_dir may start a new run meanwhile: this look is then not its
        python = "python3" if isinstance(conn, SSHConnection) else shlex.quote(sys.executable)
        tails: Any
        try:
            if isinstance(conn, LocalConnection):
                tails = look_at(os.path.join(conn.cwd(), run_dir))
            else:
                code, out, _ = await conn.run(
                    f"{python} -c {shlex.quote(TAIL_SCRIPT)} {shlex.quote(run_dir)}", timeout=30.0
                )
                tails = json.loads(out) if code == 0 else None
        except (PrimeTrainError, OSError, ValueError, asyncio.TimeoutError) as exc:
            log.info("no first look at %s on %s: %s", run_dir, worker.pod.name, exc)
            tails = None
        if worker.health is not health:
            return False, None  # another run dir was set while looking: its own first look follows
        if isinstance(tails, dict) and isinstance(logs := tails.get("logs"), list):
            worker.note_log_positions(
                [[x.get("path"), x.get("ino"), x.get("pos")] for x in logs if isinstance(x, dict)]
            )
        return isinstance(tails, dict) and not tails.get("logs"), (health, tails)

    async def _back_fill(self, worker: PodMonitorState, looked: tuple[Any, Any]) -> None:
        """The first look's tails into the pod's history, timed by their own stamps, so a run found stalled
        alerts at once and its last step is not taken as new; billing: the rental's creation, else (a remote
        pod) its uptime. Best effort. Done while the probe's process starts, before its first line is read."""
        health, tails = looked
        rented = None
        if self.rented_at is not None:
            with contextlib.suppress(Exception):
                rented = await asyncio.to_thread(self.rented_at, worker.pod)
        if worker.health is not health:
            return  # another run dir was set meanwhile: its own first look follows
        try:
            if isinstance(tails, dict):  # ~0.1 ms a line: off the event loop
                await asyncio.to_thread(health.feed_tails, tails)
                up = tails.get("uptime")
                if rented is None and worker.pod.billed_since_boot and isinstance(up, (int, float)):
                    health.set_billing(float(tails.get("now") or time.time()) - up, "since the pod started")
                if worker.health is health:
                    worker._tail_view = tuple(health.tail)
            if rented is not None:
                health.set_billing(float(rented), "since rented")
        except Exception:  # a failing back-fill must never stop sampling
            log.exception("back-filling the health rules failed for %s", worker.pod.name)

    def _set(
        self,
        worker: PodMonitorState,
        state: PodState,
        reason: str = "",
        *,
        next_retry: float | None = None,
        host_key: HostKeyPrompt | None = None,
    ) -> None:
        now = self._clock()
        since = worker.status.since if worker.status.state is state else now
        worker.status = PodStatus(
            state, plain(reason, oneline=True), since=since, next_retry=next_retry, host_key=host_key
        )
        self._emit(worker)

    def _emit(self, worker: PodMonitorState) -> None:
        worker.snapshot = worker._build()
        try:
            self._on_snapshot(worker.snapshot)
        except Exception:  # a broken subscriber must not stop sampling
            log.exception("snapshot callback failed for %s", worker.pod.name)

    async def _run(self, worker: PodMonitorState) -> None:
        attempt = 0
        while not worker.stopped:
            worker.wake.clear()
            status = worker.status  # (connecting since add(): said there already)
            if status.state is not PodState.OFFLINE and status != PodStatus.connecting(status.since):
                self._set(worker, PodState.CONNECTING, "connecting")
            conn = self._connector(worker.pod)
            wait_for_user = unsupported = False
            try:
                await conn.connect()
                self._start_cluster(worker, conn)
                run_dir = await self._run_dir(worker)
                if run_dir and run_dir != worker.pod.run_dir:  # followed from the records: the snapshots'
                    if worker.pod.run_dir:  # a newer launch than the one followed so far: a new run
                        worker.new_run()
                    worker.pod = replace(worker.pod, run_dir=run_dir)  # pod carries it (checkpoints, backups)
                    worker.followed = True
                from_start, looked = False, None
                if run_dir and worker.first_look_done != run_dir:
                    # a look that found no logs yet (a run being launched as we connect): the probe reads the
                    # logs it finds at its start from their start, or a run that wrote and ended meanwhile
                    # (a crash seconds in) would show none of its lines
                    from_start, looked = await self._first_look(worker, conn, run_dir)
                args = self._probe_args(worker.pod, run_dir) + (["--logs-from-start"] if from_start else [])
                if run_dir:  # the first look's or the last probe's read positions: no line is lost in between
                    args += worker.log_from_arg()
                try:
                    stream = await conn.start_probe(args)
                finally:
                    if looked is not None:  # (the probe's process starting meanwhile)
                        await self._back_fill(worker, looked)
                reason = await self._pump(worker, stream)
                if reason == PROBE_ENDED and (how := await stream.exit_reason()):
                    reason = f"the probe stopped ({how})"
                if worker.samples_total:
                    attempt = 0
                tail = stream.stderr_tail().strip().splitlines()
                if tail:
                    reason = f"{reason}: {tail[-1][:200]}"
            except HostKeyError as exc:
                wait_for_user = True
                worker.pending_key = HostKeyPrompt(
                    host=exc.host,
                    port=exc.port,
                    key_type=exc.key_type,
                    fingerprint=exc.fingerprint,
                    key_line=exc.key_line,
                    known_hosts_file=exc.known_hosts_file,
                    changed=isinstance(exc, HostKeyChanged),
                )
                state = PodState.HOSTKEY_CHANGED if worker.pending_key.changed else PodState.HOSTKEY_UNKNOWN
                self._set(worker, state, str(exc), host_key=worker.pending_key)
            except AuthError as exc:
                wait_for_user = True
                self._set(worker, PodState.AUTH_FAILED, str(exc))
            except PodUnsupported as exc:  # retrying changes nothing until the user changes the pod
                unsupported, reason = True, str(exc)
            except PrimeTrainError as exc:
                reason = str(exc)
            except (OSError, asyncio.TimeoutError) as exc:
                reason = f"connection error: {exc}"
            finally:
                await self._stop_cluster(worker)
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
            if unsupported:
                delay = self.settings.unsupported_retry
            else:
                delay = backoff_delay(attempt, self.settings.backoff_max)
                attempt += 1
            self._set(
                worker,
                PodState.UNSUPPORTED if unsupported else PodState.OFFLINE,
                reason,
                next_retry=self._clock() + delay,
            )
            await _wait_event(worker.wake, delay)

    def _start_cluster(self, worker: PodMonitorState, conn: Connection) -> None:
        """A Slurm login node: look at its cluster over this connection, in a task of its own (a slow
        controller never holds up the samples), until the connection is closed."""
        if worker.cluster is None:
            return
        from services.monitor.cluster import poll_cluster  # (its Slurm modules: ~5 ms of every start-up)

        worker.cluster_task = asyncio.ensure_future(
            poll_cluster(
                conn,
                worker.cluster,
                interval=self.settings.slurm_interval,
                timeout=self.settings.slurm_timeout,
                now=self._clock,
                changed=lambda: self._emit(worker),
            )
        )

    async def _stop_cluster(self, worker: PodMonitorState) -> None:
        task, worker.cluster_task = worker.cluster_task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=5.0)

    async def _pump(self, worker: PodMonitorState, stream) -> str:
        """Read samples until the stream ends; returns why it ended. Only a VALID sample counts as life:
        a probe sending garbage (or lines over the hard limit) turns STALE like a silent one.

        One task reads and handles the lines as they come (a line costs one wake-up of it, no task or
        timer of its own); this one wakes only when a sample is due and none came (STALE, reopening), when
        the run dir changes, or when the reading ends. The reading is never cancelled mid-line by a timeout."""
        settings = self.settings
        clock = time.monotonic
        valid_at = clock()  # the last valid sample (or the channel's start)
        malformed_at = worker.malformed_total  # ... and the malformed count then
        reader = LineReader(stream)
        rate = _RateCap(settings.max_rate, clock)

        def silence() -> str | None:
            """STALE when no valid sample came for stale_after; why to reopen past restart_after, else None."""
            silent, garbage = clock() - valid_at, worker.malformed_total - malformed_at
            state = worker.status.state
            if silent >= settings.stale_after and (
                state is PodState.ONLINE or (garbage and state is PodState.CONNECTING)
            ):
                worker.open_gap()
                self._set(worker, PodState.STALE, _stale_reason(settings.stale_after, garbage))
            if silent > settings.restart_after:
                return _stale_reason(settings.restart_after, garbage) + "; reopening the channel"
            return None

        async def read_lines() -> str:
            nonlocal valid_at, malformed_at
            while True:
                line = await reader.readline()
                if worker.stopped:
                    return "monitoring stopped"
                if worker.restart.is_set():  # the line is the old run dir's: not for the new run's rules
                    return "the run dir changed"
                if line == b"":
                    return PROBE_ENDED
                if not rate.take():  # a pod writing samples as fast as it can: skipped unparsed
                    worker.dropped_total += 1
                    continue
                if self._handle_line(worker, line):
                    valid_at, malformed_at = clock(), worker.malformed_total
                elif (why := silence()) is not None:
                    return why

        reading: asyncio.Future[str] = asyncio.ensure_future(read_lines())
        restart: asyncio.Future[Any] = asyncio.ensure_future(worker.restart.wait())
        try:
            while not worker.stopped:
                silent = clock() - valid_at
                online = worker.status.state is PodState.ONLINE
                left = (settings.stale_after if online else settings.restart_after) - silent
                done, _ = await asyncio.wait(
                    {reading, restart},
                    timeout=max(0.05, min(settings.stale_after, left)),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if restart in done:
                    return "the run dir changed"
                if reading in done:
                    return reading.result()
                if (why := silence()) is not None:
                    return why
            return "monitoring stopped"
        finally:
            restart.cancel()
            reading.cancel()
            if reading.done() and not reading.cancelled():
                reading.exception()  # raised above, or moot once the run dir changed: never logged as lost

    def _handle_line(self, worker: PodMonitorState, line: bytes | None) -> bool:
        """Count and parse one probe line (None: one over the hard limit, skipped unread); True when it
        was a valid sample (now in the history)."""
        if line is None:
            worker.malformed_total += 1
            return False
        worker.bytes_total += len(line)
        if not line.strip():
            return False
        try:  # parsed once: the sample, and its optional "traces" (which Sample does not carry)
            obj = loads_line(line)
        except (ValueError, RecursionError):
            obj = None
        try:
            sample = Sample.from_dict(obj)
        except ProbeFormatError:
            worker.malformed_total += 1
            return False
        now = self._clock()
        worker.close_gap(now)
        worker.keep(sample, len(line))
        worker.add_metrics(sample.metrics)
        worker.add_episodes(obj.get("traces"))
        if "logpos" in obj:
            worker.note_log_positions(obj["logpos"])
        worker.observe_health(sample)
        self._poll_wandb(worker)
        worker.samples_total += 1
        worker.cut_bytes += sample.cut_bytes
        worker.cut_lines += sample.cut_lines
        worker.last_received = now
        if worker.status.state is not PodState.ONLINE:
            self._set(worker, PodState.ONLINE, sample.source and f"via {sample.source}")
        else:
            self._emit(worker)
        return True

    def _poll_wandb(self, worker: PodMonitorState) -> None:
        """Ask W&B about the pod's run when due (rate-limited by the poller), in a thread: it is HTTP."""
        path = worker.wandb_path
        if not self._wandb_on or path is None or worker.wandb_task is not None:
            return
        if worker.wandb_poller is None or worker.wandb_poller.run_path != path:
            worker.wandb_poller = WandbPoller(
                path, min_interval=self.settings.wandb_interval, clock=self._clock, api_factory=self._wandb_api
            )
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


class _RateCap:
    """A token bucket: ``take()`` is True at most ``rate`` times a second on average, with a burst of
    ``rate`` (a probe that catches up after a pause is not cut)."""

    def __init__(self, rate: float, clock: Callable[[], float]) -> None:
        self.rate, self.clock = rate, clock
        self.tokens, self.at = rate, clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


def _stale_reason(stale_after: float, malformed: int) -> str:
    """Why a pod is STALE: nothing came, or only lines that are not samples."""
    if not malformed:
        return f"no sample for {stale_after:g} s"
    return f"no valid sample for {stale_after:g} s ({malformed} malformed line{'s' if malformed != 1 else ''})"


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
