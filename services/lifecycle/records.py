"""What the pod records of its runs and checkpoints, as the actions read them: the runs (the helper's
``status``), a run's checkpoints and the newest complete one, the default run dir, where a run's backups go."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.lifecycle.preflight import LifecycleSettings
from services.lifecycle.shell import PodShell

if TYPE_CHECKING:
    from services.models import Pod


async def pod_runs(shell: PodShell) -> list[dict[str, Any]]:
    return list((await shell.agent("status")).get("runs", []))


async def active_run(shell: PodShell) -> dict[str, Any] | None:
    active = [r for r in await pod_runs(shell) if r.get("active")]
    return active[-1] if active else None


def ckpt_dir_of(run_dir: str, settings: LifecycleSettings) -> str:
    return (
        settings.ckpt_subdir
        if settings.ckpt_subdir.startswith("/")
        else f"{run_dir.rstrip('/')}/{settings.ckpt_subdir}"
    )


async def checkpoints(shell: PodShell, run_dir: str, settings: LifecycleSettings) -> tuple[str, list[dict[str, Any]]]:
    ckpt_dir = ckpt_dir_of(run_dir, settings)
    result = await shell.agent("ckpts", "--ckpt-dir", ckpt_dir, "--run-dir", shell.abspath(run_dir))
    return str(result.get("ckpt_dir") or ckpt_dir), list(result.get("ckpts", []))  # the helper follows the configs


def newest_complete(ckpts: list[dict[str, Any]]) -> dict[str, Any] | None:
    complete = [c for c in ckpts if c.get("complete")]
    return max(complete, key=lambda c: c["step"]) if complete else None


def default_run_dir(pod: Pod, config: Path | None) -> str:
    if pod.run_dir:
        return pod.run_dir
    stem = config.stem if config is not None else "run"
    return f"prime-train-tui/runs/{stem}"


def backup_on(backup: Any) -> bool:
    """Backup counts as configured when a bucket is set (``services.backup.s3.BackupSettings``)."""
    return backup is not None and bool(getattr(backup, "bucket", ""))


def backup_where(backup: Any, run_dir: str) -> str:
    return f"s3://{backup.bucket}/{backup.prefix_for(run_dir)}"
