"""``prime-train-tui resume POD [--yes]``: relaunch from the newest COMPLETE checkpoint."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from app.commands._support import add_backup_args, backup_settings
from app.commands.launch import confirm, drive

if TYPE_CHECKING:
    from services.lifecycle.events import Event
    from services.lifecycle.preflight import LifecycleSettings
    from services.pod.connection import Connection


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "resume",
        help="relaunch the last run from its newest complete checkpoint",
        description="Relaunch the pod's last run (same config and command) with the resume "
        "arguments of settings, from the newest checkpoint that is complete.",
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (required without a terminal)")
    p.add_argument("--force", action="store_true", help="start even when a pre-flight check fails")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_backup_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state: dict[str, Any] = {}

    async def before(conn: Connection, settings: LifecycleSettings, doc: dict[str, Any]) -> int | None:
        from services.lifecycle.targets import target_for

        target = state["target"] = target_for(conn.pod)
        backup = backup_settings(args) if target.restores_from_bucket else None
        plan = state["plan"] = await target.plan_resume(conn, settings, backup)
        doc["plan"] = plan.doc
        if not args.json:
            for line in plan.lines:
                print(line)
        return confirm(args, plan.question)

    async def body(conn: Connection, settings: LifecycleSettings) -> AsyncIterator[Event]:
        async for ev in state["target"].resume(conn, state["plan"], settings=settings, force=args.force):
            yield ev

    return drive(args, "resume", body, before)
