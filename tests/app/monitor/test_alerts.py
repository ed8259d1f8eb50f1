"""Health alerts in the real app (Pilot).

End to end over the real sshd: the fake nvidia-smi's ``inference_dead`` scenario drops GPU 0 to 0 MiB
while the simulated trainer keeps logging -> "inference server likely died at step N" shows in the
sidebar badge, a toast and the monitor pane, with N a step the trainer really logged; then the trainer
dies with a CUDA OOM line in a log -> its alert, with the line, and the log tail highlights it.

Toast bookkeeping (once per alert id per pod; again only after it cleared) is driven with hand-made
snapshots through the App's own ``on_snapshot`` entry, the monitor's pod parked on a connection that
never completes, so nothing else speaks for that pod.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.tui import PrimeTrainApp
from services.models import Alert, Pod, PodKind, PodSnapshot, PodState, PodStatus, Severity
from services.monitor.health import HealthSettings
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from tests.app.helpers import Parked, shown, wait_for
from tests.conftest import SSHD, _make_server
from widgets.alerts import AlertList
from widgets.monitor_pane import MonitorPane
from widgets.pod_list import PodList

REPO = Path(__file__).resolve().parents[3]
SIZE = (160, 50)
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 79.1 GiB total)"


@pytest.fixture
def sshd(tmp_path: Path):
    """The conftest sshd, but its sessions see the fake nvidia-smi's inference_dead scenario."""
    if not Path(SSHD).exists():
        pytest.fail("OpenSSH sshd is not installed: run the README's test command (it installs it)")
    server = _make_server(tmp_path / "sshd", env={"PTT_FAKE_GPUS": "4", "PTT_FAKE_SCENARIO": "inference_dead"})
    server.start()
    yield server
    server.kill()


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def toasts(app: PrimeTrainApp) -> list[tuple[str, str, str]]:
    return [(n.severity, n.title, n.message) for n in app._notifications]


def logged_steps(log: Path) -> set[int]:
    return {int(m) for m in re.findall(r"SUCCESS Step (\d+) \|", log.read_text())}


async def test_inference_dead_then_oom_over_real_sshd(sshd, client_home, tmp_path: Path) -> None:
    client_home.trust()
    run = tmp_path / "run"
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.2",
            "--max-steps",
            "0",
            "--ckpt-interval",
            "0",
        ],
        cwd=REPO,
    )
    try:
        settings = MonitorSettings(interval=0.3, stale_after=5.0, health=HealthSettings(gpu_dead_after_s=2.0))
        pod = sshd.pod(run_dir=str(run), probe_dir=str(tmp_path / "pc"))
        app = PrimeTrainApp([pod], settings=settings)
        app.animation_level = "none"
        async with app.run_test(size=SIZE) as pilot:

            def dead_alert() -> Alert | None:
                snap = app.snapshots.get(pod.name)
                return next((a for a in snap.alerts if a.id == "gpu-dead"), None) if snap else None

            await wait_for(pilot, dead_alert, timeout=30)
            alert = dead_alert()
            assert alert is not None and alert.severity is Severity.CRITICAL
            died = int(re.search(r"inference server likely died at step (\d+)", alert.message).group(1))
            assert died in logged_steps(run / "logs" / "trainer.log")  # a step the trainer really logged
            snap = app.snapshots[pod.name]
            assert snap.run is not None and snap.run.step >= died  # the trainer kept logging
            assert snap.latest.gpus[0].mem_used == 0 and snap.latest.gpus[1].mem_used > 0

            # the sidebar badge, the toast and the monitor pane all say it
            row = app.query_one(PodList).row(pod.name)
            await wait_for(pilot, lambda: "alert" in row.text)
            assert "‼" in row.text
            assert any(sev == "error" and f"died at step {died}" in title for sev, title, _ in toasts(app))
            pane = app.query_one(MonitorPane)
            await wait_for(pilot, lambda: f"likely died at step {died}" in str(pane.query_one(AlertList).render()))
            assert str(pane.query_one("#run-progress").render()).startswith("run: step ")

            # the trainer dies of an OOM: its alert, with the line
            trainer.kill()
            trainer.wait()
            with open(run / "logs" / "trainer.log", "a") as f:
                f.write("14:30:00   ERROR Traceback (most recent call last):\n" + OOM + "\n")

            def oom_alert() -> Alert | None:
                return next((a for a in app.snapshots[pod.name].alerts if a.id == "log:cuda-oom"), None)

            await wait_for(pilot, oom_alert, timeout=15)
            assert oom_alert().line == f"trainer: {OOM}"
            assert any("CUDA out of memory" in title for _, title, _ in toasts(app))
            await wait_for(pilot, lambda: OOM in str(pane.query_one("#log-tail").render()))
            await wait_for(pilot, lambda: "CUDA out of memory" in str(pane.query_one(AlertList).render()))
            assert toasts(app).count(next(t for t in toasts(app) if "CUDA out of memory" in t[1])) == 1
    finally:
        trainer.kill()
        trainer.wait()


# ------------------------------------------------------------------------------------ toast bookkeeping


def alert(aid: str, sev: Severity = Severity.WARNING, text: str = "do something") -> Alert:
    return Alert(aid, sev, aid.title(), text, since=1.0)


async def test_toast_once_per_alert_and_again_only_after_it_cleared() -> None:
    pod = Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1")
    app = PrimeTrainApp([pod], monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))
    async with app.run_test(size=SIZE) as pilot:
        base = PodSnapshot(pod=pod, status=PodStatus(PodState.ONLINE, "", since=0.0))

        async def feed(*alerts: Alert) -> None:
            app.on_snapshot(replace(base, alerts=alerts))
            await shown(pilot)

        def count(aid: str) -> int:
            return sum(1 for _, title, _ in toasts(app) if title == f"gpu1: {aid.title()}")

        await feed(alert("disk"))
        await feed(alert("disk", text="97 % now"), alert("nofile", Severity.CRITICAL))
        await feed(alert("disk"), alert("nofile", Severity.CRITICAL))
        assert (count("disk"), count("nofile")) == (1, 1)
        assert ("error", "gpu1: Nofile", "do something") in toasts(app)
        row = app.query_one(PodList).row("gpu1")
        assert "‼ 2 alerts" in row.text
        await feed(alert("nofile", Severity.CRITICAL))  # disk cleared
        assert "‼ 1 alert" in row.text
        await feed(alert("nofile", Severity.CRITICAL), alert("disk"))  # ... and fires again
        assert (count("disk"), count("nofile")) == (2, 1)
        await feed()
        assert "alert" not in row.text
