"""The idle guard (services/monitor/idle.py → the snapshot's idle figure; services/watch/idle.py in the watcher's
rentals pass) over real parts: the real sshd as the rented pod with the fake nvidia-smi's GPUs at 0 %
(PTT_FAKE_SCENARIO=idle), the provider cloud stub over HTTP (tests/services/offers/cloud_stub.py), moto's S3
for the final backup, a webhook receiver for the pushes. Before, a rented pod whose GPUs sat idle with no run
cost money with nobody told: no figure, no push, no termination. Now: the monitor says "idle N min · $X
wasted", the watcher pushes it once per idle streak, and only with ``[watch] terminate_idle = true`` terminates
the rental — after its newest complete checkpoint is verified in the bucket."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from services.models import GpuSample, HostSample, PodRunRecord, Sample
from services.monitor.health import HealthSettings
from services.monitor.idle import IdleTracker, run_active
from services.monitor.runlife import Phase
from services.monitor.worker import MonitorSettings
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.watch.notify import NotifySettings
from services.watch.watcher import Watcher, WatchOptions
from tests.http_stub import serve
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint
from tests.services.offers.cloud_stub import Cloud, prime_pod, providers
from tests.services.watch.receiver import receiver
from tests.services.watch.test_watcher import until

GIB = 1 << 30
# idle after 1.2 s of idle samples; no host alerts from this machine's disk or ulimit
HEALTH = HealthSettings(idle_minutes=0.02, nofile_min=0, disk_pct=100.0, disk_critical_pct=100.0)
FAST = MonitorSettings(interval=0.3, backoff_max=0.5, health=HEALTH)


def sample(t: float, util: float | None = 0.0, mem: int | None = 4 << 20, gpus: int = 2) -> Sample:
    return Sample(t, tuple(GpuSample(i, "H100", util, mem, 80 * GIB, 70.0, 30.0) for i in range(gpus)), HostSample())


def test_idle_needs_every_gpu_idle_for_the_whole_window_with_no_live_run():
    tracker = IdleTracker(HealthSettings(idle_minutes=10), price_per_hr=6.0)
    assert tracker.observe(sample(1000.0), active=False) is None
    assert tracker.observe(sample(1000.0 + 599), active=False) is None
    fig = tracker.observe(sample(1000.0 + 42 * 60), active=False)
    assert fig is not None and fig.since == 1000.0 and fig.label == "idle 42 min · $4.20 wasted"
    assert tracker.observe(sample(4000.0, util=40.0), active=False) is None  # one busy sample: the streak ends
    assert tracker.observe(sample(4001.0 + 600), active=False) is None  # ... and starts again
    assert tracker.observe(sample(5000.0), active=True) is None  # a live run is never idle
    assert tracker.observe(sample(5000.0 + 900, mem=3 * GIB), active=False) is None  # memory held: not idle
    assert tracker.observe(sample(6000.0, util=None), active=False) is None  # unread: not known to be idle
    assert tracker.observe(sample(6000.0, gpus=0), active=False) is None  # no GPUs read
    assert IdleTracker(HealthSettings(idle_minutes=0), 6.0).observe(sample(0.0), active=False) is None  # off
    assert run_active(Phase.STARTING, None, wrote=False) is False  # no run at all
    assert run_active(Phase.STARTING, PodRunRecord("r", "running", alive=True), wrote=False) is True
    assert run_active(Phase.RUNNING, None, wrote=True) is True
    assert run_active(Phase.FINISHED, PodRunRecord("r", "exited", alive=False, exit_code=0), wrote=True) is False


@pytest.fixture
def idle_pod(sshd, client_home, tmp_path):
    """The test sshd pod, its fake GPUs at 0 % and ~0 MiB, rented as ``testpod`` at $6/hr."""
    sshd.kill()
    sshd.env["PTT_FAKE_SCENARIO"] = "idle"
    sshd.start()
    client_home.trust()
    return sshd.pod(
        probe_dir=str(tmp_path / "podstate"),
        run_dir=str(tmp_path / "run"),
        price_per_hr=6.0,
        provider="primeintellect",
        provider_id="pod-1",
    )


def rent(data: Path) -> Rental:
    r = Rental("testpod", "primeintellect", "pod-1", "primeintellect 1x H100", 6.0, 6.6, time.time() - 3600, None)
    AuditLog(data / AUDIT_NAME).append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    return r


@pytest.mark.ssh
async def test_an_idle_rental_is_pushed_once_and_kept_without_terminate_idle(idle_pod, tmp_path):
    (tmp_path / "run").mkdir()
    data = tmp_path / "data"
    rent(data)
    cloud = Cloud()
    cloud.prime.append(prime_pod("pod-1", "testpod"))
    stop = asyncio.Event()
    with serve(cloud.answer) as base, receiver() as rx:
        w = Watcher(
            [idle_pod],
            WatchOptions(
                data,
                notify=NotifySettings((rx.url(),), min_interval_s=0.0),
                tick_s=0.1,
                deadline_interval_s=0.2,
                sweep_minutes=0,
            ),
            monitor_settings=FAST,
            providers=lambda: providers(base),
        )
        task = asyncio.ensure_future(w.run(stop))
        try:
            await asyncio.to_thread(
                rx.wait_for, lambda b: any("[IDLE]" in str(x.get("title")) for x in b), 30.0, "the idle push"
            )
            snap = w.snapshots["testpod"]
            assert snap.idle is not None and snap.idle.label.startswith("idle 0 min · $0.00 wasted")
            passes = len([a for a in w.state.actions if a["what"].startswith("idle")])
            await asyncio.sleep(1.0)  # several more rentals passes over the same idle streak
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    idle = [b for b in rx.bodies if "[IDLE]" in str(b.get("title"))]
    assert len(idle) == 1 and passes == 1, rx.bodies
    assert idle[0]["title"].startswith("[IDLE] testpod: idle 0 min")
    assert "GPUs idle with no run" in idle[0]["message"] and "terminate_idle = true" in idle[0]["message"]
    assert cloud.count("DELETE", "/pi/api/v1/pods/pod-1") == 0  # never terminated without the setting
    assert [r.name for r in AuditLog(data / AUDIT_NAME).open_rentals()] == ["testpod"]


@pytest.mark.ssh
async def test_with_terminate_idle_an_idle_rental_is_terminated_after_a_verified_final_backup(
    idle_pod, s3env, tmp_path
):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, 2, shard_bytes=8 * 1024)
    write_checkpoint(run_dir, 4, shard_bytes=16 * 1024)
    data = tmp_path / "data"
    rent(data)
    cloud = Cloud()
    cloud.prime.append(prime_pod("pod-1", "testpod"))
    seen: list[list[str]] = []  # the bucket's keys when the provider got the terminate

    def answer(method: str, path: str) -> tuple:
        if method == "DELETE":
            seen.append(s3env.keys("prime-train/run/"))
        return cloud.answer(method, path)

    with serve(answer) as base:
        w = Watcher(
            [idle_pod],
            WatchOptions(data, terminate_idle=True, backup=s3env.settings(), sweep_minutes=0),
            monitor_settings=FAST,
            providers=lambda: providers(base),
        )
        w._start_monitor()
        assert w.monitor is not None
        try:
            await until(lambda: (s := w.snapshots.get("testpod")) is not None and s.idle is not None, 30, "idle")
            await w.rentals_pass()
        finally:
            await w.monitor.aclose()
    assert len(seen) == 1 and "prime-train/run/step_4/manifest.json" in seen[0], seen
    assert AuditLog(data / AUDIT_NAME).open_rentals() == []
    whats = [a["what"] for a in w.state.actions if a["what"].startswith("idle")]
    assert whats == ["idle idle", "idle backed-up", "idle terminated"], w.state.actions
    assert "testpod" not in w.snapshots  # terminated on purpose: no longer watched


@pytest.mark.ssh
async def test_terminate_idle_without_a_bucket_keeps_the_pod(idle_pod, tmp_path):
    write_checkpoint(tmp_path / "run", 2, shard_bytes=1024)
    data = tmp_path / "data"
    rent(data)
    cloud = Cloud()
    cloud.prime.append(prime_pod("pod-1", "testpod"))
    with serve(cloud.answer) as base:
        w = Watcher(
            [idle_pod],
            WatchOptions(data, terminate_idle=True, sweep_minutes=0),
            monitor_settings=FAST,
            providers=lambda: providers(base),
        )
        w._start_monitor()
        assert w.monitor is not None
        try:
            await until(lambda: (s := w.snapshots.get("testpod")) is not None and s.idle is not None, 30, "idle")
            await w.rentals_pass()
            await w.rentals_pass()  # said once, retried silently
        finally:
            await w.monitor.aclose()
    assert cloud.count("DELETE", "/pi/api/v1/pods/pod-1") == 0
    failed = [a for a in w.state.actions if a["what"] == "idle failed"]
    assert len(failed) == 1 and "NOT terminated" in failed[0]["message"] and "no bucket" in failed[0]["message"]
    assert [r.name for r in AuditLog(data / AUDIT_NAME).open_rentals()] == ["testpod"]
