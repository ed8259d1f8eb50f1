"""The watcher in-process (services/watch/watcher.py) over real parts: the `local` pod with the fake
nvidia-smi on PATH and the simulated trainer writing a real run dir, real apprise posting to a webhook
receiver on 127.0.0.1, the exporter scraped over HTTP. The trainer is frozen (SIGSTOP) so the no-progress
rule fires: ONE "opened" with the step and the fix; thawed (SIGCONT): ONE "resolved"; nothing else.
An unreachable pod opens an alert of its own; ``once`` summarises one sample per pod."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.models import Pod, PodKind
from services.monitor.health import HealthSettings
from services.monitor.worker import MonitorSettings
from services.watch.notify import NotifySettings
from services.watch.state import STATE_NAME, read_state
from services.watch.watcher import Watcher, WatchOptions
from tests.conftest import FAKE_BIN, free_port
from tests.services.watch.receiver import receiver

REPO = Path(__file__).resolve().parents[3]
# no-progress after 2.5 s without a step (steps every 0.2 s); the host rules off (this machine's disk/ulimit)
FAST = HealthSettings(
    stall_k=3.0,
    stall_floor_s=2.5,
    stall_cap_s=10.0,
    stall_start_s=60.0,
    nofile_min=0,
    disk_pct=100.0,
    disk_critical_pct=100.0,
)


def start_trainer(run: Path) -> subprocess.Popen:
    return subprocess.Popen(
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
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def until(test, timeout: float = 20.0, what: str = ""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := test():
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def scrape(port: int) -> dict[str, list]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:{os.environ['PATH']}")
    monkeypatch.setenv("PTT_FAKE_GPUS", "2")


async def test_a_stalled_run_is_one_opened_and_one_resolved_message(tmp_path: Path, fake_gpus) -> None:
    run = tmp_path / "run"
    trainer = start_trainer(run)
    stop = asyncio.Event()
    try:
        with receiver() as rx:
            options = WatchOptions(
                tmp_path / "data",
                notify=NotifySettings((rx.url(),), resolve_after_s=1.0, min_interval_s=600.0),
                metrics_port=0,
                tick_s=0.1,
            )
            watcher = Watcher(
                [Pod("p", PodKind.LOCAL, run_dir=str(run))],
                options,
                monitor_settings=MonitorSettings(interval=0.2, health=FAST),
            )
            task = asyncio.ensure_future(watcher.run(stop))
            await until(
                lambda: (s := watcher.snapshots.get("p")) and s.run and (s.run.step or 0) >= 3, what="the run's steps"
            )
            assert rx.bodies == []
            os.kill(trainer.pid, signal.SIGSTOP)  # the run stalls
            await asyncio.to_thread(rx.wait_for, lambda b: len(b) >= 1, 20.0, "the opened message")
            opened = rx.bodies[0]
            assert opened["title"] == "[OPENED] p: No training progress" and opened["type"] == "failure"
            step = watcher.book.open[("p", "no-progress")].step
            assert step and f"step {step}" in opened["message"] and f"run {run}" in opened["message"]
            assert "Fix: If it is stuck, kill it and resume from the last complete checkpoint." in opened["message"]

            m = scrape(watcher.exporter.port)
            assert ({"pod": "p", "rule": "no-progress", "severity": "critical"}, 1.0) in m["ptt_alert_active"]
            assert {lb["gpu"] for lb, _ in m["ptt_gpu_utilization_percent"] if lb["pod"] == "p"} == {"0", "1"}
            assert m["ptt_alerts_opened_total"] == [({"pod": "p", "rule": "no-progress"}, 1.0)]

            os.kill(trainer.pid, signal.SIGCONT)  # it moves again
            await asyncio.to_thread(rx.wait_for, lambda b: len(b) >= 2, 20.0, "the resolved message")
            await asyncio.sleep(1.5)  # longer than resolve_after_s: nothing else comes
            kinds = [b["title"].split("]")[0] + "]" for b in rx.bodies]
            assert kinds == ["[OPENED]", "[RESOLVED]"], rx.bodies
            assert (
                rx.bodies[1]["type"] == "success"
                and opened["message"].splitlines()[-1].split(" · ")[0] in rx.bodies[1]["message"]
            )  # the same thread id
            stop.set()
            await asyncio.wait_for(task, 30)
    finally:
        stop.set()
        os.kill(trainer.pid, signal.SIGCONT)
        trainer.kill()
        trainer.wait()
    state = read_state(tmp_path / "data" / STATE_NAME)
    assert state["stopped"] is not None
    (th,) = [t for t in state["threads"] if t["rule"] == "no-progress"]
    assert th["notified"] and th["resolved"] and th["messages"] == 2
    whats = [a["what"] for a in state["actions"]]
    assert whats.count("notified") == 2 and "alert opened" in whats and "alert resolved" in whats
    assert "hook" not in json.dumps(state)  # no URL in the state file


async def test_an_unreachable_pod_opens_an_alert_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh of the developer's
    stop = asyncio.Event()
    with receiver() as rx:
        options = WatchOptions(tmp_path / "data", notify=NotifySettings((rx.url(),)), offline_after_s=0.3, tick_s=0.1)
        pod = Pod("gone", PodKind.SSH, host="127.0.0.1", port=free_port(), user="nobody")
        watcher = Watcher([pod], options, monitor_settings=MonitorSettings(interval=0.2, backoff_max=0.5))
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await asyncio.to_thread(rx.wait_for, lambda b: len(b) >= 1, 20.0, "the unreachable alert")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    (body,) = rx.bodies
    assert body["title"] == "[OPENED] gone: Pod unreachable" and "No sample from gone" in body["message"]
    assert "Fix: Check the pod with ssh" in body["message"]


async def test_once_summarises_one_sample_per_pod(tmp_path: Path, fake_gpus) -> None:
    run = tmp_path / "run"
    trainer = start_trainer(run)
    try:
        await until(lambda: (run / "logs" / "trainer.log").exists(), what="the trainer's log")
        watcher = Watcher(
            [Pod("p", PodKind.LOCAL, run_dir=str(run))],
            WatchOptions(tmp_path / "data"),
            monitor_settings=MonitorSettings(interval=0.2, health=FAST),
        )
        summary = await watcher.once(timeout=30)
    finally:
        trainer.kill()
        trainer.wait()
    (pod,) = summary["pods"]
    assert pod["reached"] and pod["state"] == "online" and len(pod["gpus"]) == 2
    assert summary["reached"] == 1 and not (tmp_path / "data" / STATE_NAME).exists()
