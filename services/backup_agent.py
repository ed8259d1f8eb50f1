"""The pod side of checkpoint backup and restore (standard library only; Python 3.8+).

Uploaded to the pod under its content hash (like the probe) and run with ``python3``. It never sees a
long-lived credential: the app sends presigned URLs on stdin, one JSON object per line, and the agent
answers with one JSON object per line on stdout ({"event": ...}).

  list RUN_DIR                         the checkpoints under RUN_DIR/checkpoints (step, bytes, complete)
  scan CKPT_DIR PART_SIZE MIN_PART [--compress zstd --level N]
                                       one document: every file's size, sha256 and parts (offset,
                                       raw size, stored size, md5 of the stored bytes). With zstd, each
                                       part is compressed on its own (concatenated zstd frames are one
                                       valid stream) and a file is compressed only when that saves >= 5%
  upload [--jobs N]                    stdin: parts {"path","n","offset","raw","md5","encoding","level",
                                       "url","key"}; PUTs each with urllib (parallel), checks the md5
                                       before sending; prints {"event":"part",...} per part
  download [--jobs N]                  stdin: one plan {"dest","final","files":[...]}; ranged GETs into
                                       a staging dir, sha256 of every file checked against the manifest,
                                       then ONE rename makes step_N appear (complete only when verified)
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

READ = 1024 * 1024
SAVING = 0.95  # compress a file only when the stored bytes are at most 95% of the raw bytes


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


def checkpoint_complete(path):
    """Same rule as the probe's: trainer/.metadata (DCP writes it last) and orchestrator/progress.pt."""
    if os.path.isfile(os.path.join(path, "STABLE")):
        return True
    trainer, orch = os.path.join(path, "trainer"), os.path.join(path, "orchestrator")
    has_trainer, has_orch = os.path.isdir(trainer), os.path.isdir(orch)
    if not (has_trainer or has_orch):
        return False
    if has_trainer and not os.path.isfile(os.path.join(trainer, ".metadata")):
        return False
    return not has_orch or os.path.isfile(os.path.join(orch, "progress.pt"))


def walk(root):
    out = []
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(base, name)
            if os.path.isfile(full) and not os.path.islink(full):
                out.append(os.path.relpath(full, root))
    return out


