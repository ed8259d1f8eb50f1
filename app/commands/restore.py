"""``prime-train-tui restore POD [--step N]``: a verified backup from S3 back onto the pod.

The pod downloads with presigned URLs, checks every file's sha256 against the manifest and only then
renames the staging dir to ``checkpoints/step_N`` (per half: the trainer's goes to the separate
[ckpt] output_dir when the run's configs name one). Default: the newest verified backup. An incomplete
step_N already on the pod is moved aside (and named in the output), a complete one is never replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from app.commands._support import EXIT_OK

if TYPE_CHECKING:
    from services.pod.connection import Connection


def register(sub: argparse._SubParsersAction) -> None:
    from app.commands.backup import add_store_options

    p = sub.add_parser(
        "restore",
        help="restore a verified checkpoint from S3 onto the pod",
        description="Restore a checkpoint from S3 onto the pod, verified against its manifest.",
    )
    add_store_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_restore(args))


async def _restore(args: argparse.Namespace) -> int:
    from app.commands.backup import on_pod
    from services.backup.transfer import restore_checkpoint

    notes: list[str] = []
    placed: list[str] = []

    async def work(conn: Connection, settings: Any, run_dir: str, bar: Any) -> Any:
        return await restore_checkpoint(conn, settings, run_dir, args.step, on_progress=bar, notes=notes, placed=placed)

    got = await on_pod(args, work)
    if isinstance(got, int):
        return got
    pod, _settings, run_dir, manifest = got
    path = " + ".join(placed) or f"{run_dir.rstrip('/')}/checkpoints/step_{manifest.step}"
    if args.json:
        print(
            json.dumps(
                {
                    "pod": pod.name,
                    "step": manifest.step,
                    "path": path,
                    "paths": placed,
                    "verified": True,
                    "bytes": manifest.bytes,
                    "files": len(manifest.files),
                    "notes": notes,
                },
                indent=2,
            )
        )
    else:
        from services.units import fmt_bytes

        print(
            f"step {manifest.step}: {fmt_bytes(manifest.bytes)} in {len(manifest.files)} files restored to "
            f"{pod.name}:{path} · VERIFIED"
        )
        for note in notes:
            print(note)
    return EXIT_OK
