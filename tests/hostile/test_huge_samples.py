"""Item 8: log files growing with non-UTF-8 bytes must not blind the monitor. The probe caps what one sample
carries (and says how much it cut), the client skips a line over its hard limit without holding it, and a
pod that sends bytes but no VALID sample is STALE, not "online · 0 malformed"."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from services.models import HostSample, Pod, PodKind, PodSnapshot, PodState
from services.monitor.lines import MAX_LINE, LineReader
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection

AGENT = Path(__file__).resolve().parents[2] / "services" / "pod" / "agent"
MB = 1_000_000
SAMPLE = '{"v":1,"t":%d,"gpus":[],"host":{"cpu_pct":1.0}}'


class Recorder:
    def __init__(self) -> None:
        self.snaps: list[PodSnapshot] = []

    def __call__(self, snap: PodSnapshot) -> None:
        self.snaps.append(snap)

    def states(self) -> list[PodState]:
        out: list[PodState] = []
        for s in self.snaps:
            if not out or out[-1] is not s.status.state:
                out.append(s.status.state)
        return out


async def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def flood(path: Path, n: int, line: int = 1000, byte: bytes = b"\xff") -> None:
    """Append ``n`` bytes of ``byte`` to ``path``, a newline every ``line`` bytes (0: none at all)."""
    chunk = (byte * (line - 1) + b"\n") if line else byte * 4096
    with path.open("ab") as fh:
        fh.write(chunk * (n // len(chunk)))


# ----------------------------------------------------------------------------------------- on the pod
class RawProbe:
    """probe.py as a subprocess; its stdout kept as raw lines (their size is the point)."""

    def __init__(self, run: Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-u",
                str(AGENT / "probe.py"),
                "--backend",
                "none",
                "--interval",
                "0.2",
                "--run-dir",
                str(run),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def line(self) -> bytes:
        raw = self.proc.stdout.readline()
        assert raw, self.proc.stderr.read().decode()
        return raw

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "logs" / "latest").mkdir(parents=True)
    for name in ("logs/trainer.log", "logs/latest/orchestrator.log", "metrics.jsonl"):
        (run / name).write_bytes(b"")
    return run


def test_the_probe_caps_a_sample_and_counts_what_it_cut(run_dir: Path):
    probe = RawProbe(run_dir)
    try:
        probe.line()
        flood(run_dir / "logs" / "trainer.log", 5 * MB)  # 0xff lines: 6 bytes each as a JSON escape
        flood(run_dir / "logs" / "latest" / "orchestrator.log", 3 * MB, line=0)  # one endless line
        flood(run_dir / "logs" / "latest" / "orchestrator.log", 1 * MB, line=50_000, byte=b"\x01")
        with (run_dir / "metrics.jsonl").open("ab") as fh:  # a 3 MB metrics line, then a good one
            fh.write(b'{"step": 1, "x": "' + b"a" * 3 * MB + b'"}\n{"step": 2, "time/step": 1.5}\n')
        cut = {"log_bytes": 0, "lines": 0, "metrics_bytes": 0, "metrics_lines": 0}
        metrics, sizes = [], []
        for _ in range(6):
            raw = probe.line()
            sizes.append(len(raw))
            sample = json.loads(raw)
            for key in cut:
                cut[key] += sample["cut"][key]
            metrics += sample["metrics"]
            assert all(len(line.encode()) <= 4096 * 3 for line in sample["log"])
        with (run_dir / "logs" / "trainer.log").open("ab") as fh:
            fh.write(b"Step 7 | 1.2s | loss 0.3\n")
        for _ in range(20):
            sample = json.loads(probe.line())
            if sample["log"]:
                break
    finally:
        probe.close()
    assert max(sizes) < 1024 * 1024  # was ~4 MiB: past the SSH window, every sample lost
    assert cut["log_bytes"] > 4 * MB and cut["lines"] > 0
    assert cut["metrics_lines"] == 1 and cut["metrics_bytes"] >= 3 * MB  # dropped whole: a cut JSON is no JSON
    assert metrics == ['{"step": 2, "time/step": 1.5}']
    assert sample["log"] == ["trainer: Step 7 | 1.2s | loss 0.3"]  # and the log is followed on


def test_the_line_is_utf8_and_a_sample_over_the_last_guard_loses_its_lines_not_its_life():
    from services.pod.agent.rundir import MAX_SAMPLE_BYTES, encode, fit

    line = encode({"log": ["\ufffd" * 10, "odd name \udcff"]})  # what decode("utf-8", "replace") makes
    assert len(line) < 80 and json.loads(line)["log"] == ["\ufffd" * 10, "odd name \udcff"]
    sample = {
        "v": 1,
        "t": 1.0,
        "log": ["x" * 600_000, "y" * 600_000],
        "metrics": ["{}"],
        "errors": ["e"] * 20,
        "cut": {"log_bytes": 5, "lines": 1, "metrics_bytes": 0, "metrics_lines": 0},
    }
    out = fit(sample, encode(sample), 20)
    assert len(out) <= MAX_SAMPLE_BYTES
    got = json.loads(out)
    assert got["log"] == [] and got["metrics"] == [] and len(got["errors"]) == 20
    assert got["cut"]["lines"] == 3 and got["cut"]["log_bytes"] > 1_200_000 and got["cut"]["metrics_lines"] == 1
    assert "its log, metrics and trace lines were left out" in got["errors"][-1]


@pytest.mark.ssh
async def test_a_flooded_log_never_blinds_the_monitor_over_ssh(pod, run_dir: Path):
    """The sshd pod's probe; two log files receive 5 MB of 0xff between samples, three times over."""
    rec = Recorder()
    settings = MonitorSettings(interval=0.3, stale_after=5.0, backoff_max=2.0, keepalive_interval=2.0)
    mon = MonitorService(rec, settings=settings)
    mon.add(replace(pod, run_dir=str(run_dir)))
    try:
        await wait_for(lambda: mon.snapshot(pod.name).samples_total >= 1, what="a first sample")
        for _ in range(3):
            before = mon.snapshot(pod.name).samples_total
            await asyncio.to_thread(flood, run_dir / "logs" / "trainer.log", 5 * MB, 60_000)
            await asyncio.to_thread(flood, run_dir / "logs" / "latest" / "orchestrator.log", 5 * MB, 60_000)
            await wait_for(
                lambda before=before: mon.snapshot(pod.name).samples_total >= before + 3, what="samples go on"
            )
        snap = mon.snapshot(pod.name)
    finally:
        await mon.aclose()
    assert snap.status.state is PodState.ONLINE and snap.malformed_total == 0
    assert PodState.STALE not in rec.states() and PodState.OFFLINE not in rec.states()
    assert snap.cut_bytes > 10 * MB and snap.cut_lines > 0
    assert any(s.cut_bytes for s in snap.history)


