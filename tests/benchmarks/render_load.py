"""render_load: what drawing N pods x 8 GPUs at 1 Hz costs the headless app (fleet view or monitor pane).

Every second each pod gets a new sample (8 GPUs, a training step line every third tick, a metrics
record), run through the real HealthTracker and wrapped in a PodSnapshot with a 600-sample history,
exactly as the monitor would hand it over, and fed through the App's own ``on_snapshot``; each pod at its own
moment of the second, as real pods send them (``--batched``: all at once, which under-reports). Pods are parked
on a connection that never completes; acquisition (SSH, probe) is added from a figure measured in this run: the
real MonitorService's CPU per pod-sample over a real sshd (``--acquire-pods`` pods for ``--acquire-seconds``), so
``all in`` = the whole app's CPU (drawing) + acquisition (which holds the health rules: the monitor runs them).
tests/benchmarks/monitor_load.py measures
the same all at once over real pods (its app mode).

Measured per snapshot: sample -> screen = its time to the refresh after the App put it on screen (hooked where the
App applies it: ``SnapshotFrames.on_shown``, the fleet table's ``update_pod``; the refresh: the next update the App
sends to the terminal, ``App._display``); and the process CPU share
(the synthetic samples' construction and their health rules taken out: the acquisition figure holds the rules,
as the real monitor runs them, so they count once; without acquisition they are added back), per second
and per snapshot fed. Each pod's history is first filled with ``--history`` back-dated samples (600), kept as the
monitor keeps them (its ``history_len`` window whole, and its downsampled hour where the tree has one). The
anchor, run before each run in the same process: the same app and view with the same pods and no snapshots
(``idle``); ``over idle`` = per snapshot less the idle app's own CPU, a second column: the target is on the
whole app.

    python tests/benchmarks/render_load.py                       # 64 pods fleet, 1 pod monitor; 3 rounds of 20 s
    python tests/benchmarks/render_load.py --pods 64 --view monitor --seconds 20
    python tests/benchmarks/render_load.py --pods 1 --view monitor --rounds 5    # medians over 5 idle+run pairs

Targets: fleet < 10 % of one core at 64 pods all in; monitor pane < 5 ms of the whole app's CPU per snapshot.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample  # noqa: E402
from services.monitor.health import HealthTracker  # noqa: E402
from services.monitor.service import MonitorService  # noqa: E402
from services.monitor.worker import MonitorSettings  # noqa: E402

try:  # the downsampled hour (issue 36); absent from older trees, which this benchmark also measures
    from services.monitor.trend import TrendBuilder
except ImportError:  # pragma: no cover
    TrendBuilder = None  # type: ignore[assignment,misc]
from tests.app.helpers import Parked  # noqa: E402

GIB = 1024**3


def cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


class FakePod:
    def __init__(self, pod: Pod, seed: int) -> None:
        self.pod, self.rng = pod, random.Random(seed)
        self.tracker = HealthTracker(price_per_hr=pod.price_per_hr, max_steps=1000)
        settings = MonitorSettings()  # the monitor's window and, where it keeps one, its downsampled hour
        self.history: deque[Sample] = deque(maxlen=settings.history_len)
        self.trend = TrendBuilder(settings.trend_s) if TrendBuilder is not None else None
        self.step, self.n = 0, 0
        self.health_cpu = 0.0  # the health rules' CPU: the monitor's, counted in acquisition (or added back)
        self.status = PodStatus(PodState.ONLINE, "via nvml", since=time.time())

    def prefill(self, now: float, count: int) -> None:
        """``count`` back-dated samples at 1 Hz, as a pod watched for that long would have."""
        keep_n = self.n
        for k in range(count, 0, -1):
            self.tick(now - k)
        self.n = keep_n

    def tick(self, now: float) -> PodSnapshot:
        r, self.n = self.rng, self.n + 1
        gpus = tuple(
            GpuSample(
                i,
                "NVIDIA H100 80GB HBM3",
                float(r.randint(85, 100)),
                int(r.uniform(55, 70) * GIB),
                80 * GIB,
                round(r.uniform(550, 690), 1),
                float(r.randint(60, 75)),
            )
            for i in range(8)
        )
        log: tuple[str, ...] = ()
        if self.n % 3 == 0:
            self.step += 1
            log = (
                f"trainer: 14:00:00 SUCCESS Step {self.step} |    3.0s | Loss {0.5 / (1 + self.step / 50):.4f} | "
                f"Entropy 0.4 | Mismatch KL 0.001 | Grad. Norm 0.2 | LR 3.00e-06 | Throughput "
                f"{r.randint(24000, 26000)} tokens/s | MFU 31.2% | Peak Mem. 41.3 GiB",
            )
        host = HostSample(r.uniform(5, 30), 300 * GIB, 2000 * GIB, 400 * GIB, 1000 * GIB, 1048576)
        sample = Sample(t=now, gpus=gpus, host=host, log=log, source="nvml")
        self.history.append(sample)
        if self.trend is not None:
            self.trend.add(sample)
        h0 = time.process_time()
        alerts = self.tracker.observe(sample)
        self.health_cpu += time.process_time() - h0
        extra = {} if self.trend is None else {"trend": self.trend.view}
        return PodSnapshot(
            pod=self.pod,
            status=self.status,
            history=tuple(self.history),
            **extra,
            samples_total=self.n,
            last_received=now,
            alerts=alerts,
            run=self.tracker.progress,
            log_tail=tuple(self.tracker.tail),
        )


async def run(n: int, seconds: float, view: str, spread: bool = False, history: int = 600, feed: bool = True) -> dict:
    from app.tui import PrimeTrainApp

    pods = [
        Pod(name=f"pod{i:02d}", kind=PodKind.SSH, host=f"10.0.{i // 250}.{i % 250 + 1}", price_per_hr=23.92)
        for i in range(n)
    ]
    fakes = [FakePod(p, i) for i, p in enumerate(pods)]
    for f in fakes:
        f.prefill(time.time() - 5, max(0, history - 5))
    app = PrimeTrainApp(pods, monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))
    app.animation_level = "none"
    refresh_ms: list[float] = []
    async with app.run_test(size=(180, 80)) as pilot:
        await pilot.pause(0.5)
        measuring = False
        shown_ms: list[float] = []  # a fed sample's time -> the refresh after the App put it on screen
        awaiting: list[float] = []  # the sample times put on screen since the last refresh

        def refreshed() -> None:
            now = time.time()
            shown_ms.extend(1000 * (now - t) for t in awaiting)
            awaiting.clear()

        # the refresh that shows them: the next update the App sends to the terminal (``App._display``, as
        # offers_table.py and startup.py time theirs). A callback after the refresh per frame (``call_after_refresh``)
        # cost the App two callables whose signatures Textual inspects and a message to the screen: ~0.1 ms of a
        # Monitor snapshot's 5, the measurement's own cost counted as the App's
        display = app._display

        def displayed(screen: object, update: object) -> None:
            display(screen, update)  # type: ignore[arg-type]
            if awaiting:
                refreshed()

        app._display = displayed  # type: ignore[method-assign]

        def on_screen(snap: PodSnapshot) -> None:
            if measuring and snap.latest is not None:
                awaiting.append(snap.latest.t)

        if view == "fleet":
            await pilot.press("o")
            await pilot.pause(0.3)
            table = app.screen.table  # type: ignore[attr-defined]
            update = table.update_pod

            def fleet_update(snap: PodSnapshot) -> None:
                update(snap)
                on_screen(snap)

            table.update_pod = fleet_update
        else:
            app.frames.on_shown.append(on_screen)
        for _ in range(5):  # warm-up: widgets mounted, histories filling
            for f in fakes:
                app.on_snapshot(f.tick(time.time()))
            await pilot.pause(0.2)
        gen_cpu, fed = 0.0, 0
        measuring = True
        c0, t0 = cpu(), time.monotonic()
        health0 = sum(f.health_cpu for f in fakes)
        next_tick = time.monotonic()
        if not feed:  # the baseline: the same app, nothing arriving
            await asyncio.sleep(seconds)
            c1, t1 = cpu(), time.monotonic()
            return {
                "pods": n,
                "view": view + " idle",
                "ticks": 0,
                "p50": float("nan"),
                "p95": float("nan"),
                "max": float("nan"),
                "cpu_pct": 100 * (c1 - c0) / (t1 - t0),
                "app_cpu_pct": 100 * (c1 - c0) / (t1 - t0),
                "gen_cpu_pct": 0.0,
                "health_ms": 0.0,
                "ms_per_snapshot": float("nan"),
            }
        while spread and time.monotonic() - t0 < seconds:  # each pod at its own moment of the second
            tick0 = time.monotonic()
            for i, f in enumerate(fakes):
                await asyncio.sleep(max(0.0, tick0 + i / n - time.monotonic()))
                g0 = time.process_time()
                snap = f.tick(time.time())
                gen_cpu += time.process_time() - g0
                # (no per-snapshot refresh callback here: spread runs report sample -> screen from on_screen, and
                # two callbacks per snapshot were counted as the app's CPU)
                app.on_snapshot(snap)
                fed += 1
            await asyncio.sleep(max(0.0, tick0 + 1.0 - time.monotonic()))
        while not spread and time.monotonic() - t0 < seconds:
            g0 = time.process_time()
            now = time.time()
            snaps = [f.tick(now) for f in fakes]
            gen_cpu += time.process_time() - g0
            done = asyncio.Event()
            start = time.perf_counter()
            for s in snaps:
                app.on_snapshot(s)
            app.call_later(lambda done=done: app.call_after_refresh(done.set))  # after the PodUpdated messages queued
            await done.wait()
            refresh_ms.append(1000 * (time.perf_counter() - start))
            next_tick += 1.0
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
        c1, t1 = cpu(), time.monotonic()
        health_cpu = sum(f.health_cpu for f in fakes) - health0
        measuring = False
    wall = t1 - t0
    if spread:  # the user's figure: each sample to the frame that shows it (a refresh before it does not count)
        refresh_ms, fed_n = shown_ms, fed
    else:
        fed_n = len(refresh_ms) * n
    return {
        "ms_per_snapshot": 1000 * (c1 - c0 - gen_cpu) / max(1, fed_n),
        "pods": n,
        "view": view + (" spread" if spread else ""),
        "ticks": fed_n,
        "p50": pct(refresh_ms, 0.5),
        "p95": pct(refresh_ms, 0.95),
        "max": max(refresh_ms, default=float("nan")),
        "cpu_pct": 100 * (c1 - c0) / wall,
        "app_cpu_pct": 100 * (c1 - c0 - gen_cpu) / wall,
        "gen_cpu_pct": 100 * gen_cpu / wall,
        "health_ms": 1000 * health_cpu / max(1, fed_n),
    }


async def acquisition_ms(pods: int, seconds: float) -> float:
    """The real MonitorService's CPU per pod-sample (ms) over a real loopback sshd with 8 fake GPUs per pod."""
    import os
    import tempfile

    from services.monitor.worker import MonitorSettings
    from tests.conftest import _make_server

    tmp = Path(tempfile.mkdtemp(prefix="ptt-render-"))
    (tmp / "pod-home").mkdir()
    server = _make_server(tmp / "sshd", env={"PTT_FAKE_GPUS": "8", "HOME": str(tmp / "pod-home")})
    server.start()
    os.environ["PRIME_TRAIN_TUI_CONFIG_DIR"] = str(tmp / "cfg")
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "known_hosts").write_text(server.known_hosts_line + "\n")
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {server.client_key}\n  UserKnownHostsFile {home / '.ssh' / 'known_hosts'}\n"
    )
    mon = MonitorService(lambda s: None, settings=MonitorSettings(interval=1.0))
    try:
        for i in range(pods):
            mon.add(server.pod(name=f"acq{i:02d}", probe_dir=str(tmp / "probe")))
        deadline = time.monotonic() + 120
        while sum(s.samples_total > 0 for s in mon.snapshots()) < pods and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        s0, c0 = sum(s.samples_total for s in mon.snapshots()), cpu()
        await asyncio.sleep(seconds)
        s1, c1 = sum(s.samples_total for s in mon.snapshots()), cpu()
    finally:
        await mon.aclose()
        server.kill()
        if old_home is not None:
            os.environ["HOME"] = old_home
    return 1000 * (c1 - c0) / max(1, s1 - s0)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", default=None, help="pod counts (default: 64 for the fleet, 1 for the monitor)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--view", default="fleet,monitor", help="fleet and/or monitor (comma-separated)")
    ap.add_argument("--history", type=int, default=600, help="samples already in each pod's history (default 600)")
    ap.add_argument(
        "--batched",
        action="store_true",
        help="every pod's snapshot at the same moment (under-reports: one frame draws them all) instead "
        "of each at its own moment of the second, as real pods send them",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="idle anchor then fed run, this many times in turn (the machine's speed drifts: each "
        "round's 'over idle' uses its own anchor); the medians are printed last",
    )
    ap.add_argument("--acquire-pods", type=int, default=8, help="pods over a real sshd for the acquisition figure")
    ap.add_argument("--acquire-seconds", type=float, default=10.0, help="0: leave acquisition out")
    args = ap.parse_args()
    import os

    spread = not args.batched
    acq = await acquisition_ms(args.acquire_pods, args.acquire_seconds) if args.acquire_seconds > 0 else 0.0
    print(
        f"render_load: 8 GPUs per pod, 1 Hz, {args.seconds:g} s per run, {'spread' if spread else 'batched'}; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; refresh = snapshot fed -> screen refreshed; app = "
        "this process's CPU less building the synthetic samples and their health rules; acquisition (health rules in) "
        "measured "
        f"now over a real sshd: {acq:.2f} ms CPU per pod-sample ({args.acquire_pods} pods)"
    )
    print("targets: fleet all in < 10 % of one core at 64 pods; monitor < 5 ms of the whole app's CPU per snapshot")
    print(
        f"{'view':<16} {'pods':>5} {'ticks':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'app %':>7} "
        f"{'all in %':>8} {'ms/snap':>8} {'all in':>7} {'over idle':>9} {'gen %':>7}"
    )
    for view in [v for v in args.view.split(",") if v]:
        counts = args.pods or ("64" if view == "fleet" else "1")
        for n in [int(x) for x in counts.split(",")]:
            rounds: list[tuple[float, float, float, float, float]] = []  # app %, all-in %, ms/snap, all-in, over idle
            for _ in range(max(1, args.rounds)):
                idle = await run(n, min(args.seconds, 10.0), view, spread, args.history, feed=False)
                r = await run(n, args.seconds, view, spread, args.history)
                for row in (idle, r):
                    # the snapshots' own cost: the app's CPU per snapshot less what the same app spends idle (its
                    # clock tick redrawing "last sample N s ago", timers) over the same second, shared by the n
                    over = row["ms_per_snapshot"] - idle["app_cpu_pct"] * 10 / n
                    fed = row["ticks"] > 0
                    # acquisition: n pod-samples a second of acq ms each; the real monitor's figure holds the
                    # health rules, else the rules as run here (counted once, not in the app column too)
                    per_sample = acq if acq > 0 else row["health_ms"]
                    all_pct = row["app_cpu_pct"] + (n * per_sample / 10 if fed else 0.0)
                    all_ms = row["ms_per_snapshot"] + per_sample
                    print(
                        f"{row['view']:<16} {row['pods']:>5} {row['ticks']:>6} {row['p50']:>8.1f} "
                        f"{row['p95']:>8.1f} {row['max']:>8.1f} {row['app_cpu_pct']:>7.1f} {all_pct:>8.1f} "
                        f"{row['ms_per_snapshot']:>8.1f} {all_ms:>7.1f} {over:>9.1f} {row['gen_cpu_pct']:>7.1f}",
                        flush=True,
                    )
                rounds.append(
                    (
                        r["app_cpu_pct"],
                        r["app_cpu_pct"] + n * per_sample / 10,
                        r["ms_per_snapshot"],
                        r["ms_per_snapshot"] + per_sample,
                        over,
                    )
                )
            med = [statistics.median(x[i] for x in rounds) for i in range(5)]
            print(
                f"{r['view']:<16} {n:>5} median of {len(rounds)} rounds: app {med[0]:.1f} %, all in {med[1]:.1f} % "
                f"of a core; {med[2]:.2f} ms per snapshot, all in {med[3]:.2f} ms ({med[4]:.2f} over idle)",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
