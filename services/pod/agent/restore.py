"""The pod side of a restore, ``backup.py download`` (standard library only; Python 3.8+).

Uploaded with backup.py, transfer.py and common.py (services/pod/agent/__init__.py BACKUP_FILES). The plan on
stdin is built from a manifest in the bucket, and whoever can write to the bucket wrote that manifest: the
app checks it when it reads it (services/backup/manifest.py), and this agent checks the plan again before it
writes anything (:func:`check_plan`, the same path rule: transfer.check_path). A plan with one bad entry is
refused whole with one line naming it. Then every file is created in a staging dir made fresh for this
restore (never an existing file, never through a symlink, nothing outside it), ranged GETs fill them, every
sha256 is checked against the manifest, and only then does one rename per half make step_N appear.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

if __package__:  # imported from the repo (services.pod.agent.restore)
    from .common import checkpoint_complete, ckpt_roots
    from .transfer import TIMEOUT, check_path, decompress, emit, http, zstd_codec
else:  # on the pod, beside its siblings
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True
    from common import checkpoint_complete, ckpt_roots
    from transfer import TIMEOUT, check_path, decompress, emit, http, zstd_codec

READ = 1024 * 1024
_TAG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class PlanError(ValueError):
    """The plan cannot be followed safely: one line naming the entry."""


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_plan(plan):
    """Every entry of a download plan {"run_dir","step","files"[,"tag","trainer_root"]} is safe to write
    under a staging dir: its path passes transfer.check_path, no two entries name the same file or a file
    and a directory, sizes and parts are whole numbers that cover each file exactly. Raises PlanError."""
    if not isinstance(plan, dict) or not isinstance(plan.get("files"), list):
        raise PlanError("the restore plan is not an object with a list of files")
    if not _count(plan.get("step")):
        raise PlanError("the restore plan's step is not a whole number: %r" % (plan.get("step"),))
    if not isinstance(plan.get("run_dir"), str) or not plan["run_dir"]:
        raise PlanError("the restore plan names no run dir")
    tag = plan.get("tag")
    if tag is not None and not (isinstance(tag, str) and _TAG.match(tag)):
        raise PlanError("the restore plan's tag %r is not letters, digits, '-' or '_'" % (tag,))
    root = plan.get("trainer_root")
    if root is not None and not (isinstance(root, str) and root and "\0" not in root):
        raise PlanError("the restore plan's trainer_root is not a path: %r" % (root,))
    files: set[object] = set()  # str: check_path refused anything else
    dirs: set[str] = set()
    for i, f in enumerate(plan["files"], 1):
        path = f.get("path") if isinstance(f, dict) else None
        what = "entry %d (%r)" % (i, path)
        try:
            parts = check_path(path)
        except ValueError as exc:
            raise PlanError("unsafe path in the manifest, %s: %s" % (what, exc)) from None
        if path in files or path in dirs:
            raise PlanError("%s: another entry names the same file or a directory of that name" % what)
        parents = {"/".join(parts[:n]) for n in range(1, len(parts))}
        if parents & files:
            raise PlanError("%s: it lies under a file another entry names" % what)
        files.add(path)
        dirs |= parents
        if not _count(f.get("size")) or not isinstance(f.get("sha256"), str) or not _SHA256.match(f["sha256"]):
            raise PlanError("%s: its size or sha256 is not valid" % what)
        if f.get("encoding", "none") not in ("none", "zstd") or not _count(f.get("mtime_ns") or 0):
            raise PlanError("%s: unknown encoding or a bad mtime" % what)
        if not isinstance(f.get("url"), str) or not f["url"].startswith(("http://", "https://")):
            raise PlanError("%s: no http(s) URL to download it from" % what)
        parts_ = f.get("parts")
        if not isinstance(parts_, list) or not (parts_ or f["size"] == 0):
            raise PlanError("%s: no parts" % what)
        offset = 0
        for p in parts_:
            if (
                not isinstance(p, dict)
                or not all(_count(p.get(k)) for k in ("n", "offset", "raw", "size"))
                or p["offset"] != offset
            ):
                raise PlanError("%s: its parts do not cover the file in order" % what)
            offset += p["raw"]
        if offset != f["size"]:
            raise PlanError("%s: its parts hold %d bytes, not its size %d" % (what, offset, f["size"]))
    return plan["files"]


def restore_halves(plan):
    """[(final step dir, staging dir, files)] for a checked download plan: each half where it belongs for
    that run (the trainer half into a separate ckpt dir when the configs name one, or the app's
    ``trainer_root``); every file's ``sub`` (the dir under the staging dir it goes to) is set here, never
    taken from the plan."""
    troot, oroot = ckpt_roots(plan["run_dir"], plan.get("trainer_root"))
    name, tag = "step_%d" % int(plan["step"]), plan.get("tag") or "%d" % os.getpid()

    def half(root, files):
        return (os.path.join(root, name), os.path.join(root, ".%s.restoring-%s" % (name, tag)), files)

    if oroot is None:
        return [half(troot, [dict(f, sub="") for f in plan["files"]])], None
    orch = [f for f in plan["files"] if f["path"].startswith("orchestrator/")]
    rest = [dict(f, sub="") for f in plan["files"] if not f["path"].startswith("orchestrator/")]
    halves = [
        half(oroot, [dict(f, path=f["path"][len("orchestrator/") :], sub="orchestrator") for f in orch]),
        half(troot, rest),
    ]
    return [h for h in halves if h[2]], (halves[1][0], halves[0][0] if orch else None)


def _whole(halves, pair):
    """Whether the step is already complete on the pod (then nothing is overwritten)."""
    if pair is not None:
        return checkpoint_complete(pair[0], pair[1])
    final = halves[0][0]
    return os.path.lexists(final) and (checkpoint_complete(final) or not os.path.isdir(final))


def make_staging(dest):
    """Create the staging dir, which must not exist: one already there (a planted one with a symlink
    inside, or another restore's) is never written into."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        os.mkdir(dest)
    except FileExistsError:
        raise OSError(
            "the staging dir %s already exists (another restore, or put there by someone): "
            "refusing to write into it" % dest
        ) from None


def stage_file(dest, f):
    """Create the empty file of entry ``f`` under the staging dir ``dest`` at its size: a new file (never an
    existing one, never through a symlink), inside ``dest`` however its dirs resolve. Returns its path."""
    parts = ([f["sub"]] if f["sub"] else []) + check_path(f["path"])
    parent = os.path.join(dest, *parts[:-1])
    os.makedirs(parent, exist_ok=True)
    top, real = os.path.realpath(dest), os.path.realpath(parent)
    if real != top and not real.startswith(top + os.sep):
        raise OSError("%s leads outside the staging dir (to %s): refused" % (f["path"], real))
    full = os.path.join(parent, parts[-1])
    fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    try:
        os.ftruncate(fd, f["size"])
    finally:
        os.close(fd)
    return full


def cmd_download(jobs, timeout=TIMEOUT):
    try:
        plan = json.loads(sys.stdin.readline())
        check_plan(plan)
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, PlanError) else "the restore plan is not JSON"
        emit({"event": "error", "message": "refused the restore: %s; nothing was written" % reason})
        return 1
    halves, pair = restore_halves(plan)
    if _whole(halves, pair) or any(os.path.lexists(f) and not os.path.isdir(f) for f, _d, _x in halves):
        where = " and ".join(f for f, _d, _x in halves)
        emit({"event": "error", "message": "%s already exists on the pod and is complete: not overwritten" % where})
        return 1
    codec = zstd_codec()
    tasks, placed, made = [], [], []

    def one(task):
        f, p, start, full = task
        headers = {"Range": "bytes=%d-%d" % (start, start + p["size"] - 1)} if p["size"] else {}
        data = http("GET", f["url"], headers=headers, timeout=timeout)[2] if p["size"] else b""
        if f.get("encoding") == "zstd":
            if codec is None:
                raise OSError("this backup is zstd-compressed but the pod has neither zstd nor zstandard")
            data = decompress(data, codec)
        if len(data) != p["raw"]:
            raise OSError("%s part %d: got %d bytes, expected %d" % (f["path"], p["n"], len(data), p["raw"]))
        fd = os.open(full, os.O_WRONLY | _NOFOLLOW)
        try:
            os.pwrite(fd, data, p["offset"])
        finally:
            os.close(fd)
        emit({"event": "part", "key": f["path"], "n": p["n"], "bytes": p["raw"]})

    try:
        for _final, dest, files in halves:
            make_staging(dest)
            made.append(dest)
            for f in files:
                full = stage_file(dest, f)
                placed.append((f, full))
                stored_at = 0
                for p in f["parts"]:
                    tasks.append((f, p, stored_at, full))
                    stored_at += p["size"]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, tasks))
        bad = []
        for f, full in placed:
            sha = hashlib.sha256()
            with open(full, "rb") as fh:
                for chunk in iter(lambda: fh.read(READ), b""):
                    sha.update(chunk)
            if sha.hexdigest() != f["sha256"]:
                bad.append(f["path"])
        if bad:
            raise OSError("checksum mismatch against the manifest: " + ", ".join(bad))
        for f, full in placed:
            fd = os.open(full, os.O_RDONLY | _NOFOLLOW)
            os.fsync(fd)
            os.close(fd)
            if int(f.get("mtime_ns") or 0) > 0:  # the checkpoint's own times: it is the backed-up one
                os.utime(full, ns=(int(f["mtime_ns"]), int(f["mtime_ns"])))
        if _whole(halves, pair):
            raise OSError("%s appeared on the pod during the restore: not overwritten" % halves[-1][0])
        aside = swap_halves(halves)
    except Exception as exc:
        for dest in made:  # only the staging dirs this restore made
            shutil.rmtree(dest, ignore_errors=True)
        emit({"event": "error", "message": str(exc)})
        return 1
    emit(
        {
            "event": "done",
            "failed": 0,
            "path": halves[-1][0],
            "paths": [h[0] for h in halves],
            "moved_aside": aside[0] if len(aside) == 1 else (aside or None),
        }
    )
    return 0


