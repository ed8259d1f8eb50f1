#!/usr/bin/env python3
"""prime-train-tui probe: runs ON the pod, standard library only (pynvml / psutil used when importable).

Uploaded as a single file and run as ``python3 -u probe.py [args]``. Writes one JSON object per line
(protocol v1) to stdout and exits when stdin closes, on SIGTERM/SIGHUP/SIGINT, or when stdout breaks.

    {"v":1,"t":<epoch s>,"source":"nvml"|"nvidia-smi"|"none",
     "gpus":[{"index","name","util","mem_used","mem_total","power_w","temp_c"}],
     "host":{"cpu_pct","mem_used","mem_total","disk_used","disk_total","nofile_soft"},
     "procs":[{"pid","gpu","mem","cmd"}], "log":[...new lines...], "metrics":[...new metrics.jsonl lines...],
     "ckpts":[{"step","path","bytes","trainer_bytes","orch_bytes","mtime","complete"}], "errors":[...]}

Unmeasurable values are null (never 0). Bytes are int bytes, percentages 0-100, power W, temp C.
- nvml: handles fetched once; per-field errors -> null. procs via compute-running-processes.
- nvidia-smi: ONE long-lived ``nvidia-smi --query-gpu=... -lms N`` child; one sample per batch.
  Malformed lines are skipped and reported in "errors"; the child is restarted with backoff if it
  exits (samples with "gpus": [] and an error keep flowing meanwhile); "procs" is always [].
  If no batch arrives for max(15 s, 5*interval), a sample with "gpus": [] and an error is emitted
  (a silent fake nvidia-smi, PTT_FAKE_MAX_TICKS, thus freezes the stream for snapshots).
- host: psutil unless --proc-root is given; else /proc/stat deltas between samples, /proc/meminfo
  (used = MemTotal - MemAvailable), statvfs, getrlimit. The first cpu_pct is measured over >= 0.1 s
  (null if stat was unreadable at start or did not change); nofile_soft is null when unlimited.
- run dir: "log" = lines appended since the last sample to <run>/logs/*.log and <run>/logs/latest/*.log,
  prefixed "<file stem>: " (files present at start are read from their end, files appearing later from
  their start; at most 200 lines and 256 KiB per file per sample). "metrics" = lines appended since the
  last sample to <run>/metrics.jsonl (prime-rl's file monitor), same rules, except that a file present
  at start contributes its last <= 64 KiB of whole lines (so the last steps are known at once); lines
  are passed on unparsed (the app skips garbled ones). A runbook-style <run>/training.csv (header
  line, e.g. step,loss,lr,toks_per_s) is tailed the same way; each new row goes into "metrics" as
  {"source":"training.csv","step":N,<column>:<number or text>...} keyed by the file's own header
  (rows that do not fit it are passed as {"source":"training.csv","raw":<line>}). "ckpts" = every
  step_N, once, rescanned at most every --ckpt-scan seconds (default 10): <run>/checkpoints, and the
  trainer half's dir when the resolved configs name a separate [ckpt] output_dir (trainer_ckpt_dir;
  then complete needs both halves; "trainer_bytes"/"orch_bytes" size each, "orch_path" names the other);
  complete == prime-rl's own markers: trainer/.metadata (torch DCP writes it last) and, when there is
  an orchestrator/ part, orchestrator/progress.pt (atomic rename); or a STABLE file (older layouts).
- --once: emit one sample and exit 0 (stdin is not watched in this mode).
"""
from __future__ import annotations

import argparse, glob, json, math, os, queue, shlex, shutil, signal, subprocess, sys, threading, time  # noqa: E401

try:
    import resource
except ImportError:  # pragma: no cover - non-POSIX
    resource = None

PROTOCOL = 1
SMI_FIELDS = "index,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
MIB = 1024 * 1024
LOG_LINES_PER_TICK = 200
LOG_BYTES_PER_FILE = 256 * 1024
METRICS_BACKFILL_BYTES = 64 * 1024
MAX_ERRORS = 20

