"""The probe as a real subprocess, for the probe's tests (test_probe.py: the GPU and host backends;
test_probe_rundir.py: what it reads from a run's directory). The ``start_probe`` fixture is in conftest.py."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "services" / "pod" / "agent" / "probe.py"
MIB = 1024 * 1024
GPU_FIELDS = ("index", "name", "util", "mem_used", "mem_total", "power_w", "temp_c")


def gpu_rows(sample: dict) -> dict:
    """The sample with its "gpus" columns (the wire: one list per field, all of one length) as one dict per GPU,
    which is how the tests below read them."""
    cols = sample["gpus"]
    assert set(cols) == set(GPU_FIELDS) and len({len(c) for c in cols.values()}) == 1, cols
    return {**sample, "gpus": [dict(zip(GPU_FIELDS, row)) for row in zip(*(cols[k] for k in GPU_FIELDS))]}


def make_env(bin_dir: Path | None, **fake: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTT_FAKE_")}
    env["PATH"] = (f"{bin_dir}:" if bin_dir else "") + "/usr/bin:/bin"
    env.update({f"PTT_FAKE_{k.upper()}": str(v) for k, v in fake.items()})
    return env


class Probe:
    """A running probe; stdout lines are parsed on a reader thread."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(PROBE), *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.q.put(gpu_rows(json.loads(line)))
        self.q.put(None)

    def sample(self, timeout: float = 5.0) -> dict:
        s = self.q.get(timeout=timeout)
        assert s is not None, f"probe exited: {self.proc.stderr.read().decode()}"
        return s

    def samples(self, n: int, timeout: float = 5.0) -> list[dict]:
        return [self.sample(timeout) for _ in range(n)]

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_once(args: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-u", str(PROBE), "--once", *args], env=env, capture_output=True, timeout=15)
    assert out.returncode == 0, out.stderr.decode()
    lines = out.stdout.decode().splitlines()
    assert len(lines) == 1
    return gpu_rows(json.loads(lines[0]))


def wait_samples(p: Probe, pred, timeout: float = 4.0) -> tuple[list[str], dict]:
    """Collect log lines over samples until pred(lines, last_sample) holds."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        s = p.sample()
        lines += s["log"]
        if pred(lines, s):
            return lines, s
        assert time.monotonic() < deadline, lines
