"""What every connection to a pod offers, whatever carries it (SSH or a local subprocess).

The probe is the only thing that runs on the pod for monitoring; other work (lifecycle, backups) runs
short commands, streams through a :class:`RemoteProcess`, or writes files atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from services.models import Pod
from services.pod.agent import PROBE_FILES  # the probe last: its presence says the directory is whole

DEFAULT_PROBE_DIR = ".cache/prime-train-tui"

_BUNDLES: dict[tuple[Path, ...], tuple[tuple, list[tuple[str, bytes]], str]] = {}


def bundle(files: tuple[Path, ...]) -> tuple[list[tuple[str, bytes]], str]:
    """[(name, bytes)] of files uploaded together, and their short content hash, which names the
    directory they go to on the pod: it covers every file's name and bytes, so a changed sibling (say,
    common.py) means a new directory, never a new script beside an old sibling. Read again only
    when a file changed."""
    stamp = tuple((f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    cached = _BUNDLES.get(files)
    if cached is None or cached[0] != stamp:
        contents = [(f.name, f.read_bytes()) for f in files]
        h = hashlib.sha256()
        for name, data in contents:
            h.update(b"%s\0%d\0" % (name.encode(), len(data)))
            h.update(data)
        cached = _BUNDLES[files] = (stamp, contents, h.hexdigest()[:16])
    return cached[1], cached[2]


def probe_source() -> tuple[list[tuple[str, bytes]], str]:
    """The probe's files [(name, bytes)], the probe last, and their short content hash (names the
    directory they are uploaded to)."""
    return bundle(PROBE_FILES)


class ProbeStream(ABC):
    """Lines from a running probe. ``readline`` returns b"" at end of stream."""

    bytes_read: int = 0

    @abstractmethod
    async def readline(self) -> bytes: ...

    @abstractmethod
    def stderr_tail(self) -> str:
        """The last lines the probe wrote to stderr (why it died), for the pod's reason."""

    async def exit_reason(self, wait: float = 5.0) -> str:
        """Once the stream ended: how the probe ended ("exited with status 3", "killed by signal 9"),
        waiting up to ``wait`` s for the exit and its stderr; "" when that is not known."""
        return ""

    @abstractmethod
    async def close(self) -> None:
        """Close the probe's stdin (it exits by itself) and release the channel/process."""


def exit_text(status: int | None, sig: int | str | None = None) -> str:
    """ "killed by signal 9" / "exited with status 3" ("" when neither is known); ``sig``: a number or
    a name as SSH reports it ("KILL")."""
    if sig:
        if isinstance(sig, str):
            with contextlib.suppress(KeyError):
                sig = signal.Signals["SIG" + sig.upper().removeprefix("SIG")].value
        return f"killed by signal {sig}"
    if status is None:
        return ""
    return f"killed by signal {-status}" if status < 0 else f"exited with status {status}"


class RemoteProcess:
    """A command running on the pod (or here): bytes in, lines out, an exit status."""

    def __init__(self, stdin: Any, stdout: Any, wait: Any, kill: Any) -> None:
        self.stdin, self.stdout = stdin, stdout
        self._wait, self._kill = wait, kill

    async def write(self, data: bytes) -> None:
        self.stdin.write(data)
        await self.stdin.drain()

    def write_eof(self) -> None:
        self.stdin.write_eof()

    async def readline(self) -> bytes:
        return await self.stdout.readline()

    def __aiter__(self) -> Any:
        return self.stdout.__aiter__()

    async def wait(self) -> int:
        return int(await self._wait() or 0)

    async def kill(self) -> None:
        """Stop it now (cancelled work); never raises."""
        with contextlib.suppress(Exception):
            await self._kill()


class Connection(ABC):
    def __init__(self, pod: Pod) -> None:
        self.pod = pod

    @abstractmethod
    async def connect(self) -> None:
        """Raises ConnectError (or AuthError, HostKeyUnknown, HostKeyChanged)."""

    @abstractmethod
    async def start_probe(self, args: list[str]) -> ProbeStream: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def run(self, command: str, timeout: float = 30.0, input: bytes | None = None) -> tuple[int, str, str]:
        """Run one short shell command on the pod: (exit status, stdout, stderr); ``input`` goes to
        its stdin (how secrets and presigned URLs reach the pod without touching its disk)."""

    @abstractmethod
    async def start(self, command: str) -> RemoteProcess:
        """A shell command on the pod with stdin/stdout pipes, for streaming work (backups)."""

    @abstractmethod
    async def put_file(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        """Write a file on the pod atomically (temp + rename); relative paths are under the home."""

    async def put_files(self, files: list[tuple[bytes, str, int]]) -> None:
        """Several (data, remote, mode) files, each atomically, in this order (over SSH: one SFTP session)."""
        for data, remote, mode in files:
            await self.put_file(data, remote, mode)

    @abstractmethod
    async def exists(self, remote: str) -> bool: ...

    async def __aenter__(self) -> Connection:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
