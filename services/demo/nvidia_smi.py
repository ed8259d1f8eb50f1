#!/usr/bin/env python3
"""A fake ``nvidia-smi`` for the simulated pod (stdlib only, Python 3.8+, runnable by path).

Supports ``--query-gpu=FIELDS --format=csv[,noheader][,nounits] [-l S | -lms MS]``, ``-L`` and
``--query-compute-apps=pid,process_name,used_memory[,gpu_uuid] --format=csv[,noheader][,nounits]``.
Environment:
  PTT_FAKE_GPUS       GPU count (default 8)
  PTT_FAKE_GPU_NAME   default "NVIDIA H100 80GB HBM3" (memory total from a small table, else 81559 MiB)
  PTT_FAKE_SEED       default 0; values are deterministic per (seed, tick, gpu)
  PTT_FAKE_SCENARIO   training (default) | idle | nccl_hang | inference_dead | na_fields | garbage
  PTT_FAKE_MAX_TICKS  print N batches, then stay alive silently until killed
  PTT_FAKE_PROC_ROOT  before batch k, (re)write DIR/stat and DIR/meminfo for tick k (atomic replace)
  PTT_FAKE_RUN_DIR    the demo sandbox's run dir: once the run's leader (<run>/.ptt/leader.json, written by
                      the lifecycle helper) has exited, a "training" pod's GPUs read idle (a killed run frees
                      them); --query-compute-apps lists the processes of the run's session while it lives
"""

from __future__ import annotations

import os
import random
import sys
import time

SCENARIOS = ("training", "idle", "nccl_hang", "inference_dead", "na_fields", "garbage")
DEFAULT_NAME = "NVIDIA H100 80GB HBM3"
MEM_TOTAL_MIB = {
    "NVIDIA H100 80GB HBM3": 81559,
    "NVIDIA H200": 143771,
    "NVIDIA A100-SXM4-80GB": 81920,
    "NVIDIA A100-SXM4-40GB": 40960,
    "NVIDIA GeForce RTX 4090": 24564,
}
# field -> (header, unit or "")
FIELDS = {
    "index": ("index", ""),
    "name": ("name", ""),
    "uuid": ("uuid", ""),
    "pci.bus_id": ("pci.bus_id", ""),
    "driver_version": ("driver_version", ""),
    "pstate": ("pstate", ""),
    "utilization.gpu": ("utilization.gpu [%]", "%"),
    "utilization.memory": ("utilization.memory [%]", "%"),
    "memory.used": ("memory.used [MiB]", "MiB"),
    "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"),
    "power.draw": ("power.draw [W]", "W"),
    "power.limit": ("power.limit [W]", "W"),
    "temperature.gpu": ("temperature.gpu", ""),
    "clocks.sm": ("clocks.current.sm [MHz]", "MHz"),
    "clocks.current.sm": ("clocks.current.sm [MHz]", "MHz"),
    "fan.speed": ("fan.speed [%]", "%"),
}
N_CPUS = 32
HZ = 100
MEM_TOTAL_KB = 2113502204


class Config:
    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.gpus = int(env.get("PTT_FAKE_GPUS", "8"))
        self.name = env.get("PTT_FAKE_GPU_NAME", DEFAULT_NAME)
        self.mem_total = MEM_TOTAL_MIB.get(self.name, 81559)
        self.seed = int(env.get("PTT_FAKE_SEED", "0"))
        self.scenario = env.get("PTT_FAKE_SCENARIO", "training")
        if self.scenario not in SCENARIOS:
            raise ValueError("unknown PTT_FAKE_SCENARIO %r" % self.scenario)
        mt = env.get("PTT_FAKE_MAX_TICKS")
        self.max_ticks = int(mt) if mt not in (None, "") else None
        self.proc_root = env.get("PTT_FAKE_PROC_ROOT") or None
        self.run_dir = env.get("PTT_FAKE_RUN_DIR") or None