_LOCK = threading.RLock()
_CHILDREN = []  # live subprocess.Popen objects to kill on exit
_STOPPING = threading.Event()


def shutdown(code=0):
    """Kill children and leave immediately (callable from any thread / signal handler)."""
    _STOPPING.set()
    with _LOCK:
        procs = list(_CHILDREN)
    for p in procs:
        try:
            if p.poll() is None:
                p.kill()
                p.wait(1.0)
        except Exception:
            pass
    os._exit(code)


def _pdeathsig_preexec():
    """preexec_fn: on Linux the child gets SIGKILL when the probe dies, even if SIGKILLed."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork
    except Exception:
        return None
    parent = os.getpid()

    def fn():
        prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
        if os.getppid() != parent:  # parent already gone before prctl took effect
            os._exit(1)

    return fn


def _num(text):
    """A nvidia-smi value -> float, None for [N/A]/[Not Supported]/...; ValueError if garbage."""
    s = text.strip()
    if not s or s.startswith("[") or s.upper() in ("N/A", "NA"):
        return None
    v = float(s.split()[0])  # tolerates units ("87 %")
    return None if (math.isnan(v) or math.isinf(v)) else v


def _mib(text):
    v = _num(text)
    return None if v is None else int(round(v * MIB))


def parse_smi_line(line):
    """'0, NAME, util, mem.used, mem.total, power, temp' -> gpu dict. Raises ValueError."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 7:
        raise ValueError("too few fields")
    return {
        "index": int(parts[0]),
        "name": ", ".join(parts[1:-5]),
        "util": _num(parts[-5]),
        "mem_used": _mib(parts[-4]),
        "mem_total": _mib(parts[-3]),
        "power_w": _num(parts[-2]),
        "temp_c": _num(parts[-1]),
    }


def _short(e):
    return ("%s: %s" % (type(e).__name__, e))[:160]


def _try(errors, label, fn, quiet=()):
    """fn() or None; the failure is appended to errors unless its type name is in `quiet`."""
    try:
        return fn()
    except Exception as e:
        if type(e).__name__ not in quiet:
            errors.append("%s: %s" % (label, _short(e)))
        return None


# ----------------------------------------------------------------------------------------- GPUs
class NoGpus(object):
    source = "none"

    def read(self, errors):
        return [], []


