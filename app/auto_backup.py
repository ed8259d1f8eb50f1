"""The App's auto-backup: every snapshot of every pod goes to services.backup.planner's planner (whatever
tab or dialog is on screen); the backups it asks for run here as workers, one per pod at a time.

Settings are the Checkpoints pane's (backup.toml: ``auto_backup``, bucket, ...). The outcome is a
notification -- a success per step, a failure once per streak (the retries after it are quiet until it
works again) -- and, when the Checkpoints pane shows that pod, its progress bar and the last failure
with the time of the next retry. ``x`` in the pane cancels a running auto-backup (:meth:`cancel`): the
agent on the pod stops, the finished parts stay in the bucket for the next backup, and that step is not
retried (the next complete one is backed up). A pod removed meanwhile (:meth:`remove`) is gone: its
cancelled or finished backup tells the planner nothing and says nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from app.host import AppHost
from app.pane_registry import CHECKPOINTS
from app.tasks import Busy, Outcome, Task, report_transfer
from services.backup.planner import AutoBackupPlanner, Job
from services.errors import PrimeTrainError
from services.models import PodSnapshot

if TYPE_CHECKING:  # transfers and manifests load with the first auto-backup, not with the app
    from textual.worker import Worker

    from app.panes.checkpoints import CheckpointsPane
    from services.backup.manifest import TransferProgress
    from services.backup.s3 import BackupSettings

RETRY_BASE = 30.0  # seconds before the first retry; doubles per failure up to RETRY_MAX
RETRY_MAX = 1800.0


class AutoBackup:
    def __init__(self, app: AppHost, connect: Callable[[Any], Any] | None = None) -> None:
        self.app = app
        self.connect = connect
        self.planner = AutoBackupPlanner(retry_base=RETRY_BASE, retry_max=RETRY_MAX)
        self.progress: dict[str, TransferProgress] = {}  # pod -> the running auto-backup's progress
        self._workers: dict[str, Worker[Any]] = {}
        self._removed: set[str] = set()  # pods removed while their backup was still unwinding
        self._settings: BackupSettings | None = None  # read while there is no Checkpoints pane
        self._found: CheckpointsPane | None = None

    def _pane(self) -> CheckpointsPane | None:
        """The main screen's Checkpoints pane, once mounted: held while it is in the DOM (a removed widget has no
        parent), as this runs for every snapshot of every pod and the App's lookup walks the pane's ancestry."""
        pane = self._found
        if pane is None or pane.parent is None:
            pane = self._found = self.app.mounted(CHECKPOINTS)
        return pane

    @property
    def settings(self) -> BackupSettings:
        pane = self._pane()
        if pane is not None:
            return pane.settings
        if self._settings is None:  # no pane (yet: it mounts just after the first screen): backup.toml itself
            from app.settings import load_backup_toml
            from services.backup.s3 import BackupSettings

            try:
                self._settings = load_backup_toml()
            except PrimeTrainError:  # the pane says why once it is up; backups are off meanwhile
                self._settings = BackupSettings()
        return self._settings

    # ------------------------------------------------------------------ fed by the App
    def observe(self, snapshot: PodSnapshot) -> None:
        """Every snapshot of every pod (cheap: no I/O unless a backup starts)."""
        settings = self.settings
        job = self.planner.want(snapshot, enabled=settings.auto_backup and bool(settings.bucket))
        if job is None:
            return
        self._removed.discard(job.pod.name)
        name, tasks = job.pod.name, self.app.tasks
        try:  # a task in the "transfer" lane: the task list (t) shows it and can stop it
            task = tasks.start(name, "auto-backup", lambda t: self._run(job, settings, t), _shown_here, lane="transfer")
        except Busy as err:  # a transfer started elsewhere in the same instant: try again later, quietly
            self.planner.failed(name, job.step, str(err))
            return
        if task.worker is not None:
            self._workers[name] = task.worker

    def remove(self, name: str) -> None:
        self._removed.add(name)
        worker = self._workers.pop(name, None)
        if worker is not None:
            worker.cancel()
        self.planner.forget(name)
        self.progress.pop(name, None)

    def cancel(self, name: str) -> bool:
        """Stop the running auto-backup of this pod (asked by the user); False when none runs."""
        worker = self._workers.get(name)
        if worker is None or worker.is_finished:
            return False
        worker.cancel()
        return True

    def running(self, name: str) -> int | None:
        return self.planner.running(name)

    def status(self, name: str) -> str:
        return self.planner.status(name)

    # ------------------------------------------------------------------ the worker
    async def _run(self, job: Job, settings: BackupSettings, task: Task | None = None) -> Outcome:
        from services.backup.manifest import TransferProgress
        from services.backup.s3 import BackupError, transport_error
        from services.backup.transfer import backup_checkpoint, pod_backed_up
        from services.connect import open_connection

        name, step = job.pod.name, job.step
        outcome = Outcome("done", "")
        doing = f"auto-backup of step {step} from {name}"
        self.progress[name] = TransferProgress("backup", step, "connect", 0, 0, 0.0)
        self._changed(name)
        conn = None
        try:
            conn = (self.connect or open_connection)(job.pod)
            await conn.connect()
            if job.list_first:  # this run's verified backups of the checkpoints on the pod (not another
                # run's under the same prefix, nor an older checkpoint of the same step in the same run dir)
                steps, _oldest, _source = await pod_backed_up(conn, settings, job.run_dir)
                if self.planner.listed(name, steps):
                    return Outcome("done", f"step {step} is already verified in the bucket")
            result = await backup_checkpoint(
                conn, settings, job.run_dir, step, on_progress=partial(self._progress, name, task)
            )
            if not result.verified:
                raise BackupError(f"step {step} does not match its manifest: {result.problems[0]}")
        except asyncio.CancelledError:
            if name in self._removed:  # the pod is gone: nothing to remember or say about it
                raise
            self.planner.cancelled(name, step)
            self.app.notify(
                f"{doing} cancelled; its finished parts stay in the bucket for the next backup.",
                title="Auto-backup",
                severity="warning",
            )
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is reported and retried, never a crash
            err = exc if isinstance(exc, PrimeTrainError) else transport_error(exc, doing)
            reason = (
                (f"{err}" + (f" ({err.hint})" if err.hint else ""))
                if err is not None
                else f"{type(exc).__name__}: {exc}"
            )
            outcome = Outcome("error", reason)
            if name not in self._removed and self.planner.failed(name, step, reason):
                self.app.notify(
                    f"{name}: {reason}. Retrying in the background; the Checkpoints pane shows the next attempt.",
                    title="Auto-backup failed",
                    severity="error",
                    timeout=15,
                )
        else:
            recovered = name not in self._removed and self.planner.succeeded(name, step, job.mtime, job.run_dir)
            text = (
                f"step {step} backed up and verified ({result.uploaded_parts} parts sent, "
                f"{result.skipped_parts} already there)"
            )
            outcome = Outcome("done", text)
            if name not in self._removed:
                self.app.notify(f"{name}: {text}" + (" — working again" if recovered else ""), title="Auto-backup")
        finally:
            if conn is not None:
                await conn.close()
            if name not in self._removed:
                self.progress.pop(name, None)
                self._workers.pop(name, None)
                self._changed(name, finished=True)
        if task is not None:
            task.update(status=("✓ " if outcome.kind == "done" else "✗ ") + outcome.message, line=outcome.message)
        return outcome

    def _progress(self, name: str, task: Task | None, p: TransferProgress) -> None:
        if name in self._removed:
            return
        self.progress[name] = p
        self._changed(name)
        if task is not None:
            report_transfer(task, p)

    def _changed(self, name: str, finished: bool = False) -> None:
        pane = self._pane()
        if pane is not None:
            pane.auto_backup_changed(name, finished)


def _shown_here(task: Any, event: Any) -> None:
    """Auto-backup notifies by itself (once per failure streak): the App adds no toast of its own."""
