"""Connections to pods over SSH (asyncssh): host-key trust, the probe channel, commands, files.

The probe (``services/pod/agent/probe.py``) is the only thing that runs on the pod for monitoring. Over SSH it
is uploaded by SFTP with its siblings, once per content hash (connection.PROBE_FILES), and started
with ``exec python3 -u`` on ONE long-lived channel; locally it is the same file run by this
interpreter. Either way the caller gets a
:class:`ProbeStream` of newline-delimited JSON.

Host keys: asyncssh checks the key against the user's known_hosts (from ``~/.ssh/config``'s
UserKnownHostsFile or the default). A key it cannot verify is captured by :class:`_KeyRecorder`, the
connection is refused, and we raise :class:`HostKeyUnknown` (no entry for the host: the user may
trust it) or :class:`HostKeyChanged` (another key is on record: never trusted by us).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.errors import (
    AuthError,
    ConnectError,
    HostKeyChanged,
    HostKeyUnknown,
    ProbeError,
)
from services.pod.connection import (  # noqa: F401  (re-exported: callers import them from here)
    DEFAULT_PROBE_DIR,
    PROBE_PATH,
    Connection,
    ProbeStream,
    RemoteProcess,
    probe_source,
)
from services.pod.local import LocalConnection
from services.models import Pod, PodKind

@dataclass(frozen=True)
class SSHOptions:
    keepalive_interval: float = 15.0  # asyncssh's default is 0 = off: a dead link would hang reads
    keepalive_count_max: int = 3
    connect_timeout: float = 20.0
    login_timeout: float = 30.0



# ---------------------------------------------------------------- SSH


def _asyncssh() -> Any:
    import asyncssh  # imported on first SSH use: it pulls in cryptography (~100 ms)

    return asyncssh


class _SSHStream(ProbeStream):
    def __init__(self, process: Any) -> None:
        self._process = process
        self._stderr: deque[str] = deque(maxlen=20)
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        with contextlib.suppress(Exception):
            async for raw in self._process.stderr:
                self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    async def readline(self) -> bytes:
        asyncssh = _asyncssh()
        try:
            line = await self._process.stdout.readline()
        except (asyncssh.Error, OSError) as exc:
            raise ConnectError(f"connection lost: {_describe(exc)}") from None
        self.bytes_read += len(line)
        return line

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._process.stdin.write_eof()
        with contextlib.suppress(Exception):
            self._process.close()
            await asyncio.wait_for(self._process.wait_closed(), 3.0)
        self._stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._stderr_task


class SSHConnection(Connection):
    def __init__(self, pod: Pod, options: SSHOptions | None = None) -> None:
        super().__init__(pod)
        self.options = options or SSHOptions()
        self._conn: Any = None
        self._known_hosts: list[str] = []
        self._streams: list[_SSHStream] = []
        self._connect_kwargs: dict[str, Any] = {}

    async def connect(self) -> None:
        asyncssh = _asyncssh()
        pod = self.pod
        recorder: list[tuple[str, str, int, Any]] = []

        class _KeyRecorder(asyncssh.SSHClient):
            def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
                recorder.append((host, addr, port, key))
                return False  # only known_hosts (and the user's explicit yes) can trust a key

        loop = asyncio.get_running_loop()
        try:
            conn_opts = await loop.run_in_executor(None, self._client_options, asyncssh)
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise ConnectError(f"bad ssh settings for {pod.name}: {_describe(exc)}") from None
        self._known_hosts = list(conn_opts.known_hosts or [])
        try:
            # connect_timeout and login_timeout (in conn_opts) bound this; no outer wait_for, whose
            # Python 3.11 cancellation race leaves "exception was never retrieved" behind.
            self._conn = await asyncssh.connect(pod.host, options=conn_opts, client_factory=_KeyRecorder,
                                                **self._connect_kwargs)
        except asyncssh.HostKeyNotVerifiable:
            if not recorder:
                raise ConnectError("the pod's host key could not be verified") from None
            raise self._host_key_error(*recorder[-1]) from None
        except asyncssh.PermissionDenied as exc:
            raise AuthError(
                f"authentication failed: {_describe(exc)}",
                hint="check the user and IdentityFile in ~/.ssh/config, or add your key to the agent",
            ) from None
        except asyncio.TimeoutError:
            raise ConnectError("timed out connecting") from None
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(_describe(exc)) from None

    def _client_options(self, asyncssh: Any) -> Any:
        """Options from ~/.ssh/config plus ours. Runs in a thread: it reads files and keys."""
        pod, opts = self.pod, self.options
        kwargs: dict[str, Any] = {
            "keepalive_interval": opts.keepalive_interval,
            "keepalive_count_max": opts.keepalive_count_max,
            "connect_timeout": opts.connect_timeout,
            "login_timeout": opts.login_timeout,
        }
        if pod.user:
            kwargs["username"] = pod.user
        if pod.port:
            kwargs["port"] = pod.port
        missing_ok = _identity_files(pod, kwargs)
        if missing_ok is not None:
            # OpenSSH skips an IdentityFile that does not exist and tries the others; asyncssh
            # aborts. Configs often list keys that exist on only some machines: behave like ssh.
            kwargs["client_keys"] = missing_ok
            kwargs["ignore_encrypted"] = True
        self._connect_kwargs = {k: kwargs[k] for k in ("client_keys", "ignore_encrypted") if k in kwargs}
        conn_opts = asyncssh.SSHClientConnectionOptions(host=pod.host, **kwargs)
        if conn_opts.known_hosts is None:
            # "UserKnownHostsFile none" in the ssh config would switch checking off: never.
            conn_opts = asyncssh.SSHClientConnectionOptions(
                conn_opts, known_hosts=[str(default_known_hosts())]
            )
        elif not conn_opts.known_hosts:
            conn_opts = asyncssh.SSHClientConnectionOptions(
                conn_opts, known_hosts=_existing_or_empty(default_known_hosts())
            )
        return conn_opts

    def _host_key_error(self, host: str, addr: str, port: int, key: Any) -> Exception:
        asyncssh = _asyncssh()
        files = [str(Path(f).expanduser()) for f in self._known_hosts if isinstance(f, str)]
        target = files[0] if files else str(default_known_hosts())
        fingerprint = key.get_fingerprint("sha256")
        key_type = key.get_algorithm()
        pub = key.export_public_key("openssh").decode().split()
        host_field = host if port == 22 else f"[{host}]:{port}"
        key_line = f"{host_field} {pub[0]} {pub[1]}"
        on_record: list[Any] = []
        readable = [f for f in files if os.path.isfile(f)]
        if readable:
            with contextlib.suppress(Exception):
                trusted = asyncssh.match_known_hosts(
                    readable, host, addr, None if port == 22 else port
                )[0]
                on_record = list(trusted)
        common = dict(host=host, port=port, fingerprint=fingerprint, key_type=key_type,
                      key_line=key_line, known_hosts_file=target)
        if on_record:
            return HostKeyChanged(
                f"HOST KEY CHANGED for {host_field}: the pod now presents {key_type} {fingerprint}, "
                f"which differs from the key in {target}. This can be a man-in-the-middle attack; "
                "refusing to connect.",
                hint=f"if the pod was really re-created, run: ssh-keygen -f {target} -R '{host_field}'",
                **common,
            )
        return HostKeyUnknown(
            f"unknown host key for {host_field}: {key_type} {fingerprint}",
            hint=f"verify the fingerprint, then trust it in the app (it is appended to {target})",
            **common,
        )

    async def start_probe(self, args: list[str]) -> ProbeStream:
        if self._conn is None:
            raise ConnectError("not connected")
        remote = await self.upload_probe()
        cmd = " ".join(["exec", "python3", "-u", shlex.quote(remote), *map(shlex.quote, args)])
        asyncssh = _asyncssh()
        try:
            process = await self._conn.create_process(cmd, encoding=None)
        except (OSError, asyncssh.Error) as exc:
            raise ProbeError(f"cannot start the probe: {_describe(exc)}") from None
        stream = _SSHStream(process)
        self._streams.append(stream)
        return stream

    async def upload_probe(self) -> str:
        """Put the probe and its siblings (pod/agent/common.py, ...) on the pod, into a directory named by
        their content hash, unless it is already there; the probe is written last, so its presence
        says the directory is whole. Returns the probe's path."""
        files, digest = probe_source()
        directory = f"{(self.pod.probe_dir or DEFAULT_PROBE_DIR).rstrip('/')}/probe-{digest}"
        remote = f"{directory}/{PROBE_PATH.name}"
        try:
            if await self.exists(remote):
                return remote
            await self.put_files([(data, f"{directory}/{name}", 0o644) for name, data in files])
        except ConnectError as exc:
            raise ProbeError(f"cannot upload the probe to {directory}: {exc}") from None
        self.uploads += 1
        return remote

    uploads = 0  # how many times this connection uploaded the probe (tests check the hash cache)

    async def run(self, command: str, timeout: float = 30.0,
                  input: bytes | None = None) -> tuple[int, str, str]:
        """Run one short command (not for sampling: that is what the probe channel is for)."""
        asyncssh = _asyncssh()
        conn = self._connected()
        try:
            result = await asyncio.wait_for(
                conn.run(command, input=input, check=False, encoding=None), timeout)
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"connection lost: {_describe(exc)}") from None
        return (int(result.exit_status or 0), _text(result.stdout), _text(result.stderr))

    async def start(self, command: str) -> RemoteProcess:
        asyncssh = _asyncssh()
        try:
            proc = await self._connected().create_process(command, encoding=None)
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"cannot start a command on the pod: {_describe(exc)}") from None

        async def wait() -> int:
            await proc.wait_closed()
            return int(proc.exit_status or 0)

        async def kill() -> None:
            if proc.exit_status is None:
                proc.terminate()
            proc.close()

        return RemoteProcess(proc.stdin, proc.stdout, wait, kill)

    async def put_file(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        await self.put_files([(data, remote, mode)])

    async def put_files(self, files: list[tuple[bytes, str, int]]) -> None:
        """Each file to a temp name beside it, then renamed over the target: POSIX rename (OpenSSH's
        posix-rename extension) replaces it atomically, so two clients uploading the same file at once
        both succeed and a reader never finds it missing or half-written."""
        asyncssh = _asyncssh()
        remote = ""
        try:
            async with self._connected().start_sftp_client() as sftp:
                made: set[str] = set()
                for data, remote, mode in files:
                    directory = remote.rsplit("/", 1)[0] if "/" in remote else "."
                    if directory not in made:
                        await sftp.makedirs(directory, exist_ok=True)
                        made.add(directory)
                    tmp = f"{remote}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
                    async with sftp.open(tmp, "wb") as fh:
                        await fh.write(data)
                    await sftp.chmod(tmp, mode)
                    try:
                        await sftp.posix_rename(tmp, remote)
                    except asyncssh.SFTPOpUnsupported:  # a server without the extension: not atomic
                        with contextlib.suppress(asyncssh.SFTPError):
                            await sftp.remove(remote)
                        await sftp.rename(tmp, remote)
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"cannot write {remote} on the pod: {_describe(exc)}") from None

    async def exists(self, remote: str) -> bool:
        asyncssh = _asyncssh()
        try:
            async with self._connected().start_sftp_client() as sftp:
                return bool(await sftp.exists(remote))
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"connection lost: {_describe(exc)}") from None

    def _connected(self) -> Any:
        if self._conn is None:
            raise ConnectError("not connected")
        return self._conn

    async def close(self) -> None:
        streams, self._streams = self._streams, []
        for stream in streams:
            await stream.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 3.0)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def default_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def _identity_files(pod: Pod, kwargs: dict[str, Any]) -> list[str] | None:
    """The config's IdentityFiles that exist, or None when all of them exist (or none is set)."""
    import getpass

    from asyncssh.config import SSHClientConfig

    paths = [p for p in (Path("~/.ssh/config").expanduser(),) if os.access(p, os.R_OK)]
    if not paths:
        return None
    config = SSHClientConfig.load(None, paths, False, False, False, getpass.getuser(),
                                  kwargs.get("username", ()), pod.host, kwargs.get("port", ()))
    files = [str(Path(f).expanduser()) for f in config.get("IdentityFile", ())]
    existing = [f for f in files if os.path.isfile(f)]
    return None if existing == files else existing


def _existing_or_empty(path: Path) -> Any:
    return [str(path)] if path.is_file() else b""


def trust_host_key(key_line: str, known_hosts_file: str) -> None:
    """Append one known_hosts line (the user said yes). Creates ~/.ssh with safe permissions."""
    path = Path(known_hosts_file).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    if key_line in existing.splitlines():
        return
    prefix = "" if not existing or existing.endswith("\n") else "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(f"{prefix}{key_line}\n")
        fh.flush()
        os.fsync(fh.fileno())


def connect_pod(pod: Pod, ssh_options: SSHOptions | None = None, **local_kwargs: Any) -> Connection:
    """The right Connection for a pod (the demo pod is wired by the monitor, see services.monitor.service)."""
    if pod.kind is PodKind.SSH:
        return SSHConnection(pod, ssh_options)
    return LocalConnection(pod, **local_kwargs)


def _describe(exc: BaseException) -> str:
    """A short human reason for a connection-level exception."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return str(reason).strip().rstrip(".")