def swap_in(dest, final):
    """Make the verified ``dest`` appear as ``final``. An incomplete ``final`` (a save cut short) is
    renamed to ``.step_N.incomplete-<time>`` beside it first, never deleted; a complete one is kept and
    the restore fails. Returns where the incomplete one went (or None)."""
    if os.path.lexists(final) and (checkpoint_complete(final) or not os.path.isdir(final)):
        raise OSError("%s appeared on the pod during the restore: not overwritten" % final)
    return _swap(dest, final)


def _swap(dest, final):
    aside = None
    if os.path.lexists(final):
        aside = os.path.join(os.path.dirname(final), ".%s.incomplete-%d" % (os.path.basename(final), time.time()))
        os.rename(final, aside)
    try:
        os.rename(dest, final)  # only now does this half exist: verified first
    except OSError:
        if aside:
            os.rename(aside, final)  # put the user's files back where they were
        raise
    return aside


def swap_halves(halves):
    """Swap in every verified half (the orchestrator's first, the trainer's .metadata-bearing one last);
    a half already there (written only partly) is moved aside, never deleted. If a later half cannot
    be swapped in, the earlier ones are put back as they were. Returns the moved-aside paths."""
    if len(halves) == 1:
        aside = swap_in(halves[0][1], halves[0][0])
        return [aside] if aside else []
    done = []
    try:
        for final, dest, _files in halves:
            done.append((final, dest, _swap(dest, final)))
    except OSError:
        for final, dest, aside in reversed(done):
            os.rename(final, dest)
            if aside:
                os.rename(aside, final)
        raise
    return [a for _f, _d, a in done if a]
