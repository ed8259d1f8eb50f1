"""What launch, kill, resume and cleanup share: events, errors, the pod shell, checkpoint helpers."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

from services.errors import PrimeTrainError
from services.models import PodKind
from services.preflight import Check, LifecycleSettings

AGENT_PATH = Path(__file__).with_name("lifecycle_agent.py")
# the helper and the sibling it imports; uploaded together into one directory named by their hash
AGENT_FILES = (AGENT_PATH, Path(__file__).with_name("lifecycle_agent_preflight.py"))
DEFAULT_STATE_DIR = ".cache/prime-train-tui"


class LifecycleError(PrimeTrainError):
    """A launch/kill/resume/cleanup could not be done; the message says why."""


@dataclass(frozen=True)
class Event:
    action: str  # launch | kill | resume | cleanup
    kind: str  # check | step | progress | warn | done | error
    message: str
    progress: float | None = None  # 0..1 when known
    check: Check | None = None
    data: dict[str, Any] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "kind": self.kind, "message": self.message}
        if self.progress is not None:
            out["progress"] = round(self.progress, 3)
        if self.check is not None:
            out["check"] = self.check.to_json()
        if self.data is not None:
            out["data"] = self.data
        return out


def mask(text: str, values: Iterable[str]) -> str:
    for v in sorted((v for v in values if v and len(v) >= 4), key=len, reverse=True):
        text = text.replace(v, "****")
    return text


def collect_secrets(names: Iterable[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {n: env[n] for n in names if env.get(n)}


def render(template: str, **values: str) -> str:
    """Fill ``{config}``/``{run_dir}``/``{step}`` (shell-quoted); other braces are left alone."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", shlex.quote(str(value)) if key != "step" else str(int(value)))
    return out


# ------------------------------------------------------------------------------------ the pod


