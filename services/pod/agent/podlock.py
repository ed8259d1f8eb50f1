"""The pod's action lock (stdlib only, Python 3.6+): one launch/kill/resume/cleanup at a time on a pod, across
processes and machines. Uploaded beside ``lifecycle.py`` and ``actions.py``, which take it.

A flock on ``<state>/action.lock``; the kernel drops it when its holder dies, so a dead holder is never in
the way. The file's content only says who holds it, for a refused taker's message: a JSON record (pid on the
pod, action, owner = user@host of the machine that took it, since). That record is outside data when read
(half-written, or written by anyone with root on the pod): :func:`parse_holder` takes any bytes.
"""

import json
import os
import time

LOCK_RECORD_MAX = 4096  # the record is ~150 bytes; a bigger file is garbage and read no further
LOCK_WAIT = 1.0  # seconds a refused taker waits for a holder's record that is missing, unreadable or stale


def take_lock(state, action, owner, wait=LOCK_WAIT):
    """(fd, info) with the pod's action lock held (flock on <state>/action.lock), or (None, holder) where
    holder is :func:`parse_holder`'s answer. The holder writes its record just after its flock, and
    truncates it just before it lets go: a taker that finds the flock held but no live holder's record
    looks again (and tries the flock again) for up to ``wait`` seconds, then says "unknown"."""
    import fcntl

    os.makedirs(state, exist_ok=True)
    path = os.path.join(state, "action.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited across exec (PEP 446)
    end = time.time() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            holder = read_holder(fd)
            live = holder["known"] and _alive(holder["pid"])
            if live or time.time() >= end:
                os.close(fd)
                return None, holder if live else parse_holder(b"", time.time())
            time.sleep(0.05)
    info = {"pid": os.getpid(), "action": action, "owner": clean_text(owner) or "", "since": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
    return fd, info


def read_holder(where, now=None):
    """:func:`parse_holder` of the lock file (a path, or an fd open on it); never raises, never blocks (a
    FIFO or a directory in its place reads as nothing)."""
    now = time.time() if now is None else now
    data = b""
    try:
        fd = where if isinstance(where, int) else os.open(where, os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.pread(fd, LOCK_RECORD_MAX, 0)
        finally:
            if fd is not where:
                os.close(fd)
    except (OSError, ValueError, TypeError):
        pass
    return parse_holder(data, now)


def parse_holder(data, now):
    """Who holds the lock, from the record's bytes (anything: written by us, half-written, or garbage).
    Always the same keys: ``known`` (a valid pid was recorded), ``pid``, ``action``, ``owner`` (printable,
    one line, at most 80 characters), ``since`` and ``age`` (seconds, finite); None where unknown."""
    holder = {"known": False, "pid": None, "action": None, "owner": None, "since": None, "age": None}  # type: dict
    try:
        record = json.loads(bytes(data[:LOCK_RECORD_MAX]).decode("utf-8"))
    except (ValueError, TypeError, RecursionError):
        return holder
    if not isinstance(record, dict):
        return holder
    pid = record.get("pid")
    if type(pid) is int and 0 < pid < 2**31:
        holder.update(known=True, pid=pid)
    holder.update(action=clean_text(record.get("action")), owner=clean_text(record.get("owner")))
    since = record.get("since")
    # a bool is no time; NaN fails both tests
    if (type(since) is int or type(since) is float) and 0 < since <= now + 60:
        holder.update(since=float(since), age=max(0.0, float(now - since)))
    return holder


def clean_text(value, limit=80):
    """A string fit for a one-line message (printable, spaces collapsed, at most ``limit`` long), or None."""
    if not isinstance(value, str):
        return None
    text = " ".join("".join(c if c.isprintable() else " " for c in value[: 4 * limit]).split())[:limit].strip()
    return text or None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's, alive
        return True
    return True


def drop_lock(fd):
    if fd is not None:
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
