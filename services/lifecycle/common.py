"""What launch, kill, resume and cleanup share: events, errors, the pod shell, checkpoint helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import sys
import time
import weakref
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from services.errors import PrimeTrainError, UnsafeProbeDir
from services.lifecycle.holder import holder_text
from services.lifecycle.preflight import Check, LifecycleSettings
from services.models import PodKind
from services.pod import agent, trusted

if TYPE_CHECKING:
    from services.models import Pod
    from services.pod.connection import Connection


AGENT_PATH = agent.LIFECYCLE
# the helper and the siblings it imports (pod/agent/common.py: what every pod script shares); uploaded together
# into one private directory named by their hash, and run only through the guard (services/pod/trusted.py),
# which checks each file's content first: a directory that is not whole or not ours answers UNTRUSTED (one exec
# either way: no SFTP check before a connection's first call). The interpreter is the pod's python3, never a
# path read from the pod. Its stderr joins stdout, so a streamed command's failure is readable.
AGENT_FILES = agent.LIFECYCLE_FILES
_JOIN_STDERR = 'exec "$@" 2>&1'
DEFAULT_STATE_DIR = ".cache/prime-train-tui"


class LifecycleError(PrimeTrainError):
    """A launch/kill/resume/cleanup could not be done; the message says why."""


Action = Literal["launch", "kill", "resume", "cleanup"]
# check: one pre-flight check's result (``check`` set); step / progress: what is being done; warn: went on
# regardless; done: the action succeeded (always last; ``data`` its result); error: it failed (always last)
EventKind = Literal["check", "step", "progress", "warn", "done", "error"]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))


@dataclass(frozen=True)
class Event:
    action: Action
    kind: EventKind
    message: str
    progress: float | None = None  # 0..1 when known
    check: Check | None = None
    data: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:  # the front-ends render by kind: an unknown one would be lost
            raise ValueError(f"unknown event kind {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "kind": self.kind, "message": self.message}
        if self.progress is not None:
            out["progress"] = round(self.progress, 3)
        if self.check is not None:
            out["check"] = self.check.to_json()
        if self.data is not None:
            out["data"] = self.data
        return out


def hide_values(text: str, values: Iterable[str]) -> str:
    for v in sorted((v for v in values if v and len(v) >= 4), key=len, reverse=True):
        text = text.replace(v, "****")
    return text


def collect_secrets(names: Iterable[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {n: env[n] for n in names if env.get(n)}


def render(template: str, **values: str | int) -> str:
    """Fill ``{config}``/``{run_dir}``/``{step}`` (shell-quoted); other braces are left alone."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", shlex.quote(str(value)) if key != "step" else str(int(value)))
    return out


# ------------------------------------------------------------------------------------ the pod