class PodShell:
    """Commands, stdin and file uploads on a connected pod (SSH or this machine)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.local = getattr(conn.pod, "kind", None) is not PodKind.SSH
        self.state_dir = (getattr(conn.pod, "probe_dir", None) or DEFAULT_STATE_DIR).rstrip("/")
        self._agent: str | None = None
        self._home: str | None = None
        self.python = sys.executable if self.local else "python3"

    # One exec per call (~130 ms over SSH); input goes over the command's stdin, never to a file.
    async def exec(self, argv: list[str], input: bytes | None = None, timeout: float = 60.0) -> tuple[int, str, str]:
        try:
            return await self.conn.run(shlex.join(argv), timeout, input=input)
        except asyncio.TimeoutError:
            raise LifecycleError(f"the pod did not answer within {timeout:g} s") from None
        except PrimeTrainError as exc:
            raise LifecycleError(str(exc)) from None

    async def put(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        """Write a file on the pod atomically (temp + rename)."""
        try:
            await self.conn.put_file(data, remote, mode)
        except PrimeTrainError as exc:
            raise LifecycleError(f"cannot upload {remote}: {exc}") from None

    async def exists(self, remote: str) -> bool:
        return await self.conn.exists(remote)

    def abspath(self, path: str) -> str:
        path = os.path.expanduser(path) if self.local else path
        if path.startswith("/"):
            return path
        home = self._home or (str(Path.home()) if self.local else "")
        return f"{home.rstrip('/')}/{path}" if home else path

    async def agent_path(self) -> str:
        if self._agent:
            return self._agent
        if self.local:
            self._agent = str(AGENT_PATH)
            return self._agent
        # one upload check per connection, one at a time (the lock and the pre-flight start together)
        guard = getattr(self.conn, "_ptt_agent_lock", None)
        if guard is None:
            guard = asyncio.Lock()
            with contextlib.suppress(AttributeError):
                self.conn._ptt_agent_lock = guard
        async with guard:
            cached = getattr(self.conn, "_ptt_lifecycle_agent", None)
            if cached:
                self._agent = cached
                return cached
            files = [(f.name, f.read_bytes()) for f in AGENT_FILES]
            digest = hashlib.sha256(b"".join(data for _, data in files)).hexdigest()[:16]
            where = f"{self.state_dir}/lifecycle-{digest}"
            if not await self.exists(f"{where}/{files[-1][0]}"):  # the last one is written last
                for name, data in files:
                    await self.put(data, f"{where}/{name}")
            self._agent = f"{where}/{AGENT_PATH.name}"
            with contextlib.suppress(AttributeError):
                self.conn._ptt_lifecycle_agent = self._agent
        return self._agent

    async def agent(self, *args: str, input: bytes | None = None, timeout: float = 60.0) -> dict[str, Any]:
        path = await self.agent_path()
        env = ["env", f"PTT_STATE_DIR={self.state_dir}"]
        rc, out, err = await self.exec([*env, self.python, path, *args], input=input, timeout=timeout)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            tail = (err.strip().splitlines() or [f"exit status {rc}"])[-1]
            raise LifecycleError(f"the pod's helper failed ({args[0]}): {tail}",
                                 hint="is python3 installed on the pod?")
        import json

        return json.loads(lines[-1])

    async def home(self) -> str:
        if self._home is None:
            rc, out, _ = await self.exec(["sh", "-c", "cd && pwd"])
            self._home = out.strip() or "/root"
        return self._home


# ------------------------------------------------------------------------------------ guard


class _Busy:
    """An action never runs twice at once on one pod (per process)."""

    def __init__(self) -> None:
        self._held: dict[str, str] = {}

    @contextlib.contextmanager
    def hold(self, pod: str, action: str):
        if pod in self._held:
            raise LifecycleError(f"{self._held[pod]} is already running on {pod}",
                                 hint="wait for it to finish or cancel it")
        self._held[pod] = action
        try:
            yield
        finally:
            self._held.pop(pod, None)


BUSY = _Busy()


class PodLock:
    """The pod-wide action lock, across processes and machines: the helper's ``lock`` command holds a
    flock on ``<state>/action.lock`` while its stdin is open. A CLI ``kill`` and the app's ``k``
    therefore never interleave; a holder that died (its pid gone) never blocks anyone."""

    def __init__(self, conn: Any, action: str) -> None:
        self.conn, self.action = conn, action
        self.proc: Any = None

    async def acquire(self) -> dict[str, Any]:
        conn = self.conn
        shell = PodShell(conn)
        path = await shell.agent_path()
        owner = f"{socket.gethostname()}:{os.getpid()}"
        argv = ["env", f"PTT_STATE_DIR={shell.state_dir}", shell.python, path, "lock", "--action", self.action,
                "--owner", owner]
        try:
            self.proc = await conn.start(shlex.join(argv))
        except PrimeTrainError as exc:
            raise LifecycleError(f"cannot take the pod's action lock: {exc}") from None
        try:
            answer = json.loads(await asyncio.wait_for(self.proc.readline(), 30) or b"{}")
        except (asyncio.TimeoutError, ValueError):
            raise LifecycleError(f"the pod's action lock did not answer on {conn.pod.name}",
                                 hint="is python3 installed on the pod?") from None
        if not answer.get("ok"):
            held = answer.get("held_by") or {}
            since = time.strftime("%H:%M:%S", time.localtime(held["since"])) if held.get("since") else "?"
            raise LifecycleError(f"{held.get('action', 'another action')} is already running on {conn.pod.name} "
                                 f"(pid {held.get('pid', '?')} on the pod, from {held.get('owner') or '?'}, "
                                 f"since {since})", hint="wait for it to finish or cancel it")
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
async def pod_lock(conn: Any, action: str) -> AsyncIterator[dict[str, Any]]:
    lock = PodLock(conn, action)
    try:
        yield await lock.acquire()
    finally:
        await lock.release()


class Guard:
    """The pod's lock, being taken while the action's read-only first steps (pre-flight, status) run:
    :meth:`ready` is awaited before anything is changed on the pod (it raises when another holds it)."""

    def __init__(self, task: "asyncio.Future[dict[str, Any]]") -> None:
        self._task = task

    async def ready(self) -> dict[str, Any]:
        return await asyncio.shield(self._task)


@contextlib.asynccontextmanager
async def hold(conn: Any, action: str) -> AsyncIterator[Guard]:
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


# ------------------------------------------------------------------------------------ helpers


async def pod_runs(shell: PodShell) -> list[dict[str, Any]]:
    return list((await shell.agent("status")).get("runs", []))


async def active_run(shell: PodShell) -> dict[str, Any] | None:
    active = [r for r in await pod_runs(shell) if r.get("active")]
    return active[-1] if active else None


def ckpt_dir_of(run_dir: str, settings: LifecycleSettings) -> str:
    return settings.ckpt_subdir if settings.ckpt_subdir.startswith("/") else \
        f"{run_dir.rstrip('/')}/{settings.ckpt_subdir}"


async def checkpoints(shell: PodShell, run_dir: str, settings: LifecycleSettings) -> tuple[str, list[dict[str, Any]]]:
    ckpt_dir = ckpt_dir_of(run_dir, settings)
    result = await shell.agent("ckpts", "--ckpt-dir", ckpt_dir)
    return ckpt_dir, list(result.get("ckpts", []))


def newest_complete(ckpts: list[dict[str, Any]]) -> dict[str, Any] | None:
    complete = [c for c in ckpts if c.get("complete")]
    return max(complete, key=lambda c: c["step"]) if complete else None


def default_run_dir(pod: Any, config: Path | None) -> str:
    if getattr(pod, "run_dir", None):
        return str(pod.run_dir)
    stem = config.stem if config is not None else "run"
    return f"prime-train-tui/runs/{stem}"


def backup_on(backup: Any) -> bool:
    """Backup counts as configured when a bucket is set (``services.s3.BackupSettings``)."""
    return backup is not None and bool(getattr(backup, "bucket", ""))


def backup_where(backup: Any, run_dir: str) -> str:
    return f"s3://{backup.bucket}/{backup.prefix_for(run_dir)}"


def _fmt_bytes(n: int) -> str:
    try:
        from services.units import fmt_bytes

        return fmt_bytes(n)
    except Exception:  # noqa: BLE001
        return f"{n} B"


def _one_line(exc: PrimeTrainError) -> str:
    hint = getattr(exc, "hint", "")
    return f"{exc} (hint: {hint})" if hint else str(exc)
