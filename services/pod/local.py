"""This machine as a pod: the same probe and commands as over SSH, as subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
from collections import deque
from pathlib import Path

from services.errors import ConnectError, ProbeError
from services.models import Pod
from services.pod.agent import PROBE as PROBE_PATH
from services.pod.connection import Connection, ProbeStream, RemoteProcess, exit_text


class _ProcessStream(ProbeStream):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._stderr: deque[str] = deque(maxlen=20)
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        async for raw in self._proc.stderr:
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    async def readline(self) -> bytes:
        assert self._proc.stdout is not None
        line = await self._proc.stdout.readline()
        self.bytes_read += len(line)
        return line

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    async def exit_reason(self, wait: float = 5.0) -> str:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._proc.wait(), wait)
        await asyncio.wait({self._stderr_task}, timeout=wait)
        return exit_text(self._proc.returncode)

    async def close(self) -> None:
        proc = self._proc
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 3.0)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self._stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._stderr_task


class LocalConnection(Connection):
    """This machine: the same probe as a subprocess of this interpreter."""

    def __init__(
        self,
        pod: Pod,
        *,
        env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        probe_path: Path = PROBE_PATH,
    ) -> None:
        super().__init__(pod)
        self._probe_path = probe_path
        self._env = env
        self._extra_args = extra_args or []
        self._streams: list[_ProcessStream] = []

    async def connect(self) -> None:
        if not self._probe_path.is_file():
            raise ConnectError(f"probe missing from the installation: {self._probe_path}")

    async def start_probe(self, args: list[str]) -> ProbeStream:
        env = dict(os.environ)
        if self._env:
            env.update(self._env)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-u",
                str(self._probe_path),
                *args,
                *self._extra_args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                limit=4 * 1024 * 1024,
            )
        except OSError as exc:
            raise ProbeError(f"cannot start the probe: {exc}") from None
        stream = _ProcessStream(proc)
        self._streams.append(stream)
        return stream

    def cwd(self) -> str:
        """Where run() and start() run their commands: a relative path in one is under it."""
        return str(Path.home())

    def _shell_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self._env:
            env.update(self._env)
        return env

    async def run(self, command: str, timeout: float = 30.0, input: bytes | None = None) -> tuple[int, str, str]:
        """Run one short command with ``sh -c`` here (same contract as SSHConnection.run)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._shell_env(),
                cwd=self.cwd(),
            )
        except OSError as exc:
            raise ConnectError(f"cannot run a command: {exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        return int(proc.returncode or 0), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    async def start(self, command: str) -> RemoteProcess:
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=self._shell_env(),
                cwd=self.cwd(),
                limit=4 * 1024 * 1024,
            )
        except OSError as exc:
            raise ConnectError(f"cannot run a command: {exc}") from None

        async def kill() -> None:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

        return RemoteProcess(proc.stdin, proc.stdout, proc.wait, kill)

    async def put_file(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        path = _local_path(remote)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_bytes(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise ConnectError(f"cannot write {path}: {exc.strerror or exc}") from None

    async def exists(self, remote: str) -> bool:
        return _local_path(remote).exists()

    async def close(self) -> None:
        streams, self._streams = self._streams, []
        for stream in streams:
            await stream.close()


def _local_path(remote: str) -> Path:
    """A pod path on this machine: ~ expanded, relative paths under the home (as over SFTP)."""
    path = Path(remote).expanduser()
    return path if path.is_absolute() else Path.home() / path
