"""The pod side of checkpoint backup and restore (standard library only; Python 3.8+).

Uploaded to the pod with common.py and transfer.py beside it, in a directory named by their content hash (like the
probe), and run with ``python3``. It never sees a long-lived credential: the app sends presigned URLs
on stdin, one JSON object per line, and the agent answers with one JSON object per line on stdout
({"event": ...}).

  list RUN_DIR                         the run's checkpoints, each step once with both halves (step,
                                       bytes, trainer_bytes, orch_bytes, complete); the trainer half
                                       may live in a separate [ckpt] output_dir (trainer_ckpt_dir)
  plan RUN_DIR --step N [--trainer-root DIR] [--compress zstd --level N]
                                       every file of both halves (paths trainer/..., orchestrator/...
                                       whatever the layout), size and encoding: zstd only when it saves
                                       >= 5% on samples of the file (each part is then its own zstd
                                       frame; concatenated frames are one valid stream)
  source RUN_DIR [--state-dir DIR]     which run this is: the absolute run dir, the id of the run record in
                                       RUN_DIR/.ptt/run.json (when we launched it) and the ids it was
                                       resumed from (the pod's registry DIR/runs/<id>.json); plan takes
                                       --state-dir too and puts the same in its event
  send [--jobs N --limit B/S --min-part M]
                                       stdin: one file per line {"path","full","key","encoding","level",
                                       "parts":[{"n","offset","raw","url","have"}][,"crc32":true
                                       [,"crc_only":true]]};
                                       ONE read per file: sha256 in order, md5 (+zstd, +CRC32 when "crc32") per part,
                                       PUT with urllib (parallel) with Content-MD5 (and the part's
                                       x-amz-checksum-crc32 when "crc32": its upload names CRC32); with
                                       "crc_only" (the store catches a wrong CRC32) no md5 per new part
                                       unless the bucket already has that md5 ("have"); a file whose
                                       object is complete in the bucket ("exists": its ETag and size) is
                                       hashed first and not sent at all when the ETag matches; prints
                                       {"event":"part"} per part and {"event":"file"} (sha256, parts)
  download [--jobs N]                  stdin: one plan {"run_dir","step","files":[...][,"trainer_root"]};
                                       every entry checked first (restore.py: a bad path refuses the whole
                                       plan, nothing written); ranged GETs into a fresh staging dir beside
                                       each half's home, sha256 of every file checked against the manifest,
                                       then one rename per half makes step_N appear (only when verified)

send and download take --timeout S: a store that gives no answer in S seconds (twice) is given up on,
"cannot reach the S3 endpoint <url>: no answer in S s" (transfer.http).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

if __package__:  # imported from the repo (services.pod.agent.backup)
    from .common import checkpoint_complete, ckpt_roots, has_orchestrator, step_dirs
    from .restore import cmd_download
    from .transfer import (
        TIMEOUT,
        Throttle,
        _stop,
        compress,
        emit,
        fingerprint,
        http,
        read_at,
        skippable,
        zstd_codec,
    )
else:  # run on the pod: its siblings were uploaded beside it, and a script's own dir is sys.path[0]
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded by path, not run
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ in the pod's hashed dir: it holds what was uploaded
    from common import checkpoint_complete, ckpt_roots, has_orchestrator, step_dirs
    from restore import cmd_download
    from transfer import (
        TIMEOUT,
        Throttle,
        _stop,
        compress,
        emit,
        fingerprint,
        http,
        read_at,
        skippable,
        zstd_codec,
    )

READ = 1024 * 1024
SAVING = 0.95  # compress a file only when the stored bytes are at most 95% of the raw bytes


def walk(root):
    out = []
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(base, name)
            if os.path.isfile(full) and not os.path.islink(full):
                out.append(os.path.relpath(full, root))
    return out


def step_files(troot, oroot, step):
    """[(path relative to step_N, full path on the pod)] of both halves of step N: the same shape
    (trainer/..., orchestrator/...) whether or not the trainer half lives in a separate dir."""
    tdir = os.path.join(troot, "step_%d" % step)
    if oroot is None:
        return [(rel, os.path.join(tdir, rel)) for rel in walk(tdir)]
    odir = os.path.join(oroot, "step_%d" % step, "orchestrator")
    out = [(rel, os.path.join(tdir, rel)) for rel in walk(tdir) if not rel.startswith("orchestrator" + os.sep)]
    return out + [(os.path.join("orchestrator", rel), os.path.join(odir, rel)) for rel in walk(odir)]


def step_status(troot, oroot, step, files=None):
    """One step, both halves: {"step","path","orch_path","bytes","trainer_bytes","orch_bytes","mtime","complete"}."""
    tdir = os.path.join(troot, "step_%d" % step)
    odir = tdir if oroot is None else os.path.join(oroot, "step_%d" % step)
    files = step_files(troot, oroot, step) if files is None else files
    stats = [(rel, os.stat(full)) for rel, full in files]
    sizes = [(rel.startswith("orchestrator" + os.sep), st.st_size) for rel, st in stats]
    mtimes = [os.path.getmtime(d) for d in set((tdir, odir)) if os.path.isdir(d)]
    if oroot is None:
        complete = checkpoint_complete(tdir)
    else:  # both halves when the run has an orchestrator (configs or any orchestrator half say so)
        run_dir = os.path.dirname(oroot)
        rl = has_orchestrator(run_dir, (oroot,))
        complete = checkpoint_complete(tdir, odir if rl else None)
    return {
        "step": step,
        "path": tdir if os.path.isdir(tdir) else odir,
        "orch_path": odir,
        "bytes": sum(n for _o, n in sizes),
        "orch_bytes": sum(n for o, n in sizes if o),
        "trainer_bytes": sum(n for o, n in sizes if not o),
        "mtime": max(mtimes) if mtimes else None,
        "complete": complete,
        "fingerprint": fingerprint((rel, st.st_size, st.st_mtime_ns) for rel, st in stats),
    }


def cmd_list(run_dir):
    troot, oroot = ckpt_roots(run_dir)
    steps = set(step_dirs(troot)) | set(step_dirs(oroot) if oroot else ())
    res = [step_status(troot, oroot, s) for s in sorted(steps)]
    st = os.statvfs(run_dir) if os.path.isdir(run_dir) else None
    disk = {"total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize} if st else None
    emit({"event": "list", "ckpts": res, "disk": disk, "trainer_dir": troot, "orch_dir": oroot or troot})


def run_source(run_dir, state_dir=None):
    """{"run_dir", "run_id", "lineage", "resumed_at"} of the run in ``run_dir`` (ids empty when no record is
    there); ``resumed_at[i]``: the newest step of ``lineage[i]`` this run took over (the smallest resume
    step on the way to it; None when a record on the way does not say)."""
    run_dir = os.path.abspath(os.path.expanduser(run_dir))
    out = {"run_dir": run_dir, "run_id": "", "lineage": [], "resumed_at": []}
    try:
        with open(os.path.join(run_dir, ".ptt", "run.json")) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return out
    if not isinstance(rec, dict) or not rec.get("id"):
        return out
    out["run_id"] = str(rec["id"])
    state = os.path.expanduser(state_dir or "~/.cache/prime-train-tui")
    state = state if os.path.isabs(state) else os.path.join(os.path.expanduser("~"), state)
    seen = {out["run_id"]}
    parent, bound = rec.get("resumed_from"), _step(rec.get("resume_step"))
    while parent and str(parent) not in seen and len(seen) < 100:
        parent = str(parent)
        out["lineage"].append(parent)
        out["resumed_at"].append(bound)
        seen.add(parent)
        try:
            with open(os.path.join(state, "runs", os.path.basename(parent) + ".json")) as fh:
                older = json.load(fh) or {}
            parent, step = older.get("resumed_from"), _step(older.get("resume_step"))
        except (OSError, ValueError, AttributeError):
            break
        bound = None if bound is None or (step is None and parent) else (bound if step is None else min(bound, step))
    return out


def _step(value):
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def cmd_source(run_dir, state_dir=None):
    emit({"event": "source", **run_source(run_dir, state_dir)})
    return 0


# ------------------------------------------------------------------ compression
def pays_off(full, size, codec, level):
    """Whether zstd saves >= 5% on this file, judged on up to three 1 MiB samples (start, middle, end)."""
    if codec is None or size < 4096:
        return False
    sample = min(READ, size)
    raw = stored = 0
    for offset in sorted({0, max(0, size // 2 - sample // 2), size - sample}):
        chunk = read_at(full, offset, sample)
        raw += len(chunk)
        stored += len(compress(chunk, level, codec))
    return stored <= SAVING * raw


def cmd_plan(run_dir, step, encoding, level, trainer_root=None, state_dir=None):
    """The files of a complete checkpoint (both halves, wherever each lives), their sizes and whether
    each is worth compressing."""
    troot, oroot = ckpt_roots(run_dir, trainer_root)
    tdir = os.path.join(troot, "step_%d" % step)
    odir = tdir if oroot is None else os.path.join(oroot, "step_%d" % step)
    if not os.path.isdir(tdir) and not os.path.isdir(odir):
        emit({"event": "error", "message": "no checkpoint at %s" % tdir})
        return 1
    files = step_files(troot, oroot, step)
    if not step_status(troot, oroot, step, files)["complete"]:
        where = tdir if oroot is None else "trainer half %s, orchestrator half %s" % (tdir, odir)
        emit(
            {
                "event": "error",
                "message": "step_%d is incomplete (trainer/.metadata or orchestrator/progress.pt "
                "missing; %s): refusing to back it up" % (step, where),
            }
        )
        return 1
    codec = zstd_codec() if encoding == "zstd" else None
    out = []
    for rel, full in files:
        st = os.stat(full)
        size = st.st_size
        out.append(
            {
                "path": rel.replace(os.sep, "/"),
                "full": full,
                "size": size,
                "mtime_ns": st.st_mtime_ns,
                "encoding": "zstd" if pays_off(full, size, codec, level) else "none",
            }
        )
    emit(
        {
            "event": "plan",
            "files": out,
            "zstd": codec is not None,
            "trainer_dir": tdir,
            "orch_dir": odir,
            "source": run_source(run_dir, state_dir),
        }
    )
    return 0


def cmd_send(jobs, limit=0, min_part=5 * 1024 * 1024, timeout=TIMEOUT):
    """One pass per file: a reader thread reads it in order (feeding sha256), workers compress, md5 and
    PUT the parts; a part whose md5 equals the bucket's ("have") is not sent again. Per part an event
    {"event":"part",...}; per file {"event":"file",...} with its sha256 and every part's md5 and ETag."""
    codec = zstd_codec()
    throttle = Throttle(limit)
    failed = []
    gate = threading.BoundedSemaphore(jobs + 2)  # memory: at most jobs + 2 parts read and not yet sent

    def stored(task, chunk, last):
        """The bytes stored for a part: the chunk, or its zstd frame (padded: S3 refuses small parts)."""
        if task["encoding"] != "zstd":
            return chunk
        if codec is None:
            raise OSError("zstd is not available on this pod any more")
        data = compress(chunk, task["level"], codec)
        if not last and len(data) < min_part:  # S3 refuses small parts but the last
            data += skippable(max(8, min_part - len(data)))
        return data

    def already_there(task):
        """The object is complete in the bucket ("exists"): one read hashing every part as it would be
        stored; when the ETag the parts give equals the object's, nothing is sent (True)."""
        want = task["exists"]
        sha, parts = hashlib.sha256(), []
        with open(task["full"], "rb") as fh:
            for i, p in enumerate(task["parts"]):
                if _stop.is_set():
                    raise OSError("stopped")
                fh.seek(p["offset"])
                chunk = fh.read(p["raw"])
                sha.update(chunk)
                data = stored(task, chunk, i == len(task["parts"]) - 1)
                parts.append(
                    {
                        "n": p["n"],
                        "offset": p["offset"],
                        "raw": len(chunk),
                        "size": len(data),
                        "md5": hashlib.md5(data).hexdigest(),
                    }
                )
            if fh.read(1):
                return False
        md5s = [p["md5"] for p in parts]
        etag = (
            md5s[0]
            if len(md5s) == 1
            else "%s-%d" % (hashlib.md5(b"".join(bytes.fromhex(m) for m in md5s)).hexdigest(), len(md5s))
        )
        if etag != want.get("etag") or sum(p["size"] for p in parts) != int(want.get("size", -1)):
            return False
        for p in parts:
            p["etag"] = p["md5"]
            emit(
                {
                    "event": "part",
                    "key": task["key"],
                    "n": p["n"],
                    "bytes": p["raw"],
                    "stored": p["size"],
                    "skipped": True,
                }
            )
        emit(
            {
                "event": "file",
                "path": task["path"],
                "key": task["key"],
                "size": task["size"],
                "sha256": sha.hexdigest(),
                "encoding": task["encoding"],
                "level": task["level"],
                "stored_size": sum(p["size"] for p in parts),
                "parts": parts,
                "existing": True,
            }
        )
        return True

    def put(task, p, chunk, last):
        try:
            if _stop.is_set():
                raise OSError("stopped")
            data = stored(task, chunk, last)
            # CRC32 only for an upload that names it (the store then checks it and completes from them);
            # "crc_only": the store catches a wrong CRC32, so a new part needs no md5 (the costliest hash
            # here); a part the bucket has already ("have") is still compared by its md5
            crc = (
                base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()
                if task.get("crc32")
                else ""
            )
            digest = b"" if crc and task.get("crc_only") and not p.get("have") else hashlib.md5(data).digest()
            md5 = digest.hex()
            info = {"n": p["n"], "offset": p["offset"], "raw": len(chunk), "size": len(data), "md5": md5, "crc32": crc}
            if md5 and p.get("have") == md5:
                info["etag"], skipped = p.get("have_etag") or md5, True
            else:
                throttle.take(len(data))
                if _stop.is_set():
                    raise OSError("stopped")
                # Content-MD5: the store refuses a part whose bytes changed on the way (presigned URLs may
                # carry it unsigned); x-amz-checksum-crc32 when the upload was created with CRC32.
                sent = {"Content-Length": str(len(data)), "Content-Type": "application/octet-stream"}
                if digest:
                    sent["Content-MD5"] = base64.b64encode(digest).decode()
                if crc:
                    sent["x-amz-checksum-crc32"] = crc
                _, headers, _ = http("PUT", p["url"], data=data, timeout=timeout, headers=sent)
                info["etag"] = {k.lower(): v for k, v in headers.items()}.get("etag", "").strip('"')
                skipped = False
            emit(
                {
                    "event": "part",
                    "key": task["key"],
                    "n": p["n"],
                    "bytes": len(chunk),
                    "stored": len(data),
                    "skipped": skipped,
                }
            )
            return info
        finally:
            gate.release()

    def one_file(task, pool):
        if task.get("exists") and already_there(task):
            return
        full = task["full"]
        sha = hashlib.sha256()
        futures = []
        with open(full, "rb") as fh:
            for i, p in enumerate(task["parts"]):
                gate.acquire()
                try:
                    if _stop.is_set():
                        raise OSError("stopped")
                    fh.seek(p["offset"])
                    chunk = fh.read(p["raw"])
                    if len(chunk) != p["raw"]:
                        raise OSError("%s changed while it was being backed up" % task["path"])
                except BaseException:
                    gate.release()
                    raise
                sha.update(chunk)
                futures.append(pool.submit(put, task, p, chunk, i == len(task["parts"]) - 1))
                del chunk
            if fh.read(1):
                raise OSError("%s grew while it was being backed up" % task["path"])
        parts = [f.result() for f in futures]
        emit(
            {
                "event": "file",
                "path": task["path"],
                "key": task["key"],
                "size": task["size"],
                "sha256": sha.hexdigest(),
                "encoding": task["encoding"],
                "level": task["level"],
                "stored_size": sum(p["size"] for p in parts),
                "parts": parts,
            }
        )

    def guarded(task, pool):
        try:
            one_file(task, pool)
        except Exception as exc:  # reported, the other files go on
            failed.append(str(exc))
            emit({"event": "error", "key": task.get("key"), "message": str(exc)})

    readers = max(1, min(4, jobs // 2))
    with ThreadPoolExecutor(max_workers=jobs) as pool, ThreadPoolExecutor(max_workers=readers) as files:
        pending = threading.BoundedSemaphore(readers * 2)  # read ahead on stdin: URLs are signed as we go
        for line in sys.stdin:
            if _stop.is_set():
                break
            if not line.strip():
                continue
            pending.acquire()
            fut = files.submit(guarded, json.loads(line), pool)
            fut.add_done_callback(lambda _f: pending.release())
    emit({"event": "done", "failed": len(failed)})
    return 1 if failed else 0


def main(argv):
    cmd = argv[0] if argv else ""
    opts = dict(zip(argv[1::2], argv[2::2])) if cmd in ("send", "download") else {}
    if cmd == "list":
        return cmd_list(argv[1]) or 0
    if cmd == "plan":
        rest = argv[2:]
        encoding = rest[rest.index("--compress") + 1] if "--compress" in rest else "none"
        level = int(rest[rest.index("--level") + 1]) if "--level" in rest else 1
        root = rest[rest.index("--trainer-root") + 1] if "--trainer-root" in rest else None
        state = rest[rest.index("--state-dir") + 1] if "--state-dir" in rest else None
        return cmd_plan(argv[1], int(rest[rest.index("--step") + 1]), encoding, level, root, state)
    if cmd == "source":
        rest = argv[2:]
        return cmd_source(argv[1], rest[rest.index("--state-dir") + 1] if "--state-dir" in rest else None)
    if cmd == "send":
        return cmd_send(
            int(opts.get("--jobs", 8)),
            int(opts.get("--limit", 0)),
            int(opts.get("--min-part", 5 * 1024 * 1024)),
            float(opts.get("--timeout", TIMEOUT)),
        )
    if cmd == "download":
        return cmd_download(int(opts.get("--jobs", 8)), float(opts.get("--timeout", TIMEOUT)))
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
