"""history_memory: what an hour of one pod's GPU history costs the monitor, per pod, at 64 pods.

Each pod's samples are parsed from real probe lines (the probe with 8 fake GPUs, ``--once``; the figures varied
per line, so no two samples share a number object) and handed to the monitor's per-pod state
(``PodMonitorState.keep``) for ``--minutes`` of 1 Hz samples; the memory is what stays allocated afterwards
(tracemalloc), divided by the pods. Anchor in the same run: the same parsed samples kept as the monitor kept them
before the downsampled history, the last 600 whole (10 minutes) in a deque. Target: <= 1 MiB per pod with an hour
of graphs. Prints; asserts nothing.

    python tests/benchmarks/history_memory.py [--pods 16] [--minutes 60]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from services.models import Pod, PodKind, Sample  # noqa: E402
from services.monitor.worker import MonitorSettings, PodMonitorState  # noqa: E402


def probe_line() -> dict:
    env = {**os.environ, "PTT_FAKE_GPUS": "8", "PATH": f"{REPO / 'services' / 'demo' / 'bin'}:{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, str(REPO / "services" / "pod" / "agent" / "probe.py"), "--once"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def lines(base: dict, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        doc = dict(base, t=1_000_000.0 + k)
        doc["gpus"] = [
            dict(
                g,
                util=float(rng.randint(0, 100)),
                power_w=round(rng.uniform(100, 700), 2),
                temp_c=float(rng.randint(40, 90)),
                mem_used=rng.randint(10, 80) << 30,
            )
            for g in base["gpus"]
        ]
        out.append(json.dumps(doc))
    return out


def measure(pods: int, minutes: float, base: dict, keep) -> float:
    """Bytes per pod left allocated after ``keep(pod, text lines)`` for each pod."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = [keep(i, lines(base, int(minutes * 60), i)) for i in range(pods)]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del held
    return (after - before) / pods


def ours(i: int, text: list[str]) -> object:
    state = PodMonitorState(Pod(name=f"p{i}", kind=PodKind.SSH, host="h"), MonitorSettings(), clock=time.time)
    for line in text:
        state.keep(Sample.from_line(line), len(line))
    return state, state._build()


def before(i: int, text: list[str]) -> object:
    kept: deque[Sample] = deque(maxlen=600)
    for line in text:
        kept.append(Sample.from_line(line))
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=16, help="pods (the figure is per pod; 64 take minutes to generate)")
    ap.add_argument("--minutes", type=float, default=60.0)
    args = ap.parse_args()
    base = probe_line()
    print(
        f"history_memory: {args.pods} pods x {args.minutes:g} min of 1 Hz samples, 8 GPUs; {os.cpu_count()} "
        f"cores, load {os.getloadavg()[0]:.1f}"
    )
    anchor = measure(args.pods, args.minutes, base, before)
    mine = measure(args.pods, args.minutes, base, ours)
    settings = MonitorSettings()
    print(f"  anchor, the last 600 parsed samples whole (10 min of graphs): {anchor / (1 << 20):.2f} MiB per pod")
    print(
        f"  ours, {settings.history_len} samples whole + {settings.trend_s / 60:g} min in buckets "
        f"({min(args.minutes * 60, settings.trend_s) / 60:g} min of graphs): {mine / (1 << 20):.2f} MiB per pod "
        f"= {mine / anchor:.2f}x the anchor; {args.pods} pods: {mine * args.pods / (1 << 20):.0f} MiB   "
        "target <= 1 MiB per pod"
    )


if __name__ == "__main__":
    main()