def _proc_stat(pid):
    """(state, sid, starttime) of a live pid from /proc, or None (gone, or no /proc here)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    rest = data[data.rfind(")") + 2 :].split()
    return rest[0], int(rest[3]), int(rest[19])


def run_leader(cfg):
    """The lifecycle run's leader {"pid", "sid", "start"} from <run_dir>/.ptt/leader.json, or None."""
    if not cfg.run_dir:
        return None
    try:
        import json

        with open(os.path.join(cfg.run_dir, ".ptt", "leader.json")) as fh:
            leader = json.load(fh)
        return leader if isinstance(leader, dict) and int(leader.get("pid") or 0) > 0 else None
    except (OSError, ValueError, TypeError):
        return None


def run_stopped(cfg):
    """True once the sandbox's run has a leader that exited (killed or ended); False with no run yet."""
    leader = run_leader(cfg)
    if leader is None:
        return False
    st = _proc_stat(int(leader["pid"]))
    return st is None or st[0] == "Z" or (bool(leader.get("start")) and st[2] != int(leader["start"]))


def effective(cfg):
    """The config a tick is drawn with: a "training" pod whose run stopped reads idle."""
    if cfg.scenario != "training" or not run_stopped(cfg):
        return cfg
    idle = Config.__new__(Config)
    idle.__dict__.update(cfg.__dict__, scenario="idle")
    return idle


def run_processes(cfg):
    """[(pid, name)] of the live processes in the run's session (none without a live run)."""
    leader = run_leader(cfg)
    if leader is None or run_stopped(cfg):
        return []
    sid = int(leader.get("sid") or leader["pid"])
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        st = _proc_stat(int(name))
        if st is None or st[0] == "Z" or st[1] != sid:
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as fh:
                argv = [a for a in fh.read().split(b"\0") if a]
        except OSError:
            continue
        words = [a.decode("utf-8", "replace") for a in argv]
        script = next((w for w in words[1:] if w.endswith(".py")), words[0] if words else "?")
        found.append((int(name), script))
    return sorted(found)


APP_FIELDS = {
    "pid": "pid",
    "process_name": "process_name",
    "name": "process_name",
    "used_memory": "used_gpu_memory [MiB]",
    "used_gpu_memory": "used_gpu_memory [MiB]",
    "gpu_uuid": "gpu_uuid",
}


def compute_apps(cfg, fields, header, units):
    """--query-compute-apps: each process of the run on GPU 0.. in turn (the trainer holds memory)."""
    out = [", ".join(APP_FIELDS[f] for f in fields)] if header else []
    for i, (pid, script) in enumerate(run_processes(cfg)):
        gpu = i % max(1, cfg.gpus)
        v = {
            "pid": pid,
            "process_name": script,
            "name": script,
            "used_memory": "%d%s" % (int(cfg.mem_total * 0.7), " MiB" if units else ""),
            "gpu_uuid": gpu_values(cfg, 0, gpu)["uuid"],
        }
        v["used_gpu_memory"] = v["used_memory"]
        out.append(", ".join(str(v[f]) for f in fields))
    return out


def _rng(*key):
    return random.Random(":".join(str(k) for k in key))


