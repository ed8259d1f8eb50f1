"""known_hosts: what a refused host key is (unknown, changed, revoked), and the user's yes to a new one.

:class:`~services.pod.ssh.SSHConnection` refuses every key asyncssh cannot verify; these functions turn
the refused key and the user's known_hosts files into the error the user reads. asyncssh is imported on
first use (it pulls in cryptography).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from services.errors import HostKeyChanged, HostKeyRevoked, HostKeyUnknown


def default_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def existing_or_empty(path: Path) -> Any:
    return [str(path)] if path.is_file() else b""


def _files(known_hosts: list[Any]) -> list[str]:
    return [str(Path(f).expanduser()) for f in known_hosts if isinstance(f, str)]


def host_key_error(known_hosts: list[Any], host: str, addr: str, port: int, key: Any) -> Exception:
    """The refusal of a key that known_hosts does not trust: revoked, changed (another key on record) or
    unknown (first contact: the only one the user may be offered to trust)."""
    import asyncssh

    files = _files(known_hosts)
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
            trusted = asyncssh.match_known_hosts(readable, host, addr, None if port == 22 else port)[0]
            on_record = list(trusted)
    if any(k == key for _, k in revoked_on_record(known_hosts, host, addr, port)):
        return revoked_error(known_hosts, host, port, key, addr)
    common = dict(
        host=host, port=port, fingerprint=fingerprint, key_type=key_type, key_line=key_line, known_hosts_file=target
    )
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


def revoked_on_record(known_hosts: list[Any], host: str, addr: str, port: int) -> list[tuple[str, Any]]:
    """(file, key) of every ``@revoked`` key known_hosts holds for this host. Looked up with the port and
    without: asyncssh's own lookup drops the port's revocations when no key is trusted for that port."""
    import asyncssh

    names = [(host, addr)]
    if port and port != 22:
        names += [(f"[{host}]:{port}", "")] + ([(f"[{addr}]:{port}", "")] if addr and addr != host else [])
    found: list[tuple[str, Any]] = []
    for path in _files(known_hosts):
        if not os.path.isfile(path):
            continue
        for name, address in names:
            with contextlib.suppress(Exception):  # an unreadable file or line: nothing on record there
                found += [(path, k) for k in asyncssh.match_known_hosts(path, name, address, None)[2]]
    return found


def revoked_error(known_hosts: list[Any], host: str, port: int, key: Any, addr: str = "") -> HostKeyRevoked:
    """The refusal of a key marked @revoked. ``key`` None: the one asyncssh refused itself (a key both
    trusted and revoked), read from the record when only one key is revoked for this host."""
    on_record = revoked_on_record(known_hosts, host, addr, port)
    if key is None:
        keys = list({k.get_fingerprint("sha256"): k for _, k in on_record}.values())
        key = keys[0] if len(keys) == 1 else None
    files = _files(known_hosts)
    where = next((f for f, k in on_record if key is None or k == key), None) or (
        files[0] if files else str(default_known_hosts())
    )
    host_field = host if port in (22, 0, None) else f"[{host}]:{port}"
    what = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}" if key is not None else "its key"
    return HostKeyRevoked(
        f"the host key of {host_field} is REVOKED: {what} is marked @revoked in {where}; refusing to connect",
        host=host,
        port=port,
        fingerprint=key.get_fingerprint("sha256") if key is not None else "",
        known_hosts_file=where,
        hint="a revoked key was retired or stolen: never delete the @revoked line to get in; ask whoever "
        "runs the pod for its new host key",
    )


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
