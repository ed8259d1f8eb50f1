"""Kill on a Slurm cluster (a pod of ``kind = "slurm"``): cancel the run's job with ``scancel`` through the
login node and verify it is gone (issue 19).

The run's job is the job of the newest run launched from here (``slurm_launch``: its record on the login
node) while that job is pending or running; else the user's newest running job (else the newest pending
one): what the confirm step names, listing the user's other jobs as left alone. The cancel is verified: the job
leaves the queue entirely (no longer even COMPLETING, i.e. its processes on every node have ended) within
``wait`` seconds, and Slurm's final word on it is read (CANCELLED); else an error says what is still there.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from services.errors import PrimeTrainError
from services.lifecycle.events import Event, LifecycleError
from services.lifecycle.shell import DEFAULT_STATE_DIR
from services.slurm.cluster import SlurmCluster
from services.slurm.health import pending_reason
from services.slurm.models import SlurmError, SlurmJob

if TYPE_CHECKING:
    from services.pod.connection import Connection


def _label(job: SlurmJob) -> str:
    nodes = ", ".join(job.nodes) or job.nodelist
    return (
        f"job {job.id}"
        + (f" ({job.name})" if job.name else "")
        + f", {job.state.lower()}"
        + (f" on {nodes}" if nodes else "")
        + (f": {pending_reason(job.reason)}" if job.pending else "")
    )


# ------------------------------------------------------------------------------------ run records
# A run launched on a cluster (services/lifecycle/slurm_launch.py) is recorded on the login node, beside the
# pod runs' registry (<state>/runs/): <state>/slurm-runs/<id>.json, and a copy in <run_dir>/.ptt/slurm-run.json.
RECORDS_DIR = "slurm-runs"
_SEP = "@@ptt-slurm-run"


def records_dir(conn: Connection) -> str:
    return f"{(conn.pod.probe_dir or DEFAULT_STATE_DIR).rstrip('/')}/{RECORDS_DIR}"


async def slurm_runs(conn: Connection) -> list[dict[str, Any]]:
    """The runs launched on this cluster from here (oldest first), read from the login node in one command;
    unreadable records are skipped, none recorded is []."""
    d = shlex.quote(records_dir(conn))
    try:
        rc, out, _err = await conn.run(
            f'for f in {d}/*.json; do [ -f "$f" ] && cat "$f"; echo; echo {_SEP}; done', timeout=30.0
        )
    except (asyncio.TimeoutError, PrimeTrainError):
        return []
    found = []
    for chunk in out.split(_SEP):
        try:
            rec = json.loads(chunk) if chunk.strip() else None
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("job_id") and rec.get("run_dir"):
            found.append(rec)
    found.sort(key=lambda r: (float(r.get("submitted") or 0.0), str(r.get("id", ""))))
    return found


async def plan_cancel_run(conn: Connection) -> tuple[SlurmJob, list[SlurmJob], dict[str, Any] | None]:
    """(the run's job, the user's other active jobs, the run's record or None). The run's job is the newest
    recorded run's job while it is pending or running; without one, the user's newest active job.
    LifecycleError when no job is active."""
    try:
        # a COMPLETING job is already ending (its processes are being reaped): nothing scancel could do
        active = [j for j in await SlurmCluster(conn).jobs() if not j.finished and j.state != "COMPLETING"]
    except SlurmError as exc:
        raise LifecycleError(str(exc), hint=exc.hint) from None
    if not active:
        raise LifecycleError(f"no Slurm job of yours is pending or running on {conn.pod.name}")
    by_id = {j.id: j for j in active}
    for rec in reversed(await slurm_runs(conn)):
        job = by_id.get(str(rec["job_id"]))
        if job is not None:
            return job, [j for j in active if j.id != job.id], rec
    # a running job before a pending one (a held eval submitted later is not the run), then the newest
    active.sort(key=lambda j: (not j.pending, j.submit_time or 0.0, j.id))
    return active[-1], active[:-1], None


async def plan_cancel(conn: Connection) -> tuple[SlurmJob, list[SlurmJob]]:
    """(the run's job, the user's other active jobs): see :func:`plan_cancel_run`."""
    target, others, _rec = await plan_cancel_run(conn)
    return target, others


def describe(target: SlurmJob, others: list[SlurmJob], record: dict[str, Any] | None = None) -> str:
    """The confirm step's text."""
    lines = [f"Cancel {_label(target)}"]
    if record is not None:
        lines.append(f"the run launched from here in {record['run_dir']} (run {record.get('id')})")
    if others:
        lines.append("Your other jobs are left alone:")
        lines += [f"  {_label(j)}" for j in others[:8]]
        if len(others) > 8:
            lines.append(f"  … and {len(others) - 8} more")
    lines.append("Slurm ends its processes on every node; the job must leave the queue.")
    return "\n".join(lines)


async def cancel(conn: Connection, job_id: str, *, wait: float = 60.0, poll: float = 0.5) -> AsyncIterator[Event]:
    """``scancel`` the job, then wait until it has left the queue; ends with done or error."""
    t0 = time.monotonic()
    try:
        async for ev in _cancel(conn, job_id, wait, poll, t0):
            yield ev
    except PrimeTrainError as exc:
        yield Event("kill", "error", str(exc).splitlines()[0])


async def _cancel(conn: Connection, job_id: str, wait: float, poll: float, t0: float) -> AsyncIterator[Event]:
    cluster = SlurmCluster(conn)
    if not job_id.replace("_", "").isdigit():
        raise LifecycleError(f"not a Slurm job id: {job_id!r}")
    rc, _out, err = await conn.run(f"scancel {job_id}", timeout=30.0)
    if rc != 0:
        reason = next((ln.strip() for ln in reversed(err.splitlines()) if ln.strip()), f"exit status {rc}")
        raise LifecycleError(f"scancel {job_id} failed on {conn.pod.name}: {reason}")
    yield Event("kill", "step", f"scancel {job_id}: Slurm is ending the job on its nodes", progress=0.2)
    deadline = time.monotonic() + wait
    last: SlurmJob | None = None
    while True:
        queued = {j.id: j for j in await cluster.jobs(finished_too=True, expand=False)}
        last = queued.get(job_id)
        if last is None or (last.finished and last.state != "COMPLETING" and not await _still_completing(conn, job_id)):
            break
        if time.monotonic() > deadline:
            raise LifecycleError(
                f"job {job_id} is still {last.state.lower()} {wait:g} s after scancel",
                hint="Slurm may be waiting for a node that does not answer; check the nodes",
            )
        yield Event("kill", "progress", f"job {job_id}: {last.state.lower()}", progress=0.5)
        await asyncio.sleep(poll)
    states = await cluster.job_states([job_id])
    final = states.get(job_id) or last
    state = final.state if final is not None else ""
    what = "cancelled" if state in ("CANCELLED", "") else f"ended ({state.lower().replace('_', ' ')})"
    yield Event(
        "kill",
        "done",
        f"job {job_id} {what}: it left the queue, no process of it is left on its "
        f"nodes [{time.monotonic() - t0:.2f} s]",
        progress=1.0,
        data={"job": job_id, "state": final.state if final is not None else None},
    )


async def _still_completing(conn: Connection, job_id: str) -> bool:
    """Whether the controller still waits for the job's processes to end (its COMPLETING flag, which squeue's
    JSON of Slurm before 23.02 hides behind the base state)."""
    rc, out, _err = await conn.run(f"squeue -h -t CG -j {job_id} -o %i", timeout=30.0)
    return rc == 0 and job_id in out.split()
