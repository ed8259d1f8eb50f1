"""MonitorService over the real `local` pod and probe, at start and when the run dir changes: a run found
stalled 2 h ago alerts on the first sample with its real last-step age (the probe's re-read of
metrics.jsonl is not new progress); a console-only run gone silent alerts too; a pod without run_dir
follows its newest recorded launch, and ``set_run_dir`` (a launch's done event) reopens the probe on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services import runs
from services.connect import open_connection
from services.models import Pod, PodKind, PodSnapshot
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.connection import Connection
from services.pod.local import LocalConnection
from tests.services.monitor.test_service import wait_for

REPO = Path(__file__).resolve().parents[3]


def write_run(run: Path, steps: int, *extra: str) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.001",
            "--max-steps",
            str(steps),
            "--ckpt-interval",
            "0",
            *extra,
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    log = run / "logs" / "trainer.log"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-1]))  # it did not finish
    return run


def age_all(run: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in [*(run / "logs").glob("*.log"), *run.glob("*.jsonl"), *(run / "configs").glob("*.json")]:
        os.utime(p, (t, t))


def tracking(probes: list) -> type[LocalConnection]:
    """The real local connection, keeping every probe stream it starts in ``probes`` (a test kills one: the
    connection drops and the monitor starts another)."""

    class Tracked(LocalConnection):
        async def start_probe(self, args):
            stream = await super().start_probe(args)
            probes.append(stream)
            return stream

    return Tracked


def writing_before_the_probe(write: Callable[[], None]) -> Callable[[Pod], Connection]:
    """The pod's real connection, with ``write()`` done between the monitor's first look and the probe's start."""

    def connector(pod: Pod) -> Connection:
        conn = open_connection(pod)
        start_probe = conn.start_probe

        async def late(args):
            write()
            return await start_probe(args)

        conn.start_probe = late  # type: ignore[method-assign]
        return conn

    return connector


async def until_the_oom_alert(mon: MonitorService) -> PodSnapshot:
    """Pod "p"'s snapshot once it shows the OOM alert (within 20 s); the monitor is closed either way."""
    try:
        return await wait_for(
            lambda: "log:cuda-oom" in {a.id for a in mon.snapshot("p").alerts} and mon.snapshot("p"),
            what="the OOM alert",
            timeout=20,
        )
    finally:
        await mon.aclose()


async def first_look(pod: Pod, **kw) -> tuple[MonitorService, PodSnapshot]:
    mon = MonitorService(lambda s: None, settings=MonitorSettings(interval=0.2))
    for k, v in kw.items():
        setattr(mon, k, v)
    mon.add(pod)
    snap = await wait_for(
        lambda: mon.snapshot(pod.name).samples_total >= 1 and mon.snapshot(pod.name), what="first sample"
    )
    return mon, snap


async def test_a_run_stalled_two_hours_ago_alerts_on_the_first_sample(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 8)
    age_all(run, 7200)
    mon, snap = await first_look(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run)))
    await mon.aclose()
    assert snap.run is not None and snap.run.step == 8
    assert 7100 < snap.latest.t - snap.run.last_step_at < 7400
    assert "no-progress" in {a.id for a in snap.alerts}
    assert any("Step 8" in line for line in snap.log_tail)  # the pane shows the tail at once


async def test_a_console_only_run_gone_silent_alerts(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 5, "--no-metrics")
    age_all(run, 7200)
    mon, snap = await first_look(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run)))
    await mon.aclose()
    assert snap.run is not None and snap.run.step == 5
    assert "no-progress" in {a.id for a in snap.alerts}


async def test_a_pod_without_run_dir_follows_its_recorded_launch_and_a_new_one(tmp_path: Path) -> None:
    old, new = write_run(tmp_path / "old", 3), write_run(tmp_path / "new", 6)
    records = tmp_path / "records"
    runs.save_record(records, {"id": "r1", "pod": "p", "started": 1.0, "run_dir": str(old)})
    runs.save_record(records, {"id": "r0", "pod": "other", "started": 2.0, "run_dir": str(new)})
    mon, snap = await first_look(Pod(name="p", kind=PodKind.LOCAL), runs_dir=records)
    try:
        assert snap.run is not None and snap.run.step == 3  # from the record, not pods.toml
        pod = mon.set_run_dir("p", str(new))
        assert pod is not None and pod.run_dir == str(new) and mon.snapshot("p").pod.run_dir == str(new)
        assert mon.set_run_dir("p", str(new)) is None  # nothing changed
        snap = await wait_for(
            lambda: (s := mon.snapshot("p")).run is not None and s.run.step == 6 and s, what="the new run's progress"
        )
        assert snap.status.state.value == "online" and not any(g.end is None for g in snap.gaps)
    finally:
        await mon.aclose()


