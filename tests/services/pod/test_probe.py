"""The probe as a real subprocess, reading the fake nvidia-smi, a fake pynvml and a fake /proc (its run-dir side:
test_probe_rundir.py)."""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from services.demo import nvidia_smi as fake
from services.pod.agent import probe as probe_mod
from tests.services.pod.probe_support import MIB, REPO, make_env, run_once

QUERY = "--query-gpu=index,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH dir with a fast `nvidia-smi` wrapper around the fake."""
    d = tmp_path / "bin"
    d.mkdir()
    smi = d / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "services/demo/nvidia_smi.py"}" "$@"\n')
    smi.chmod(0o755)
    return d


def fake_printed_tick0(env: dict[str, str]) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", QUERY, "--format=csv,noheader,nounits"], env=env, capture_output=True, text=True, check=True
    )
    return [[f.strip() for f in line.split(",")] for line in out.stdout.splitlines()]


def test_once_units_match_fake_tick0(bin_dir: Path) -> None:
    env = make_env(bin_dir, gpus=4, seed=3)
    s = run_once(["--backend", "nvidia-smi"], env)
    printed = fake_printed_tick0(env)
    assert len(printed) == 4
    assert s["v"] == 1 and s["source"] == "nvidia-smi" and abs(s["t"] - time.time()) < 10
    assert [g["index"] for g in s["gpus"]] == [0, 1, 2, 3]
    for g, row in zip(s["gpus"], printed):
        assert g["name"] == row[1] == "NVIDIA H100 80GB HBM3"
        assert g["util"] == float(row[2]) and 85 <= g["util"] <= 100
        assert g["mem_used"] == int(row[3]) * MIB and isinstance(g["mem_used"], int)
        assert g["mem_total"] == 81559 * MIB
        assert g["power_w"] == float(row[5]) and 550 <= g["power_w"] <= 690
        assert g["temp_c"] == float(row[6])
    h = s["host"]
    assert 0.0 <= h["cpu_pct"] <= 100.0
    assert h["mem_total"] == psutil.virtual_memory().total
    assert 0 < h["mem_used"] < h["mem_total"]
    st = os.statvfs("/")
    assert h["disk_total"] == st.f_blocks * st.f_frsize
    assert 0 < h["disk_used"] <= h["disk_total"]
    assert h["nofile_soft"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert s["procs"] == [] and s["log"] == [] and s["ckpts"] == [] and s["errors"] == []


def test_na_fields_become_null(bin_dir: Path) -> None:
    s = run_once(["--backend", "nvidia-smi"], make_env(bin_dir, gpus=4, scenario="na_fields"))
    g0, g1, g2, g3 = s["gpus"]
    assert g1["power_w"] is None and g1["temp_c"] is None and g1["util"] is not None
    assert g3["power_w"] is None and g3["temp_c"] is None and g3["util"] is None  # [Unknown Error]
    for g in (g0, g2):
        assert None not in (g["util"], g["power_w"], g["temp_c"], g["mem_used"])
    assert all(g["mem_total"] == 81559 * MIB for g in s["gpus"])
    assert s["errors"] == []


def test_garbage_lines_skipped_and_reported(bin_dir: Path, start_probe) -> None:
    env = make_env(bin_dir, gpus=2, scenario="garbage", seed=5)
    p = start_probe(["--backend", "nvidia-smi", "--interval", "0.2"], env)
    samples = p.samples(5)
    cfg = fake.Config(env)
    for tick, s in enumerate(samples):
        assert [g["util"] for g in s["gpus"]] == [
            float(fake.gpu_values(cfg, tick, g)["utilization.gpu"]) for g in range(2)
        ], tick
        bad = [e for e in s["errors"] if "bad line" in e]
        assert len(bad) == (1 if tick % 3 == 1 else 0), (tick, s["errors"])
    assert "Unable to determine the device handle" in samples[1]["errors"][0]


def test_streams_at_interval(bin_dir: Path, start_probe) -> None:
    p = start_probe(["--backend", "nvidia-smi", "--interval", "0.2"], make_env(bin_dir, gpus=2))
    t0 = time.monotonic()
    samples = p.samples(4)
    assert time.monotonic() - t0 < 4.0
    ts = [s["t"] for s in samples]
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    assert all(0.05 < g < 1.0 for g in gaps[1:]), gaps
    assert len({json.dumps(s["gpus"]) for s in samples}) == 4  # a new batch each time


def test_closing_stdin_exits_and_kills_nvidia_smi(bin_dir: Path, start_probe) -> None:
    p = start_probe(["--backend", "nvidia-smi", "--interval", "0.2"], make_env(bin_dir, gpus=2, max_ticks=1))
    p.sample()
    with pytest.raises(queue.Empty):  # a silent nvidia-smi freezes the stream (no filler samples)
        p.sample(timeout=0.8)
    kids = p.children()
    assert len(kids) == 1 and "nvidia_smi.py" in " ".join(kids[0].cmdline())
    t0 = time.monotonic()
    p.proc.stdin.close()
    assert p.proc.wait(timeout=2) == 0
    assert time.monotonic() - t0 < 2
    gone, alive = psutil.wait_procs(kids, timeout=1)
    assert alive == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_signals_leave_no_orphan(bin_dir: Path, start_probe, sig: int) -> None:
    # max_ticks=1: the fake then sleeps silently, so only the probe can end it (no EPIPE to die of)
    p = start_probe(["--backend", "nvidia-smi", "--interval", "0.2"], make_env(bin_dir, gpus=1, max_ticks=1))
    p.sample()
    kids = p.children()
    assert len(kids) == 1
    p.proc.send_signal(sig)
    p.proc.wait(timeout=2)
    gone, alive = psutil.wait_procs(kids, timeout=2)  # SIGKILL: PR_SET_PDEATHSIG does it
    assert alive == []


def test_nvidia_smi_exit_is_reported_not_fatal(bin_dir: Path, start_probe) -> None:
    p = start_probe(["--backend", "nvidia-smi", "--nvidia-smi", "false", "--interval", "0.2"], make_env(bin_dir))
    s = p.sample()
    assert s["gpus"] == [] and s["source"] == "nvidia-smi"
    assert any("exited (rc=1)" in e for e in s["errors"]), s["errors"]
    assert s["host"]["mem_total"] > 0
    time.sleep(0.3)
    assert p.proc.poll() is None  # still alive, restarting with backoff


def test_backend_none_without_nvidia_smi(tmp_path: Path) -> None:
    env = make_env(None)
    env["PATH"] = str(tmp_path)  # no nvidia-smi anywhere; pynvml (if any) finds no driver
    s = run_once(["--backend", "auto"], env)
    assert s["source"] == "none" and s["gpus"] == [] and s["procs"] == []
    h = s["host"]
    assert 0.0 <= h["cpu_pct"] <= 100.0
    assert h["mem_total"] == psutil.virtual_memory().total
    assert h["disk_total"] > 0 and h["disk_used"] > 0
    assert s["errors"] == []


STAT_A = "cpu  1000 50 300 8000 100 10 5 0 0 0\ncpu0 1000 50 300 8000 100 10 5 0 0 0\nctxt 1\n"
STAT_B = "cpu  1600 50 400 8300 200 10 5 0 0 0\ncpu0 1600 50 400 8300 200 10 5 0 0 0\nctxt 2\n"
MEMINFO = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\n"


def test_proc_parsers() -> None:
    a, b = probe_mod.parse_stat(STAT_A), probe_mod.parse_stat(STAT_B)
    assert a == (9465, 8100)
    # delta: total 600+100+300+100 = 1100, idle 300+100 = 400 -> busy 700/1100
    assert probe_mod.cpu_pct(a, b) == round(100 * 700 / 1100, 2)
    assert probe_mod.cpu_pct(b, b) is None
    assert probe_mod.parse_meminfo(MEMINFO) == (10000000 * 1024, 16000000 * 1024)
    no_avail = "MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 20 kB\n"
    assert probe_mod.parse_meminfo(no_avail) == (65 * 1024, 100 * 1024)
    assert probe_mod.parse_smi_line("0, NVIDIA H100 80GB HBM3, 87, 61234, 81559, 612.34, 64") == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "util": 87.0,
        "mem_used": 61234 * MIB,
        "mem_total": 81559 * MIB,
        "power_w": 612.34,
        "temp_c": 64.0,
    }
    g = probe_mod.parse_smi_line("1, X, [N/A], 1, 2, [GPU requires reset], N/A")
    assert (g["util"], g["power_w"], g["temp_c"]) == (None, None, None)
    for bad in ("garbage", "x, NAME, 1, 2, 3, 4, 5", "0, NAME, 1, 2, 3, 4, hot"):
        with pytest.raises(ValueError):
            probe_mod.parse_smi_line(bad)


