"""The app's task list: every launch / kill / resume / cleanup (and any other long action a pane starts) runs
as an app-level worker registered here, so it outlives the dialog that started it, shows in the task list
(`t`), and can be cancelled from there.

A task is a small record (pod, action, state, progress, status line, log lines) that listeners (the dialog
or pane that started it, the task list) are told about on every change. One task at a time per pod and
lane: launch/kill/resume/cleanup share the "lifecycle" lane (the pod-side lock keeps other processes out
too); a backup or restore is in the "transfer" lane, so a kill is never held up by an upload.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from textual.app import App
from textual.worker import Worker

from services.text import plain

Listener = Callable[["Task", Any], None]
KEEP_FINISHED = 20  # finished tasks kept for the list; older ones are dropped


@dataclass(eq=False)
class Task:
    id: int
    pod: str
    action: str  # launch | kill | resume | cleanup | backup | restore | auto-backup
    started: float
    lane: str = "lifecycle"  # one running task per (pod, lane)
    state: str = "running"  # running | done | failed | cancelled
    progress: float | None = None  # 0..1 when known
    status: str = ""  # the newest line worth a glance
    lines: list[str] = field(default_factory=list)
    finished: float | None = None
    result: Any = None  # the action's final event (lifecycle: an Event with kind done/error)
    worker: Worker | None = field(default=None, repr=False)
    entered: bool = field(default=False, repr=False)  # the worker's coroutine has begun (see Tasks._reap)
    listeners: list[Listener] = field(default_factory=list, repr=False)

    @property
    def running(self) -> bool:
        return self.state == "running"

    def elapsed(self, now: float | None = None) -> float:
        return (self.finished if self.finished is not None else (now or time.monotonic())) - self.started

    def update(
        self, *, progress: float | None = None, status: str | None = None, line: str | None = None, event: Any = None
    ) -> None:
        """Record a change and tell the listeners (``event``: the raw event, for a dialog that renders it)."""
        if progress is not None:
            self.progress = max(0.0, min(1.0, progress))
        if status is not None:  # the pod's and the provider's words: the task list shows them as text
            self.status = plain(status, oneline=True)
        if line is not None:
            self.lines.append(plain(line))
        self._tell(event)

    def _tell(self, event: Any = None) -> None:
        for listener in list(self.listeners):
            try:
                listener(self, event)
            except Exception:  # noqa: BLE001 - a view that went away must not stop the action
                self.listeners.remove(listener)


@dataclass(frozen=True)
class Outcome:
    """What a task body may return: ``kind`` "error" marks the task failed in the list."""

    kind: str  # done | error
    message: str


def report_transfer(task: Task, p: Any) -> None:
    """A backup/restore's progress (services.backup.transfer.TransferProgress) as the task's progress and status."""
    rate = f" · {p.rate / 1e6:.0f} MB/s" if p.rate > 0 else ""
    task.update(progress=p.done / p.total if p.total > 0 else None, status=f"{p.phase} step {p.step}{rate}")


class Busy(Exception):
    """The pod already runs an action from this app."""


class Tasks:
    def __init__(self, app: App) -> None:
        self.app = app
        self.items: list[Task] = []
        self._ids = itertools.count(1)
        self.on_finish: list[Callable[[Task], None]] = []  # e.g. the app's toast

    def running(self, pod: str | None = None) -> list[Task]:
        self._reap()
        return [t for t in self.items if t.running and (pod is None or t.pod == pod)]

    def _reap(self) -> None:
        """A worker cancelled before its coroutine first ran never reached ``_run``'s bookkeeping: its task
        would block its lane for good. Settle it here."""
        for task in self.items:
            worker = task.worker
            if task.running and worker is not None and not task.entered and (worker.is_cancelled or worker.is_finished):
                task.state, task.status, task.finished = "cancelled", "cancelled", time.monotonic()
                task.lines.append("– cancelled before it started")
                task._tell()

    def busy(self, pod: str, lane: str = "lifecycle") -> Task | None:
        return next((t for t in self.running(pod) if t.lane == lane), None)

    def start(
        self,
        pod: str,
        action: str,
        body: Callable[[Task], Awaitable[Any]],
        listener: Listener | None = None,
        *,
        lane: str = "lifecycle",
    ) -> Task:
        """Run ``body(task)`` as an app worker; its return value is the task's result (an object whose
        ``kind`` is "error" marks the task failed). Raises :class:`Busy` when the pod already runs a task of
        this lane started here."""
        if (other := self.busy(pod, lane)) is not None:
            raise Busy(f"{other.action} is still running on {pod} (t shows the task list)")
        task = Task(next(self._ids), pod, action, time.monotonic(), lane=lane)
        if listener is not None:
            task.listeners.append(listener)
        self.items.append(task)
        self._trim()
        # a callable, not a coroutine: a worker cancelled before it runs then leaves no coroutine un-awaited
        task.worker = self.app.run_worker(
            functools.partial(self._run, task, body),
            name=f"{action} on {pod}",
            group=f"task-{task.id}",
            exit_on_error=False,
        )
        task._tell()
        return task

    def start_events(
        self,
        pod: str,
        action: str,
        events: Callable[[], AsyncIterator[Any]],
        listener: Listener | None = None,
        *,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> Task:
        """A lifecycle action: an async iterator of events (kind, message, progress, check) → the task."""

        async def body(task: Task) -> Any:
            last = None
            try:
                async for ev in events():
                    last = ev
                    task.update(progress=getattr(ev, "progress", None), status=_status(ev), line=_line(ev), event=ev)
            finally:
                if close is not None:
                    await close()
            return last

        return self.start(pod, action, body, listener)

    def cancel(self, task: Task) -> None:
        if task.running and task.worker is not None:
            task.worker.cancel()

    async def _run(self, task: Task, body: Callable[[Task], Awaitable[Any]]) -> None:
        import asyncio

        task.entered = True
        try:
            task.result = await body(task)
            kind = getattr(task.result, "kind", "done")
            task.state = "failed" if kind == "error" else "done"
        except asyncio.CancelledError:
            task.state = "cancelled"
            task.status = "cancelled"
            task.lines.append("– cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - shown in the task, never a crash
            task.state = "failed"
            task.status = f"✗ {exc}"
            task.lines.append(f"✗ {exc}")
            task.result = exc
        finally:
            task.finished = time.monotonic()
            task._tell()
            for hook in list(self.on_finish):
                try:
                    hook(task)
                except Exception:  # noqa: BLE001
                    pass

    def _trim(self) -> None:
        done = [t for t in self.items if not t.running]
        for t in done[: max(0, len(done) - KEEP_FINISHED)]:
            self.items.remove(t)


def _line(ev: Any) -> str:
    check = getattr(ev, "check", None)
    if check is not None:
        return f"{check.mark} {check.name}" + (f" — {check.detail}" if check.detail else "")
    kind, message = getattr(ev, "kind", ""), str(getattr(ev, "message", ev))
    return {"done": f"✓ {message}", "error": f"✗ {message}", "warn": f"! {message}"}.get(kind, message)


def _status(ev: Any) -> str | None:
    return _line(ev) if getattr(ev, "kind", "") != "check" else None
