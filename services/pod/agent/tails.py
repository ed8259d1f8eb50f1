"""One look at a run dir: the last 300 lines and the mtime of every log, metrics.jsonl and training.csv, max_steps
from the resolved configs, the clock and the uptime (stdlib only). Run on a pod as ``python3 -c <this file>
RUN_DIR`` (services.monitor.progress.TAIL_SCRIPT); a run dir on this machine is looked at by ``look`` itself."""

import glob
import json
import os
import sys
import time


def tail(p, n=300, maxb=131072, whole=False):
    """The last ``n`` lines of at most ``maxb`` bytes, the file's inode and the offset after the last line read.
    ``whole``: only lines that ended (the line being written is left to the probe, which goes on from there)."""
    # a regular file only, at most maxb bytes: a FIFO named *.log would block the open (on this machine the look
    # runs in the app's event loop) and a link to /dev/zero never ends
    if not os.path.isfile(p):
        raise OSError("not a regular file: %s" % p)
    with open(p, "rb") as f:
        ino = os.fstat(f.fileno()).st_ino
        f.seek(0, 2)
        size = f.tell()
        start = max(0, size - maxb)
        f.seek(start)
        data = f.read(min(maxb, size - start))
    end = start + len(data)
    if whole:
        end = start + data.rfind(b"\n") + 1
        data = data[: end - start]
    lines = data.decode("utf-8", "replace").splitlines()
    return (lines[1:][-n:] if start else lines[-n:]), ino, end


def look(r):
    logs = []  # type: list[dict]
    out = {"now": time.time(), "exists": os.path.isdir(r), "logs": logs}
    seen = set()
    for pat in (("logs", "*.log"), ("logs", "latest", "*.log")):
        for p in sorted(glob.glob(os.path.join(r, *pat))):
            rp = os.path.realpath(p)
            if rp in seen:
                continue
            seen.add(rp)
            try:
                mtime = os.stat(p).st_mtime
                lines, ino, end = tail(p, whole=True)
            except OSError:
                continue
            # path, ino, pos: where the probe goes on reading this log (its --log-from), so the lines written
            # between this look and the probe's start are not lost
            stem = os.path.splitext(os.path.basename(p))[0]
            logs.append({"stem": stem, "mtime": mtime, "lines": lines, "path": rp, "ino": ino, "pos": end})
    for name in ("metrics.jsonl", "training.csv"):
        p = os.path.join(r, name)
        try:
            out[name] = {"mtime": os.stat(p).st_mtime, "lines": tail(p)[0]}
        except OSError:
            pass
    for name in ("trainer.json", "orchestrator.json", "rl.json"):
        try:
            with open(os.path.join(r, "configs", name)) as f:
                cfg = json.load(f)
            ms = cfg.get("max_steps") or (cfg.get("trainer") or {}).get("max_steps")
            if isinstance(ms, int) and ms > 0:
                out["max_steps"] = ms
                break
        except Exception:
            pass
    try:  # how long the pod (its PID 1: the container, or the machine) has been up: "$ so far" counts from it
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        with open("/proc/1/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19])
        out["uptime"] = max(0.0, up - started / os.sysconf("SC_CLK_TCK"))
    except Exception:
        pass
    return out


if __name__ == "__main__":
    print(json.dumps(look(sys.argv[1])))
