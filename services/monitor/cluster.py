"""A Slurm login node's cluster, looked at beside the pod's own samples.

For a pod whose ``scheduler`` is ``"slurm"`` the monitor runs :func:`poll_cluster` as a child task of the
pod's task, over the pod's open connection: every ``MonitorSettings.slurm_interval`` seconds the user's jobs
(recently ended ones too) and the nodes, and the alerts services.slurm.health decides from them. Each Slurm
command is bounded (``slurm_timeout``) and runs in its own task, so a slow or dead controller never holds up
sampling; a failure becomes the view's ``error`` (and a warning), never the pod's. After each look the running
jobs' GPUs are read node by node (services.slurm.gpus, one bounded ``srun`` per job) and the view updated
again: the jobs and nodes never wait for them, and a job whose GPUs could not be read carries the reason. A
node whose GPUs stay idle while another node of its job works becomes a "looks stalled" warning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from services.errors import PrimeTrainError
from services.models import Alert
from services.pod.connection import Connection
from services.slurm.cluster import SlurmCluster
from services.slurm.gpus import GpuReader
from services.slurm.health import judge, stalled_ranks, track_idle, unreachable
from services.slurm.models import ClusterView, JobGpus
from services.text import plain, plain_fields

log = logging.getLogger("services.monitor.service")


class ClusterState:
    """What the monitor last learned about one pod's cluster; only that pod's tasks mutate it."""

    def __init__(self) -> None:
        self.view = ClusterView()
        self.alerts: tuple[Alert, ...] = ()
        self.looked_alerts: tuple[Alert, ...] = ()  # the last look's (jobs and nodes)
        self.idle_since: dict[tuple[str, str], float] = {}  # (job, node) -> GPUs idle since (stalled ranks)

    def looked(self, view: ClusterView, alerts: list[Alert]) -> None:
        """A new look at jobs and nodes: the GPUs last read for jobs still running stay until read again."""
        running = {j.id for j in view.jobs if j.state == "RUNNING"}
        kept = tuple(g for g in self.view.gpus if g.job_id in running)
        # job, node and partition names, reasons and errors are the cluster's text: shown plain everywhere
        self.view, self.looked_alerts = plain_fields(replace(view, gpus=kept)), plain_fields(tuple(alerts))
        self.idle_since = {k: v for k, v in self.idle_since.items() if k[0] in running}
        self._merge(view.checked_at)

    def read_gpus(self, gpus: tuple[JobGpus, ...], now: float | None = None) -> None:
        """The running jobs' GPUs, read: a node idle for minutes while another node of its job works is a
        stalled rank (services.slurm.health.stalled_ranks)."""
        self.view = replace(self.view, gpus=plain_fields(gpus))
        if now is not None:
            self.idle_since = track_idle(self.idle_since, gpus, now)
        self._merge(now)

    def _merge(self, now: float | None) -> None:
        stalls = stalled_ranks(self.view.gpus, self.idle_since, now) if now is not None else []
        self.alerts = tuple(sorted((*self.looked_alerts, *stalls), key=lambda a: -a.severity.rank))

    def failed(self, message: str, now: float) -> None:
        """Slurm could not be asked: the last look's jobs and nodes stay, the error says why (first)."""
        message = plain(message, oneline=True)
        since = self.view.error_at if self.view.error and self.view.error_at is not None else now
        self.view = replace(self.view, error=message, error_at=since)
        self.alerts = self.looked_alerts = (unreachable(message, since),)


async def cluster_once(conn: Connection, timeout: float) -> tuple[dict[str, Any], list[Alert]] | None:
    """The headless status's one look at the cluster behind the connection's pod: None unless the pod is a
    Slurm login node; else the user's jobs (recently ended ones too), every node and the running jobs' GPUs
    as JSON, with the alerts they decide; Slurm's own error instead when it cannot be asked."""
    if getattr(conn.pod, "scheduler", None) != "slurm":
        return None
    from services.slurm.models import SlurmError

    cluster = SlurmCluster(conn, timeout=timeout)
    try:
        jobs = await cluster.jobs(finished_too=True)
        nodes = await cluster.nodes()
    except SlurmError as exc:
        message = f"{exc} ({exc.hint})" if getattr(exc, "hint", None) else str(exc)
        return {"jobs": [], "nodes": [], "gpus": [], "error": message}, [unreachable(message, time.time())]
    # the running jobs' GPUs node by node (one bounded srun per job; its failures are the job's or node's error)
    gpus = await GpuReader(conn, timeout=min(timeout, 20.0)).jobs(
        jobs, time.time(), down=[n.name for n in nodes if not n.responding]
    )
    return (
        {
            "jobs": [asdict(j) | {"finished": j.finished} for j in jobs],
            "nodes": [asdict(n) | {"responding": n.responding} for n in nodes],
            "gpus": [asdict(g) for g in gpus],
            "error": None,
        },
        list(judge(jobs, nodes, time.time())),
    )


async def look(cluster: SlurmCluster, state: ClusterState, now: Callable[[], float]) -> None:
    """One look: jobs and nodes, or why Slurm could not be asked."""
    try:
        jobs = await cluster.jobs(finished_too=True)
        nodes = await cluster.nodes()
    except PrimeTrainError as exc:  # SlurmError, and the connection's own errors
        hint = getattr(exc, "hint", None)
        state.failed(f"{exc} ({hint})" if hint else str(exc), now())
        return
    except (OSError, asyncio.TimeoutError) as exc:
        state.failed(f"asking Slurm failed: {exc or type(exc).__name__}", now())
        return
    at = now()
    state.looked(ClusterView(jobs=tuple(jobs), nodes=tuple(nodes), checked_at=at), judge(jobs, nodes, at))


async def look_gpus(reader: GpuReader, state: ClusterState, now: Callable[[], float]) -> bool:
    """Read the GPUs of the jobs the last look found running; False when there were none to read. A failure
    is each job's GPU error; the jobs and nodes are left as they are."""
    running = [j for j in state.view.jobs if j.state == "RUNNING" and j.nodes]
    if not running and not state.view.gpus:
        return False
    try:
        gpus = await reader.jobs(running, now(), down=[n.name for n in state.view.nodes if not n.responding])
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the reader reports its own failures; anything else must not end the view
        log.exception("reading the GPUs of %s's Slurm jobs failed", reader.conn.pod.name)
        gpus = tuple(
            JobGpus(j.id, error=f"reading the GPUs failed: {exc or type(exc).__name__}", checked_at=now())
            for j in running
        )
    state.read_gpus(gpus, now())
    return True


async def poll_cluster(
    conn: Connection,
    state: ClusterState,
    *,
    interval: float,
    timeout: float,
    now: Callable[[], float],
    changed: Callable[[], None],
) -> None:
    """Look at the cluster now and every ``interval`` seconds until cancelled; ``changed()`` after each look.
    A look that raises something unexpected is logged and shown as the error: the loop goes on."""
    cluster = SlurmCluster(conn, timeout=timeout)
    reader = GpuReader(conn, timeout=min(timeout, 20.0))
    while True:
        try:
            await look(cluster, state, now)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a parser bug must not end the pod's cluster view for good
            log.exception("looking at the Slurm cluster of %s failed", conn.pod.name)
            state.failed(f"reading Slurm's answer failed: {exc}", now())
        changed()
        if not state.view.error and await look_gpus(reader, state, now):
            changed()
        await asyncio.sleep(interval)
