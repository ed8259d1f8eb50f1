"""The watcher resumes a preempted run with nobody at the keyboard ([lifecycle] auto_resume, opt-in as in the
TUI), over real parts: a run launched through the lifecycle on the real sshd (the simulated trainer,
checkpointing), the pod's sshd and run killed together (a spot pod taken back), the sshd started again; a webhook
receiver on 127.0.0.1 gets the messages. With auto-resume off the watcher says so and resumes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import replace

import pytest

from services import runs
from services.lifecycle.preemption import Decision
from services.monitor.worker import MonitorSettings
from services.watch.notify import NotifySettings
from services.watch.watcher import Watcher, WatchOptions
from tests.services.lifecycle.test_actions import _kill, _launch, make_settings, trainer_pids, wait_for
from tests.services.watch.receiver import receiver
from tests.services.watch.test_watcher import until

pytestmark = pytest.mark.ssh


def titles(bodies: list[dict]) -> list[str]:
    return [str(b.get("title", "")) for b in bodies]


async def test_the_watcher_resumes_a_preempted_run_from_its_newest_complete_checkpoint(sshd, client_home, tmp_path):
    client_home.trust()
    data = tmp_path / "data"
    pod = sshd.pod(probe_dir=str(tmp_path / "podstate"), run_dir=str(tmp_path / "run"))
    settings = make_settings(tmp_path, auto_resume=True, runs_dir=data / "runs")
    first = (await _launch(pod, tmp_path, settings))[-1].data["id"]
    ck = tmp_path / "run" / "checkpoints"
    assert wait_for(lambda: (ck / "step_4" / "orchestrator" / "progress.pt").exists(), 15)
    stop = asyncio.Event()
    try:
        with receiver() as rx:
            # SSH down 5 s = preempted (long enough that a slow first connect is not taken for one)
            options = WatchOptions(
                data,
                notify=NotifySettings((rx.url(),), min_interval_s=0.0),
                tick_s=0.1,
                preempt_after_s=5.0,
                lifecycle=settings,
            )
            watcher = Watcher(
                [pod], options, monitor_settings=MonitorSettings(interval=0.5, backoff_max=0.5, stale_after=3.0)
            )
            task = asyncio.ensure_future(watcher.run(stop))
            await until(
                lambda: (s := watcher.snapshots.get(pod.name)) and s.status.state.value == "online",
                30,
                "the pod online",
            )
            for pid in trainer_pids(tmp_path / "run"):  # the pod is taken back: its run and its sshd die together
                os.kill(pid, signal.SIGKILL)
            sshd.kill()
            await asyncio.to_thread(
                rx.wait_for, lambda b: any("[PREEMPTED]" in t for t in titles(b)), 30.0, "the preempted message"
            )
            preempted = next(b for b in rx.bodies if "[PREEMPTED]" in str(b.get("title")))
            assert "Auto-resume is on: the watcher resumes it when" in preempted["message"], preempted
            assert runs.load_record(settings.runs_dir, first)["state"] == "interrupted"
            steps_done = sorted(
                int(p.name[5:])
                for p in ck.iterdir()
                if (p / "trainer" / ".metadata").exists() and (p / "orchestrator" / "progress.pt").exists()
            )
            sshd.start()  # the pod is back
            await asyncio.to_thread(
                rx.wait_for, lambda b: any("[RESUMED]" in t for t in titles(b)), 60.0, "the resumed message"
            )
            assert not any("FAILED" in t for t in titles(rx.bodies)), "\n".join(b["message"][:300] for b in rx.bodies)
            resumed = [r for r in runs.list_records(settings.runs_dir) if r.get("auto_resumed_from") == first]
            assert len(resumed) == 1 and resumed[0]["resume_step"] == steps_done[-1], resumed
            assert runs.load_record(settings.runs_dir, first)["auto_attempts"] == 1
            assert wait_for(lambda: len(trainer_pids(tmp_path / "run")) == 1, 15)  # running again, once
            stop.set()
            await asyncio.wait_for(task, 30)
    finally:
        stop.set()
        if sys.exc_info()[1] is not None:  # failed above: its simulated trainer must not outlive the test
            for pid in trainer_pids(tmp_path / "run"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert (await _kill(pod, settings))[-1].kind == "done"


async def test_with_auto_resume_off_the_watcher_resumes_nothing_and_says_so(tmp_path):
    """The tracker's decisions as the watcher acts on them: off, an interrupted run is said with 'resume it'; a
    resume decision (another process's policy) is never carried out here."""
    data = tmp_path / "data"
    settings = make_settings(tmp_path, auto_resume=False, runs_dir=data / "runs")
    watcher = Watcher([], WatchOptions(data, lifecycle=settings))
    assert watcher.resumer is None and not watcher.preemption.policy.enabled
    watcher._acting = True
    sent: list = []
    watcher.push = sent.append  # what would be pushed
    runs.save_record(
        settings.runs_dir, {"id": "r1", "pod": "p", "started": 1.0, "state": "interrupted", "run_dir": "/r"}
    )
    watcher._preempted(
        [
            Decision("interrupted", "p", "r1", "p lost: SSH down for 10 min"),
            Decision("resume", "p", "r1", "resuming run r1 on p", "p"),
        ]
    )
    assert [m.title for m in sent] == ["[PREEMPTED] p: run r1 interrupted"]
    assert "Resume it from its newest checkpoint" in sent[0].body and not watcher._resumes
    on = Watcher([], WatchOptions(data, lifecycle=replace(settings, auto_resume=True)))
    assert on.resumer is not None and on.preemption.policy.enabled


def test_the_tui_hands_a_resume_over_while_a_watcher_holds_the_data_dir(tmp_path, monkeypatch):
    """One process resumes a run: while a watcher holds the data dir's lock the TUI's tracker forgets its
    resume decision (uncounted, not retried); with no watcher the TUI resumes as before."""
    from app.lifecycle_bg import watcher_running
    from services.lifecycle.preemption import AutoResumePolicy, PreemptionTracker
    from services.models import Pod, PodSnapshot, PodState, PodStatus
    from services.watch.lock import WatchLock

    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    assert not watcher_running()
    with WatchLock(tmp_path / "data"):
        assert watcher_running()
    assert not watcher_running()  # released: no stale record counts

    now = [1000.0]
    tracker = PreemptionTracker(
        tmp_path / "runs", down_after=10.0, policy=AutoResumePolicy(enabled=True), clock=lambda: now[0]
    )
    runs.save_record(tmp_path / "runs", {"id": "r1", "pod": "p", "started": 1.0, "state": "running", "run_dir": "/r"})
    pod = Pod("p")
    tracker.observe(PodSnapshot(pod, PodStatus(PodState.ONLINE)))
    tracker.observe(PodSnapshot(pod, PodStatus(PodState.OFFLINE)))
    now[0] += 11
    assert [d.kind for d in tracker.check()] == ["interrupted"]
    [decision] = tracker.observe(PodSnapshot(pod, PodStatus(PodState.ONLINE)))
    assert decision.kind == "resume"
    tracker.handed_over(decision)
    assert tracker.check() == [] and tracker.observe(PodSnapshot(pod, PodStatus(PodState.ONLINE))) == []
    assert "auto_attempts" not in runs.load_record(tmp_path / "runs", "r1")  # not counted as an attempt here
