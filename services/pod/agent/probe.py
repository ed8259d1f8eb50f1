#!/usr/bin/env python3
"""prime-train-tui probe: runs ON the pod, standard library only (pynvml / psutil used when importable).

Uploaded with its siblings (rundir.py: the run dir; traces.py: episode timings; common.py: what all pod scripts
share) into one private directory named by their content hash, and run through the guard (guard.py) once
verified. Writes one JSON object per line (protocol v1) to stdout and exits when stdin closes, on
SIGTERM/SIGHUP/SIGINT, or when stdout breaks.

    {"v":1,"t":<epoch s>,"source":"nvml"|"nvidia-smi"|"none",
     "gpus":{"index":[...],"name":[...],"util":[...],"mem_used":[...],"mem_total":[...],"power_w":[...],
             "temp_c":[...]}   (one list per field, GPU by GPU, all of one length),
     "host":{"cpu_pct","mem_used","mem_total","disk_used","disk_total","nofile_soft"},
     "procs":[{"pid","gpu","mem","cmd"}], "log":[...new lines...], "metrics":[...new metrics.jsonl lines...],
     "ckpts":[{"step","path","bytes","trainer_bytes","orch_bytes","mtime","complete"}], "errors":[...],
     "run":{...}, "cut":{"log_bytes","lines","metrics_bytes","metrics_lines","trace_bytes","trace_records"},
     "traces":[{"step","env","tool","model","total"}],
     "life":{"id","state","started","ended","alive","exit","resumed"},
     "signals":{...}}   (run, cut, traces, life, signals: with --run-dir)

Unmeasurable values are null (never 0). Bytes are int bytes, percentages 0-100, power W, temp C.
- nvml: handles fetched once; per-field errors -> null. procs via compute-running-processes. mem_used is
  nvidia-smi's figure (the v2 memory call: the driver's own reserve is not counted; v1 on drivers < 510).
- nvidia-smi: ONE long-lived ``nvidia-smi --query-gpu=... -lms N`` child; one sample per batch.
  Malformed lines are skipped and reported in "errors"; the child is restarted with backoff if it
  exits (samples with "gpus": [] and an error keep flowing meanwhile); "procs" is always [].
  If no batch arrives for max(15 s, 5*interval), a sample with "gpus": [] and an error is emitted
  (a silent fake nvidia-smi, PTT_FAKE_MAX_TICKS, thus freezes the stream for snapshots).
- host: psutil unless --proc-root is given; else /proc/stat deltas between samples, /proc/meminfo
  (used = MemTotal - MemAvailable), statvfs, getrlimit. The first cpu_pct is measured over >= 0.1 s of this
  machine's CPU; a --proc-root's stat is read at start and at the first sample without waiting (its writer
  ticks on its own clock: null if it was unreadable at start or did not change); nofile_soft is null when
  unlimited.
- run dir: "log" = lines appended since the last sample to <run>/logs/*.log and <run>/logs/latest/*.log,
  prefixed "<file stem>: " (files present at start are read from their end -- or from the offset --log-from
  gives for that file when it is still the same inode -- files appearing later from their start; at most 200
  lines and 256 KiB per file per sample); "logpos" = [[realpath, ino, offset], ...] for each log whose next
  whole line moved since the last sample (absent when none did): what the app passes back as --log-from
  when it starts the next probe, so a reconnect loses no line. "metrics" = lines appended since the
  last sample to <run>/metrics.jsonl (prime-rl's file monitor), same rules, except that a file present
  at start contributes its last <= 64 KiB of whole lines (so the last steps are known at once); lines
  are passed on unparsed (the app skips garbled ones). A runbook-style <run>/training.csv (header
  line, e.g. step,loss,lr,toks_per_s) is tailed the same way; each new row goes into "metrics" as
  {"source":"training.csv","step":N,<column>:<number or text>...} keyed by the file's own header
  (rows that do not fit it are passed as {"source":"training.csv","raw":<line>}). One sample carries
  at most 256 KiB of log lines (the newest), each at most its first 4 KiB, 256 KiB of metrics.jsonl
  lines (a line over 64 KiB is dropped whole) and 64 KiB of training.csv rows; "cut" =
  {"log_bytes","lines","metrics_bytes","metrics_lines"} counts what this sample left out (bytes not
  carried, lines shortened or dropped); the line is UTF-8 (text as itself, not \\u escapes) and at
  most 1 MiB (MAX_SAMPLE_BYTES, a last guard). "traces" = one record per trace of the episodes
  appended since the last sample to prime-rl's <run>/rollouts/step_N/train/all/traces.jsonl (else
  .../train/effective/...) of the newest 2 step_N dirs: {"step": N (the dir's), "env": the episode's env
  name (else its id; null when the line names none), "tool": agent/harness seconds (tools and environment),
  "model": agent/model seconds (generation), "total": setup + agent + finalize + scoring seconds} (null:
  not measured, e.g. an agent span that never ended). Nothing else of a trace leaves the pod (they hold
  prompts and completions). A file present at start contributes its last 2 MiB, later ones are read from
  their start; at most 2 MiB per file per sample are read (the rest at the next sample; a file more than
  32 MiB behind goes on from its newest 2 MiB), lines are scanned as they stream by (never held whole),
  and a sample carries at most 256 records (the newest); "cut" counts the bytes skipped
  ("trace_bytes") and the episodes or records left out ("trace_records"). Older probes send no "traces"
  key; an older app ignores it. "ckpts" = every
  step_N, once, rescanned at most every --ckpt-scan seconds (default 10): <run>/checkpoints, and the
  trainer half's dir when the resolved configs name a separate [ckpt] output_dir (trainer_ckpt_dir;
  then complete needs both halves; "trainer_bytes"/"orch_bytes" size each, "orch_path" names the other);
  complete == prime-rl's own markers: trainer/.metadata (torch DCP writes it last) and, when there is
  an orchestrator/ part, orchestrator/progress.pt (atomic rename); or a STABLE file (older layouts).
- "life" (only for a run the app launched: <run>/.ptt/run.json exists) = the pod's record of it: "state" as the
  lifecycle wrote it ("running", "killing"/"killed" by a kill from any machine, "exited"), "alive" = its leader
  process (pid and start time from .ptt/leader.json) still runs (null: none recorded yet), "exit" = the code
  the leader wrote to .ptt/exit_code when the command ended (null while it runs or when it was killed),
  "resumed" = it continued another run from a checkpoint.
- "signals": prime-rl's own signals (weight-broadcast markers, process roles, local endpoints): signals.py
  says what each holds. Older probes send no "signals" key; an older app ignores it.
- --once: emit one sample and exit 0 (stdin is not watched in this mode).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

try:
    import resource
except ImportError:  # pragma: no cover - non-POSIX
    resource = None  # type: ignore[assignment]  # an optional module: every use checks it first

if __package__:  # imported from the repo (services.pod.agent.probe)
    from .rundir import RunDir, _short, _try, encode, fit
    from .signals import Signals
else:  # run on the pod: its siblings were uploaded beside it, and a script's own dir is sys.path[0]
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded by path, not run
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ in the pod's hashed dir: it holds what was uploaded
    from rundir import RunDir, _short, _try, encode, fit
    from signals import Signals

PROTOCOL = 1
GPU_FIELDS = ("index", "name", "util", "mem_used", "mem_total", "power_w", "temp_c")
SMI_FIELDS = "index,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
MIB = 1024 * 1024
MAX_ERRORS = 20

_LOCK = threading.RLock()
_CHILDREN: list[subprocess.Popen] = []  # live subprocess.Popen objects to kill on exit
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


# ----------------------------------------------------------------------------------------- GPUs
class NoGpus:
    source = "none"

    def read(self, errors):
        return [], []


class NvmlGpus:
    source = "nvml"

    def __init__(self, proc_root):
        import pynvml

        self.nv, self.proc_root = pynvml, proc_root
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]  # fetched ONCE
        names = [_try([], "", lambda h=h: pynvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.names = [n.decode() if isinstance(n, bytes) else n for n in names]
        # Memory "used" as nvidia-smi shows it: the v2 call leaves out what the driver reserves for itself
        # (480 MiB of an idle H100 80GB that v1 counts as used); v1 where the driver or binding lacks v2.
        self.mem_v2 = getattr(pynvml, "nvmlMemory_v2", None)
        if self.mem_v2 is not None and self.handles:
            try:
                pynvml.nvmlDeviceGetMemoryInfo(self.handles[0], version=self.mem_v2)
            except Exception:  # NVMLError_FunctionNotFound (driver < 510), a binding without `version`
                self.mem_v2 = None

    def _cmd(self, pid):
        try:
            with open(os.path.join(self.proc_root, str(pid), "cmdline"), "rb") as f:
                return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300] or None
        except OSError:
            return None

    def read(self, errors):
        nv, quiet, v2 = self.nv, ("NVMLError_NotSupported",), self.mem_v2
        gpus, procs = [], []
        for i, h in enumerate(self.handles):

            def get(what, fn):
                return _try(errors, "gpu%d %s" % (i, what), fn, quiet)

            mem = get("mem", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=v2) if v2 else nv.nvmlDeviceGetMemoryInfo(h))
            gpus.append(
                {
                    "index": i,
                    "name": self.names[i],
                    "util": get("util", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
                    "mem_used": int(mem.used) if mem is not None else None,
                    "mem_total": int(mem.total) if mem is not None else None,
                    "power_w": get("power", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                    "temp_c": get("temp", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
                }
            )
            for p in get("procs", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)) or []:
                used = getattr(p, "usedGpuMemory", None)
                procs.append(
                    {
                        "pid": int(p.pid),
                        "gpu": i,
                        "mem": int(used) if used is not None else None,
                        "cmd": self._cmd(p.pid),
                    }
                )
        return gpus, procs


class SmiGpus:
    """One long-lived ``nvidia-smi ... -lms N`` child, read by a supervisor thread."""

    source = "nvidia-smi"

    def __init__(self, cmd, interval, ngpu=None):
        self.argv = list(cmd) + [
            "--query-gpu=" + SMI_FIELDS,
            "--format=csv,noheader,nounits",
            "-lms",
            str(int(round(interval * 1000))),
        ]
        self.gap = max(0.05, min(0.25, interval / 2.0))  # silence that ends a batch of unknown size
        # GPUs per batch: given (a pod that knows its count), else learned from the first batch's end
        self.ngpu, self.pending = ngpu, None
        self.q: queue.Queue = queue.Queue()
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
                    proc = subprocess.Popen(
                        self.argv,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        preexec_fn=self.preexec,
                    )
                except OSError as e:
                    proc = None
                    self.q.put(("exit", "nvidia-smi: cannot start: %s; retry in %.0fs" % (_short(e), backoff)))
                if proc is not None:
                    _CHILDREN.append(proc)
            if proc is not None:
                assert proc.stdout is not None  # stdout=PIPE
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


class Host:
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
        # a given proc root (the simulated pod's) changes only when its writer ticks: waiting measures nothing
        if first and self.prev is not None and left > 0 and self.proc_root == "/proc":
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
        return {
            "cpu_pct": _try(errors, "cpu", self._cpu),
            "mem_used": mem[0],
            "mem_total": mem[1],
            "disk_used": disk[0],
            "disk_total": disk[1],
            "nofile_soft": None if soft is None or soft == resource.RLIM_INFINITY else int(soft),
        }


# ----------------------------------------------------------------------------------------- main
def parse_args(argv):
    ap = argparse.ArgumentParser(description="prime-train-tui pod probe (JSON lines, protocol v1)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples (>= 0.2)")
    ap.add_argument("--backend", choices=("auto", "nvml", "nvidia-smi", "none"), default="auto")
    ap.add_argument("--nvidia-smi", dest="nvidia_smi", default="nvidia-smi", help="command (shell-split)")
    ap.add_argument(
        "--gpu-count",
        type=int,
        default=None,
        help="nvidia-smi backend: the GPUs per batch when known (else learned from the first batch's end)",
    )
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--disk-path", default=None, help="default: run dir if given, else /")
    ap.add_argument("--proc-root", default=None, help="read /proc files here (disables psutil)")
    ap.add_argument("--ckpt-scan", type=float, default=10.0, help="min seconds between checkpoint scans")
    ap.add_argument("--once", action="store_true", help="emit one sample and exit")
    ap.add_argument(
        "--logs-from-start",
        action="store_true",
        help="read the run's logs present at start from their start (the app's first look saw none)",
    )
    ap.add_argument(
        "--log-from",
        type=_log_from,
        default=None,
        help='JSON [[realpath, ino, offset], ...]: where the app has each log up to (its "logpos")',
    )
    args = ap.parse_args(argv)
    args.interval = max(0.2, args.interval)
    if args.disk_path is None:
        args.disk_path = args.run_dir or "/"
    return args


def _log_from(text):
    """--log-from's value as {realpath: (ino, offset)}; anything malformed is left out (read as today)."""
    try:
        items = json.loads(text)
    except ValueError:
        items = None
    out = {}
    for item in items if isinstance(items, list) else []:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in item[1:])
        ):
            out[item[0]] = (item[1], item[2])
    return out


