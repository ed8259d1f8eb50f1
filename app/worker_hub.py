"""The App's worker error hub: no worker ends the App; each failure is a toast and a line in the log.

Textual's workers default to ``exit_on_error=True``: the first exception in any of them ends the App with
WorkerFailed — and every pod's monitoring with it (a typo in settings.toml and ``r`` in the Offers pane
was enough). :class:`HubWorkers` replaces the App's worker manager, so every worker — ``run_worker`` or
``@work``, coroutine or thread, started by the App, a pane or a modal — runs with ``exit_on_error=False``
and its failure reaches :func:`report` when it ends, whether or not the widget that started it still
exists (a worker's StateChanged message does not bubble, so an App handler would miss a pane's).

:func:`report`: a toast (the error's own sentence and hint for a PrimeTrainError, else its type and
message), the App's ``worker_errors`` (the last 200), Textual's log, and ``<data dir>/errors.log`` with the
traceback — masked like every other log of ours.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.worker import Worker, WorkerState
from textual.worker_manager import WorkerManager

from services.errors import PrimeTrainError


class HubWorkers(WorkerManager):
    """The App's worker manager: workers never exit the App; a failed one goes to ``on_failure``."""

    def __init__(self, app: App[Any], on_failure: Callable[[Worker[Any]], None]) -> None:
        super().__init__(app)
        self.on_failure = on_failure

    def add_worker(self, worker: Worker[Any], start: bool = True, exclusive: bool = True) -> None:
        worker.exit_on_error = False
        super().add_worker(worker, start=start, exclusive=exclusive)

    def _remove_worker(self, worker: Worker[Any]) -> None:  # every worker's done callback (textual.worker._start)
        super()._remove_worker(worker)
        if worker.state is WorkerState.ERROR and worker.error is not None:
            try:
                self.on_failure(worker)
            except Exception:  # noqa: BLE001 - the hub itself must never be what ends the App
                pass


ErrorLog = deque[tuple[float, str]]  # (time, "NAME failed: what")


def install(app: App[Any]) -> ErrorLog:
    """Give ``app`` the hub (call in its ``__init__``, before any worker starts); returns its log of failures
    (the last 200)."""
    errors: ErrorLog = deque(maxlen=200)
    app._workers = HubWorkers(app, lambda worker: report(app, errors, worker))
    return errors


def describe(error: BaseException) -> str:
    if isinstance(error, PrimeTrainError):
        return f"{error}\n{error.hint}".strip()
    return f"{type(error).__name__}: {error}"


def report(app: App[Any], errors: ErrorLog, worker: Worker[Any]) -> None:
    from services.backup.s3 import hide_credentials

    error = worker.error
    assert error is not None
    title = f"{worker.name or 'a background job'} failed"
    text = hide_credentials(describe(error))
    errors.append((time.time(), f"{title}: {text}"))
    app.log.error(f"{title}: {text}")
    _append_log(f"{title}: {text}", error)
    app.notify(text, severity="error", title=title, timeout=10)


def _append_log(line: str, error: BaseException) -> None:
    from app.settings import data_dir
    from services.backup.s3 import hide_credentials

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    trace = "" if isinstance(error, PrimeTrainError) else "".join(traceback.format_exception(error))
    try:
        path = data_dir() / "errors.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {line}\n" + hide_credentials(trace))
    except OSError:
        pass  # an unwritable data dir costs the log file, never the App
