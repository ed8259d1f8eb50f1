"""The Checkpoints pane: the selected pod's checkpoints, the bucket's backups, backup and restore.

The App calls ``show(snapshot, now)`` for the selected pod (the probe's "ckpts" and disk figures) and
``clear()`` when no pod is selected. The bucket is listed by a worker (services.backup.bucket.list_bucket)
when the pod changes, after a transfer, on ``r``, and at most every ``BUCKET_REFRESH`` s.

``b`` backs up the newest complete checkpoint not yet verified in the bucket for this run, ``u`` restores
the newest verified backup of this run onto the pod (another run's under the same prefix only when this
run has none, and the question names that run); a verified ``b`` backup is told to the auto-backup so it
is not sent again. Which run is on the pod (services.backup.transfer.run_source) is asked with each listing; both ask
first (ConfirmScreen) and run as workers that open their own
connection to the pod (``connect``, default services.connect.open_connection). ``x`` (or escape) stops the running
transfer after a confirmation: the agent on the pod is stopped with its SSH channel, the finished parts
stay in the bucket and the next backup resumes from them. Progress: bytes, MB/s, ETA.
Posts :class:`CheckpointsPane.TransferFinished` when a backup/restore ends (also when cancelled).

Auto-backup (``auto_backup`` in the settings) is not run from here: the App's app/auto_backup.py is fed
every snapshot of every pod; this pane shows its progress and last failure for the selected pod and
``x`` cancels it too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from app.screens.confirm import ConfirmScreen
from app.tasks import Busy, Outcome, Tasks, report_transfer
from services.errors import PrimeTrainError
from services.models import PodSnapshot
from widgets.checkpoints_view import CheckpointsModel, CheckpointsView, size

if TYPE_CHECKING:  # transfers and manifests load when the pane first lists or moves a checkpoint, not with the app
    from services.backup.manifest import BucketCheckpoint, PodCheckpoint, RunSource, TransferProgress
    from services.backup.s3 import BackupSettings

BUCKET_REFRESH = 120.0


def credential_source(env: Mapping[str, str] | None = None) -> str:
    """Where boto3 will find credentials, masked: never the secret, at most 4 chars of the key id."""
    env = os.environ if env is None else env
    if env.get("AWS_ACCESS_KEY_ID"):
        return f"credentials: environment ({env['AWS_ACCESS_KEY_ID'][:4]}…****)"
    if env.get("AWS_PROFILE"):
        return f"credentials: profile {env['AWS_PROFILE']}"
    return "credentials: ~/.aws or the machine's role"


def backup_toml() -> str:
    """Where backup.toml is (or would be), with the home directory as ~."""
    from pathlib import Path

    from app.settings import config_dir

    path = config_dir() / "backup.toml"
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


class CheckpointsPane(Widget, can_focus=True):
    BINDINGS = [
        Binding("b", "backup", "Back up", id="checkpoints.backup"),
        Binding("u", "restore", "Restore", id="checkpoints.restore"),
        Binding("r", "refresh_bucket", "Refresh bucket", id="checkpoints.refresh"),
        Binding("x", "cancel_transfer", "Stop transfer", id="checkpoints.cancel"),
        Binding("escape", "cancel_transfer(True)", "Stop transfer", show=False),
        # a small terminal: the body scrolls from the keyboard too (hidden: they stay with the focus)
        Binding("down", "scroll_body('down')", "Scroll down", show=False),
        Binding("up", "scroll_body('up')", "Scroll up", show=False),
        Binding("pagedown", "scroll_body('page_down')", "Page down", show=False),
        Binding("pageup", "scroll_body('page_up')", "Page up", show=False),
    ]

    DEFAULT_CSS = """
    CheckpointsPane { height: 1fr; }
    CheckpointsPane #ck-empty { padding: 1 2; color: $text-muted; }
    CheckpointsPane #ck-body { padding: 0 1; }
    """

    class TransferFinished(Message):
        def __init__(self, action: str, pod: str, step: int | None, ok: bool, message: str) -> None:
            super().__init__()
            self.action, self.pod, self.step, self.ok, self.message = action, pod, step, ok, message

    def __init__(
        self, settings: BackupSettings | None = None, *, connect: Callable[[Any], Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.last_message = ""
        if settings is None:
            settings = self.load_settings()
        self.settings = settings
        self._connect = connect
        self.snapshot: PodSnapshot | None = None
        self.bucket: dict[str, tuple[BucketCheckpoint, ...]] = {}  # pod name -> listing
        self.sources: dict[str, RunSource | None] = {}  # pod name -> the run on it (None: not known)
        self.on_pod: dict[str, dict[int, PodCheckpoint]] = {}  # pod name -> its checkpoints (which: fingerprint)
        self._bucket_at: dict[str, float] = {}
        self._bucket_status: dict[str, str] = {}
        self.transfer: TransferProgress | None = None
        self._busy: str | None = None  # pod name of the running transfer
        self._now = 0.0
        self._worker: Any = None  # the running backup/restore worker

    def load_settings(self) -> BackupSettings:
        """``[backup]`` of <config dir>/backup.toml + PRIME_TRAIN_TUI_BUCKET/_S3_ENDPOINT; defaults on error."""
        from app.settings import load_backup_toml
        from services.backup.s3 import BackupSettings

        try:
            return load_backup_toml()
        except PrimeTrainError as exc:
            self.settings_error = str(exc)
            self.last_message = f"backup settings: {exc}"
            return BackupSettings()

    settings_error = ""  # backup.toml could not be read: the pane says so first (backups are off meanwhile)

    def action_scroll_body(self, how: str) -> None:  # up/down/page keys: a small terminal's long tables
        getattr(self.query_one("#ck-body", VerticalScroll), f"scroll_{how}")(animate=False)

    def compose(self) -> ComposeResult:
        yield Static("No pod selected. Press [b]a[/b] to add one.", id="ck-empty")
        with VerticalScroll(id="ck-body"):
            yield CheckpointsView(id="ck-view")

    def on_mount(self) -> None:
        self.query_one("#ck-body").display = False
        self._ready = True
        if self.snapshot is not None:
            self.show(self.snapshot, self._now)

    _ready = False

    # ------------------------------------------------------------------ fed by the App
    def clear(self) -> None:
        self.snapshot = None
        if self._ready:
            self.query_one("#ck-empty").display = True
            self.query_one("#ck-body").display = False

    def show(self, snapshot: PodSnapshot, now: float) -> None:
        self.snapshot, self._now = snapshot, now
        if not self._ready:
            return
        self.query_one("#ck-empty").display = False
        self.query_one("#ck-body").display = True
        name = snapshot.pod.name
        if self._run_dir() and self.settings.bucket and now - self._bucket_at.get(name, float("-inf")) > BUCKET_REFRESH:
            self._bucket_at[name] = now
            self.action_refresh_bucket()
        self._refresh_view()

    def _run_dir(self) -> str | None:
        return self.snapshot.pod.run_dir if self.snapshot else None

    def _refresh_view(self) -> None:
        snap = self.snapshot
        if snap is None or not self._ready:
            return
        latest = snap.latest
        name = snap.pod.name
        s = self.settings
        run_dir = self._run_dir()
        where = f"s3://{s.bucket}/{s.prefix_for(run_dir or 'run')}" if s.bucket else ""
        status = self._bucket_status.get(name, where)
        failed = status.startswith("(error")
        title = (
            f"{snap.pod.label}"
            + (" · SIMULATED" if snap.pod.simulated else "")
            + (f" · run {run_dir}" if run_dir else "")
            + (f" · {credential_source()}" if s.bucket else "")
        )
        model = CheckpointsModel(
            title=title,
            pod_ckpts=tuple(latest.ckpts) if latest else (),
            bucket=self.bucket.get(name),
            bucket_status=status if not failed else "",
            disk_used=latest.host.disk_used if latest else None,
            disk_total=latest.host.disk_total if latest else None,
            now=latest.t if latest else 0.0,
            transfer=self._transfer_of(name),
            message=("" if self.last_message == f"backup settings: {self.settings_error}" else self.last_message)
            or (self.auto.status(name) if self.auto is not None else ""),
            source=self.sources.get(name),
            backed_up=frozenset(self.backed_up(name)),
            notice=self._notice(snap, failed and status),
            show_pod=bool(run_dir) or bool(latest and latest.ckpts),
            show_bucket=bool(s.bucket) and bool(run_dir) and not failed,
            backups=bool(s.bucket),
        )
        self.query_one("#ck-view", CheckpointsView).show(model)

    def _notice(self, snap: PodSnapshot, bucket_error: str | bool) -> str:
        """Why a part of the pane is empty or missing, the real reason first, and what to do (keys, files)."""
        name, lines, state = snap.pod.name, [], snap.status.state
        if state.value != "online" and snap.latest is None:
            lines.append(
                f"{name} is {state.value}"
                + (f": {snap.status.reason}" if snap.status.reason else "")
                + ". Its checkpoints show once it answers (r reconnects now)."
            )
        elif not self._run_dir():
            where = f" Or set run_dir for {name} in pods.toml." if snap.pod.saved else ""
            lines.append(
                f"No run on {name} yet, so there are no checkpoints to list. Launch one (L): its run "
                f"directory is followed from then on.{where}"
            )
        if self.settings_error:
            lines.append(
                f"Backups are off: backup.toml cannot be read ({self.settings_error}). Fix it and restart the app."
            )
        elif not self.settings.bucket:
            lines.append(
                f"No backup bucket set up: checkpoints stay only on the pod. To back them up (b) and "
                f'restore them (u), name a bucket in {backup_toml()} — [backup] bucket = "my-bucket".'
            )
        elif bucket_error:
            lines.append(f"The bucket could not be listed {bucket_error}; r lists it again.")
        return "\n".join(lines)

    @property
    def auto(self) -> Any:
        """The App's auto-backup controller (app/auto_backup.py), None in an App without one."""
        return getattr(self.app, "auto_backup", None)

    def _transfer_of(self, name: str) -> TransferProgress | None:
        if self._busy == name:
            return self.transfer
        return self.auto.progress.get(name) if self.auto is not None else None

    def auto_backup_changed(self, name: str, finished: bool) -> None:
        """From the auto-backup controller: progress, or the end of a backup (the bucket is re-listed the
        next time this pod is shown)."""
        if finished:
            self._bucket_at.pop(name, None)
            if self.snapshot is not None and self.snapshot.pod.name == name:
                self.last_message = ""
        if self.snapshot is not None and self.snapshot.pod.name == name:
            self._refresh_view()

    # ------------------------------------------------------------------ actions
    def _target(self, action: str) -> tuple[Any, str] | None:
        snap = self.snapshot
        if snap is None:
            self.notify("Select a pod first.", severity="warning")
            return None
        if not snap.pod.run_dir:
            self.notify(f"No run on {snap.pod.name} yet: launch one first (L).", severity="warning")
            return None
        if not self.settings.bucket:
            self.notify(
                f'No backup bucket set up: name one in {backup_toml()} ([backup] bucket = "…").', severity="warning"
            )
            return None
        if self._busy is not None:
            self.notify(f"A transfer for {self._busy} is still running.", severity="warning")
            return None
        if self.auto is not None and (step := self.auto.running(snap.pod.name)) is not None:
            self.notify(
                f"The auto-backup of step {step} from {snap.pod.name} is running (x stops it).", severity="warning"
            )
            return None
        return snap.pod, snap.pod.run_dir

    def backup_candidate(self) -> int | None:
        """The newest complete checkpoint on the pod that is not verified in the bucket."""
        snap = self.snapshot
        if snap is None or snap.latest is None:
            return None
        verified = self.backed_up(snap.pod.name)
        steps = [c.step for c in snap.latest.ckpts if c.complete and c.step not in verified]
        return max(steps) if steps else None

    def backed_up(self, name: str) -> set[int]:
        """The pod's steps whose checkpoint has a verified backup of THAT checkpoint by the run on the pod
        (not another run's, nor an older checkpoint of the same step: a relaunch in the same run dir)."""
        on_pod = self.on_pod.get(name, {})
        return {c.step for c in self.mine(name) if c.of(on_pod.get(c.step))}

    def mine(self, name: str) -> list[BucketCheckpoint]:
        """The listed steps that came from the run on this pod (another run may share the prefix)."""
        from services.backup.bucket import ours

        return ours(self.bucket.get(name, ()), self.sources.get(name))

    def action_backup(self) -> None:
        target = self._target("backup")
        if target is None:
            return
        step = self.backup_candidate()
        if step is None:
            self.notify("No complete checkpoint that is not already backed up.", severity="information")
            return
        ck = next(c for c in self.snapshot.latest.ckpts if c.step == step)  # type: ignore[union-attr]
        question = (
            f"Back up step {step} ({size(ck.bytes)}) from {target[0].name} to "
            f"s3://{self.settings.bucket}/{self.settings.prefix_for(target[1])}? "
            "Storage and transfer may cost money."
        )

        def answered(ok: bool | None) -> None:
            if ok:
                self._start("backup", target[0], target[1], step)

        self.app.push_screen(ConfirmScreen(question, yes="Back up"), answered)

    def action_restore(self) -> None:
        target = self._target("restore")
        if target is None:
            return
        name = target[0].name
        mine = [c for c in self.mine(name) if c.verified]
        others = [c for c in self.bucket.get(name, ()) if c.verified and c not in mine]
        if not mine and not others:
            self.notify("No verified backup in the bucket for this run (press r to refresh).", severity="warning")
            return
        from services.backup.manifest import source_label

        pick = max(mine or others, key=lambda c: c.step)
        step = pick.step
        whose = (
            ""
            if mine
            else (f" It is ANOTHER run's backup ({source_label(pick.source)}): this run has none under this prefix.")
        )
        question = (
            f"Restore step {step} from the bucket onto {name}:{target[1]}/checkpoints? "
            f"It is verified against its manifest before it appears.{whose}"
        )

        def answered(ok: bool | None) -> None:
            if ok:
                self._start("restore", target[0], target[1], step)

        self.app.push_screen(ConfirmScreen(question, yes="Restore"), answered)

    def action_refresh_bucket(self) -> None:
        snap = self.snapshot
        if snap is None or not snap.pod.run_dir or not self.settings.bucket:
            return
        # an unexpected failure is the App's error toast (its worker hub), never the end of the App
        self.run_worker(
            self._list(snap.pod, snap.pod.run_dir),
            name=f"listing the bucket for {snap.pod.name}",
            group="checkpoints-list",
            exclusive=True,
            exit_on_error=False,
        )

    def action_cancel_transfer(self, quiet: bool = False) -> None:
        """Stop the running backup/restore (or the selected pod's auto-backup), after a confirmation.
        ``quiet`` (escape): nothing to say when nothing runs."""
        snap = self.snapshot
        auto_step = self.auto.running(snap.pod.name) if self.auto is not None and snap is not None else None
        if self._busy is not None and self.transfer is not None:
            what, pod = f"{self.transfer.action} of step {self.transfer.step}", self._busy
        elif auto_step is not None and snap is not None:
            what, pod = f"auto-backup of step {auto_step}", snap.pod.name
        else:
            if not quiet:
                self.notify("No backup or restore is running.", severity="information")
            return
        worker, auto = self._worker, self._busy is None
        question = (
            f"Stop the {what} on {pod}? The agent on the pod is stopped; the parts already in the "
            "bucket stay there and the next backup resumes from them."
        )

        def answered(ok: bool | None) -> None:
            if not ok:
                return
            if auto:
                self.auto.cancel(pod)
            elif worker is not None and worker is self._worker:
                worker.cancel()

        self.app.push_screen(ConfirmScreen(question, yes="Stop it"), answered)

    def _start(self, action: str, pod: Any, run_dir: str, step: int) -> None:
        """The transfer runs as an app task in the "transfer" lane (app/tasks.py): the task list (t) shows
        and can stop it, and a lifecycle action (kill) is never held up by it."""
        tasks = getattr(self.app, "tasks", None)
        if isinstance(tasks, Tasks) and (other := tasks.busy(pod.name, "transfer")) is not None:
            self.notify(f"{other.action} is still running on {pod.name} (t shows the task list)", severity="warning")
            return
        from services.backup.manifest import TransferProgress

        self._busy = pod.name
        self.transfer = TransferProgress(action, step, "connect", 0, 0, 0.0)
        self.last_message = ""
        if self.auto is not None:
            self.auto.planner.hold(pod.name, action)
        self._refresh_view()
        if not isinstance(tasks, Tasks):  # a bare host app (tests): a worker of the pane's own
            self._worker = self.run_worker(self._transfer(action, pod, run_dir, step), group="checkpoints-transfer")
            return
        try:
            task = tasks.start(
                pod.name,
                action,
                lambda t: self._transfer(action, pod, run_dir, step, t),
                self._task_changed,
                lane="transfer",
            )
        except Busy as err:  # checked above; kept for a race with another starter
            self._busy, self.transfer = None, None
            self.notify(str(err), severity="warning")
            return
        self._worker = task.worker

    def _task_changed(self, task: Any, event: Any) -> None:
        """The pane shows its own transfers (so the App adds no toast of its own when they end)."""

    # ------------------------------------------------------------------ workers
    async def _list(self, pod: Any, run_dir: str) -> None:
        from services.backup.bucket import list_bucket
        from services.backup.s3 import transport_error
        from services.backup.transfer import pod_checkpoints, run_source
        from services.connect import open_connection

        name = pod.name
        self._bucket_status[name] = "(listing…)"
        self._refresh_view()
        conn = (self._connect or open_connection)(pod)
        try:  # which run is on the pod: its backups are "this run's"; not known when the pod does not answer
            await conn.connect()
            self.sources[name] = await run_source(conn, run_dir)
            self.on_pod[name] = {c.step: c for c in (await pod_checkpoints(conn, run_dir))[0]}
        except Exception as exc:  # a pod that does not answer: nothing counts as this run's
            if not isinstance(exc, PrimeTrainError) and transport_error(exc, "which run") is None:
                raise
            self.sources[name] = None
            self.on_pod.pop(name, None)
        finally:
            await conn.close()
        try:
            self.bucket[name] = tuple(await list_bucket(self.settings, run_dir))
            self._bucket_status.pop(name, None)
        except PrimeTrainError as exc:
            self._bucket_status[name] = f"(error: {exc})"
        self._refresh_view()

    def _progress(self, p: TransferProgress) -> None:
        self.transfer = p
        self._refresh_view()

    async def _transfer(self, action: str, pod: Any, run_dir: str, step: int, task: Any = None) -> Any:
        from services.backup.s3 import transport_error
        from services.backup.transfer import backup_checkpoint, restore_checkpoint
        from services.connect import open_connection

        conn = (self._connect or open_connection)(pod)
        ok, text = False, ""

        def report(p: Any) -> None:
            self._progress(p)
            if task is not None:
                report_transfer(task, p)

        try:
            await conn.connect()
            if action == "backup":
                res = await backup_checkpoint(conn, self.settings, run_dir, step, on_progress=report)
                ok = res.verified
                if ok and self.auto is not None:  # auto-backup does not send it again
                    snap = self.snapshot if self.snapshot and self.snapshot.pod.name == pod.name else None
                    ck = next((c for c in (snap.latest.ckpts if snap and snap.latest else ()) if c.step == step), None)
                    self.auto.planner.succeeded(pod.name, step, ck.mtime if ck else None, run_dir)
                text = (
                    f"step {step} backed up and verified ({res.uploaded_parts} parts sent, "
                    f"{res.skipped_parts} already there)"
                    if ok
                    else f"step {step}: {res.problems[0]}"
                )
            else:
                notes: list[str] = []
                await restore_checkpoint(conn, self.settings, run_dir, step, on_progress=report, notes=notes)
                ok, text = True, " · ".join([f"step {step} restored onto {pod.name} and verified", *notes])
        except asyncio.CancelledError:
            self._busy, self.transfer = None, None
            self._finished(
                action,
                pod.name,
                step,
                False,
                f"{action} of step {step} stopped"
                + (
                    ": the parts already sent stay in the bucket, the next backup resumes"
                    if action == "backup"
                    else ": nothing was put in place on the pod"
                ),
            )
            raise
        except PrimeTrainError as exc:
            text = f"{action} of step {step} failed: {exc}" + (f" ({exc.hint})" if exc.hint else "")
        except Exception as exc:  # a timeout or lost connection: one line, not a crash
            known = transport_error(exc, f"{action} of step {step}")
            if known is None:
                raise
            text = f"{known} ({known.hint})" if known.hint else str(known)
        finally:
            await conn.close()
            self._busy, self.transfer, self._worker = None, None, None
            if self.auto is not None:
                self.auto.planner.release(pod.name)
        self._finished(action, pod.name, step, ok, text)
        if task is not None:
            task.update(status=("✓ " if ok else "✗ ") + text, line=text)
        await self._list(pod, run_dir)
        return Outcome("done" if ok else "error", text)

    def _finished(self, action: str, pod: str, step: int, ok: bool, text: str) -> None:
        self.last_message = text
        self.notify(text, severity="information" if ok else "error")
        self.post_message(self.TransferFinished(action, pod, step, ok, text))
        self._refresh_view()

    def with_settings(self, settings: BackupSettings) -> None:
        """New settings from the App (e.g. the bucket changed): re-list."""
        self.settings = replace(settings)
        self._bucket_at.clear()
        self.bucket.clear()
