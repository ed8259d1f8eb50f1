"""Connections to pods over SSH (asyncssh): host-key trust, the probe channel, commands, files.

The probe (``services/pod/agent/probe.py``) is the only thing that runs on the pod for monitoring. Over SSH it
is uploaded with its siblings, once per content hash (connection.PROBE_FILES), and started with
``python3 -u`` (once python3 is checked) on ONE long-lived channel; locally it is the same file run by
this interpreter. Either way the caller gets a :class:`ProbeStream` of newline-delimited JSON.

Files go by SFTP; a server that refuses SFTP (no ``Subsystem sftp``, RunPod's basic proxy) is remembered for
the connection and files then go over one exec channel's stdin (services/pod/provider_ssh.py). An endpoint
that runs no commands at all is recognised by a canary (``echo``) asked only after something failed, and
raises :class:`ExecRefused`; a pod without python3 raises :class:`PythonMissing`.

Host keys: asyncssh checks the key against the user's known_hosts (from ``~/.ssh/config``'s
UserKnownHostsFile or the default). A key it cannot verify is captured by :class:`_KeyRecorder`, the
connection is refused, and we raise :class:`HostKeyUnknown` (no entry for the host: the user may
trust it), :class:`HostKeyChanged` (another key is on record: never trusted by us) or
:class:`HostKeyRevoked` (the key is marked ``@revoked``: never trusted, never offered). A ProxyJump's hops
are opened here, one by one, so that a failing one is named.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
from collections import deque
from dataclasses import dataclass
from typing import Any

from services.errors import (
    AuthError,
    ConnectError,
    ExecRefused,
    PrimeTrainError,
    ProbeError,
    PythonMissing,
    UnsafeProbeDir,
)
from services.models import Pod
from services.pod import connection as pod_connection, provider_ssh, trusted
from services.pod.connection import (
    Connection,
    ProbeStream,
    RemoteProcess,
    exit_text,
)
from services.pod.known_hosts import (
    default_known_hosts,
    existing_or_empty,
    host_key_error,
    revoked_error,
)
from services.pod.ssh_config import identity_files, pod_ssh_config


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


# Our cipher preference when ~/.ssh/config names none (then OpenSSH's and asyncssh's defaults follow, in their
# order): AES-GCM is an AEAD cipher like chacha20-poly1305, and costs this client ~4x less CPU per packet (one
# call into AES-NI code; asyncssh builds three ChaCha20 cipher objects per packet), paid on every sample.
CIPHERS = "^aes256-gcm@openssh.com,aes128-gcm@openssh.com"

STREAM_HIGH = 256 * 1024  # bytes of probe output held on this side before the channel is paused
STDERR_LINE = 500  # characters kept of each of the probe's last stderr lines
STDERR_LINES = 20  # ... and how many of them


class _SSHStream(ProbeStream):
    """The probe's channel, read by its SSH session callbacks (asyncssh calls ``data_received`` as each packet
    is decrypted): stdout goes into ``_buf`` and wakes ``readline``, stderr's last lines are kept. One wake-up
    of the reader per packet, none per line, no stream reader or task between the channel and the monitor.

    Back-pressure is ours: while ``_buf`` holds STREAM_HIGH bytes the channel is paused; paused, asyncssh
    re-opens no window, so at most one window (2 MiB) more arrives and then the pod's writes block.
    (asyncssh's own stream reader, on resuming, re-opened the whole window while the data it held back was
    still queued: a pod writing faster than the monitor read grew that queue without bound, 1.6 GB in 90 s.)
    ``readline`` returns a line, or a piece of at most STREAM_HIGH bytes of a longer one (without its
    newline: services.monitor.lines.LineReader joins or skips those)."""

    def __init__(self) -> None:
        self._chan: Any = None
        self._buf = bytearray()
        self._err = bytearray()  # stderr's unfinished last line (at most STDERR_LINE * 4 bytes of it kept)
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._paused = False
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None  # readline waiting for data
        self._closed = asyncio.get_running_loop().create_future()  # the channel's close
        self._exit: tuple[int | None, str | None] = (None, None)  # exit status, exit signal

    # ------------------------------------------------------------ asyncssh's SSHClientSession callbacks

    def connection_made(self, chan: Any) -> None:
        self._chan = chan

    def session_started(self) -> None:
        pass

    def data_received(self, data: bytes, datatype: Any) -> None:
        if datatype:  # stderr (the only extended data type)
            self._stderr_received(data)
            return
        buf = self._buf
        buf += data
        if len(buf) >= STREAM_HIGH and not self._paused:
            self._paused = True
            self._chan.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._ended()
        return True  # our side stays open: close() ends the probe's stdin

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self._error is None:
            self._error = exc
        self._ended()
        if self._err:
            self._stderr_line(bytes(self._err))
            self._err.clear()
        if not self._closed.done():
            self._closed.set_result(None)

    def exit_status_received(self, status: int) -> None:
        self._exit = (status, None)

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self._exit = (None, signal)

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def xon_xoff_requested(self, client_can_do: bool) -> None:
        pass

    # ------------------------------------------------------------ ProbeStream

    def _ended(self) -> None:
        self._eof = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _stderr_received(self, data: bytes) -> None:
        err = self._err
        *lines, rest = data.split(b"\n")
        if lines:
            self._stderr_line(bytes(err) + lines[0])
            err.clear()
            for line in lines[1:]:
                self._stderr_line(line)
        room = STDERR_LINE * 4 - len(err)
        if room > 0:
            err += rest[:room]

    def _stderr_line(self, raw: bytes) -> None:
        self._stderr.append(raw[: STDERR_LINE * 4].decode("utf-8", "replace").rstrip()[:STDERR_LINE])

    @property
    def buffered(self) -> int:
        """Bytes of the probe's output read from the channel and not yet returned."""
        return len(self._buf)

    async def readline(self) -> bytes:
        while True:
            buf = self._buf
            end = buf.find(b"\n", 0, STREAM_HIGH)
            if end >= 0 or len(buf) >= STREAM_HIGH or (self._eof and buf):
                size = end + 1 if end >= 0 else min(len(buf), STREAM_HIGH)
                line = bytes(buf[:size])
                del buf[:size]
                self.bytes_read += size
                if self._paused and len(buf) < STREAM_HIGH:
                    self._paused = False
                    self._chan.resume_reading()  # delivers what the channel held back, here and now
                return line
            if self._eof:
                if self._error is not None:
                    raise ConnectError(f"connection lost: {_describe(self._error)}") from None
                return b""
            self._waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def read_to_end(self, most: int = 64 * 1024) -> bytes:
        """What the probe still writes until it exits, up to ``most`` bytes."""
        parts: list[bytes] = []
        size = 0
        while size < most and (line := await self.readline()):
            parts.append(line)
            size += len(line)
        return b"".join(parts)[:most]

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    async def exit_reason(self, wait: float = 5.0) -> str:
        # sshd reports the exit (exit-status/exit-signal) and the last stderr before it closes the channel,
        # but on a loaded machine that can come seconds after the output's end: wait for the close
        await asyncio.wait({self._closed}, timeout=wait)
        status, sig = self._exit
        return exit_text(None if sig else status, sig)

    async def close(self) -> None:
        chan = self._chan
        if chan is None:
            return
        with contextlib.suppress(Exception):
            chan.write_eof()
        with contextlib.suppress(Exception):
            chan.close()
        await asyncio.wait({self._closed}, timeout=3.0)
        self._ended()  # a reader still waiting gets the end, closed or not


