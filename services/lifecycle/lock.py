"""An action never runs twice at once on a pod: this process's guard (:data:`BUSY`, instant) and the pod's
action lock (:class:`PodLock`, across processes and machines), both held by :func:`hold`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from services.errors import PrimeTrainError
from services.lifecycle.events import LifecycleError
from services.lifecycle.holder import holder_text
from services.lifecycle.shell import PodShell, first_json
from services.pod import trusted

if TYPE_CHECKING:
    from services.pod.connection import Connection


class _Busy:
    """An action never runs twice at once on one pod (per process)."""

    def __init__(self) -> None:
        self._held: dict[str, str] = {}

    @contextlib.contextmanager
    def hold(self, pod: str, action: str):
        if pod in self._held:
            raise LifecycleError(
                f"{self._held[pod]} is already running on {pod}", hint="wait for it to finish or cancel it"
            )
        self._held[pod] = action
        try:
            yield
        finally:
            self._held.pop(pod, None)


BUSY = _Busy()


def owner_id() -> str:
    """Who takes the pod's lock, for another taker's refusal message: this machine's user@host."""
    try:
        import getpass

        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no name for this uid (a container): the uid says it
        user = str(os.getuid()) if hasattr(os, "getuid") else "?"
    return f"{user}@{socket.gethostname()}"


def held_error(held: Any, pod: str) -> LifecycleError:
    """The refusal when another holds the pod's lock: "kill is already running on p1: pid 4242 on the pod,
    from alice@laptop, since 14:02:10 (3 min ago)"; "unknown holder" when the record is unusable."""
    return LifecycleError(holder_text(held, pod), hint="wait for it to finish or cancel it")


class PodLock:
    """The pod-wide action lock, across processes and machines: the helper's ``lock`` command holds a
    flock on ``<state>/action.lock`` while its stdin is open. A CLI ``kill`` and the app's ``k``
    therefore never interleave; a holder that died (its pid gone) never blocks anyone."""

    def __init__(self, conn: Connection, action: str) -> None:
        self.conn, self.action = conn, action
        self.proc: Any = None

    async def acquire(self) -> dict[str, Any]:
        conn = self.conn
        shell = PodShell(conn)
        argv = await shell.argv("lock", "--action", self.action, "--owner", owner_id())
        answer: dict[str, Any] = {}
        for attempt in (1, 2):
            try:
                self.proc = await conn.start(shlex.join(argv))
            except PrimeTrainError as exc:
                raise LifecycleError(f"cannot take the pod's action lock: {exc}") from None
            answer = await first_json(self.proc, 30)
            if answer.get(trusted.UNTRUSTED) and attempt == 1:
                await self.release()
                await shell.install_agent()
                continue
            break
        if not answer or answer.get(trusted.UNTRUSTED):
            raise LifecycleError(
                f"the pod's action lock did not answer on {conn.pod.name}", hint="is python3 installed on the pod?"
            )
        if not answer.get("ok"):
            raise held_error(answer.get("held_by") or {}, conn.pod.name)
        return answer["lock"]

    async def release(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            proc.write_eof()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - never mask the action's own outcome
            await proc.kill()


@contextlib.asynccontextmanager
async def pod_lock(conn: Connection, action: str) -> AsyncIterator[dict[str, Any]]:
    lock = PodLock(conn, action)
    try:
        yield await lock.acquire()
    finally:
        await lock.release()


class Guard:
    """The pod's lock, being taken while the action's read-only first steps (pre-flight, status) run:
    :meth:`ready` is awaited before anything is changed on the pod (it raises when another holds it)."""

    def __init__(self, task: asyncio.Future[dict[str, Any]]) -> None:
        self._task = task

    async def ready(self) -> dict[str, Any]:
        return await asyncio.shield(self._task)


@contextlib.asynccontextmanager
async def hold(conn: Connection, action: str) -> AsyncIterator[Guard]:
    """Both guards: this process's (instant) and the pod's (across processes; see :class:`Guard`)."""
    with BUSY.hold(conn.pod.name, action):
        lock = PodLock(conn, action)
        task = asyncio.ensure_future(lock.acquire())
        try:
            yield Guard(task)
        finally:
            if not task.done():
                task.cancel()
            with contextlib.suppress(BaseException):
                await task  # retrieved either way: no "exception never retrieved"
            await lock.release()
