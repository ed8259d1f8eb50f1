#!/usr/bin/env bash
# The product against a real GPU, in one pass (a lent GPU machine, or any NVIDIA box): the probe beside
# nvidia-smi (scripts/gpu_check.sh), the probe's own cost per sample with each backend, then the product's
# path on `local`: pre-flight + launch of a run that loads the GPU, status, the TUI's Monitor pane saved as
# SVG, one-key kill and its GPU check. Prints one section per phase; with $OUT set, files land there.
#   scripts/gpu_session.sh           (needs python3 with the project's dependencies importable)
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY="${PYTHON:-python3}"
OUT="${OUT:-$(mktemp -d)}"
WORK=$(mktemp -d)
export PRIME_TRAIN_TUI_CONFIG_DIR="$WORK/config" PRIME_TRAIN_TUI_DATA_DIR="$WORK/data" \
       PRIME_TRAIN_TUI_CACHE_DIR="$WORK/cache" PYTHONUNBUFFERED=1
ptt() { "$PY" -m app.cli "$@"; }
section() { echo; echo "==== $* ($(date +%T))"; }

section "machine"
nvidia-smi -L || true
nvidia-smi --query-gpu=driver_version,pstate,clocks.sm,clocks.max.sm --format=csv || true
"$PY" -c "import sys; print('python', sys.version.split()[0])"
"$PY" -c "import pynvml; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml,'__version__') else '?')" 2>&1 | tail -1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -1

section "probe vs nvidia-smi (scripts/gpu_check.sh 16)"
PYTHON="$PY" bash scripts/gpu_check.sh 16

probe_cost() {  # $1 = label; the rest: probe arguments (one run of ~10 s per backend in $BACKENDS)
  local label="$1"; shift
  LABEL="$label" BACKENDS="${BACKENDS:-nvml nvidia-smi}" "$PY" - "$@" <<'PYEOF'
import json, os, subprocess, sys, time
TICK = os.sysconf("SC_CLK_TCK")
def tree_cpu(pid):  # user+system seconds of pid and its live descendants
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
            for t in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, t)) as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, IndexError, ValueError):
            pass
    return total
for backend in os.environ["BACKENDS"].split():
    p = subprocess.Popen([sys.executable, "-u", "services/pod/agent/probe.py", "--interval", "0.25",
                          "--backend", backend, *sys.argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    t0 = time.time(); n = 0; mark = None; last = {}; first = start_cpu = 0.0; lines = nbytes = 0
    while time.time() - t0 < 10:
        line = p.stdout.readline()
        if not line:
            break
        n += 1; last = json.loads(line)
        if n == 1:
            first, start_cpu = time.time() - t0, tree_cpu(p.pid)
        if n == 5:
            mark = (n, tree_cpu(p.pid), time.time())
        if mark:
            lines += len(last.get("log", [])) + len(last.get("metrics", [])); nbytes += len(line)
    end = (n, tree_cpu(p.pid), time.time())
    p.stdin.close(); p.wait(10)
    if mark is None:
        print(f"{backend:<11} {n} sample(s): too few to measure"); continue
    per = (end[1] - mark[1]) * 1000 / max(1, end[0] - mark[0])
    print(f"{os.environ['LABEL']}: {backend:<11} samples {n:>3}; first after {first:.3f} s, start-up CPU "
          f"{start_cpu*1000:.0f} ms; then {per:.2f} ms CPU per sample ({(end[1]-mark[1])*100/(end[2]-mark[2]):.1f} % "
          f"of a core); {lines} log+metrics lines, {nbytes // max(1, end[0] - mark[0])} bytes per sample; "
          f"source={last.get('source')} gpus={len(last.get('gpus', []))} errors={last.get('errors')}")
PYEOF
}

section "probe cost per sample at 0.25 s, per backend (steady state: samples 5..end; the nvidia-smi child counted)"
probe_cost "no run dir"

section "prime-train-tui probe local --once --json (the product's path)"
ptt probe local --once --json | "$PY" -c "import json,sys; d=json.loads(sys.stdin.readline()); print(json.dumps({k: d.get(k) for k in ('source','gpus','errors')}, indent=1)[:1500])"

section "launch on local: a run that loads the GPU (bf16 matmuls, 8 GB held) + the simulated trainer's files"
RUN="$WORK/run"
ptt init --model Qwen/Qwen3-0.6B --preset h100-80gb --gpus 1 -o "$WORK/rl.toml" >/dev/null && echo "config: $WORK/rl.toml"
CMD="$PY $REPO/scripts/gpu_load.py 300 8 & exec $PY $REPO/services/demo/trainer.py --run-dir {run_dir} --config {config} --step-seconds 1 --ckpt-interval 5"
ptt launch local "$WORK/rl.toml" --command "$CMD" --run-dir "$RUN" --force  # a VM's ulimit -n can be below the check's 65536
echo "launch exit $?"
sleep 12

section "probe cost with the live run's dir (logs, metrics.jsonl, checkpoints tailed), NVML"
BACKENDS=nvml probe_cost "run dir" --run-dir "$RUN"

section "status local (one look, while the run loads the GPU)"
ptt status local --run-dir "$RUN"; echo "status exit $?"

section "the TUI, Monitor pane on local, 160x48 -> $OUT/monitor.svg"
timeout 90 "$PY" scripts/screenshot.py --local "$OUT/monitor.svg"; echo "screen exit $?"

section "kill local (SIGTERM, grace, GPU check)"
ptt kill local --yes; echo "kill exit $?"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv || true
section "done"