def gpu_values(cfg, tick, gpu):
    """Raw simulated values for one GPU at one tick: numbers, or strings like "[N/A]"."""
    r = _rng(cfg.seed, tick, gpu)
    total = cfg.mem_total
    util = r.randint(85, 100)
    used = int(total * r.uniform(0.735, 0.92))
    power = round(r.uniform(550.0, 690.0), 2)
    temp = r.randint(60, 75)
    sm = r.choice((1755, 1785, 1980))
    pstate = "P0"
    sc = cfg.scenario
    if sc == "idle":
        util, used, power, temp, sm = 0, 4, round(r.uniform(68.0, 75.0), 2), r.randint(30, 35), 345
    elif sc == "nccl_hang":
        util, power, temp = 100, round(r.uniform(68.0, 75.0), 2), r.randint(40, 45)
    elif sc == "inference_dead" and gpu == 0 and tick > 5:
        util, used, power, temp, sm = 0, 0, round(r.uniform(68.0, 75.0), 2), r.randint(30, 35), 345
    v = {
        "index": gpu,
        "name": cfg.name,
        "uuid": "GPU-%08x-%04x-%04x-%04x-%012x"
        % (
            _rng(cfg.seed, "uuid", gpu).getrandbits(32),
            gpu,
            0x4000 + gpu,
            0x8000 + gpu,
            _rng(cfg.seed, "uuid2", gpu).getrandbits(48),
        ),
        "pci.bus_id": "00000000:%02X:00.0" % (0x18 + 0x10 * gpu),
        "driver_version": "550.54.15",
        "pstate": pstate,
        "utilization.gpu": util,
        "utilization.memory": min(100, util // 2 + 5) if util else 0,
        "memory.used": used,
        "memory.total": total,
        "memory.free": total - used,
        "power.draw": power,
        "power.limit": 700.00,
        "temperature.gpu": temp,
        "clocks.sm": sm,
        "clocks.current.sm": sm,
        "fan.speed": "[N/A]",
    }
    if sc == "na_fields" and gpu % 2 == 1:
        v["power.draw"] = "[N/A]"
        v["temperature.gpu"] = "[Not Supported]"
        if gpu == 3:
            v["utilization.gpu"] = "[Unknown Error]"
    return v


def cpu_busy_fraction(cfg, tick):
    r = _rng(cfg.seed, tick, "cpu")
    lo, hi = {"idle": (0.01, 0.03), "nccl_hang": (0.10, 0.14)}.get(cfg.scenario, (0.35, 0.55))
    return r.uniform(lo, hi)


def proc_stat_totals(cfg, tick):
    """Cumulative (user, system, idle) jiffies of the aggregate cpu line at `tick` (1 s per tick)."""
    base = (123456789, 23456789, 987654321)
    per_tick = HZ * N_CPUS
    user, system, idle = base
    for k in range(1, tick + 1):
        busy = int(round(per_tick * cpu_busy_fraction(cfg, k)))
        user += busy * 85 // 100
        system += busy - busy * 85 // 100
        idle += per_tick - busy
    return user, system, idle


def expected_cpu_pct(cfg, tick):
    """The CPU % a reader computes from the stat deltas between tick-1 and tick (tick >= 1)."""
    busy = int(round(HZ * N_CPUS * cpu_busy_fraction(cfg, tick)))
    return 100.0 * busy / (HZ * N_CPUS)


def meminfo_kb(cfg, tick):
    """(MemTotal, MemAvailable) in kB at `tick`."""
    r = _rng(cfg.seed, tick, "mem")
    frac = {"idle": (0.02, 0.04)}.get(cfg.scenario, (0.20, 0.30))
    used = int(MEM_TOTAL_KB * r.uniform(*frac))
    return MEM_TOTAL_KB, MEM_TOTAL_KB - used


def _atomic_write(path, text):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_proc(cfg, tick, root=None):
    """Write root/stat and root/meminfo for `tick` (the simulated pod's hardware)."""
    root = root or cfg.proc_root
    user, system, idle = proc_stat_totals(cfg, tick)
    lines = ["cpu  %d 0 %d %d 0 0 0 0 0 0" % (user, system, idle)]
    for c in range(N_CPUS):
        lines.append("cpu%d %d 0 %d %d 0 0 0 0 0 0" % (c, user // N_CPUS, system // N_CPUS, idle // N_CPUS))
    lines += [
        "ctxt %d" % (1000000 + tick * 5000),
        "btime 1700000000",
        "processes %d" % (40000 + tick),
        "procs_running 3",
        "procs_blocked 0",
    ]
    _atomic_write(os.path.join(root, "stat"), "\n".join(lines) + "\n")
    total, avail = meminfo_kb(cfg, tick)
    free = avail - 10485760 if avail > 20971520 else avail // 2
    mem = [
        "MemTotal:       %d kB" % total,
        "MemFree:        %d kB" % free,
        "MemAvailable:   %d kB" % avail,
        "Buffers:          123456 kB",
        "Cached:         10485760 kB",
        "SwapTotal:             0 kB",
        "SwapFree:              0 kB",
    ]
    _atomic_write(os.path.join(root, "meminfo"), "\n".join(mem) + "\n")


def _fmt(value, unit, units):
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        s = "%.2f" % value
    else:
        s = str(value)
    return "%s %s" % (s, unit) if (units and unit) else s


def batch_lines(cfg, tick, fields, units):
    out = []
    for g in range(cfg.gpus):
        v = gpu_values(cfg, tick, g)
        out.append(", ".join(_fmt(v[f], FIELDS[f][1], units) for f in fields))
        if cfg.scenario == "garbage" and tick % 3 == 1 and g == 0:
            out.append("Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error")
    return out


def _usage_error(msg=None):
    if msg:
        sys.stdout.write(msg + "\n")
    sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
    sys.stdout.flush()
    return 2


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = Config()
    except ValueError as e:
        sys.stderr.write("fake nvidia-smi: %s\n" % e)
        return 2
    query, fmt, loop, list_gpus, apps = None, None, None, False, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--query-gpu="):
            query = a.split("=", 1)[1]
        elif a.startswith("--query-compute-apps="):
            apps = a.split("=", 1)[1]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a in ("-L", "--list-gpus"):
            list_gpus = True
        elif a in ("-l", "-lms", "--loop", "--loop-ms") or a.startswith(("--loop=", "--loop-ms=")):
            ms = a in ("-lms", "--loop-ms") or a.startswith("--loop-ms=")
            if "=" in a:
                val = a.split("=", 1)[1]
            else:
                i += 1
                if i >= len(argv):
                    return _usage_error()
                val = argv[i]
            try:
                n = float(val)
            except ValueError:
                return _usage_error()
            loop = n / 1000.0 if ms else n
        else:
            return _usage_error("Unknown argument: %s" % a if a.startswith("-") else None)
        i += 1
    if list_gpus:
        for g in range(cfg.gpus):
            sys.stdout.write("GPU %d: %s (UUID: %s)\n" % (g, cfg.name, gpu_values(cfg, 0, g)["uuid"]))
        return 0
    if apps is not None:
        fields = [f.strip() for f in apps.split(",") if f.strip()]
        for f in fields:
            if f not in APP_FIELDS:
                sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % f)
                return 2
        opts = [o.strip() for o in (fmt or "").split(",") if o.strip()]
        if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
            sys.stdout.write('"%s" is not a valid format.\n' % (fmt or ""))
            return 2
        lines = compute_apps(cfg, fields, "noheader" not in opts, "nounits" not in opts)
        sys.stdout.write("".join(line + "\n" for line in lines))
        return 0
    if query is None:
        if fmt is not None:
            return _usage_error()
        sys.stdout.write("+ fake nvidia-smi (prime-train-tui SIMULATED) | Driver Version: 550.54.15 +\n")
        for line in batch_lines(
            cfg,
            0,
            ["index", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw", "temperature.gpu"],
            True,
        ):
            sys.stdout.write("| " + line + "\n")
        return 0
    fields = [f.strip() for f in query.split(",") if f.strip()]
    for f in fields:
        if f not in FIELDS:
            sys.stdout.write('Field "%s" is not a valid field to query.\n\n' % f)
            return 2
    opts = [o.strip() for o in (fmt or "").split(",") if o.strip()]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        sys.stdout.write('"%s" is not a valid format.\n' % (fmt or ""))
        return 2
    header, units = "noheader" not in opts, "nounits" not in opts
    tick = 0
    start = time.monotonic()
    while True:
        if cfg.max_ticks is not None and tick >= cfg.max_ticks:
            while True:  # stay alive silently until killed
                time.sleep(3600)
        now = effective(cfg)
        if cfg.proc_root:
            write_proc(now, tick)
        lines = batch_lines(now, tick, fields, units)
        if header:
            lines.insert(0, ", ".join(FIELDS[f][0] for f in fields))
        try:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            return 0
        if loop is None:
            return 0
        tick += 1
        delay = start + tick * loop - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def run():
    """As the nvidia-smi command: exits with its status. The wrappers on PATH import this module and call it
    (its bytecode cached), rather than run the file as a script, which compiled it on every call (~15-60 ms of
    each fake ``nvidia-smi``, the demo pod's first sample and every pre-flight's GPU check included)."""
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        sys.exit(0)


if __name__ == "__main__":
    run()
