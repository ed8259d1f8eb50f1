"""The pod side of every action: :class:`PodShell` runs short commands and the lifecycle helper
(``pod/agent/lifecycle.py``, uploaded under its content hash and run through the guard) on a connected pod,
and reads its JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import sys
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.errors import PrimeTrainError
from services.lifecycle.events import LifecycleError
from services.models import PodKind
from services.pod import agent, trusted

if TYPE_CHECKING:
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
            await trusted.install_or_refuse(
                self.conn, b, LifecycleError, f"cannot upload the lifecycle helper to {b.directory}"
            )
            upload.directory = b.directory

    async def argv(self, *args: str) -> list[str]:
        """The helper's command line: through the guard on a pod (it answers UNTRUSTED, running nothing, when
        the helper's files are missing or not what we uploaded), as it is here."""
        if self.local:
            return [
                "sh",
                "-c",
                _JOIN_STDERR,
                "sh",
                "env",
                f"PTT_STATE_DIR={self.state_dir}",
                self.python,
                await self.agent_path(),
                *args,
            ]
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
                raise LifecycleError(
                    f"the pod's helper failed ({args[0]}): {tail}", hint="is python3 installed on the pod?"
                )
            return json.loads(lines[-1])
        raise AssertionError("unreachable")

    async def stream(
        self,
        args: list[str],
        request: dict[str, Any],
        timeout: float = 180.0,
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
                    raise LifecycleError(
                        f"the pod's helper stopped ({args[0]}): {tail[-1]}",
                        hint="is python3 (3.6 or newer) installed on the pod?",
                    )
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


def _json_line(line: str | bytes) -> dict[str, Any] | None:
    """A line of the helper's JSON output, or None for anything else (stderr joins stdout)."""
    if not (line.lstrip().startswith(b"{") if isinstance(line, bytes) else line.lstrip().startswith("{")):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


async def first_json(proc: Any, timeout: float) -> dict[str, Any]:
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