@dataclass
class _Upload:
    """The helper's upload on one connection: its lock, and the directory it went to (None: not yet)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    directory: str | None = None


_UPLOADS: weakref.WeakKeyDictionary[Connection, _Upload] = weakref.WeakKeyDictionary()


class PodShell:
    """Commands, stdin and file uploads on a connected pod (SSH or this machine)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.local = conn.pod.kind is not PodKind.SSH
        self.state_dir = (conn.pod.probe_dir or DEFAULT_STATE_DIR).rstrip("/")
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

    def abspath(self, path: str) -> str:
        path = os.path.expanduser(path) if self.local else path
        if path.startswith("/"):
            return path
        home = self._home or (str(Path.home()) if self.local else "")
        return f"{home.rstrip('/')}/{path}" if home else path

    async def agent_path(self) -> str:
        """Where the helper is (or will be) on the pod: a private directory named by the files' hash."""
        if self._agent:
            return self._agent
        self._agent = str(AGENT_PATH) if self.local else self._bundle().script_path
        return self._agent

    def _bundle(self) -> trusted.Bundle:
        return trusted.pod_bundle(self.conn.pod, AGENT_FILES, "lifecycle", script=AGENT_PATH.name)

    async def install_agent(self) -> None:
        """Make the helper's directory private (or refuse) and upload its files unless each is there with its
        content (one SFTP session; each file atomically, the helper last). Two clients doing it at once write
        the same bytes under temp names and rename them in place."""
        if self.local:
            return
        upload = _UPLOADS.get(self.conn)  # one upload per connection at a time
        if upload is None:
            upload = _UPLOADS[self.conn] = _Upload()
        b = self._bundle()
        async with upload.lock:
            if upload.directory == b.directory:
                return  # another action on this connection just did it
            try:
                await trusted.install(self.conn, b)
            except UnsafeProbeDir as exc:
                raise LifecycleError(str(exc), hint=exc.hint) from None
            except PrimeTrainError as exc:
                raise LifecycleError(f"cannot upload the lifecycle helper to {b.directory}: {exc}") from None
            upload.directory = b.directory

    async def argv(self, *args: str) -> list[str]:
        """The helper's command line: through the guard on a pod (it answers UNTRUSTED, running nothing, when
        the helper's files are missing or not what we uploaded), as it is here."""
        if self.local:
            return ["sh", "-c", _JOIN_STDERR, "sh", "env", f"PTT_STATE_DIR={self.state_dir}", self.python,
                    await self.agent_path(), *args]
        return ["sh", "-c", _JOIN_STDERR, "sh", *self._bundle().run_argv(*args)]

    async def agent(self, *args: str, input: bytes | None = None, timeout: float = 60.0) -> dict[str, Any]:
        for attempt in (1, 2):
            rc, out, err = await self.exec(await self.argv(*args), input=input, timeout=timeout)
            lines = [ln for ln in out.splitlines() if _json_line(ln) is not None]
            why = trusted.untrusted(lines[0]) if lines else None
            if why is not None and attempt == 1:
                await self.install_agent()
                continue
            if why is not None:
                raise LifecycleError(f"the pod's helper could not be verified ({args[0]}): {why}")
            if not lines:
                tail = ([ln for ln in (out + err).strip().splitlines() if ln.strip()] or [f"exit status {rc}"])[-1]
                raise LifecycleError(f"the pod's helper failed ({args[0]}): {tail}",
                                     hint="is python3 installed on the pod?")
            return json.loads(lines[-1])
        raise AssertionError("unreachable")

    async def stream(self, args: list[str], request: dict[str, Any], timeout: float = 180.0,
                     ) -> AsyncIterator[dict[str, Any]]:
        """Run a streaming helper command (``launch``, ``kill``): one JSON request line on its stdin, which
        stays open until this generator ends (closing it early, e.g. on cancel, stops the helper before
        anything irreversible), and one JSON object per line out. ``timeout`` bounds each line."""
        data = (json.dumps(request) + "\n").encode()
        for attempt in (1, 2):
            try:
                proc = await self.conn.start(shlex.join(await self.argv(*args)))
            except PrimeTrainError as exc:
                raise LifecycleError(f"cannot run the pod's helper ({args[0]}): {exc}") from None
            tail: list[str] = []
            missing = False
            try:
                await proc.write(data)
                while True:
                    try:
                        raw = await asyncio.wait_for(proc.readline(), timeout)
                    except asyncio.TimeoutError:
                        raise LifecycleError(f"the pod's helper ({args[0]}) said nothing for {timeout:g} s") from None
                    except (OSError, PrimeTrainError) as exc:
                        raise LifecycleError(f"connection lost during {args[0]}: {exc}") from None
                    if not raw:
                        break
                    line = raw.decode("utf-8", "replace").strip()
                    why = trusted.untrusted(line)
                    if why is not None:
                        if attempt == 2:
                            raise LifecycleError(f"the pod's helper could not be verified ({args[0]}): {why}")
                        missing = True
                        break
                    msg = _json_line(line)
                    if msg is None:
                        tail = (tail + [line])[-5:] if line else tail
                        continue
                    yield msg
            except BaseException:  # failed, cancelled or closed early: stop it now
                await proc.kill()
                raise
            await _end(proc)
            if not missing:
                if tail:
                    raise LifecycleError(f"the pod's helper stopped ({args[0]}): {tail[-1]}",
                                         hint="is python3 (3.6 or newer) installed on the pod?")
                return
            await self.install_agent()

    async def home(self) -> str:
        if self._home is None:
            rc, out, _ = await self.exec(["sh", "-c", "cd && pwd"])
            self._home = out.strip() or "/root"
        return self._home


async def _end(proc: Any) -> None:
    """Close a streamed command's stdin and reap it; kill it when it does not end by itself."""
    with contextlib.suppress(Exception):
        proc.write_eof()
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except Exception:  # noqa: BLE001 - slow or broken: end it, never mask the action's own outcome
        await proc.kill()
    except BaseException:  # cancelled while reaping: end it all the same
        await proc.kill()
        raise


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


def _json_line(line: str | bytes) -> dict[str, Any] | None:
    """A line of the helper's JSON output, or None for anything else (stderr joins stdout)."""
    if not (line.lstrip().startswith(b"{") if isinstance(line, bytes) else line.lstrip().startswith("{")):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


async def _first_json(proc: Any, timeout: float) -> dict[str, Any]:
    """The first JSON line a started helper prints (stderr lines joined to stdout are skipped), or {}."""
    end = time.monotonic() + timeout
    try:
        while True:
            line = await asyncio.wait_for(proc.readline(), max(0.0, end - time.monotonic()))
            if not line:
                return {}
            msg = _json_line(line)
            if msg is not None:
                return msg
    except (asyncio.TimeoutError, OSError, PrimeTrainError):
        return {}


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
            answer = await _first_json(self.proc, 30)
            if answer.get(trusted.UNTRUSTED) and attempt == 1:
                await self.release()
                await shell.install_agent()
                continue
            break
        if not answer or answer.get(trusted.UNTRUSTED):
            raise LifecycleError(f"the pod's action lock did not answer on {conn.pod.name}",
                                 hint="is python3 installed on the pod?")
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


def with_hint(exc: PrimeTrainError) -> str:
    """The error's sentence with its hint, on one line."""
    hint = getattr(exc, "hint", "")
    return f"{exc} (hint: {hint})" if hint else str(exc)
