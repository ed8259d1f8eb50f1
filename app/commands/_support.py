"""What the subcommands share: resolving POD arguments and failing with one clear line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from services.models import Pod

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def resolve_pod(spec: str, saved: list[Pod] | None = None) -> Pod:
    """A pods.toml name first, then ``local``/``demo``/an ssh alias/``user@host[:port]``."""
    if saved is None:
        from app.settings import load_pods

        saved = load_pods()
    for pod in saved:
        if pod.name == spec:
            return pod
    from services.pods import parse_pod_spec

    return parse_pod_spec(spec)


def fail(message: str, hint: str = "", code: int = EXIT_FAIL) -> int:
    print(f"prime-train-tui: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    return code


def add_backup_args(p: argparse.ArgumentParser) -> None:
    """--bucket/--endpoint, for commands that must respect (or use) the S3 backup."""
    p.add_argument("--bucket", help="S3 bucket of the backups (default: backup.toml or PRIME_TRAIN_TUI_BUCKET)")
    p.add_argument("--endpoint", help="S3-compatible endpoint URL (default: backup.toml or "
                                      "PRIME_TRAIN_TUI_S3_ENDPOINT)")


def backup_settings(args: argparse.Namespace) -> Any:
    """The backup settings (``[backup]`` of backup.toml, the environment, then --bucket/--endpoint)."""
    from app.settings import config_dir
    from services.s3 import load_backup_settings

    settings = load_backup_settings(config_dir() / "backup.toml")
    return settings.with_overrides(bucket=getattr(args, "bucket", None), endpoint=getattr(args, "endpoint", None))