def make_gpus(args):
    proc_root = args.proc_root or "/proc"
    cmd = shlex.split(args.nvidia_smi)
    if args.backend == "none":
        return NoGpus()
    if args.backend == "nvml":
        return NvmlGpus(proc_root)
    if args.backend == "nvidia-smi":
        return SmiGpus(cmd, args.interval, args.gpu_count if args.gpu_count and args.gpu_count > 0 else None)
    try:
        return NvmlGpus(proc_root)
    except Exception:
        pass
    if cmd and shutil.which(cmd[0]):
        return SmiGpus(cmd, args.interval)
    return NoGpus()


def columns(gpus):
    """The GPUs as the line carries them: one list per field, GPU by GPU (a field's name once, not per GPU)."""
    return {k: [g[k] for g in gpus] for k in GPU_FIELDS}


def emit(obj):
    line = encode(obj)
    if isinstance(obj, dict) and "v" in obj:
        line = fit(obj, line, MAX_ERRORS)
    try:
        out = getattr(sys.stdout, "buffer", None)
        if out is not None:
            out.write(line)
        else:
            sys.stdout.write(line.decode("utf-8"))
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
    run = RunDir(args.run_dir, args.ckpt_scan, args.log_from) if args.run_dir else None
    if run is not None and args.logs_from_start:
        run.first_scan = False
    signals = Signals(args.run_dir, args.proc_root or "/proc") if args.run_dir else None
    smi = gpus_backend if isinstance(gpus_backend, SmiGpus) else None
    next_t, first = time.monotonic(), True
    while True:
        errors: list[str] = []
        procs: list = []
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
        sample = {
            "v": PROTOCOL,
            "t": time.time(),
            "source": gpus_backend.source,
            "gpus": columns(gpus),
            "host": host.sample(errors),
            "procs": procs,
            "log": [],
            "metrics": [],
            "ckpts": [],
        }
        if run is not None:
            sample["log"], sample["ckpts"] = run.new_lines(errors), run.checkpoints(errors)
            logpos = run.log_positions()
            if logpos:
                sample["logpos"] = logpos
            sample["metrics"] = run.new_metrics(errors) + run.new_csv_rows(errors)
            sample["traces"] = run.new_traces(errors)
            sample["run"] = run.run_info(errors)
            life = run.run_life()
            if life is not None:
                sample["life"] = life
            sample["cut"] = run.take_cut()
        if signals is not None:
            sample["signals"] = signals.sample(errors, _try, run.sid if run is not None else None)
        sample["errors"] = sorted(set(errors), key=errors.index)[:MAX_ERRORS]
        emit(sample)
        if args.once:
            shutdown(0)


if __name__ == "__main__":
    sys.exit(main())
