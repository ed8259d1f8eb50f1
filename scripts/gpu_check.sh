#!/usr/bin/env bash
# On a machine with a real NVIDIA GPU: the probe's readings (NVML through nvidia-ml-py, and the nvidia-smi
# fallback) side by side with nvidia-smi's own, idle and under a torch matmul load when torch is installed.
# Prints one table per phase; the figures go into the issue's note. Needs: python3, nvidia-smi; optional:
# nvidia-ml-py (pip install nvidia-ml-py) and torch.   Usage: scripts/gpu_check.sh [seconds-of-load]
set -euo pipefail
cd "$(dirname "$0")/.."
LOAD_S="${1:-20}"
PROBE=services/pod/agent/probe.py
PY="${PYTHON:-python3}"

command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi on PATH: not a GPU machine" >&2; exit 2; }

snapshot() {  # $1 = phase name
  local phase="$1"
  local smi nvml fallback
  smi=$(nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu \
        --format=csv,noheader,nounits)
  nvml=$("$PY" -u "$PROBE" --once --backend nvml 2>/dev/null || echo '{"gpus":[],"errors":["nvml backend failed"]}')
  fallback=$("$PY" -u "$PROBE" --once --backend nvidia-smi 2>/dev/null || echo '{"gpus":[],"errors":["nvidia-smi backend failed"]}')
  PHASE="$phase" SMI="$smi" NVML="$nvml" FALLBACK="$fallback" "$PY" - <<'PYEOF'
import json, os
phase = os.environ["PHASE"]
smi = [[c.strip() for c in line.split(",")] for line in os.environ["SMI"].strip().splitlines() if line.strip()]
nvml, fb = json.loads(os.environ["NVML"]), json.loads(os.environ["FALLBACK"])
MIB = 1024 * 1024
print(f"== {phase}")
print(f"{'gpu':>3} {'source':<11} {'util %':>7} {'mem used MiB':>13} {'mem total MiB':>14} {'power W':>8} {'temp C':>7}")
def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None
for row in smi:
    i = int(row[0])
    print(f"{i:>3} {'nvidia-smi':<11} {row[2]:>7} {row[3]:>13} {row[4]:>14} {row[5]:>8} {row[6]:>7}")
    for name, sample in (("probe nvml", nvml), ("probe smi", fb)):
        g = next((g for g in sample.get("gpus", []) if g.get("index") == i), None)
        if g is None:
            print(f"{i:>3} {name:<11} (no reading: {'; '.join(sample.get('errors', [])) or 'missing'})")
            continue
        mu = g.get("mem_used"); mt = g.get("mem_total")
        print(f"{i:>3} {name:<11} {g.get('util')!s:>7} {(mu // MIB if mu is not None else None)!s:>13} "
              f"{(mt // MIB if mt is not None else None)!s:>14} {g.get('power_w')!s:>8} {g.get('temp_c')!s:>7}")
print(f"probe nvml processes: {[(p.get('pid'), p.get('gpu'), (p.get('mem') or 0) // MIB) for p in nvml.get('procs', [])]}")
PYEOF
}

snapshot "idle"
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  "$PY" - "$LOAD_S" <<'PYEOF' &
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
keep = torch.empty(int(8e9) // 2, dtype=torch.bfloat16, device="cuda")  # ~8 GB held: a memory reading to compare
while time.time() < end:
    (a @ b).sum().item()
PYEOF
  LOAD_PID=$!
  sleep $(( LOAD_S / 2 ))
  snapshot "torch matmul load (pid $LOAD_PID)"
  wait "$LOAD_PID" || true
else
  echo "== no torch with CUDA here: the load phase is skipped"
fi
