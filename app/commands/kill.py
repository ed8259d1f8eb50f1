"""``prime-train-tui kill POD [--yes]``: SIGTERM to the run's process group, grace, SIGKILL, verify; on a Slurm
cluster (pods.toml ``kind = "slurm"``), scancel of the run's job, waited for until it has left the queue."""

from __future__ import annotations

import argparse
from typing import Any, AsyncIterator

from app.commands.launch import confirm, drive


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kill", help="stop the active run on a pod (whole process group)",
                       description="SIGTERM to the run's process group, a grace period, SIGKILL, "
                                   "then check the processes are gone and the GPUs freed.")
    p.add_argument("pod", metavar="POD")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (required without a terminal)")
    p.add_argument("--grace", type=float, help="seconds between SIGTERM and SIGKILL (default: settings)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chosen: dict[str, Any] = {}

    async def before(conn: Any, settings: Any, doc: dict[str, Any]) -> int | None:
        from app.commands._support import fail
        from services.lifecycle.actions import plan_kill

        if getattr(conn.pod, "scheduler", None) == "slurm":  # a cluster: scancel the run's job
            from services.lifecycle import slurm_jobs

            job, others, record = await slurm_jobs.plan_cancel_run(conn)
            chosen["job"] = job.id
            doc["target"] = {"job": job.id, "state": job.state, "nodes": list(job.nodes),
                             "run": (record or {}).get("id"), "others": [j.id for j in others]}
            if not args.json:
                print(slurm_jobs.describe(job, others, record))
            return confirm(args, f"cancel job {job.id} on {conn.pod.name}?")
        target = await plan_kill(conn)
        if target is None:
            return fail(f"no active run on {conn.pod.name}")
        doc["target"] = {k: target.get(k) for k in ("id", "run_dir", "pid", "pgid", "tmux_session", "pids")}
        if not args.json:
            print(f"run {target['id']} in {target['run_dir']}: {len(target.get('pids', []))} process(es)")
            for p in target.get("procs", [])[:12]:
                print(f"  {p['pid']:>7}  {p['cmd'][:100]}")
        return confirm(args, f"kill run {target['id']} on {conn.pod.name}?")

    async def body(conn: Any, settings: Any) -> AsyncIterator[Any]:
        from services.lifecycle.actions import kill

        if "job" in chosen:
            from services.lifecycle import slurm_jobs

            async for ev in slurm_jobs.cancel(conn, chosen["job"]):
                yield ev
            return

        async for ev in kill(conn, settings=settings, grace=args.grace):
            yield ev

    return drive(args, "kill", body, before)
