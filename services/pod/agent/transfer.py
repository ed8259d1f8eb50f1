"""The backup agent's input/output primitives (standard library only; Python 3.8+): one JSON event per
line on stdout, a bandwidth throttle, zstd through the module or the binary, ranged reads, HTTP with
retries. Uploaded beside backup.py (services/backup/transfer.py AGENT_FILES); nothing here knows checkpoints."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


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
        import zstandard  # noqa: F401

        return ("module", zstandard)
    except ImportError:
        pass
    path = shutil.which("zstd")
    return ("binary", path) if path else None


def compress(data, level, codec):
    kind, impl = codec
    if kind == "module":
        return impl.ZstdCompressor(level=level).compress(data)
    return subprocess.run([impl, "-q", "-c", "-%d" % level], input=data, stdout=subprocess.PIPE,
                          check=True).stdout


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


def http(method, url, data=None, headers=None, attempts=4):
    last = None
    for attempt in range(attempts):
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()[:300].decode("utf-8", "replace")
            last = "HTTP %d %s" % (exc.code, body)
            if exc.code < 500 and exc.code != 408:
                break  # 403 expired URL, 400 bad request: retrying does not help
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        time.sleep(min(8.0, 0.5 * 2 ** attempt))
    raise IOError(last)


def fingerprint(files):
    """Which checkpoint this is, not just which step: sha256 over every file's (path under step_N, size,
    mtime in ns), sorted by path. A relaunch that writes the same step again, or a changed file, gives
    another one; a restore sets the recorded mtimes back, so a restored checkpoint keeps its own."""
    import hashlib

    lines = sorted("%s\t%d\t%d" % (str(p).replace("\\", "/"), int(size), int(ns)) for p, size, ns in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
