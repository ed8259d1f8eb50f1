"""monitor_load: what watching N pods costs the client, against the naive exec-per-sample way.

Each pod is a probe over a real loopback sshd with 8 fake GPUs, sampled at 1 Hz through the same
MonitorService the app uses. With ``--app`` the headless Textual app is running too and latency is
measured sample → screen (the probe's timestamp to the first screen refresh after the App handled the
snapshot); otherwise sample → monitor callback.

Baseline: one ``ssh pod nvidia-smi --query-gpu=...`` exec per pod per second, the way a shell script
(or the tool from the field reports) would do it; its CPU includes the ssh client processes it spawns.

    python tests/benchmarks/monitor_load.py                     # 1, 8, 32 pods for 60 s, with the app
    python tests/benchmarks/monitor_load.py --pods 1,8 --seconds 20 --baseline-seconds 10

Prints figures; asserts nothing (timing asserts flake on shared machines).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from services.models import PodSnapshot  # noqa: E402
from services.monitor.service import MonitorService, MonitorSettings  # noqa: E402
from tests.conftest import ClientHome, _make_server  # noqa: E402

QUERY = ("nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,power.draw,"
         "temperature.gpu --format=csv,noheader,nounits")


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def run_monitor(server, n: int, seconds: float, with_app: bool, probe_dir: str) -> dict:
    latencies: list[float] = []
    pods = [server.pod(name=f"pod{i:02d}", probe_dir=probe_dir) for i in range(n)]
    settings = MonitorSettings(interval=1.0)
    measuring = False
    last_seen: dict[str, int] = {}

    def observe(snap: PodSnapshot, record) -> None:
        if not measuring or snap.latest is None:
            return
        if last_seen.get(snap.pod.name) == snap.samples_total:
            return
        last_seen[snap.pod.name] = snap.samples_total
        record(snap.latest.t)

    async def measure(mon: MonitorService, settle) -> dict:
        nonlocal measuring
        deadline = time.monotonic() + 120
        while sum(s.samples_total > 0 for s in mon.snapshots()) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("pods did not come online")
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # connection set-up is not steady state
        start_samples = sum(s.samples_total for s in mon.snapshots())
        start_bytes = sum(s.bytes_total for s in mon.snapshots())
        c0, t0 = cpu_self(), time.monotonic()
        measuring = True
        await asyncio.sleep(seconds)
        measuring = False
        c1, t1 = cpu_self(), time.monotonic()
        await settle()
        samples = sum(s.samples_total for s in mon.snapshots()) - start_samples
        nbytes = sum(s.bytes_total for s in mon.snapshots()) - start_bytes
        return {"pods": n, "samples": samples, "cpu_s": c1 - c0, "wall_s": t1 - t0,
                "bytes_per_sample": nbytes / max(samples, 1)}

    if not with_app:
        mon = MonitorService(lambda s: observe(s, lambda t: latencies.append(time.time() - t)),
                             settings=settings)
        for pod in pods:
            mon.add(pod)
        try:
            result = await measure(mon, _noop)
        finally:
            await mon.aclose()
    else:
        from app.tui import PrimeTrainApp

        holder: dict[str, MonitorService] = {}

        def factory(cb):
            def wrapped(snap: PodSnapshot) -> None:
                cb(snap)
                observe(snap, lambda t: app.call_after_refresh(
                    lambda: latencies.append(time.time() - t)))
            holder["mon"] = MonitorService(wrapped, settings=settings)
            return holder["mon"]

        app = PrimeTrainApp(pods, settings=settings, monitor_factory=factory)
        async with app.run_test(size=(160, 50)) as pilot:
            result = await measure(holder["mon"], lambda: pilot.pause(0.5))
    result["lat_p50_ms"] = 1000 * pct(latencies, 0.50)
    result["lat_p95_ms"] = 1000 * pct(latencies, 0.95)
    result["lat_n"] = len(latencies)
    return result


async def _noop() -> None:
    return None


async def run_baseline(server, home: ClientHome, n: int, seconds: float) -> dict:
    """One `ssh host nvidia-smi ...` per pod per second, as a script would do it."""
    base = ["ssh", "-F", str(home.home / ".ssh" / "config"), "-o", "BatchMode=yes",
            "testpod", QUERY]
    latencies: list[float] = []
    nbytes = 0
    samples = 0

    async def one_pod(offset: float) -> None:
        nonlocal nbytes, samples
        await asyncio.sleep(offset)
        next_tick = time.monotonic()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            proc = await asyncio.create_subprocess_exec(*base, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.DEVNULL)
            out, _ = await proc.communicate()
            if proc.returncode == 0 and out:
                latencies.append(time.monotonic() - t0)
                nbytes += len(out)
                samples += 1
            next_tick += 1.0
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))

    c0, k0, t0 = cpu_self(), cpu_children(), time.monotonic()
    await asyncio.gather(*(one_pod(i / n) for i in range(n)))
    c1, k1, t1 = cpu_self(), cpu_children(), time.monotonic()
    return {"pods": n, "samples": samples, "cpu_s": (c1 - c0) + (k1 - k0), "wall_s": t1 - t0,
            "bytes_per_sample": nbytes / max(samples, 1), "lat_p50_ms": 1000 * pct(latencies, 0.5),
            "lat_p95_ms": 1000 * pct(latencies, 0.95), "lat_n": len(latencies)}


def row(label: str, r: dict) -> str:
    per_sample_ms = 1000 * r["cpu_s"] / max(r["samples"], 1)
    core_pct = 100 * r["cpu_s"] / r["wall_s"]
    return (f"{label:<12} {r['pods']:>4} {r['samples']:>8} {per_sample_ms:>12.3f} {core_pct:>10.1f} "
            f"{r['lat_p50_ms']:>9.1f} {r['lat_p95_ms']:>9.1f} {r['bytes_per_sample']:>10.0f}")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--baseline-seconds", type=float, default=20.0)
    ap.add_argument("--baseline-pods", default="1,8")
    ap.add_argument("--modes", default="monitor,app",
                    help="monitor = the monitor service alone (what acquisition costs, compared with "
                         "the baseline); app = the headless app too (sample → screen)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]

    tmp = Path(tempfile.mkdtemp(prefix="ptt-bench-"))
    server = _make_server(tmp / "sshd", env={"PTT_FAKE_GPUS": "8"})
    server.start()
    home_dir = tmp / "home"
    (home_dir / ".ssh").mkdir(parents=True, mode=0o700)
    os.environ["HOME"] = str(home_dir)
    os.environ.pop("SSH_AUTH_SOCK", None)
    os.environ["PRIME_TRAIN_TUI_CONFIG_DIR"] = str(tmp / "cfg")
    home = ClientHome(home=home_dir, server=server)
    home.write_ssh_config()
    home.trust()
    try:
        print(f"monitor_load: {args.seconds:g} s per run, 8 fake GPUs per pod, 1 Hz; "
              f"{os.cpu_count()} cores. CPU is this client process (+ its ssh children for the "
              "baseline); latency is sample → callback (monitor) or sample → screen (app)")
        print(f"{'mode':<12} {'pods':>4} {'samples':>8} {'ms CPU/smp':>12} {'% 1 core':>10} "
              f"{'p50 ms':>9} {'p95 ms':>9} {'B/sample':>10}")
        ours = {}
        for n in [int(x) for x in args.pods.split(",")]:
            for mode in modes:
                r = await run_monitor(server, n, args.seconds, mode == "app", str(tmp / "probe"))
                if mode == "monitor":
                    ours[n] = r
                print(row(f"probe+{mode}", r), flush=True)
        for n in [int(x) for x in args.baseline_pods.split(",") if x]:
            b = await run_baseline(server, home, n, args.baseline_seconds)
            print(row("ssh-exec", b), flush=True)
            if n in ours:
                mine = ours[n]["cpu_s"] / max(ours[n]["samples"], 1)
                theirs = b["cpu_s"] / max(b["samples"], 1)
                print(f"  → {n} pods: acquiring a sample through the probe costs {theirs / mine:.0f}× "
                      "less client CPU than one ssh exec")
    finally:
        server.kill()


if __name__ == "__main__":
    asyncio.run(main())