def test_proc_root_fixture_once(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text(STAT_A)
    (proc / "meminfo").write_text(MEMINFO)
    s = run_once(["--backend", "none", "--proc-root", str(proc), "--disk-path", str(tmp_path)], make_env(None))
    h = s["host"]
    assert h["mem_used"] == 10000000 * 1024 and h["mem_total"] == 16000000 * 1024
    assert h["cpu_pct"] is None  # a static stat file gives no delta: unmeasurable, not 0
    st = os.statvfs(tmp_path)
    assert h["disk_total"] == st.f_blocks * st.f_frsize


def test_proc_root_missing_files_are_null_with_errors(tmp_path: Path) -> None:
    s = run_once(
        ["--backend", "none", "--proc-root", str(tmp_path / "nope"), "--disk-path", str(tmp_path / "nope")],
        make_env(None),
    )
    h = s["host"]
    assert (h["cpu_pct"], h["mem_used"], h["mem_total"], h["disk_used"], h["disk_total"]) == (None,) * 5
    assert any(e.startswith("cpu:") for e in s["errors"]) and any(e.startswith("mem:") for e in s["errors"])
    assert any(e.startswith("disk:") for e in s["errors"])


def test_proc_root_streaming_cpu_from_deltas(bin_dir: Path, tmp_path: Path, start_probe) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    env = make_env(bin_dir, gpus=1, seed=7, proc_root=proc)
    cfg = fake.Config(env)
    fake.write_proc(cfg, 0)
    # 0.5 s ticks: the probe must read tick k's stat before the fake writes tick k+1
    p = start_probe(["--backend", "nvidia-smi", "--proc-root", str(proc), "--interval", "0.5"], env)
    samples = p.samples(4)
    assert samples[0]["host"]["cpu_pct"] is None
    for tick in (1, 2, 3):
        h = samples[tick]["host"]
        assert h["cpu_pct"] == pytest.approx(fake.expected_cpu_pct(cfg, tick), abs=0.01)
        total, avail = fake.meminfo_kb(cfg, tick)
        assert h["mem_total"] == total * 1024 and h["mem_used"] == (total - avail) * 1024
        assert 35 <= h["cpu_pct"] <= 55


FAKE_PYNVML = """
import os
class NVMLError(Exception): pass
class NVMLError_NotSupported(NVMLError): pass
NVML_TEMPERATURE_GPU = 0
class _O:
    def __init__(self, **kw): self.__dict__.update(kw)
def _log(what):
    with open(os.environ["FAKE_NVML_LOG"], "a") as f: f.write(what + "\\n")
def nvmlInit(): _log("init")
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): _log("handle"); return i
def nvmlDeviceGetName(h): return b"Fake GPU %d" % h
def nvmlDeviceGetUtilizationRates(h): return _O(gpu=55 + h, memory=10)
class NVMLError_FunctionNotFound(NVMLError): pass
nvmlMemory_v2 = 0x02000028
RESERVED = 480  # what the driver keeps for itself: v1 counts it as used, v2 and nvidia-smi do not
def nvmlDeviceGetMemoryInfo(h, version=None):
    if version is None:
        return _O(used=1000 * (h + 1) + RESERVED, total=8000, free=0)
    if os.environ.get("FAKE_NVML_NO_V2"): raise NVMLError_FunctionNotFound("Function Not Found")
    assert version == nvmlMemory_v2
    return _O(used=1000 * (h + 1), reserved=RESERVED, total=8000, free=0, version=version)
def nvmlDeviceGetPowerUsage(h):
    if h == 1: raise NVMLError("Unknown Error")
    return 250500
def nvmlDeviceGetTemperature(h, sensor):
    if h == 1: raise NVMLError_NotSupported("Not Supported")
    return 61
def nvmlDeviceGetComputeRunningProcesses(h):
    return [_O(pid=4242, usedGpuMemory=123), _O(pid=99, usedGpuMemory=None)] if h == 0 else []
"""


def test_nvml_backend_with_fake_pynvml(tmp_path: Path, start_probe) -> None:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cmdline").write_bytes(b"python\0train.py\0--x\0")
    (proc / "stat").write_text(STAT_A)
    (proc / "meminfo").write_text(MEMINFO)
    env = make_env(
        None,
    )
    env["PYTHONPATH"] = str(tmp_path)
    env["FAKE_NVML_LOG"] = str(tmp_path / "calls.log")
    p = start_probe(["--backend", "auto", "--interval", "0.2", "--proc-root", str(proc)], env)
    samples = p.samples(3)
    s = samples[-1]
    assert s["source"] == "nvml"
    assert s["gpus"] == [
        {
            "index": 0,
            "name": "Fake GPU 0",
            "util": 55.0,
            "mem_used": 1000,
            "mem_total": 8000,
            "power_w": 250.5,
            "temp_c": 61.0,
        },
        {
            "index": 1,
            "name": "Fake GPU 1",
            "util": 56.0,
            "mem_used": 2000,
            "mem_total": 8000,
            "power_w": None,
            "temp_c": None,
        },
    ]
    assert s["procs"] == [
        {"pid": 4242, "gpu": 0, "mem": 123, "cmd": "python train.py --x"},
        {"pid": 99, "gpu": 0, "mem": None, "cmd": None},
    ]
    assert s["errors"] == ["gpu1 power: NVMLError: Unknown Error"]  # NotSupported is not an error
    assert (tmp_path / "calls.log").read_text().split() == ["init", "handle", "handle"]  # handles once


def test_nvml_memory_falls_back_to_v1_on_old_drivers(tmp_path: Path) -> None:
    """A driver without nvmlDeviceGetMemoryInfo_v2 (< 510): the v1 figure, and no error in every sample."""
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    env = make_env(None)
    env.update(PYTHONPATH=str(tmp_path), FAKE_NVML_LOG=str(tmp_path / "calls.log"), FAKE_NVML_NO_V2="1")
    s = run_once(["--backend", "nvml"], env)
    assert s["source"] == "nvml"
    assert [(g["mem_used"], g["mem_total"]) for g in s["gpus"]] == [(1480, 8000), (2480, 8000)]
    assert not any("mem" in e for e in s["errors"])


def test_a_known_gpu_count_ends_the_first_batch_at_its_last_line(tmp_path: Path) -> None:
    """--gpu-count (the demo pod knows its simulated GPUs): the first sample goes out at the batch's last line.
    Without it the probe learns the batch's size from the silence after it (a quarter of a second of every
    demo's first look): here that silence is made endless, so only the count can end the batch."""
    smi = tmp_path / "smi"
    smi.write_text(
        "#!/bin/sh\n"
        "echo '0, GPU A, 50, 1000, 80000, 300.0, 60'\n"
        "echo '1, GPU B, 51, 1001, 80000, 301.0, 61'\n"
        "exec sleep 600\n"
    )
    smi.chmod(0o755)
    code = (
        "import json, sys\n"
        "from services.pod.agent import probe\n"
        "count = int(sys.argv[2]) if sys.argv[2] != '-' else None\n"
        "gpus = probe.SmiGpus([sys.argv[1]], 1.0, count)\n"
        "gpus.gap = 600.0\n"  # the silence that ends a batch of unknown size: never, here
        "errors = []\n"
        "print(json.dumps([gpus.next_batch(600.0, errors), errors, gpus.ngpu]), flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-c", code, str(smi)]
    out = subprocess.run([*run, "2"], env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    batch, errors, ngpu = json.loads(out)
    assert [g["index"] for g in batch] == [0, 1] and batch[1]["name"] == "GPU B" and errors == [] and ngpu == 2
    with pytest.raises(subprocess.TimeoutExpired):  # the size unknown: it waits for the silence
        subprocess.run([*run, "-"], env=env, capture_output=True, timeout=1.0)


@pytest.mark.parametrize("scenario", ["training", "na_fields"])
def test_the_first_sample_with_the_gpu_count_is_the_one_without(bin_dir: Path, scenario: str) -> None:
    """The fast first sample carries the same GPUs as the one found by the silence (the fake's tick 0)."""
    env = make_env(bin_dir, gpus=4, seed=5, scenario=scenario)
    learned = run_once(["--backend", "nvidia-smi"], env)
    counted = run_once(["--backend", "nvidia-smi", "--gpu-count", "4"], env)
    assert len(counted["gpus"]) == 4 and counted["gpus"] == learned["gpus"]
    assert counted["errors"] == learned["errors"]


def test_a_proc_roots_first_cpu_reading_does_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--proc-root (the simulated pod's /proc, rewritten on its writer's ticks): the first sample reads its stat at
    once. Waiting until 0.1 s after start measured nothing there and held the demo's first sample back ~50 ms;
    the figure is the same: the delta between the stat at start and at the sample. This machine's CPU still
    waits (a delta over a few jiffies would be noise)."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text(STAT_A)
    (proc / "meminfo").write_text(MEMINFO)
    host = probe_mod.Host(str(proc), str(tmp_path))
    (proc / "stat").write_text(STAT_B)
    waits: list[float] = []
    monkeypatch.setattr(probe_mod.time, "sleep", waits.append)
    h = host.sample([])
    assert waits == [], "the first reading of a proc root waited"
    assert h["cpu_pct"] == probe_mod.cpu_pct(probe_mod.parse_stat(STAT_A), probe_mod.parse_stat(STAT_B))
    machine = probe_mod.Host(None, str(tmp_path))
    assert machine.sample([])["cpu_pct"] is not None
    assert len(waits) == 1 and 0 < waits[0] <= 0.1  # this machine's first reading spans 0.1 s
