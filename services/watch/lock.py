"""One watcher per data dir: an flock on ``<data dir>/watch.lock`` that holds its holder's record.

The holder writes ``{"pid", "owner", "since"}`` into the file right after its flock, so a second watcher
says who is in the way ("pid 4242 (alice@box), since 14:02:10 (3 min ago)"). The kernel drops an flock
when its process dies: a crashed watcher is never in the way. A record that is empty (a holder between
its flock and its write) or garbage reads "an unknown process"."""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, TypeGuard

from services.errors import PrimeTrainError

LOCK_NAME = "watch.lock"


class WatcherRunning(PrimeTrainError):
    """Another watcher holds this data dir."""


def owner_id() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in a container is not a reason to fail
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def read_holder(path: Path) -> dict[str, Any] | None:
    """The holder's record, or None when there is none or it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="replace")[:4096] or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid, since = data.get("pid"), data.get("since")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    owner = raw_owner if isinstance(raw_owner := data.get("owner"), str) else "?"
    since = (
        float(since)
        if isinstance(since, (int, float)) and not isinstance(since, bool) and since == since and abs(since) < 1e11
        else None
    )
    return {"pid": pid, "owner": "".join(c for c in owner[:80] if c.isprintable()), "since": since}


def describe(holder: dict[str, Any] | None, now: float) -> str:
    if holder is None:
        return "an unknown process"
    text = f"pid {holder['pid']} ({holder['owner']})"
    if holder["since"] is not None:
        ago = max(0, int(now - holder["since"]))
        when = time.strftime("%H:%M:%S", time.localtime(holder["since"]))
        text += f", since {when} ({ago // 60} min ago)" if ago >= 60 else f", since {when} ({ago} s ago)"
    return text


def holder_alive(holder: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """The recorded holder is a live process of this machine (for the TUI: a watcher is running)."""
    if holder is None or holder.get("owner", "").rpartition("@")[2] != socket.gethostname():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WatchLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, *, clock=time.time, wait: float = 1.0) -> None:
        """Take the lock or raise WatcherRunning naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.path)
            deadline = time.monotonic() + wait
            while holder is None and time.monotonic() < deadline:  # a holder between its flock and its write
                time.sleep(0.05)
                holder = read_holder(self.path)
            raise WatcherRunning(
                f"another watcher is running on this data dir ({self.path.parent}): {describe(holder, clock())}",
                hint="one watcher per data dir: stop that one first, or give this one its own PRIME_TRAIN_TUI_DATA_DIR",
            ) from None
        record = json.dumps({"pid": os.getpid(), "owner": owner_id(), "since": round(clock(), 3)})
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # no stale record left for a reader
        finally:
            os.close(fd)  # drops the flock

    def __enter__(self) -> WatchLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
