"""Item 7: whatever a pod sends, the monitor's memory for it stays bounded. A pod writing samples as fast as
it could grew the process without bound (asyncssh re-opened the SSH window while the data it held back was
still queued: +18 MB/s here); one reporting 6,000 GPUs a sample grew the history to ~1.5 GB. Now the probe
stream pauses the channel itself (real back-pressure), at most ``max_rate`` samples a second are taken (the
rest dropped unparsed and counted), a line without end is skipped in pieces, and a sample carries at most
64 GPUs (saying so in its errors)."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import pytest

from services.models import Pod, PodKind, PodState
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod import trusted
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection

SAMPLE = '{"v":1,"t":%s,"gpus":[],"host":{"cpu_pct":1.0},"log":["%s"]}'


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake_probe.py"
    path.write_text(textwrap.dedent(body))
    return path


def _over_ssh(script: Path):
    """The sshd pod, its probe replaced by ``script`` (uploaded, verified and started by the real start_probe)."""

    class FakeProbe(SSHConnection):
        def probe_bundle(self) -> trusted.Bundle:
            return trusted.pod_bundle(self.pod, (script,), "probe")

    return FakeProbe


async def _watch(mon: MonitorService, name: str, seconds: float) -> list[tuple[float, float, int, int]]:
    """(time, RSS MB, samples, dropped) once a second."""
    out = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(1.0)
        snap = mon.snapshot(name)
        out.append((time.monotonic() - t0, rss_mb(), snap.samples_total, snap.dropped_total))
    return out


@pytest.mark.ssh
async def test_a_pod_flooding_samples_is_rate_capped_and_bounded(pod, tmp_path):
    script = _script(
        tmp_path,
        f"""
        import sys, time
        w = sys.stdout.write
        while True:
            w({SAMPLE!r} % (time.time(), "x" * 300) + "\\n")
    """,
    )
    settings = MonitorSettings(interval=0.5, stale_after=5.0, backoff_max=2.0)
    mon = MonitorService(lambda s: None, settings=settings, connector=_over_ssh(script))
    mon.add(pod)
    try:
        seen = await _watch(mon, pod.name, 8.0)
        snap = mon.snapshot(pod.name)
    finally:
        await mon.aclose()
    assert snap.status.state is PodState.ONLINE
    (t1, rss1, n1, _), (t2, rss2, n2, d2) = seen[1], seen[-1]
    assert (n2 - n1) / (t2 - t1) <= settings.max_rate * 1.2, seen  # was ~4,000 a second
    assert n2 - n1 >= (t2 - t1) * settings.max_rate * 0.5, seen
    assert d2 > 1000 and snap.dropped_total == d2, seen  # counted, and in the snapshot
    assert rss2 - rss1 < 25, seen  # MB over ~6 s; grew ~18 MB/s


@pytest.mark.ssh
async def test_an_endless_line_is_skipped_without_holding_it(pod, tmp_path):
    script = _script(
        tmp_path,
        f"""
        import sys, time
        sys.stdout.write({SAMPLE!r} % (time.time(), "first") + "\\n")
        chunk = "y" * 65536
        while True:
            sys.stdout.write(chunk)
    """,
    )
    settings = MonitorSettings(interval=0.5, stale_after=30.0, restart_after=60.0, backoff_max=2.0)
    mon = MonitorService(lambda s: None, settings=settings, connector=_over_ssh(script))
    mon.add(pod)
    try:
        seen = await _watch(mon, pod.name, 7.0)
        snap = mon.snapshot(pod.name)
    finally:
        await mon.aclose()
    assert snap.samples_total == 1 and snap.bytes_total < 2_000, seen  # the line is read on, never kept
    assert seen[-1][1] - seen[1][1] < 25, seen


async def test_a_sample_with_6000_gpus_keeps_64_and_says_so(tmp_path):
    gpu = '{"index":%d,"name":"H100","util":50,"mem_used":1,"mem_total":80,"power_w":300,"temp_c":60}'
    script = _script(
        tmp_path,
        f"""
        import sys, threading, os, time
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
        gpus = ",".join({gpu!r} % i for i in range(6000))
        procs = ",".join('{{"pid":%d,"gpu":0,"mem":1,"cmd":"python"}}' % i for i in range(3000))
        while True:
            print('{{"v":1,"t":%f,"gpus":[%s],"procs":[%s],"host":{{}}}}' % (time.time(), gpus, procs), flush=True)
            time.sleep(0.05)
    """,
    )
    settings = MonitorSettings(interval=0.2, stale_after=5.0, backoff_max=2.0, history_len=200)
    mon = MonitorService(
        lambda s: None, settings=settings, connector=lambda pod: LocalConnection(pod, probe_path=script)
    )
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    before = rss_mb()
    try:
        deadline = time.monotonic() + 12
        while mon.snapshot("p").samples_total < 40 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        snap = mon.snapshot("p")
    finally:
        await mon.aclose()
    assert snap.samples_total >= 40
    latest = snap.latest
    assert len(latest.gpus) == 64 and len(latest.procs) == 256
    assert "the pod reported 6000 gpus in one sample: the first 64 are shown" in latest.errors
    assert rss_mb() - before < 60  # 40 samples of 6,000 GPUs and 3,000 procs held whole: ~+200 MB


async def test_huge_samples_keep_the_history_within_its_byte_budget(tmp_path):
    """Samples of 400 log lines of 8,000 characters (~3.3 MB each, under a local pipe's 4 MiB line limit):
    the history keeps at most ``history_bytes`` of them (the newest always), and each text field is cut to
    MAX_TEXT characters."""
    from services.models import MAX_TEXT

    script = _script(
        tmp_path,
        """
        import sys, threading, os, time, json
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
        log = json.dumps(["x" * 8000] * 400)
        name = json.dumps("H" * 100_000)
        while True:
            print('{"v":1,"t":%f,"gpus":[{"index":0,"name":%s,"util":1,"mem_used":1,"mem_total":2}],"host":{},'
                  '"log":%s}' % (time.time(), name, log), flush=True)
            time.sleep(0.1)
    """,
    )
    settings = MonitorSettings(interval=0.2, stale_after=5.0, backoff_max=2.0, history_len=600, history_bytes=8 << 20)
    mon = MonitorService(
        lambda s: None, settings=settings, connector=lambda pod: LocalConnection(pod, probe_path=script)
    )
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        deadline = time.monotonic() + 20
        while mon.snapshot("p").samples_total < 12 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        snap = mon.snapshot("p")
    finally:
        await mon.aclose()
    assert snap.samples_total >= 12, snap.samples_total
    assert 1 <= len(snap.history) <= 3, len(snap.history)  # ~3.3 MB each within 8 MiB: 12 were received
    assert sum(len(line) for s in snap.history for line in s.log) <= 3 * 400 * 8000
    assert len(snap.latest.gpus[0].name) == MAX_TEXT