async def test_cost_so_far_counts_from_the_rental_and_the_pane_says_so(tmp_path: Path) -> None:
    from textual.app import App, ComposeResult

    from widgets.monitor_pane import MonitorPane

    run = write_run(tmp_path / "run", 8)
    rented = time.time() - 3600
    pod = Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run), price_per_hr=36.0)
    mon, snap = await first_look(pod, rented_at=lambda p: rented if p.name == "p" else None)
    await mon.aclose()
    assert snap.run.cost_basis == "since rented"
    assert abs(snap.run.cost_so_far - 36.0 * (snap.latest.t - rented) / 3600) < 0.05  # ≈ $36, not 8 steps' worth

    class Host(App):
        def compose(self) -> ComposeResult:
            yield MonitorPane(id="pane")

    app = Host()
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(MonitorPane)
        pane.show(snap, snap.latest.t)
        await pilot.pause()
        assert "spent (since rented)" in str(pane.query_one("#run-progress").render())


@pytest.mark.parametrize("where", ["remote", "this machine"])
async def test_a_first_look_that_ends_after_the_run_dir_changed_is_not_the_new_runs(tmp_path: Path, where: str) -> None:
    """set_run_dir while the old run's first look is still on its way (a pod's: its script's answer; this
    machine's: its back-fill, the rental's lookup): the new run starts clean (no stalled alert or step of the old
    run), and gets a first look of its own."""
    import asyncio
    import threading

    old = write_run(tmp_path / "old", 8)
    age_all(old, 7200)  # the old run: stalled two hours ago
    new = write_run(tmp_path / "new", 4)
    gate, held = asyncio.Event(), threading.Event()
    looks: list[str] = []

    class Remote(Connection):  # this machine's probe, its first look through run() as a pod's
        def __init__(self, pod: Pod) -> None:
            super().__init__(pod)
            self.inner = LocalConnection(pod)

        async def connect(self) -> None:
            await self.inner.connect()

        async def start_probe(self, args):
            return await self.inner.start_probe(args)

        async def close(self) -> None:
            await self.inner.close()

        async def run(self, command, timeout=30.0, input=None):  # the first look's exec: held until the test says
            if "--run-dir" not in command and str(old) in command:
                looks.append("old")
                await gate.wait()
            return await self.inner.run(command, timeout=timeout, input=input)

        async def start(self, command: str):
            return await self.inner.start(command)

        async def put_file(self, data: bytes, remote: str, mode: int = 0o644) -> None:
            await self.inner.put_file(data, remote, mode)

        async def exists(self, remote: str) -> bool:
            return await self.inner.exists(remote)

    def rented_at(pod: Pod) -> None:  # (in a thread) this machine's back-fill of the old run: held
        if where == "this machine" and pod.run_dir == str(old):
            looks.append("old")
            held.wait(10)

    mon = MonitorService(
        lambda s: None,
        settings=MonitorSettings(interval=0.2),
        connector=Remote if where == "remote" else LocalConnection,
    )
    mon.rented_at = rented_at
    mon.add(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(old)))
    try:
        await wait_for(lambda: looks == ["old"], what="the old run's first look, waiting")
        assert mon.set_run_dir("p", str(new)) is not None
        gate.set()
        held.set()
        snap = await wait_for(
            lambda: (s := mon.snapshot("p")).run is not None and s.run.step == 4 and s, what="the new run's progress"
        )
        assert "no-progress" not in {a.id for a in snap.alerts}
        assert not any("Step 8" in line for line in snap.log_tail)
    finally:
        held.set()
        await mon.aclose()


async def test_following_a_newer_recorded_launch_after_a_reconnect_starts_a_new_run(tmp_path: Path) -> None:
    """A pod without run_dir follows its newest recorded launch; when a newer launch is recorded and the
    probe reconnects, the new run starts clean (the old run's step 8 does not stand for the new run's 2)."""
    old, new = write_run(tmp_path / "old", 8), write_run(tmp_path / "new", 2)
    records = tmp_path / "records"
    runs.save_record(records, {"id": "r1", "pod": "p", "started": 1.0, "run_dir": str(old)})
    probes: list = []
    mon = MonitorService(
        lambda s: None, settings=MonitorSettings(interval=0.2, backoff_max=0.5), connector=tracking(probes)
    )
    mon.runs_dir = records
    mon.add(Pod(name="p", kind=PodKind.LOCAL))
    try:
        await wait_for(lambda: (s := mon.snapshot("p")).run is not None and s.run.step == 8, what="the old run")
        runs.save_record(records, {"id": "r2", "pod": "p", "started": 2.0, "run_dir": str(new)})
        probes[-1]._proc.kill()  # the connection drops; the monitor reconnects and looks again
        snap = await wait_for(
            lambda: (s := mon.snapshot("p")).pod.run_dir == str(new) and s.run is not None and s.samples_total and s,
            what="the new run followed",
        )
        assert snap.run.step == 2, snap.run
    finally:
        await mon.aclose()