# ----------------------------------------------------------------------------------------- the client
def _fake_probe(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake_probe.py"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize("first", ["", SAMPLE % 1])
async def test_garbage_without_a_valid_sample_is_stale_with_the_reason(tmp_path, first):
    script = _fake_probe(
        tmp_path,
        f"""
        import os, sys, threading, time
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
        if {first!r}:
            print({first!r}, flush=True)
        while True:
            print("garbage " * 20, flush=True)
            time.sleep(0.1)
    """,
    )
    mon = MonitorService(
        Recorder(),
        settings=MonitorSettings(interval=0.2, stale_after=1.0, backoff_max=2.0),
        connector=lambda pod: LocalConnection(pod, probe_path=script),
    )
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        snap = await wait_for(
            lambda: mon.snapshot("p").status.state is PodState.STALE and mon.snapshot("p"), what="stale"
        )
    finally:
        await mon.aclose()
    assert "no valid sample for 1 s" in snap.status.reason and "malformed" in snap.status.reason
    assert snap.malformed_total > 0 and snap.samples_total == (1 if first else 0)


async def test_a_line_over_the_hard_limit_is_malformed_and_skipped(tmp_path):
    script = _fake_probe(
        tmp_path,
        f"""
        import sys
        print({SAMPLE % 1!r}, flush=True)
        sys.stdout.write("x" * {MAX_LINE + 3 * 1024 * 1024} + "\\n")
        sys.stdout.write("y" * {5 * 1024 * 1024} + "\\n")  # past asyncio's own limit (4 MiB), not ours
        sys.stdout.write({SAMPLE % 2!r} + "\\n")
        sys.stdout.flush()
        sys.stdin.read()
    """,
    )
    rec = Recorder()
    mon = MonitorService(
        rec,
        settings=MonitorSettings(interval=0.2, stale_after=5.0, backoff_max=2.0),
        connector=lambda pod: LocalConnection(pod, probe_path=script),
    )
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        snap = await wait_for(lambda: mon.snapshot("p").samples_total == 2 and mon.snapshot("p"), what="2 samples")
    finally:
        await mon.aclose()
    assert [s.t for s in snap.history] == [1, 2] and snap.malformed_total == 2
    assert snap.status.state is PodState.ONLINE and PodState.OFFLINE not in rec.states()


@pytest.mark.ssh
async def test_the_line_reader_over_ssh_joins_long_lines_and_skips_overlong_ones(pod, tmp_path):
    """asyncssh hands a line past its window (2 MiB) in pieces: a 3 MiB line is joined, a line over the
    hard limit is skipped, the lines around it are whole."""
    script = tmp_path / "lines.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        w = sys.stdout.write
        w("first\\n"); w("a" * (3 * 1024 * 1024) + "\\n"); w("b" * {MAX_LINE + 1024 * 1024} + "\\n"); w("last")
    """)
    )
    conn = SSHConnection(pod)
    await conn.connect()
    try:
        proc = await conn.start(f"python3 {script}")
        reader = LineReader(proc)
        got = [await reader.readline() for _ in range(5)]
    finally:
        await conn.close()
    assert got[0] == b"first\n" and got[1] == b"a" * (3 * 1024 * 1024) + b"\n"
    assert got[2] is None and reader.overlong == 1  # skipped, never held whole
    assert got[3:] == [b"last", b""]


# ----------------------------------------------------------------------------------------- shown
async def test_the_cut_is_shown_in_the_pod_list_and_the_monitor_pane():
    from textual.app import App, ComposeResult

    from services.models import PodStatus, Sample
    from widgets.monitor_pane import MonitorPane
    from widgets.pod_list import PodList, cut_text

    class Panes(App[None]):
        def compose(self) -> ComposeResult:
            yield PodList(id="pods")
            yield MonitorPane()

    pod = Pod(name="p1", host="10.0.0.1")
    sample = Sample(t=1.0, gpus=(), host=HostSample(), cut_bytes=3_100_000, cut_lines=12)
    snap = PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "via nvml"),
        history=(sample,),
        samples_total=1,
        last_received=1.0,
        cut_bytes=3_100_000,
        cut_lines=12,
    )
    assert cut_text(snap) == "log cut: 3.1 MB skipped"
    assert cut_text(replace(snap, cut_bytes=0, cut_lines=0)) == ""
    async with Panes().run_test(size=(140, 40)) as pilot:
        pods = pilot.app.query_one(PodList)
        pods.add_pod(pod)
        await pilot.pause()
        pods.update_snapshot(snap, now=2.0)
        pilot.app.query_one(MonitorPane).show(snap, now=2.0)
        await pilot.pause()
        assert "log cut: 3.1 MB skipped" in pods.row("p1").text
        assert "log cut: 3.1 MB skipped" in str(pilot.app.query_one("#monitor-stats").render())
