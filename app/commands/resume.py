"""``prime-train-tui resume POD [--yes]``: relaunch from the newest COMPLETE checkpoint."""

from __future__ import annotations

from app.commands._support import add_backup_args, backup_settings

import argparse
from typing import Any, AsyncIterator

from app.commands.launch import confirm, drive


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resume", help="relaunch the last run from its newest complete checkpoint",
                       description="Relaunch the pod's last run (same config and command) with the resume "
                                   "arguments of settings, from the newest checkpoint that is complete.")
    p.add_argument("pod", metavar="POD")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (required without a terminal)")
    p.add_argument("--force", action="store_true", help="start even when a pre-flight check fails")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_backup_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state: dict[str, Any] = {}

    async def before(conn: Any, settings: Any, doc: dict[str, Any]) -> int | None:
        from services.lifecycle.actions import plan_resume

        if getattr(conn.pod, "scheduler", None) == "slurm":
            return await _before_slurm(args, conn, settings, doc)
        state["backup"] = backup = backup_settings(args)
        plan = await plan_resume(conn, settings, backup)
        step = plan["checkpoint"]["step"]
        restore = plan.get("restore")
        doc["plan"] = {"run": plan["run"]["id"], "step": step, "ckpt_dir": plan["ckpt_dir"],
                       "skipped": [c["step"] for c in plan["skipped"]]}
        if restore:
            doc["plan"]["restore"] = restore
        if not args.json and restore:
            print(f"run {plan['run']['id']}: no complete checkpoint in {plan['ckpt_dir']}; "
                  f"step_{step} will be restored from {restore['where']} first")
        elif not args.json:
            print(f"run {plan['run']['id']}: newest complete checkpoint step_{step} in {plan['ckpt_dir']}")
            for c in plan["skipped"]:
                print(f"  ! step_{c['step']} is incomplete — skipped")
        return confirm(args, f"resume from step {step}?")

    async def body(conn: Any, settings: Any) -> AsyncIterator[Any]:
        from services.lifecycle.actions import resume

        if getattr(conn.pod, "scheduler", None) == "slurm":
            from services.lifecycle import slurm_launch

            async for ev in slurm_launch.resume(conn, settings=settings, force=args.force):
                yield ev
            return
        async for ev in resume(conn, settings=settings, force=args.force, backup=state.get("backup")):
            yield ev

    return drive(args, "resume", body, before)


async def _before_slurm(args: argparse.Namespace, conn: Any, settings: Any, doc: dict[str, Any]) -> int | None:
    """A cluster: the newest recorded run, whose job has ended, from its newest complete checkpoint."""
    from services.lifecycle import slurm_launch

    plan = await slurm_launch.plan_resume(conn, settings)
    step = plan["checkpoint"]["step"]
    doc["plan"] = {"run": plan["run"]["id"], "job": plan["run"]["job_id"], "step": step,
                   "ckpt_dir": plan["ckpt_dir"], "skipped": [c["step"] for c in plan["skipped"]]}
    if not args.json:
        print(slurm_launch.describe_resume(plan, settings))
    return confirm(args, f"submit a new job from step {step}?")