async def test_a_run_that_wrote_and_crashed_between_the_first_look_and_the_probe_is_seen(tmp_path: Path) -> None:
    """The pod is watched as its run is launched: the first look finds no log yet, the run writes its steps and
    an OOM and dies, and only then does the probe start. The probe read the logs it found at its start from their
    end, so none of those lines ever showed (the incident corpus's OOM run under load: a crash with no cause).
    Now a look that found no log has the probe read them from their start."""
    run = tmp_path / "run"
    lines = [
        "14:00:01 SUCCESS Step 1 |    1.0s | Loss 0.5000",
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]

    def wrote_and_ended() -> None:  # between the look and the probe
        (run / "logs").mkdir(parents=True, exist_ok=True)
        (run / "logs" / "trainer.log").write_text("\n".join(lines) + "\n")

    mon = MonitorService(
        lambda s: None, settings=MonitorSettings(interval=0.2), connector=writing_before_the_probe(wrote_and_ended)
    )
    pod = Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run))
    mon.add(pod)
    snap = await until_the_oom_alert(mon)
    assert any("CUDA out of memory" in line for line in snap.log_tail)
    assert snap.run is not None and snap.run.step == 1


async def test_lines_written_between_the_first_look_and_the_probe_are_seen(tmp_path: Path) -> None:
    """The first look finds the run's log with a step in it; the run then writes an OOM and dies before the probe
    starts. The probe read the logs present at its start from their end, so the crash's cause never showed (a crash
    alert without the OOM). Now the probe goes on from where the look read each log."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    log = run / "logs" / "trainer.log"
    log.write_text("14:00:01 SUCCESS Step 1 |    1.0s | Loss 0.5000\n")

    def crashed() -> None:  # between the look and the probe: the run wrote, and ended
        with log.open("a") as f:
            f.write(
                "Traceback (most recent call last):\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            )

    mon = MonitorService(
        lambda s: None, settings=MonitorSettings(interval=0.2), connector=writing_before_the_probe(crashed)
    )
    mon.add(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run)))
    snap = await until_the_oom_alert(mon)
    tail = [line for line in snap.log_tail if "Step 1" in line or "CUDA out of memory" in line]
    assert len(tail) == 2, snap.log_tail  # each line once: the look's and the probe's do not overlap


async def test_a_reconnect_loses_no_log_line(tmp_path: Path) -> None:
    """The probe stops reading (its connection hangs, then drops) while the run writes its last step and an OOM and
    dies. The next probe read the logs present at its start from their end: those lines were lost, and with them
    the crash's cause. Now it goes on from where the last sample left each log."""
    import signal

    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    log = run / "logs" / "trainer.log"
    log.write_text("14:00:01 SUCCESS Step 1 |    1.0s | Loss 0.5000\n")
    probes: list = []
    mon = MonitorService(
        lambda s: None, settings=MonitorSettings(interval=0.2, backoff_max=0.5), connector=tracking(probes)
    )
    mon.add(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run)))
    try:
        with log.open("a") as f:
            f.write("14:00:02 SUCCESS Step 2 |    1.0s | Loss 0.4999\n")
        await wait_for(lambda: (s := mon.snapshot("p")).run is not None and s.run.step == 2, what="step 2")
        first = probes[-1]
        os.kill(first._proc.pid, signal.SIGSTOP)  # reads nothing more
        with log.open("a") as f:
            f.write(
                "14:00:03 SUCCESS Step 3 |    1.0s | Loss 0.4998\n"
                "Traceback (most recent call last):\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            )
        os.kill(first._proc.pid, signal.SIGKILL)  # the connection drops; the monitor starts another probe
    except BaseException:
        await mon.aclose()
        raise
    snap = await until_the_oom_alert(mon)
    assert len(probes) >= 2
    assert snap.run is not None and snap.run.step == 3, snap.run
    assert sum("Step 2" in line for line in snap.log_tail) == 1, snap.log_tail  # nothing read twice
