"""``prime-train-tui cleanup POD [--keep N] [--dry-run]``: delete old complete checkpoints."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from app.commands._support import add_backup_args, cleanup_backup_settings
from app.commands.launch import confirm, drive

if TYPE_CHECKING:
    from services.lifecycle.events import Event
    from services.lifecycle.preflight import LifecycleSettings
    from services.pod.connection import Connection


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cleanup",
        help="delete checkpoints older than the newest N complete ones",
        description="Keep the newest N complete checkpoints; never delete the newest "
        "complete one or one still being written.",
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("--keep", type=int, help="complete checkpoints to keep (default: settings keep_last)")
    p.add_argument("--run-dir", help="run directory on the pod (default: the pod's last run)")
    p.add_argument("--dry-run", action="store_true", help="show what would be deleted, delete nothing")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (required without a terminal)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_backup_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.commands._support import EXIT_OK, EXIT_USAGE, fail

    if args.keep is not None and args.keep < 1:
        return fail("--keep must be at least 1 (the newest complete checkpoint is never deleted)", code=EXIT_USAGE)
    state: dict[str, Any] = {}

    async def before(conn: Connection, settings: LifecycleSettings, doc: dict[str, Any]) -> int | None:
        from services.lifecycle.targets import target_for
        from services.units import fmt_bytes

        backup = cleanup_backup_settings(args)  # unreadable: plan_cleanup refuses (fail closed)
        state["target"] = target = target_for(conn.pod)
        plan = await target.plan_cleanup(conn, keep=args.keep, settings=settings, run_dir=args.run_dir, backup=backup)
        state["plan"] = plan
        state["backup"] = backup
        doc["plan"] = plan.to_json()
        if not args.json:
            print("\n".join(plan.preview(fmt_bytes)))
        if args.dry_run:
            return EXIT_OK
        if plan.empty:
            return None
        what = f"{len(plan.delete)} checkpoint(s)" + (
            f" and {len(plan.leftovers)} leftover dir(s)" if plan.leftovers else ""
        )
        return confirm(args, f"delete {what}, {fmt_bytes(plan.bytes)}?")

    async def body(conn: Connection, settings: LifecycleSettings) -> AsyncIterator[Event]:
        async for ev in state["target"].cleanup(conn, state["plan"], settings=settings, backup=state["backup"]):
            yield ev

    return drive(args, "cleanup", body, before)
