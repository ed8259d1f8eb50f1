"""``prime-train-tui kill POD [--yes]``: SIGTERM to the run's process group, grace, SIGKILL, verify; on a Slurm
cluster (pods.toml ``kind = "slurm"``), scancel of the run's job, waited for until it has left the queue."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from app.commands.launch import confirm, drive

if TYPE_CHECKING:
    from services.lifecycle.events import Event
    from services.lifecycle.preflight import LifecycleSettings
    from services.pod.connection import Connection


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "kill",
        help="stop the active run on a pod (whole process group)",
        description="SIGTERM to the run's process group, a grace period, SIGKILL, "
        "then check the processes are gone and the GPUs freed.",
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (required without a terminal)")
    p.add_argument("--grace", type=float, help="seconds between SIGTERM and SIGKILL (default: settings)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chosen: dict[str, Any] = {}

    async def before(conn: Connection, settings: LifecycleSettings, doc: dict[str, Any]) -> int | None:
        from app.commands._support import fail
        from services.lifecycle.targets import target_for

        target = chosen["target"] = target_for(conn.pod)
        plan = chosen["plan"] = await target.plan_kill(conn, settings)
        if plan is None:
            return fail(f"no active run on {conn.pod.name}")
        doc["target"] = plan.doc
        if not args.json:
            for line in plan.lines:
                print(line)
        return confirm(args, plan.question)

    async def body(conn: Connection, settings: LifecycleSettings) -> AsyncIterator[Event]:
        async for ev in chosen["target"].kill(conn, chosen["plan"], settings=settings, grace=args.grace):
            yield ev

    return drive(args, "kill", body, before)
