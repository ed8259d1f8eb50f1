"""The backup agent's input/output primitives (standard library only; Python 3.8+): one JSON event per
line on stdout, a bandwidth throttle, zstd through the module or the binary, ranged reads, HTTP with
retries and timeouts, the rule for a path a manifest may name. Uploaded beside backup.py
(services/backup/transfer.py AGENT_FILES); nothing here knows checkpoints."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException


def emit(obj):
    with _out_lock:
        if _stop.is_set():
            return
        try:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, OSError):
            _stop.set()  # the app went away (cancelled, connection lost): stop, leave parts for a resume


_out_lock = threading.Lock()
_stop = threading.Event()


class Throttle:
    """At most ``limit`` bytes/s over all threads (0: unlimited), like TransferConfig.max_bandwidth."""

    def __init__(self, limit):
        self.limit, self.next, self.lock = limit, 0.0, threading.Lock()

    def take(self, n):
        if self.limit <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + n / float(self.limit)
        time.sleep(max(0.0, start - now))


def zstd_codec():
    """("module", zstandard) or ("binary", path) or None: what this pod can compress with."""
    try:
        import zstandard

        return ("module", zstandard)
    except ImportError:
        pass
    path = shutil.which("zstd")
    return ("binary", path) if path else None


def compress(data, level, codec):
    kind, impl = codec
    if kind == "module":
        return impl.ZstdCompressor(level=level).compress(data)
    return subprocess.run([impl, "-q", "-c", "-%d" % level], input=data, stdout=subprocess.PIPE, check=True).stdout


def decompress(data, codec):
    kind, impl = codec
    if kind == "module":
        return impl.ZstdDecompressor().decompressobj().decompress(data)
    return subprocess.run([impl, "-q", "-d", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def read_at(path, offset, size):
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(size)


def skippable(n):
    """A zstd skippable frame of exactly ``n`` >= 8 bytes: decoders skip it (pads a too-small part)."""
    return b"\x50\x2a\x4d\x18" + (n - 8).to_bytes(4, "little") + b"\0" * (n - 8)


TIMEOUT = 30.0  # s without a byte from the store (connect, each read, each 1 MiB sent): it is not answering
CHUNK = 1024 * 1024  # a body is sent in pieces of this size, each within the timeout (a slow link is not "no answer")
_silent: set[str] = set()  # endpoints (scheme://host:port) that gave no answer: every later request fails at once


class Unreachable(IOError):
    """The store accepted no connection or gave no answer in time, twice: it is not answering."""


def origin(url):
    """scheme://host:port of a URL: where it goes, without the path or the query (a presigned URL's
    query holds its signature: never in a message)."""
    try:
        parts = urllib.parse.urlsplit(url)
        return "%s://%s" % (parts.scheme, parts.netloc.rpartition("@")[2])
    except ValueError:
        return "the S3 endpoint"


def _timed_out(exc):
    reason = getattr(exc, "reason", exc)
    return isinstance(exc, (socket.timeout, TimeoutError)) or isinstance(reason, (socket.timeout, TimeoutError))


def http(method, url, data=None, headers=None, attempts=4, timeout=TIMEOUT):
    """One request with retries (5xx, 408, lost connections: up to ``attempts``); a store that gives no
    answer in ``timeout`` s twice is given up on (and every later request to it fails at once), with
    "cannot reach the S3 endpoint <url>: no answer in N s"."""
    where = origin(url)
    silent = "cannot reach the S3 endpoint %s: no answer in %g s" % (where, timeout)
    if where in _silent:
        raise Unreachable(silent)
    last, timeouts = None, 0
    for attempt in range(attempts):
        body = data
        if data is not None and len(data) > CHUNK:  # http.client sends each piece with its own timeout
            view = memoryview(data)
            body = tuple(view[i : i + CHUNK] for i in range(0, len(data), CHUNK))
        req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()[:300].decode("utf-8", "replace")
            last = "HTTP %d %s" % (exc.code, body)
            if exc.code < 500 and exc.code != 408:
                break  # 403 expired URL, 400 bad request: retrying does not help
        except (urllib.error.URLError, OSError, HTTPException) as exc:  # lost, refused, garbled
            if _timed_out(exc):
                timeouts += 1
                if timeouts >= 2 or where in _silent:
                    _silent.add(where)
                    raise Unreachable(silent) from None
            last = str(getattr(exc, "reason", exc))
        time.sleep(min(8.0, 0.5 * 2**attempt))
    raise OSError(last)


def fingerprint(files):
    """Which checkpoint this is, not just which step: sha256 over every file's (path under step_N, size,
    mtime in ns), sorted by path. A relaunch that writes the same step again, or a changed file, gives
    another one; a restore sets the recorded mtimes back, so a restored checkpoint keeps its own."""
    import hashlib

    lines = sorted("%s\t%d\t%d" % (str(p).replace("\\", "/"), int(size), int(ns)) for p, size, ns in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


MAX_PATH = 4096  # bytes, Linux's PATH_MAX
MAX_NAME = 255  # bytes per component, Linux's NAME_MAX


def check_path(path):
    """The components of ``path`` when a manifest may name it: relative, "/"-separated, no ".." (nothing
    climbs out), no empty or "." component, no NUL, valid UTF-8, within Linux's length limits. Otherwise
    ValueError saying why (the app checks every manifest it reads, the agent every plan it gets)."""
    if not isinstance(path, str):
        raise ValueError("not a string")
    if not path:
        raise ValueError("empty")
    if "\0" in path:
        raise ValueError("contains a NUL byte")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeError:
        raise ValueError("not valid UTF-8") from None
    if path.startswith("/"):
        raise ValueError("an absolute path")
    parts = path.split("/")
    if ".." in parts:
        raise ValueError("'..' climbs out of the checkpoint")
    if "" in parts or "." in parts:
        raise ValueError("an empty or '.' component")
    if size > MAX_PATH:
        raise ValueError("longer than %d bytes" % MAX_PATH)
    if any(len(p.encode("utf-8")) > MAX_NAME for p in parts):
        raise ValueError("a name longer than %d bytes" % MAX_NAME)
    return parts
