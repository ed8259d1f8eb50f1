"""``prime-train-tui backup POD [--step N]``: one checkpoint from the pod straight to S3, verified.

The bytes go pod -> bucket through presigned part URLs (services.backup.transfer); this machine only signs.
Exit 0 when the backup is verified against its manifest, 1 with a one-line reason otherwise.
Settings: ``[backup]`` in <config dir>/backup.toml, PRIME_TRAIN_TUI_BUCKET, PRIME_TRAIN_TUI_S3_ENDPOINT,
boto3's AWS_ENDPOINT_URL(_S3); the flags override them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from app.commands._support import EXIT_OK, connected, fail, fail_error, fail_usage, need_run_dir, pod_arg

if TYPE_CHECKING:
    from services.pod.connection import Connection


if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def add_store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("pod", metavar="POD")
    p.add_argument("--run-dir", help="the run directory on the pod (default: the pod's run_dir)")
    p.add_argument("--step", type=int, help="checkpoint step (default: the newest one)")
    p.add_argument("--bucket", help="S3 bucket (default: settings or PRIME_TRAIN_TUI_BUCKET)")
    p.add_argument("--prefix", help="key prefix (default: prime-train/<run name>/)")
    p.add_argument(
        "--endpoint",
        help="S3-compatible endpoint URL (default: settings, PRIME_TRAIN_TUI_S3_ENDPOINT, AWS_ENDPOINT_URL)",
    )
    p.add_argument("--region", help="S3 region")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "backup",
        help="back up a checkpoint from the pod to S3 (verified)",
        description="Back up one checkpoint from the pod straight to S3 and verify it.",
    )
    add_store_options(p)
    p.add_argument("--compress", choices=("zstd", "none"), help="zstd per file when it pays off")
    p.add_argument("--keep-last", type=int, help="keep this many verified backups in the bucket")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_backup(args))


def settings_from(args: argparse.Namespace) -> Any:
    from app.settings import load_backup_toml

    settings = load_backup_toml()
    return settings.with_overrides(
        bucket=args.bucket,
        prefix=args.prefix,
        endpoint=args.endpoint,
        region=args.region,
        compression=getattr(args, "compress", None),
        keep_last=getattr(args, "keep_last", None),
    )


class Bar:
    """A rich progress bar on stderr (bytes, MB/s, ETA) when it is a terminal; silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def __call__(self, p: Any) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        if self.progress is None or self.task is None:
            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task(f"{p.action} step {p.step}", total=p.total or None)
        self.progress.update(
            self.task, completed=p.done, total=p.total or None, description=f"{p.action} step {p.step}: {p.phase}"
        )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


async def on_pod(args: argparse.Namespace, work: Callable[[Connection, Any, str, Bar], Awaitable[Any]]) -> Any:
    """The backup settings, POD and its run dir, then ``work(conn, settings, run_dir, bar)`` on the connected
    pod with a progress bar: (pod, settings, run_dir, what work returned), or the exit code after one line."""
    from services.errors import PodSpecError, PrimeTrainError, SettingsError

    try:
        settings = settings_from(args)
        pod = pod_arg(args)
        run_dir = need_run_dir(pod, "pass --run-dir DIR (the run's output dir)")
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    except PrimeTrainError as exc:
        return fail_error(exc)
    from services.backup.s3 import transport_error

    bar = Bar(not args.json)
    try:
        async with connected(pod) as conn:
            done = await work(conn, settings, run_dir, bar)
    except PrimeTrainError as exc:
        bar.close()  # before the error line: the bar redraws stderr
        return fail_error(exc)
    except Exception as exc:  # a timeout or lost connection: one line; anything else re-raised
        bar.close()
        known = transport_error(exc, f"{args.command} on {pod.name}")
        if known is None:
            raise
        return fail_error(known)
    bar.close()
    return pod, settings, run_dir, done


async def _backup(args: argparse.Namespace) -> int:
    from services.backup.transfer import backup_checkpoint, pod_checkpoints
    from services.errors import PrimeTrainError

    async def work(conn: Connection, settings: Any, run_dir: str, bar: Bar) -> tuple[int, Any]:
        step = args.step
        ckpts, _ = await pod_checkpoints(conn, run_dir)
        if step is None:
            complete = [c.step for c in ckpts if c.complete]
            if not complete:
                raise PrimeTrainError(f"no complete checkpoint under {run_dir}/checkpoints on {conn.pod.name}")
            step = max(complete)
        return step, await backup_checkpoint(conn, settings, run_dir, step, on_progress=bar)

    got = await on_pod(args, work)
    if isinstance(got, int):
        return got
    pod, settings, run_dir, (step, result) = got
    m = result.manifest
    doc = {
        "pod": pod.name,
        "step": step,
        "bucket": settings.bucket,
        "prefix": settings.prefix_for(run_dir),
        "verified": result.verified,
        "bytes": m.bytes,
        "stored_bytes": m.stored_bytes,
        "uploaded_parts": result.uploaded_parts,
        "skipped_parts": result.skipped_parts,
        "pruned_steps": result.pruned,
        "problems": result.problems,
        "files": [
            {
                "path": f.path,
                "bytes": f.size,
                "stored_bytes": f.stored_size,
                "sha256": f.sha256,
                "encoding": f.encoding,
                "parts": len(f.parts),
            }
            for f in m.files
        ],
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        from services.units import fmt_bytes

        print(
            f"step {step}: {fmt_bytes(m.bytes)} in {len(m.files)} files -> s3://{settings.bucket}/"
            f"{doc['prefix']}step_{step}/ ({fmt_bytes(m.stored_bytes)} stored, {result.uploaded_parts} parts "
            f"sent, {result.skipped_parts} already there) · " + ("VERIFIED" if result.verified else "NOT VERIFIED")
        )
        if result.pruned:
            print(f"removed older backups from the bucket: steps {', '.join(map(str, result.pruned))}")
    if not result.verified:
        return fail(
            f"backup of step {step} does not match its manifest: {result.problems[0]}",
            "run the backup again; finished parts are not sent twice",
        )
    return EXIT_OK
