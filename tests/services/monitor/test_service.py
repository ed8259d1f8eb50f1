"""MonitorService end to end: real sshd, real probe, real subprocesses; states, gaps, reconnects."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import pytest

from services.models import Pod, PodKind, PodSnapshot, PodState
from services.monitor.service import MonitorService, backoff_delay
from services.monitor.worker import MonitorSettings
from services.pod.local import LocalConnection

FAST = MonitorSettings(interval=0.2, stale_after=1.0, backoff_max=2.0, keepalive_interval=2.0)


class Recorder:
    """Collects every snapshot the service emits (what the App would receive)."""

    def __init__(self) -> None:
        self.snaps: list[PodSnapshot] = []

    def __call__(self, snap: PodSnapshot) -> None:
        self.snaps.append(snap)

    def states(self, name: str) -> list[PodState]:
        out: list[PodState] = []
        for s in self.snaps:
            if s.pod.name == name and (not out or out[-1] is not s.status.state):
                out.append(s.status.state)
        return out


async def wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_backoff_doubles_up_to_the_cap():
    assert [backoff_delay(i, 60) for i in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]


async def test_streams_samples_over_ssh(sshd, client_home, tmp_path):
    client_home.trust()
    rec = Recorder()
    mon = MonitorService(rec, settings=FAST)
    mon.add(sshd.pod(probe_dir=str(tmp_path / "pc")))
    try:
        snap = await wait_for(
            lambda: mon.snapshot("testpod").samples_total >= 3 and mon.snapshot("testpod"), what="3 samples"
        )
    finally:
        await mon.aclose()
    assert rec.states("testpod")[:2] == [PodState.CONNECTING, PodState.ONLINE]
    assert snap.status.state is PodState.ONLINE and "nvidia-smi" in snap.status.reason
    assert len(snap.latest.gpus) == 8 and snap.bytes_total > 0 and snap.malformed_total == 0
    assert [s.t for s in snap.history] == sorted(s.t for s in snap.history)


async def test_sshd_killed_mid_stream_goes_offline_then_recovers(sshd, client_home, tmp_path):
    client_home.trust()
    rec = Recorder()
    mon = MonitorService(rec, settings=FAST)
    mon.add(sshd.pod(probe_dir=str(tmp_path / "pc")))
    try:
        await wait_for(lambda: mon.snapshot("testpod").samples_total >= 2, what="streaming")
        sshd.kill()
        offline = await wait_for(
            lambda: mon.snapshot("testpod").status.state is PodState.OFFLINE and mon.snapshot("testpod"), what="offline"
        )
        assert offline.status.reason and offline.status.next_retry is not None
        assert offline.gaps and offline.gaps[-1].end is None  # the gap is open while it lasts
        before = offline.samples_total
        await asyncio.sleep(1.5)  # a few failed retries against a dead port
        assert mon.snapshot("testpod").status.state is PodState.OFFLINE
        sshd.start()
        back = await wait_for(
            lambda: mon.snapshot("testpod").samples_total > before + 1 and mon.snapshot("testpod"),
            timeout=20,
            what="back online",
        )
    finally:
        await mon.aclose()
    assert back.status.state is PodState.ONLINE
    gap = back.gaps[-1]
    assert gap.end is not None and gap.end - gap.start >= 1.5
    states = rec.states("testpod")
    assert states.index(PodState.OFFLINE) < len(states) - 1 and states[-1] is PodState.ONLINE


async def test_unknown_host_key_waits_for_the_user_then_trusts(sshd, client_home, tmp_path):
    mon = MonitorService(Recorder(), settings=FAST)
    mon.add(sshd.pod(probe_dir=str(tmp_path / "pc")))
    try:
        snap = await wait_for(
            lambda: mon.snapshot("testpod").status.state is PodState.HOSTKEY_UNKNOWN and mon.snapshot("testpod"),
            what="host key prompt",
        )
        prompt = snap.status.host_key
        assert prompt.fingerprint.startswith("SHA256:") and not prompt.changed
        await asyncio.sleep(1.0)  # no silent retry, no silent trust
        assert mon.snapshot("testpod").status.state is PodState.HOSTKEY_UNKNOWN
        assert not client_home.known_hosts.exists()
        mon.trust_host_key("testpod")
        await wait_for(lambda: mon.snapshot("testpod").samples_total >= 1, what="sample after trust")
    finally:
        await mon.aclose()
    assert client_home.known_hosts.read_text().strip() == sshd.known_hosts_line


async def test_changed_host_key_cannot_be_trusted_from_the_app(sshd, client_home, tmp_path):
    client_home.known_hosts.write_text(
        f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    )
    mon = MonitorService(Recorder(), settings=FAST)
    mon.add(sshd.pod())
    try:
        snap = await wait_for(
            lambda: mon.snapshot("testpod").status.state is PodState.HOSTKEY_CHANGED and mon.snapshot("testpod"),
            what="changed key",
        )
        assert snap.status.host_key.changed and "man-in-the-middle" in snap.status.reason
        with pytest.raises(Exception, match="no new host key"):
            mon.trust_host_key("testpod")
    finally:
        await mon.aclose()


async def test_auth_failure_is_reported_and_not_retried_in_a_loop(sshd, client_home, tmp_path):
    client_home.trust()
    client_home.write_ssh_config(identity=tmp_path / "missing-key")
    rec = Recorder()
    mon = MonitorService(rec, settings=FAST)
    mon.add(sshd.pod())
    try:
        await wait_for(lambda: mon.snapshot("testpod").status.state is PodState.AUTH_FAILED, what="auth failed")
        count = len(rec.snaps)
        await asyncio.sleep(1.0)
        assert len(rec.snaps) == count  # waits for the user instead of hammering the pod
    finally:
        await mon.aclose()


async def test_refused_pod_backs_off_1_2_then_cap():
    now = [1000.0]
    rec = Recorder()
    mon = MonitorService(rec, settings=FAST, clock=lambda: now[0])

    def delays() -> list[float]:
        return [
            s.status.next_retry - now[0]
            for s in rec.snaps
            if s.status.state is PodState.OFFLINE and s.status.next_retry is not None
        ]

    mon.add(Pod(name="dead", host="127.0.0.1", port=1))
    try:
        await wait_for(lambda: len(delays()) >= 4, timeout=12, what="four retries")
    finally:
        await mon.aclose()
    offline = [s for s in rec.snaps if s.status.state is PodState.OFFLINE]
    assert offline[0].status.reason == "connection refused"
    assert delays()[:4] == [1.0, 2.0, 2.0, 2.0]  # FAST caps the backoff at 2 s


def _fake_probe(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake_probe.py"
    path.write_text(textwrap.dedent(body))
    return path


SAMPLE = '{"v":1,"t":%d,"gpus":[],"host":{"cpu_pct":1.0}}'


async def test_malformed_probe_lines_are_counted_and_skipped(tmp_path):
    script = _fake_probe(
        tmp_path,
        f"""
        import sys, time
        lines = ['{SAMPLE % 1}', 'garbage', '{{"v":1}}', '{{"v":9,"t":2}}', '\\x00\\xff', '{SAMPLE % 3}']
        for line in lines:
            print(line, flush=True)
        sys.stdin.read()
    """,
    )
    mon = MonitorService(Recorder(), settings=FAST, connector=lambda pod: LocalConnection(pod, probe_path=script))
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        snap = await wait_for(
            lambda: (
                mon.snapshot("p").samples_total == 2 and mon.snapshot("p").malformed_total == 4 and mon.snapshot("p")
            ),
            what="2 good, 4 bad",
        )
    finally:
        await mon.aclose()
    assert [s.t for s in snap.history] == [1, 3]
    assert snap.status.state is PodState.ONLINE


async def test_silent_probe_turns_stale_and_the_gap_closes_when_samples_resume(tmp_path):
    script = _fake_probe(
        tmp_path,
        f"""
        import time
        print('{SAMPLE % 1}', flush=True)
        time.sleep(1.6)
        print('{SAMPLE % 2}', flush=True)
        time.sleep(60)
    """,
    )
    rec = Recorder()
    mon = MonitorService(rec, settings=FAST, connector=lambda pod: LocalConnection(pod, probe_path=script))
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        await wait_for(lambda: mon.snapshot("p").samples_total == 2, what="second sample")
    finally:
        await mon.aclose()
    assert rec.states("p") == [PodState.CONNECTING, PodState.ONLINE, PodState.STALE, PodState.ONLINE]
    gap = [s for s in rec.snaps if s.samples_total == 2][-1].gaps[-1]
    assert gap.end is not None and 1.0 <= gap.end - gap.start < 3


async def test_probe_that_dies_reports_its_stderr(tmp_path):
    script = _fake_probe(
        tmp_path,
        """
        import sys
        sys.exit("python3: cannot import name 'x' (a broken pod)")
    """,
    )
    mon = MonitorService(Recorder(), settings=FAST, connector=lambda pod: LocalConnection(pod, probe_path=script))
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        snap = await wait_for(
            lambda: mon.snapshot("p").status.state is PodState.OFFLINE and mon.snapshot("p"), what="offline"
        )
    finally:
        await mon.aclose()
    assert "a broken pod" in snap.status.reason and snap.status.next_retry is not None


async def test_remove_stops_the_probe_and_a_broken_subscriber_does_not_stop_sampling(tmp_path):
    calls = []

    def flaky(snap):
        calls.append(snap)
        raise RuntimeError("subscriber bug")

    mon = MonitorService(flaky, settings=FAST)
    mon.add(Pod(name="local", kind=PodKind.LOCAL))
    await wait_for(lambda: mon.snapshot("local").samples_total >= 2, what="local samples")
    host = mon.snapshot("local").latest.host
    assert host.mem_total > 0 and host.disk_total > 0 and host.nofile_soft > 0
    await mon.remove("local")
    assert mon.names() == [] and len(calls) >= 3


async def test_remove_always_stops_the_pod_even_when_it_races_a_retry_timer():
    """Python 3.11's wait_for can lose a cancellation that coincides with its timeout; the monitor
    must stop a removed pod anyway (it once kept retrying for ever and remove() never returned)."""
    mon = MonitorService(Recorder(), settings=FAST)
    names = [f"dead{i}" for i in range(40)]
    for name in names:
        mon.add(Pod(name=name, host="127.0.0.1", port=1))
    await wait_for(lambda: all(mon.snapshot(n).status.next_retry for n in names), what="all offline")
    loop = asyncio.get_running_loop()
    removals = []
    for i, name in enumerate(names):  # land the removals on and around the 1 s retry boundary
        when = loop.time() + 0.9 + i * 0.005
        removals.append(asyncio.ensure_future(_remove_at(mon, name, when)))
    done, pending = await asyncio.wait(removals, timeout=15)
    assert not pending, "remove() hung"
    assert mon.names() == []
    tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("monitor:")]
    assert tasks == []


async def _remove_at(mon: MonitorService, name: str, when: float) -> None:
    await asyncio.sleep(max(0.0, when - asyncio.get_running_loop().time()))
    await mon.remove(name)