def cmd_list(run_dir):
    base = os.path.join(run_dir, "checkpoints")
    res = []
    names = os.listdir(base) if os.path.isdir(base) else []
    for name in names:
        if not (name.startswith("step_") and name[5:].isdigit()):
            continue
        path = os.path.join(base, name)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in walk(path))
        res.append({"step": int(name[5:]), "path": path, "bytes": size,
                    "mtime": os.path.getmtime(path), "complete": checkpoint_complete(path)})
    st = os.statvfs(run_dir) if os.path.isdir(run_dir) else None
    disk = {"total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize} if st else None
    emit({"event": "list", "ckpts": sorted(res, key=lambda c: c["step"]), "disk": disk})


# ------------------------------------------------------------------ compression
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


def scan_file(ckpt, rel, part_size, min_part, codec, level, jobs, helper):
    """One file's size, sha256 and parts. The md5 (and zstd) of a part run in ``helper`` threads while
    this thread feeds sha256: hashlib and zstd release the GIL, so they overlap."""
    full = os.path.join(ckpt, rel)
    size = os.path.getsize(full)
    part = part_size
    while part // 2 >= min_part and size < part * 2 * jobs:
        part //= 2  # enough parts to keep every upload thread busy
    while size > part * 10000:  # S3 allows 10,000 parts: grow the part, as s3transfer does
        part *= 2
    use = codec if size >= 4096 else None

    def part_info(n, offset, chunk):
        raw = {"n": n, "offset": offset, "raw": len(chunk), "size": len(chunk),
               "md5": hashlib.md5(chunk).hexdigest()}
        if use is None:
            return raw, None
        z = compress(chunk, level, use)
        return raw, {"n": n, "offset": offset, "raw": len(chunk), "size": len(z), "md5": hashlib.md5(z).hexdigest()}

    gate = threading.BoundedSemaphore(jobs + 1)  # bounds memory: parts read but not hashed yet

    def gated(n, offset, chunk):
        try:
            return part_info(n, offset, chunk)
        finally:
            gate.release()

    sha = hashlib.sha256()
    futures, offset, n = [], 0, 1
    with open(full, "rb") as fh:
        while True:
            gate.acquire()
            chunk = fh.read(part)
            if not chunk and n > 1:
                gate.release()
                break
            futures.append(helper.submit(gated, n, offset, chunk))
            sha.update(chunk)
            offset += len(chunk)
            n += 1
            if len(chunk) < part:
                break
    results = [f.result() for f in futures]
    raw_parts = [r for r, _ in results]
    z_parts = [z for _, z in results if z is not None]
    stored = sum(p["size"] for p in z_parts)
    use_z = (use is not None and len(z_parts) == len(raw_parts) and stored <= SAVING * size
             and all(p["size"] >= min_part for p in z_parts[:-1]))
    parts = z_parts if use_z else raw_parts
    emit({"event": "scanned", "path": rel, "bytes": size})
    return {"path": rel, "size": size, "sha256": sha.hexdigest(), "encoding": "zstd" if use_z else "none",
            "level": level if use_z else 0, "stored_size": sum(p["size"] for p in parts), "parts": parts}


def cmd_scan(ckpt, part_size, min_part, encoding, level, jobs=8):
    if not os.path.isdir(ckpt):
        emit({"event": "error", "message": "no checkpoint at %s" % ckpt})
        return 1
    if not checkpoint_complete(ckpt):
        emit({"event": "error", "message": "%s is incomplete (trainer/.metadata or orchestrator/progress.pt "
                                           "missing): refusing to back it up" % ckpt})
        return 1
    codec = zstd_codec() if encoding == "zstd" else None
    # files in parallel (a DCP checkpoint has one shard per rank); parts of each file in helper threads.
    # Memory: at most jobs//2 files x (jobs + 1) parts in flight.
    with ThreadPoolExecutor(max_workers=jobs) as helper, ThreadPoolExecutor(max_workers=max(1, jobs // 2)) as pool:
        files = list(pool.map(lambda rel: scan_file(ckpt, rel, part_size, min_part, codec, level, jobs, helper),
                              walk(ckpt)))
    emit({"event": "scan", "files": files, "zstd": codec is not None})
    return 0


# ------------------------------------------------------------------ HTTP
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


def cmd_upload(jobs, limit=0):
    codec = zstd_codec()
    failed = []
    throttle = Throttle(limit)

    def one(task):
        if _stop.is_set():
            return
        t0 = time.time()
        data = read_at(task["path"], task["offset"], task["raw"])
        if task.get("encoding") == "zstd":
            if codec is None:
                raise IOError("zstd is not available on this pod any more")
            data = compress(data, task["level"], codec)
        if hashlib.md5(data).hexdigest() != task["md5"]:
            raise IOError("%s changed since it was scanned" % task["path"])
        throttle.take(len(data))
        if _stop.is_set():
            return
        _, headers, _ = http("PUT", task["url"], data=data, headers={"Content-Length": str(len(data)),
                                                         "Content-Type": "application/octet-stream"})
        etag = {k.lower(): v for k, v in headers.items()}.get("etag", "").strip('"')
        emit({"event": "part", "key": task["key"], "n": task["n"], "etag": etag, "bytes": task["raw"],
              "stored": len(data), "secs": time.time() - t0})

    def guarded(task):
        try:
            one(task)
        except Exception as exc:  # reported, the others go on
            failed.append(str(exc))
            emit({"event": "error", "key": task.get("key"), "n": task.get("n"), "message": str(exc)})

    gate = threading.BoundedSemaphore(jobs * 2)  # bounds memory: at most 2*jobs parts in flight
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for line in sys.stdin:
            if _stop.is_set():
                break
            if not line.strip():
                continue
            gate.acquire()
            fut = pool.submit(guarded, json.loads(line))
            fut.add_done_callback(lambda _f: gate.release())
    emit({"event": "done", "failed": len(failed)})
    return 1 if failed else 0


def cmd_download(jobs):
    plan = json.loads(sys.stdin.readline())
    dest, final = plan["dest"], plan["final"]
    if os.path.exists(final):
        emit({"event": "error", "message": "%s already exists on the pod: not overwritten" % final})
        return 1
    codec = zstd_codec()
    tasks = []
    for f in plan["files"]:
        full = os.path.join(dest, f["path"])
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.truncate(f["size"])
        stored_at = 0
        for p in f["parts"]:
            tasks.append((f, p, stored_at, full))
            stored_at += p["size"]

    def one(task):
        f, p, start, full = task
        headers = {"Range": "bytes=%d-%d" % (start, start + p["size"] - 1)} if p["size"] else {}
        data = http("GET", f["url"], headers=headers)[2] if p["size"] else b""
        if f["encoding"] == "zstd":
            if codec is None:
                raise IOError("this backup is zstd-compressed but the pod has neither zstd nor zstandard")
            data = decompress(data, codec)
        if len(data) != p["raw"]:
            raise IOError("%s part %d: got %d bytes, expected %d" % (f["path"], p["n"], len(data), p["raw"]))
        fd = os.open(full, os.O_WRONLY)
        try:
            os.pwrite(fd, data, p["offset"])
        finally:
            os.close(fd)
        emit({"event": "part", "key": f["path"], "n": p["n"], "bytes": p["raw"]})

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, tasks))
        bad = []
        for f in plan["files"]:
            sha = hashlib.sha256()
            with open(os.path.join(dest, f["path"]), "rb") as fh:
                for chunk in iter(lambda: fh.read(READ), b""):
                    sha.update(chunk)
            if sha.hexdigest() != f["sha256"]:
                bad.append(f["path"])
        if bad:
            raise IOError("checksum mismatch against the manifest: " + ", ".join(bad))
        for base, _dirs, names in os.walk(dest):
            for name in names:
                fd = os.open(os.path.join(base, name), os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
        os.rename(dest, final)  # only now does step_N exist: verified first
    except Exception as exc:
        shutil.rmtree(dest, ignore_errors=True)
        emit({"event": "error", "message": str(exc)})
        return 1
    emit({"event": "done", "failed": 0, "path": final})
    return 0


def main(argv):
    cmd = argv[0] if argv else ""
    opts = dict(zip(argv[1::2], argv[2::2])) if cmd in ("upload", "download") else {}
    if cmd == "list":
        return cmd_list(argv[1]) or 0
    if cmd == "scan":
        rest = argv[4:]
        encoding = rest[rest.index("--compress") + 1] if "--compress" in rest else "none"
        level = int(rest[rest.index("--level") + 1]) if "--level" in rest else 1
        jobs = int(rest[rest.index("--jobs") + 1]) if "--jobs" in rest else 8
        return cmd_scan(argv[1], int(argv[2]), int(argv[3]), encoding, level, jobs)
    if cmd == "upload":
        return cmd_upload(int(opts.get("--jobs", 8)), int(opts.get("--limit", 0)))
    if cmd == "download":
        return cmd_download(int(opts.get("--jobs", 8)))
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
