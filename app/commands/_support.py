"""What the subcommands share: resolving POD arguments, connecting to the pod, failing with one clear line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from services.models import Pod
from services.text import plain

if TYPE_CHECKING:
    from services.monitor.worker import MonitorSettings
    from services.pod.connection import Connection

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def resolve_pod(spec: str, saved: list[Pod] | None = None) -> Pod:
    """A pods.toml name first, then ``local``/``demo``/an ssh alias/``user@host[:port]``. The demo pod comes
    with its sandbox (``<data dir>/demo-pod``, app/demo.py): the one a running TUI's demo uses."""
    if saved is None:
        from app.settings import load_pods

        saved = load_pods()
    for pod in saved:
        if pod.name == spec:
            return pod
    broken = getattr(saved, "broken", {})
    if spec in broken:  # its pods.toml entry cannot be used: say why rather than take the name for a host
        raise broken[spec]
    from app.demo import sandboxed
    from services.pod.specs import parse_pod_spec

    return sandboxed(parse_pod_spec(spec))


def saved_pods() -> list[Pod]:
    """pods.toml's usable pods for a command that takes them all; each entry left out is one warning line."""
    from app.settings import broken_pod_notes, load_pods

    saved = load_pods()
    for note in broken_pod_notes(saved):
        print(f"prime-train-tui: warning: {note}", file=sys.stderr)
    return saved


def pod_arg(args: argparse.Namespace) -> Pod:
    """``args.pod`` resolved (see resolve_pod), ``--run-dir`` (when given) over the pod's own run_dir.
    Raises SettingsError/PodSpecError: report them with ``fail_usage``."""
    from dataclasses import replace

    pod = resolve_pod(args.pod)
    run_dir = getattr(args, "run_dir", None)
    return replace(pod, run_dir=run_dir) if run_dir else pod


def need_run_dir(pod: Pod, hint: str) -> str:
    """The pod's run dir, or PodSpecError("no run directory for NAME") with ``hint``."""
    from services.errors import PodSpecError

    if not pod.run_dir:
        raise PodSpecError(f"no run directory for {pod.name}", hint=hint)
    return pod.run_dir


@asynccontextmanager
async def connected(
    pod: Pod, demo: MonitorSettings | None = None, timeout: float | None = None
) -> AsyncIterator[Connection]:
    """A connected services.connect.open_connection(pod), closed on the way out (also when connecting fails).
    ``demo`` settings make a demo pod without a sandbox a simulated one of its own. ``timeout`` bounds the
    connect (asyncio.TimeoutError)."""
    from services.connect import open_connection

    conn = open_connection(pod, demo=demo.demo_options() if demo is not None else None)
    try:
        await asyncio.wait_for(conn.connect(), timeout)
        yield conn
    finally:
        await conn.close()


def say(*parts: object, **kwargs: Any) -> None:
    """``print`` for lines that carry outside text (a provider's, a pod's, an exception's): each part is
    ``plain``, so no escape sequence in it reaches the terminal."""
    print(*(plain(part) for part in parts), **kwargs)


def fail(message: str, hint: str = "", code: int = EXIT_FAIL) -> int:
    """Print the error (an exception's, a pod's or a provider's words: ``plain``) and return ``code``."""
    print(f"prime-train-tui: {plain(message)}", file=sys.stderr)
    if hint:
        print(f"  hint: {plain(hint)}", file=sys.stderr)
    return code


def fail_usage(exc: Any) -> int:
    """Exit 2 for a bad POD argument or settings file (SettingsError/PodSpecError)."""
    return fail(str(exc), exc.hint, EXIT_USAGE)


def fail_error(exc: Any) -> int:
    """Exit 1 for a PrimeTrainError met on the pod; an untrusted host key always carries a hint."""
    from services.errors import HostKeyError

    if isinstance(exc, HostKeyError):
        return fail(str(exc), exc.hint or "headless mode never trusts a new host key")
    return fail(str(exc), exc.hint)


def add_backup_args(p: argparse.ArgumentParser) -> None:
    """--bucket/--endpoint, for commands that must respect (or use) the S3 backup."""
    p.add_argument("--bucket", help="S3 bucket of the backups (default: backup.toml or PRIME_TRAIN_TUI_BUCKET)")
    p.add_argument(
        "--endpoint", help="S3-compatible endpoint URL (default: backup.toml or PRIME_TRAIN_TUI_S3_ENDPOINT)"
    )


def backup_settings(args: argparse.Namespace) -> Any:
    """The backup settings (``[backup]`` of backup.toml, the environment, then --bucket/--endpoint)."""
    from app.settings import load_backup_toml

    settings = load_backup_toml()
    return settings.with_overrides(bucket=getattr(args, "bucket", None), endpoint=getattr(args, "endpoint", None))


def cleanup_backup_settings(args: argparse.Namespace) -> Any:
    """For cleanup: the backup settings, or the SettingsError that makes backup.toml unreadable — cleanup
    then refuses (services.lifecycle.cleanup fails closed) instead of taking it for "no backup"."""
    from services.errors import SettingsError

    try:
        return backup_settings(args)
    except SettingsError as exc:
        return exc