class NvmlGpus(object):
    source = "nvml"

    def __init__(self, proc_root):
        import pynvml

        self.nv, self.proc_root = pynvml, proc_root
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]  # fetched ONCE
        names = [_try([], "", lambda h=h: pynvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.names = [n.decode() if isinstance(n, bytes) else n for n in names]

    def _cmd(self, pid):
        try:
            with open(os.path.join(self.proc_root, str(pid), "cmdline"), "rb") as f:
                return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300] or None
        except OSError:
            return None

    def read(self, errors):
        nv, quiet = self.nv, ("NVMLError_NotSupported",)
        gpus, procs = [], []
        for i, h in enumerate(self.handles):
            def get(what, fn):
                return _try(errors, "gpu%d %s" % (i, what), fn, quiet)

            mem = get("mem", lambda: nv.nvmlDeviceGetMemoryInfo(h))
            gpus.append({
                "index": i, "name": self.names[i],
                "util": get("util", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
                "mem_used": int(mem.used) if mem is not None else None,
                "mem_total": int(mem.total) if mem is not None else None,
                "power_w": get("power", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                "temp_c": get("temp", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            })
            for p in get("procs", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)) or []:
                used = getattr(p, "usedGpuMemory", None)
                procs.append({"pid": int(p.pid), "gpu": i, "mem": int(used) if used is not None else None,
                              "cmd": self._cmd(p.pid)})
        return gpus, procs


class SmiGpus(object):
    """One long-lived ``nvidia-smi ... -lms N`` child, read by a supervisor thread."""

    source = "nvidia-smi"

    def __init__(self, cmd, interval):
        self.argv = list(cmd) + ["--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits",
                                 "-lms", str(int(round(interval * 1000)))]
        self.gap = max(0.05, min(0.25, interval / 2.0))  # silence that ends a batch of unknown size
        self.ngpu = self.pending = None
        self.q = queue.Queue()
        self.preexec = _pdeathsig_preexec()
        threading.Thread(target=self._supervise, name="nvidia-smi", daemon=True).start()

    def _supervise(self):
        backoff = 1.0
        while not _STOPPING.is_set():
            started = time.monotonic()
            with _LOCK:
                if _STOPPING.is_set():
                    return
                try:
                    proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, preexec_fn=self.preexec)
                except OSError as e:
                    proc = None
                    self.q.put(("exit", "nvidia-smi: cannot start: %s; retry in %.0fs" % (_short(e), backoff)))
                if proc is not None:
                    _CHILDREN.append(proc)
            if proc is not None:
                for raw in iter(proc.stdout.readline, b""):
                    self.q.put(("line", raw.decode("utf-8", "replace").strip()))
                rc = proc.wait()
                with _LOCK:
                    _CHILDREN.remove(proc)
                if _STOPPING.is_set():
                    return
                if time.monotonic() - started > 60:
                    backoff = 1.0
                self.q.put(("exit", "nvidia-smi exited (rc=%s); restart in %.0fs" % (rc, backoff)))
            _STOPPING.wait(backoff)
            backoff = min(backoff * 2, 30.0)

    def next_batch(self, wait, errors):
        """Block until a full batch (or `wait` s of nothing). Returns a list of gpu dicts."""
        batch = [self.pending] if self.pending is not None else []
        self.pending, deadline = None, time.monotonic() + wait
        while True:
            if batch and self.ngpu is not None and len(batch) >= self.ngpu:
                return batch
            timeout = self.gap if batch else deadline - time.monotonic()
            try:
                kind, text = self.q.get(timeout=max(0.0, timeout))
            except queue.Empty:
                if batch:
                    self.ngpu = len(batch)
                    return batch
                errors.append("nvidia-smi: no data for %.1fs" % wait)
                return []
            if kind == "exit":
                errors.append(text)
                return batch
            if not text:
                continue
            try:
                gpu = parse_smi_line(text)
            except ValueError:
                errors.append("nvidia-smi: bad line: %r" % text[:100])
                continue
            if batch and gpu["index"] <= batch[-1]["index"]:
                self.pending = gpu
                self.ngpu = len(batch)
                return batch
            batch.append(gpu)


# ----------------------------------------------------------------------------------------- host
def parse_stat(text):
    """/proc/stat text -> (total_jiffies, idle_jiffies) of the aggregate cpu line."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]]
            return sum(f[:8]), f[3] + (f[4] if len(f) > 4 else 0)
    raise ValueError("no cpu line in stat")


def cpu_pct(prev, cur):
    dt, di = cur[0] - prev[0], cur[1] - prev[1]
    if dt <= 0:
        return None
    return round(min(100.0, max(0.0, 100.0 * (1.0 - float(di) / dt))), 2)


def parse_meminfo(text):
    """/proc/meminfo text -> (used_bytes, total_bytes) with used = MemTotal - MemAvailable."""
    kb = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        parts = v.split()
        if parts:
            try:
                kb[k.strip()] = int(parts[0]) * 1024
            except ValueError:
                pass
    total = kb["MemTotal"]
    avail = kb.get("MemAvailable")
    if avail is None:
        avail = kb.get("MemFree", 0) + kb.get("Buffers", 0) + kb.get("Cached", 0)
    return total - avail, total


class Host(object):
    def __init__(self, proc_root, disk_path):
        self.psutil = None
        if proc_root is None:
            try:
                import psutil

                psutil.cpu_percent(None)
                self.psutil = psutil
            except Exception:
                pass
        self.proc_root, self.disk_path = proc_root or "/proc", disk_path
        self.t0, self.first = time.monotonic(), True
        self.prev = None if self.psutil else _try([], "", self._stat)

    def _read(self, name):
        with open(os.path.join(self.proc_root, name)) as f:
            return f.read()

    def _stat(self):
        return parse_stat(self._read("stat"))

    def _cpu(self):
        first, self.first = self.first, False
        left = 0.1 - (time.monotonic() - self.t0)  # the first sample measures over >= 0.1 s
        if self.psutil is not None:
            if first and left > 0:
                time.sleep(left)
            return float(self.psutil.cpu_percent(None))
        cur = self._stat()
        if first and self.prev is not None and left > 0:
            time.sleep(left)
            cur = self._stat()
        pct = cpu_pct(self.prev, cur) if self.prev is not None else None
        self.prev = cur
        return pct

    def _mem(self):
        if self.psutil is None:
            return parse_meminfo(self._read("meminfo"))
        vm = self.psutil.virtual_memory()
        return int(vm.total - vm.available), int(vm.total)

    def _disk(self):
        st = os.statvfs(self.disk_path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize

    def sample(self, errors):
        mem = _try(errors, "mem", self._mem) or (None, None)
        disk = _try(errors, "disk", self._disk) or (None, None)
        soft = _try(errors, "nofile", lambda: resource.getrlimit(resource.RLIMIT_NOFILE)[0]) if resource else None
        return {"cpu_pct": _try(errors, "cpu", self._cpu), "mem_used": mem[0], "mem_total": mem[1],
                "disk_used": disk[0], "disk_total": disk[1],
                "nofile_soft": None if soft is None or soft == resource.RLIM_INFINITY else int(soft)}


# ----------------------------------------------------------------------------------------- run dir
def _read_json(path):
    with open(path) as f:
        return json.load(f)


def checkpoint_complete(path, orch=None):
    """A step_N dir prime-rl could resume from; prime-rl's own "latest" does not check this. Its halves:
    trainer/.metadata (DCP writes it last) and orchestrator/progress.pt (renamed into place); a legacy
    STABLE marker counts for the trainer's. ``orch``: the step_N dir holding this step's orchestrator
    half when the run has one (an RL run): ``path`` itself, or the run dir's checkpoints/step_N when the
    trainer's checkpoints go to a separate [ckpt] output_dir (research prime-rl.md 6.1) -- then BOTH
    halves are required, wherever they live. Without it, one dir alone is judged: a half present must
    be whole, and a trainer-only dir counts (an SFT run; the trainer's side of a separate dir).
    The same function is in services/probe.py, lifecycle_agent.py and backup_agent.py (a test checks)."""
    trainer, stable = os.path.join(path, "trainer"), os.path.isfile(os.path.join(path, "STABLE"))
    if orch is not None:
        return ((stable or os.path.isfile(os.path.join(trainer, ".metadata")))
                and os.path.isfile(os.path.join(orch, "orchestrator", "progress.pt")))
    if stable:
        return True
    orch = os.path.join(path, "orchestrator")
    has_trainer, has_orch = os.path.isdir(trainer), os.path.isdir(orch)
    if not (has_trainer or has_orch):
        return False
    if has_trainer and not os.path.isfile(os.path.join(trainer, ".metadata")):
        return False
    return not has_orch or os.path.isfile(os.path.join(orch, "progress.pt"))


def trainer_ckpt_dir(run_dir):
    """Where the TRAINER half of this run's checkpoints lives: ``<ckpt.output_dir>/checkpoints`` when the
    resolved configs (configs/trainer.json, or rl.json's trainer or shared ckpt) name a separate [ckpt]
    output_dir -- the orchestrator half stays in <run_dir>/checkpoints (research prime-rl.md 6.1) --
    else <run_dir>/checkpoints. A relative output_dir is taken from the launch dir: what the config's
    own (relative) output_dir, the run dir, was relative to; else the run dir's grandparent
    (<launch dir>/outputs/<run>). The same function is in services/probe.py, backup_agent.py and lifecycle_agent.py (a test
    checks)."""
    run_dir = os.path.normpath(run_dir)
    for name, places in (("trainer.json", ((),)), ("rl.json", (("trainer",), ()))):
        try:
            with open(os.path.join(run_dir, "configs", name)) as fh:
                cfg = json.load(fh)
        except (OSError, ValueError):
            continue
        for place in places:
            node = cfg
            for key in place:
                node = node.get(key) if isinstance(node, dict) else None
            ckpt = node.get("ckpt") if isinstance(node, dict) else None
            out = ckpt.get("output_dir") if isinstance(ckpt, dict) else None
            if not isinstance(out, str) or not out.strip():
                continue
            if not os.path.isabs(out):
                own = node.get("output_dir") if isinstance(node.get("output_dir"), str) else ""
                own = os.path.normpath(own) if own and not os.path.isabs(own) else ""
                if own and run_dir.endswith(os.sep + own):
                    launch = run_dir[:-len(own) - 1]
                else:
                    launch = os.path.dirname(os.path.dirname(run_dir))
                out = os.path.join(launch, out)
            return os.path.join(os.path.normpath(out), "checkpoints")
    return os.path.join(run_dir, "checkpoints")


def _csv_header(path):
    """The column names of a training.csv (its first line), or None when it has no header."""
    with open(path, "rb") as f:
        first = f.readline(4096).decode("utf-8", "replace").strip()
    names = [c.strip() for c in first.split(",")]
    return names if names and "step" in names else None


def csv_row(line, header):
    """One training.csv line -> a metrics record; None for the header and blank lines."""
    if not line:
        return None
    parts = [c.strip() for c in line.split(",")]
    names = header or ["step", "loss", "lr", "toks_per_s"]
    if header is not None and parts == header:
        return None
    if "step" not in names or not 2 <= len(parts) <= len(names):  # trailing fields may be left out
        return {"source": "training.csv", "raw": line[:300]}
    row = {"source": "training.csv"}
    for name, text in zip(names, parts):
        try:
            v = float(text)
            row[name] = int(v) if name == "step" and v == int(v) else (v if math.isfinite(v) else None)
        except ValueError:
            row[name] = text[:100]
    if not isinstance(row.get("step"), int):
        return None if parts[names.index("step")] == "step" else {"source": "training.csv", "raw": line[:300]}
    return row


class RunDir(object):
    def __init__(self, run_dir, ckpt_scan):
        self.run_dir, self.ckpt_scan = run_dir, ckpt_scan
        self.files = {}  # realpath -> {"ino", "off", "buf"}
        self.first_scan = True
        self.ckpts, self.ckpt_at = [], None
        self.complete = {}  # path -> entry of a complete checkpoint (not rescanned)
        self.metrics_file, self.metrics_first = {}, True  # metrics.jsonl tail state (like self.files)
        self.info, self.info_at = {}, None  # from <run>/configs/*.json (run_info)
        self.csv_file, self.csv_first, self.csv_header = {}, True, None  # training.csv tail state

    def _log_paths(self):
        found = {}
        for pat in (("logs", "*.log"), ("logs", "latest", "*.log")):
            for p in sorted(glob.glob(os.path.join(self.run_dir, *pat))):
                found.setdefault(os.path.realpath(p), p)
        return found

    def _read_new(self, rp, errors, files=None, first_scan=None, backfill=0):
        """Complete new lines of one file (bytes), updating its offset / partial-line buffer.
        ``backfill``: a file present at start is read from this many bytes before its end."""
        files = self.files if files is None else files
        first_scan = self.first_scan if first_scan is None else first_scan
        st = os.stat(rp)
        ent = files.get(rp)
        skip_partial = False
        if ent is None:  # files present at start: from their end; files appearing later: from the start
            off = max(0, st.st_size - backfill) if first_scan else 0
            if 0 < off < st.st_size:  # backfill: drop the cut line unless off is a line start
                with open(rp, "rb") as f:
                    f.seek(off - 1)
                    skip_partial = f.read(1) != b"\n"
            ent = files[rp] = {"ino": st.st_ino, "off": off, "buf": b""}
        elif ent["ino"] != st.st_ino or st.st_size < ent["off"]:  # rotated or truncated
            ent.update(ino=st.st_ino, off=0, buf=b"")
        if st.st_size == ent["off"]:
            return []
        start, skip_first = ent["off"], skip_partial
        if st.st_size - start > LOG_BYTES_PER_FILE:
            start, skip_first, ent["buf"] = st.st_size - LOG_BYTES_PER_FILE, True, b""
            errors.append("log: skipped part of %s" % os.path.basename(rp))
        with open(rp, "rb") as f:
            f.seek(start)
            data = f.read(st.st_size - start)
        ent["off"] = start + len(data)
        lines = (ent["buf"] + data).split(b"\n")
        ent["buf"] = lines.pop()[-LOG_BYTES_PER_FILE:]
        return lines[1:] if skip_first else lines

    def new_lines(self, errors):
        out, paths = [], self._log_paths()
        for rp, p in paths.items():
            stem = os.path.splitext(os.path.basename(p))[0]
            for ln in _try(errors, "log " + os.path.basename(p), lambda: self._read_new(rp, errors)) or []:
                out.append(stem + ": " + ln.decode("utf-8", "replace").rstrip("\r"))
        self.files = dict((rp, e) for rp, e in self.files.items() if rp in paths)
        self.first_scan = False
        if len(out) > LOG_LINES_PER_TICK:
            errors.append("log: %d lines skipped" % (len(out) - LOG_LINES_PER_TICK))
            out = out[-LOG_LINES_PER_TICK:]
        return out

    def new_metrics(self, errors):
        """New lines of <run>/metrics.jsonl (unparsed, bounded like the logs)."""
        path = os.path.join(self.run_dir, "metrics.jsonl")
        first, self.metrics_first = self.metrics_first, False
        if not os.path.isfile(path):
            self.metrics_file = {}
            return []
        rp = os.path.realpath(path)
        lines = _try(errors, "metrics.jsonl",
                     lambda: self._read_new(rp, errors, self.metrics_file, first, METRICS_BACKFILL_BYTES)) or []
        out = [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines if ln.strip()]
        if len(out) > LOG_LINES_PER_TICK:
            errors.append("metrics: %d lines skipped" % (len(out) - LOG_LINES_PER_TICK))
            out = out[-LOG_LINES_PER_TICK:]
        return out

    def new_csv_rows(self, errors):
        """New rows of <run>/training.csv as metrics records named by the file's header line."""
        path = os.path.join(self.run_dir, "training.csv")
        first, self.csv_first = self.csv_first, False
        if not os.path.isfile(path):
            self.csv_file, self.csv_header = {}, None
            return []
        rp = os.path.realpath(path)
        ent = self.csv_file.get(rp)
        if ent is None or self.csv_header is None or ent["ino"] != os.stat(rp).st_ino:
            self.csv_header = _try(errors, "training.csv", lambda: _csv_header(rp))
        lines = _try(errors, "training.csv",
                     lambda: self._read_new(rp, errors, self.csv_file, first, METRICS_BACKFILL_BYTES)) or []
        out = []
        for ln in lines:
            row = csv_row(ln.decode("utf-8", "replace").strip(), self.csv_header)
            if row is not None:
                out.append(json.dumps(row, separators=(",", ":")))
        if len(out) > LOG_LINES_PER_TICK:
            errors.append("training.csv: %d rows skipped" % (len(out) - LOG_LINES_PER_TICK))
            out = out[-LOG_LINES_PER_TICK:]
        return out

    def _ckpt(self, step, tdir, odir, rl):
        """One step, both halves (``odir``: the run dir's step_N when the trainer's lives elsewhere)."""
        sizes, newest = [0, 0], max(os.lstat(d).st_mtime for d in set((tdir, odir or tdir)) if os.path.isdir(d))
        for half, top in ((0, tdir), (1, os.path.join(odir, "orchestrator") if odir else None)):
            for root, _dirs, files in os.walk(top) if top else ():
                orch = half or os.path.relpath(root, tdir).split(os.sep)[0] == "orchestrator"
                if odir and orch and not half:
                    continue  # a stray orchestrator/ beside a separate trainer half: not this run's
                for fn in files:
                    try:
                        st = os.lstat(os.path.join(root, fn))
                    except OSError:
                        continue
                    sizes[bool(orch)] += st.st_size
                    newest = max(newest, st.st_mtime)
        complete = checkpoint_complete(tdir) if odir is None else checkpoint_complete(tdir, odir if rl else None)
        ent = {"step": step, "path": tdir if os.path.isdir(tdir) else odir, "bytes": sum(sizes),
               "trainer_bytes": sizes[0], "orch_bytes": sizes[1], "mtime": newest, "complete": complete}
        if odir is not None:
            ent["orch_path"] = odir
        if complete:
            self.complete[(tdir, odir)] = ent
        return ent

    def checkpoints(self, errors):
        """Each step once, with both halves: the trainer's may live in a separate [ckpt] output_dir."""
        now = time.monotonic()
        if self.ckpt_at is not None and now - self.ckpt_at < self.ckpt_scan:
            return self.ckpts
        own = os.path.join(self.run_dir, "checkpoints")
        self.ckpt_at, troot = now, _try(errors, "configs", lambda: trainer_ckpt_dir(self.run_dir)) or own
        oroot = None if os.path.realpath(troot) == os.path.realpath(own) else own
        steps = {}
        for base in (troot, oroot) if oroot else (troot,):
            names = _try(errors, "ckpts", lambda: os.listdir(base) if os.path.isdir(base) else [])
            if names is None:
                return self.ckpts
            for name in names:
                if name.startswith("step_") and name[5:].isdigit() and os.path.isdir(os.path.join(base, name)):
                    steps[int(name[5:])] = name
        rl = oroot is not None and (any(os.path.isfile(os.path.join(self.run_dir, "configs", n))
                                        for n in ("orchestrator.json", "rl.json"))
                                    or any(os.path.isdir(os.path.join(oroot, n, "orchestrator")) for n in steps.values()))
        res = []
        for step, name in steps.items():
            key = (os.path.join(troot, name), oroot and os.path.join(oroot, name))
            ent = self.complete.get(key) or _try(errors, "ckpt " + name, lambda: self._ckpt(step, key[0], key[1], rl))
            if ent is not None:
                res.append(ent)
        self.complete = dict((k, e) for k, e in self.complete.items() if os.path.isdir(k[0]))
        self.ckpts = sorted(res, key=lambda c: c["step"])
        return self.ckpts

    def run_info(self, errors):
        """What the run's resolved configs say (prime-rl writes <run>/configs/*.json at start):
        max_steps (ETA, "$ to go"), the model and the tokens per step (the Offers pane's calibration).
        Read at the checkpoint-scan cadence, not every tick."""
        now = time.monotonic()
        if self.info_at is not None and now - self.info_at < self.ckpt_scan:
            return self.info
        self.info_at, info = now, {}
        for name in ("rl.json", "trainer.json", "orchestrator.json"):
            path = os.path.join(self.run_dir, "configs", name)
            if not os.path.isfile(path):
                continue
            cfg = _try(errors, "configs/" + name, lambda: _read_json(path))
            if isinstance(cfg, dict):
                _config_facts(cfg, name, info)
        if info.get("batch_size") and info.get("seq_len"):
            info["tokens_per_step"] = info["batch_size"] * info["seq_len"]
        info.pop("batch_size", None)
        info.pop("seq_len", None)
        self.info = info
        return info


def _config_facts(cfg, name, info):
    """Fill max_steps, model, batch_size, seq_len from one resolved config (first found wins)."""
    def get(*path):
        node = cfg
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def pos_int(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    trainer = ("trainer",) if name == "rl.json" else ()
    orch = ("orchestrator",) if name == "rl.json" else ()
    found = {
        "max_steps": pos_int(get("max_steps")) or pos_int(get("trainer", "max_steps")),
        "model": get(*trainer, "model", "name") if name != "orchestrator.json" else None,
        "batch_size": pos_int(get(*orch, "batch_size")) if name != "trainer.json" else None,
        "seq_len": pos_int(get(*orch, "seq_len")) or pos_int(get(*trainer, "model", "seq_len")),
    }
    for key, value in found.items():
        if key not in info and value is not None and (key != "model" or isinstance(value, str)):
            info[key] = value


# ----------------------------------------------------------------------------------------- main
def parse_args(argv):
    ap = argparse.ArgumentParser(description="prime-train-tui pod probe (JSON lines, protocol v1)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples (>= 0.2)")
    ap.add_argument("--backend", choices=("auto", "nvml", "nvidia-smi", "none"), default="auto")
    ap.add_argument("--nvidia-smi", dest="nvidia_smi", default="nvidia-smi", help="command (shell-split)")
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--disk-path", default=None, help="default: run dir if given, else /")
    ap.add_argument("--proc-root", default=None, help="read /proc files here (disables psutil)")
    ap.add_argument("--ckpt-scan", type=float, default=10.0, help="min seconds between checkpoint scans")
    ap.add_argument("--once", action="store_true", help="emit one sample and exit")
    args = ap.parse_args(argv)
    args.interval = max(0.2, args.interval)
    if args.disk_path is None:
        args.disk_path = args.run_dir or "/"
    return args


def make_gpus(args):
    proc_root = args.proc_root or "/proc"
    cmd = shlex.split(args.nvidia_smi)
    if args.backend == "none":
        return NoGpus()
    if args.backend == "nvml":
        return NvmlGpus(proc_root)
    if args.backend == "nvidia-smi":
        return SmiGpus(cmd, args.interval)
    try:
        return NvmlGpus(proc_root)
    except Exception:
        pass
    if cmd and shutil.which(cmd[0]):
        return SmiGpus(cmd, args.interval)
    return NoGpus()


def emit(obj):
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    try:
        sys.stdout.write(line)
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        shutdown(0)


def _watch_stdin():
    try:
        fd = sys.stdin.fileno()
        while os.read(fd, 65536):
            pass
    except Exception:
        pass
    shutdown(0)


def main(argv=None):
    args = parse_args(argv)
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda *_: shutdown(0))
    try:
        gpus_backend = make_gpus(args)
    except Exception as e:
        sys.stderr.write("probe: backend %s unavailable: %s\n" % (args.backend, _short(e)))
        return 2
    if not args.once and sys.stdin is not None:
        threading.Thread(target=_watch_stdin, name="stdin", daemon=True).start()
    host = Host(args.proc_root, args.disk_path)
    run = RunDir(args.run_dir, args.ckpt_scan) if args.run_dir else None
    smi = gpus_backend if isinstance(gpus_backend, SmiGpus) else None
    next_t, first = time.monotonic(), True
    while True:
        errors, procs = [], []
        if smi is not None:  # cadence follows nvidia-smi's -lms
            gpus = smi.next_batch(max(15.0, 5 * args.interval), errors)
        else:
            if not first:
                next_t += args.interval
                delay = next_t - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -args.interval:
                    next_t = time.monotonic()
            gpus, procs = gpus_backend.read(errors)
        first = False
        sample = {"v": PROTOCOL, "t": time.time(), "source": gpus_backend.source, "gpus": gpus,
                  "host": host.sample(errors), "procs": procs, "log": [], "metrics": [], "ckpts": []}
        if run is not None:
            sample["log"], sample["ckpts"] = run.new_lines(errors), run.checkpoints(errors)
            sample["metrics"] = run.new_metrics(errors) + run.new_csv_rows(errors)
            sample["run"] = run.run_info(errors)
        sample["errors"] = sorted(set(errors), key=errors.index)[:MAX_ERRORS]
        emit(sample)
        if args.once:
            shutdown(0)


if __name__ == "__main__":
    sys.exit(main())
