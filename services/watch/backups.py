"""The watcher's auto-backup and backup age: the TUI's planner (services/backup/planner.py) fed every
snapshot of every pod, its jobs run here as asyncio tasks (one per pod at a time) through the backup
service (services/backup/transfer.py), with backup.toml's settings (``auto_backup = true`` and a bucket).

``newest`` holds, per pod, when its newest verified backup was made (the manifest's time: found in the
bucket when the watcher first lists it, or written by this watcher) — the exporter's
``ptt_backup_age_seconds``. Outcomes go to ``on_event(what, level, fields)``: a success each time, a
failure once per streak (the planner's rule), retried with its backoff."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from services.backup.planner import AutoBackupPlanner, Job
from services.models import Pod, PodSnapshot
from services.watch.tasks import cancel_all

if TYPE_CHECKING:
    from services.pod.connection import Connection

OnEvent = Callable[[str, int, dict[str, Any]], None]


class WatchBackups:
    def __init__(
        self,
        settings: Any,
        on_event: OnEvent,
        *,
        connect: Callable[[Pod], Connection] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings, self.on_event, self.connect, self.clock = settings, on_event, connect, clock
        self.planner = AutoBackupPlanner()
        self.newest: dict[str, float] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    @property
    def enabled(self) -> bool:
        return bool(
            self.settings is not None
            and getattr(self.settings, "auto_backup", False)
            and getattr(self.settings, "bucket", "")
        )

    def observe(self, snapshot: PodSnapshot) -> None:
        """Every snapshot (cheap: no I/O unless a backup starts)."""
        job = self.planner.want(snapshot, enabled=self.enabled)
        if job is not None:
            self._tasks[job.pod.name] = asyncio.ensure_future(self._run(job))

    def ages(self, now: float) -> dict[str, float]:
        return {pod: max(0.0, now - t) for pod, t in self.newest.items()}

    def forget(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
        self.planner.forget(name)
        self.newest.pop(name, None)

    async def aclose(self) -> None:
        await cancel_all(self._tasks)

    async def _run(self, job: Job) -> None:
        from services.backup.bucket import list_bucket, ours
        from services.backup.s3 import transport_error
        from services.backup.transfer import backup_checkpoint, pod_backed_up
        from services.connect import open_connection
        from services.errors import PrimeTrainError

        name, step = job.pod.name, job.step
        conn = None
        try:
            conn = (self.connect or open_connection)(job.pod)
            await conn.connect()
            if job.list_first:
                steps, _oldest, source = await pod_backed_up(conn, self.settings, job.run_dir)
                made = [
                    c.created
                    for c in ours(await list_bucket(self.settings, job.run_dir), source)
                    if c.verified and c.created
                ]
                if made:
                    self.newest[name] = max(made)
                if self.planner.listed(name, steps):
                    return
            result = await backup_checkpoint(conn, self.settings, job.run_dir, step)
            if not result.verified:
                raise PrimeTrainError(f"step {step} does not match its manifest: {(result.problems or ['?'])[0]}"[:300])
        except asyncio.CancelledError:
            self.planner.cancelled(name, step)
            raise
        except Exception as exc:  # noqa: BLE001 - reported once per streak, retried, never a crash
            err = exc if isinstance(exc, PrimeTrainError) else transport_error(exc, f"auto-backup of step {step}")
            reason = str(err) if err is not None else f"{type(exc).__name__}: {exc}"
            if self.planner.failed(name, step, reason[:300]):
                self.on_event(
                    "backup failed",
                    logging.ERROR,
                    {
                        "pod": name,
                        "step": step,
                        "error": reason[:300],
                        "message": f"{name}: auto-backup of step {step} failed ({reason[:200]}); retrying",
                    },
                )
        else:
            recovered = self.planner.succeeded(name, step, job.mtime, job.run_dir)
            self.newest[name] = result.manifest.created or self.clock()
            self.on_event(
                "backup done",
                logging.INFO,
                {
                    "pod": name,
                    "step": step,
                    "sent_parts": result.uploaded_parts,
                    "recovered": recovered,
                    "message": f"{name}: step {step} backed up and verified"
                    + (" (working again)" if recovered else ""),
                },
            )
        finally:
            self._tasks.pop(name, None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