@functools.cache
def _probe_session(asyncssh: Any) -> type[_SSHStream]:
    """_SSHStream as an asyncssh client session (its callbacks first; asyncssh's defaults for any other)."""
    return type("_SSHProbeSession", (_SSHStream, asyncssh.SSHClientSession), {})


class SSHConnection(Connection):
    def __init__(self, pod: Pod, options: SSHOptions | None = None) -> None:
        super().__init__(pod)
        self.options = options or SSHOptions()
        self._conn: Any = None
        self._jump: Any = None  # the last ProxyJump hop's connection, the pod's is tunnelled through
        self._jump_spec = ""  # ~/.ssh/config's ProxyJump for this pod
        self._key_host: tuple[str, int] = (pod.host or "", pod.port or 22)
        self._known_hosts: list[str] = []
        self._streams: list[_SSHStream] = []
        self._connect_kwargs: dict[str, Any] = {}
        self._sftp_refused = False  # the server refused the SFTP subsystem: files go over exec from now on
        self._exec_ok: bool | None = None  # whether the canary came back (None: not asked yet)

    async def connect(self) -> None:
        asyncssh = _asyncssh()
        pod = self.pod
        recorder: list[tuple[str, str, int, Any]] = []

        client_base: Any = asyncssh.SSHClient  # a name for the class statement: the module is imported lazily

        class _KeyRecorder(client_base):
            def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
                recorder.append((host, addr, port, key))
                return False  # only known_hosts (and the user's explicit yes) can trust a key

        loop = asyncio.get_running_loop()
        try:
            conn_opts = await loop.run_in_executor(None, self._client_options, asyncssh)
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise ConnectError(f"bad ssh settings for {pod.name}: {_describe(exc)}") from None
        self._known_hosts = list(conn_opts.known_hosts or [])
        jump = self._jump_spec
        tunnel = {"tunnel": await self._open_jump(asyncssh, jump)} if jump else {}
        via = f" (through the jump host {jump})" if jump else ""
        try:
            # connect_timeout and login_timeout (in conn_opts) bound this; no outer wait_for, whose
            # Python 3.11 cancellation race leaves "exception was never retrieved" behind.
            self._conn = await asyncssh.connect(
                pod.host, options=conn_opts, client_factory=_KeyRecorder, **self._connect_kwargs, **tunnel
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            self._close_jump()
            if recorder:
                raise host_key_error(self._known_hosts, *recorder[-1]) from None
            if "revoked" in _describe(exc).lower():  # a key both trusted and @revoked: asyncssh's own refusal
                raise revoked_error(self._known_hosts, *self._key_host, None) from None
            raise ConnectError(f"the pod's host key could not be verified: {_describe(exc)}") from None
        except asyncssh.PermissionDenied as exc:
            self._close_jump()
            raise AuthError(
                f"authentication failed: {_describe(exc)}",
                hint="check the user and IdentityFile in ~/.ssh/config, or add your key to the agent",
            ) from None
        except asyncio.TimeoutError:
            self._close_jump()
            raise ConnectError(f"timed out connecting{via}") from None
        except (OSError, asyncssh.Error) as exc:
            self._close_jump()
            raise ConnectError(f"{_describe(exc)}{via}") from None
        except BaseException:
            self._close_jump()
            raise

    async def _open_jump(self, asyncssh: Any, jump: str) -> Any:
        """The ProxyJump hops (``bastion`` or ``a,user@b:2222``), opened one through the other here rather
        than inside asyncssh, so that a hop that fails is named. Returns the last hop's connection."""
        opts = self.options
        conn: Any = None
        for hop in (h.strip() for h in jump.split(",") if h.strip()):
            user, _, where = hop.removeprefix("ssh://").rpartition("@")
            host, port = where, 0
            if where.count(":") == 1 or where.startswith("["):  # host:port or [v6]:port
                head, _, tail = where.rpartition(":")
                if tail.isdigit() and head:
                    host, port = head.strip("[]"), int(tail)
            try:
                nxt = await asyncssh.connect(
                    host,
                    port or (),
                    username=user or (),
                    tunnel=conn or (),
                    connect_timeout=opts.connect_timeout,
                    login_timeout=opts.login_timeout,
                    keepalive_interval=opts.keepalive_interval,
                    keepalive_count_max=opts.keepalive_count_max,
                )
            except (OSError, asyncssh.Error, asyncio.TimeoutError, ValueError) as exc:
                if conn is not None:
                    conn.close()
                reason = "timed out" if isinstance(exc, asyncio.TimeoutError) else _describe(exc)
                raise ConnectError(
                    f"cannot reach the jump host {hop} (ProxyJump for {self.pod.name}): {reason}",
                    hint="check that host's entry in ~/.ssh/config, or try: ssh " + hop,
                ) from None
            nxt.set_tunnel(conn)  # closing a hop closes the hops it goes through
            conn = nxt
        self._jump = conn
        return conn

    def _close_jump(self) -> None:
        jump, self._jump = self._jump, None
        if jump is not None:
            jump.close()

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
        config = pod_ssh_config(pod, kwargs)
        missing_ok = identity_files(config)
        jump = config.get("ProxyJump") if config is not None else None
        self._jump_spec = jump if isinstance(jump, str) else ""  # opened by _open_jump, hop by hop
        if config is not None:  # the name and port known_hosts files the key under (for a refusal's message)
            self._key_host = (
                str(config.get("HostKeyAlias") or config.get("Hostname") or pod.host),
                int(pod.port or config.get("Port") or 22),
            )
        if config is None or config.get("Ciphers") is None:
            kwargs["encryption_algs"] = CIPHERS
        if missing_ok is not None:
            # OpenSSH skips an IdentityFile that does not exist and tries the others; asyncssh
            # aborts. Configs often list keys that exist on only some machines: behave like ssh.
            kwargs["client_keys"] = missing_ok
            kwargs["ignore_encrypted"] = True
        self._connect_kwargs = {k: kwargs[k] for k in ("client_keys", "ignore_encrypted") if k in kwargs}
        conn_opts = asyncssh.SSHClientConnectionOptions(host=pod.host, **kwargs)
        if conn_opts.known_hosts is None:
            # "UserKnownHostsFile none" in the ssh config would switch checking off: never.
            conn_opts = asyncssh.SSHClientConnectionOptions(conn_opts, known_hosts=[str(default_known_hosts())])
        elif not conn_opts.known_hosts:
            conn_opts = asyncssh.SSHClientConnectionOptions(
                conn_opts, known_hosts=existing_or_empty(default_known_hosts())
            )
        return conn_opts

    async def start_probe(self, args: list[str]) -> ProbeStream:
        """The probe started on the pod through the guard (services/pod/trusted.py), once its first line said
        python3 is there (3.8 or newer) and the probe's files are the ones we upload: raises PythonMissing,
        naming the install command for the pod's distribution, ExecRefused, or UnsafeProbeDir. A probe that
        is missing or differs is uploaded and started again, once."""
        if self._conn is None:
            raise ConnectError("not connected")
        probe = self.probe_bundle()
        for attempt in (1, 2):
            stream, why = await self._start_guarded_probe(probe, args)
            if stream is not None:
                return stream
            if attempt == 2:
                raise ProbeError(f"the probe on the pod could not be verified: {why}")
            await self.upload_probe(probe)
        raise AssertionError("unreachable")

    async def _start_guarded_probe(self, probe: trusted.Bundle, args: list[str]) -> tuple[ProbeStream | None, str]:
        """(the stream, "") once the guard said go, or (None, why it ran nothing)."""
        asyncssh = _asyncssh()
        try:
            argv = probe.run_argv(*args, go=provider_ssh.PROBE_GO.decode(), unbuffered=True)
            _, stream = await self._conn.create_session(
                _probe_session(asyncssh), provider_ssh.probe_command(argv), encoding=None
            )
        except (OSError, asyncssh.Error) as exc:
            await self._check_exec()
            raise ProbeError(f"cannot start the probe: {_describe(exc)}") from None
        try:
            first = b""
            for _ in range(100):  # the pod's shell start-up files may print lines before ours
                first = await asyncio.wait_for(stream.readline(), self.options.login_timeout)
                if (
                    not first
                    or first.startswith((provider_ssh.PROBE_GO, provider_ssh.NO_PYTHON))
                    or trusted.untrusted(first) is not None
                ):
                    break
            if first.startswith(provider_ssh.NO_PYTHON):
                rest = await asyncio.wait_for(stream.read_to_end(), 10.0)  # /etc/os-release, then it exits
                raise provider_ssh.python_answer([first, rest])
            why = trusted.untrusted(first)
            if why is not None:
                await stream.close()
                return None, why
            if first.strip() != provider_ssh.PROBE_GO:
                await self._check_exec()
                how = await stream.exit_reason(wait=2.0)
                tail = stream.stderr_tail().strip().splitlines()
                raise ProbeError(
                    f"the pod's shell did not start the probe ({how or 'no answer'})"
                    + (f": {tail[-1][:200]}" if tail else "")
                )
        except asyncio.TimeoutError:  # first: it is an OSError too, and not a lost connection
            await stream.close()
            raise ProbeError(f"the pod did not start the probe within {self.options.login_timeout:g} s") from None
        except (OSError, asyncssh.Error) as exc:
            await stream.close()
            raise ConnectError(f"connection lost: {_describe(exc)}") from None
        except BaseException:
            await stream.close()
            raise
        self._streams.append(stream)
        return stream, ""

    async def _check_exec(self) -> None:
        """After a command failed: raise ExecRefused when this endpoint runs no commands at all (the canary
        ``echo`` does not come back). Asked once per connection; a lost connection is the caller's to report."""
        if self._exec_ok is True or self._conn is None or self._conn.is_closed():
            return  # a lost connection is not a refusal: the caller says "connection lost"
        if self._exec_ok is None:
            asyncssh = _asyncssh()
            try:
                result = await asyncio.wait_for(self._conn.run(provider_ssh.CANARY, check=False, encoding=None), 30.0)
                self._exec_ok = provider_ssh.EXEC_OK in _text(result.stdout)
            except asyncssh.ChannelOpenError as exc:
                if self._conn.is_closed() or exc.code == asyncssh.OPEN_CONNECT_FAILED:
                    return  # "SSH connection closed": the line went down meanwhile, nothing was refused
                self._exec_ok = False
            except (OSError, asyncssh.Error, asyncio.TimeoutError):
                return
        if self._exec_ok is False:
            raise provider_ssh.exec_refused()

    def probe_bundle(self) -> trusted.Bundle:
        """The probe and its siblings as they go to this pod."""
        return trusted.pod_bundle(self.pod, pod_connection.PROBE_FILES, "probe")

    async def upload_probe(self, probe: trusted.Bundle | None = None) -> str:
        """Make the probe's directory private to the SSH user (or refuse: UnsafeProbeDir) and put the probe and
        its siblings there, named by their content hash, unless every file is there with that content; the
        probe is written last. Returns the probe's path."""
        probe = probe or self.probe_bundle()
        try:
            if await trusted.install(self, probe):
                self.uploads += 1
        except (ExecRefused, UnsafeProbeDir, PythonMissing):
            raise
        except PrimeTrainError as exc:
            raise ProbeError(f"cannot upload the probe to {probe.directory}: {exc}") from None
        return probe.script_path

    uploads = 0  # how many times this connection uploaded the probe (tests check the hash cache)

    async def run(self, command: str, timeout: float = 30.0, input: bytes | None = None) -> tuple[int, str, str]:
        """Run one short command (not for sampling: that is what the probe channel is for)."""
        asyncssh = _asyncssh()
        conn = self._connected()
        try:
            result = await asyncio.wait_for(conn.run(command, input=input, check=False, encoding=None), timeout)
        except asyncssh.ChannelOpenError as exc:
            await self._check_exec()
            raise ConnectError(f"the pod refused to run a command: {_describe(exc)}") from None
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"connection lost: {_describe(exc)}") from None
        status, out, err = int(result.exit_status or 0), _text(result.stdout), _text(result.stderr)
        if status != 0:
            await self._check_exec()
            if provider_ssh.python_not_found(command, status, out + err):
                raise await self._python_missing()
        return status, out, err

    async def _python_missing(self) -> PythonMissing:
        """python3 was not found: the error, naming the install command for the pod's distribution."""
        with contextlib.suppress(Exception):
            result = await asyncio.wait_for(self._connected().run("cat /etc/os-release", check=False), 10.0)
            return provider_ssh.python_missing("", _text(result.stdout))
        return provider_ssh.python_missing("", "")

    async def start(self, command: str) -> RemoteProcess:
        asyncssh = _asyncssh()
        try:
            proc = await self._connected().create_process(command, encoding=None)
        except (OSError, asyncssh.Error) as exc:
            if isinstance(exc, asyncssh.ChannelOpenError):
                await self._check_exec()
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
        both succeed and a reader never finds it missing or half-written. Over SFTP, else over exec."""
        asyncssh = _asyncssh()
        remote = ""
        try:
            sftp_client = await self._sftp()
            if sftp_client is None:
                return await self._put_files_exec(files)
            async with sftp_client as sftp:
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
            sftp_client = await self._sftp()
            if sftp_client is not None:
                async with sftp_client as sftp:
                    return bool(await sftp.exists(remote))
        except (OSError, asyncssh.Error) as exc:
            raise ConnectError(f"connection lost: {_describe(exc)}") from None
        status, out, err = await self.run(provider_ssh.exists_command(remote))
        answer = provider_ssh.exists_answer(out)
        if answer is None:
            await self._check_exec()
            reason = (err.strip() or f"exit status {status}")[-200:]
            raise ConnectError(f"cannot look for {remote} on the pod: {reason}")
        return answer

    async def _sftp(self) -> Any:
        """An SFTP client (an async context manager), or None when the server refuses SFTP (no ``Subsystem
        sftp``; proxies): remembered, so that this connection's later files go straight over exec."""
        if self._sftp_refused:
            return None
        asyncssh = _asyncssh()
        try:
            return await self._connected().start_sftp_client()
        except (asyncssh.ChannelOpenError, asyncssh.SFTPError):
            self._sftp_refused = True
            return None

    async def _put_files_exec(self, files: list[tuple[bytes, str, int]]) -> None:
        """The files over one exec channel's stdin (services/pod/provider_ssh.py), each checked and renamed
        into place; raises ConnectError naming the first file when it failed."""
        if not files:
            return
        command, data = provider_ssh.upload_command(files, f"{os.getpid()}-{secrets.token_hex(4)}")
        where = files[0][1].rsplit("/", 1)[0] if "/" in files[0][1] else "the home directory"
        try:
            status, out, err = await self.run(command, timeout=120.0, input=data)
        except asyncio.TimeoutError:
            raise ConnectError(f"writing to {where} on the pod did not finish within 120 s") from None
        if provider_ssh.UPLOAD_OK not in out.split():
            await self._check_exec()
            reason = (err.strip().splitlines() or [f"exit status {status}"])[-1][:200]
            raise ConnectError(f"cannot write to {where} on the pod: {reason}")

    def _connected(self) -> Any:
        if self._conn is None:
            raise ConnectError("not connected")
        return self._conn

    async def close(self) -> None:
        streams, self._streams = self._streams, []
        for stream in streams:
            await stream.close()
        conn, self._conn = self._conn, None
        jump, self._jump = self._jump, None
        for c in (conn, jump):
            if c is not None:
                c.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.wait_closed(), 3.0)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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
