"""Preemption: the tracker with an injected clock (pure), and end to end over the real sshd: the pod's sshd
and run die → the run is marked interrupted; sshd back → the policy resumes it from the newest complete
checkpoint through the ordinary resume path."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from services import runs
from services.lifecycle.preemption import AutoResumePolicy, AutoResumer, Decision, PreemptionTracker
from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus, RunProgress
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import _kill, _launch, make_settings, trainer_pids, wait_for


def snap(pod: Pod, state: PodState, finished: bool = False) -> PodSnapshot:
    return PodSnapshot(pod, PodStatus(state), run=RunProgress(finished=finished) if finished else None)


def record(base: Path, rid: str, pod: str, started: float, **kw) -> None:
    runs.save_record(base, {"id": rid, "pod": pod, "started": started, "state": "running", "run_dir": "/r", **kw})


def test_ssh_down_longer_than_n_marks_interrupted_then_same_pod_resumes(tmp_path):
    now = [10_000.0]
    pod = Pod("gpu", price_per_hr=2.0)
    record(tmp_path, "r1", "gpu", 9_000.0)
    t = PreemptionTracker(tmp_path, down_after=300.0, policy=AutoResumePolicy(enabled=True), clock=lambda: now[0])
    assert t.observe(snap(pod, PodState.ONLINE)) == []
    assert t.observe(snap(pod, PodState.OFFLINE)) == []
    now[0] += 299
    assert t.check() == []  # not yet N
    assert runs.load_record(tmp_path, "r1")["state"] == "running"
    now[0] += 2
    [d] = t.check()
    assert (d.kind, d.pod, d.run_id) == ("interrupted", "gpu", "r1") and "SSH down for 5 min" in d.reason
    rec = runs.load_record(tmp_path, "r1")
    assert rec["state"] == "interrupted" and rec["interrupted"] == now[0]
    assert t.check() == []  # once
    assert t.observe(snap(pod, PodState.CONNECTING)) == []  # still down: resume waits for the pod
    [r] = t.observe(snap(pod, PodState.ONLINE))
    assert (r.kind, r.target) == ("resume", "gpu")
    assert t.observe(snap(pod, PodState.ONLINE)) == []  # in flight: not twice
    record(tmp_path, "r2", "gpu", now[0], resumed_from="r1")
    t.resumed(r, True, "r2")
    assert runs.load_record(tmp_path, "r1")["auto_attempts"] == 1
    assert runs.load_record(tmp_path, "r2")["auto_resumed_from"] == "r1"
    assert [x["id"] for x in t.lineage("r2")] == ["r2", "r1"]


def test_a_stale_pod_neither_ends_an_outage_nor_is_resumed_on(tmp_path):
    """STALE means no valid sample for a while. It once counted as "up": a stale snapshot inside an outage reset
    its clock (the preemption could go unnoticed) and a waiting resume could start on a pod that was not
    answering. A pod that goes silent while connected is not marked down either."""
    now = [10_000.0]
    pod = Pod("gpu")
    record(tmp_path, "r1", "gpu", 9_000.0)
    t = PreemptionTracker(tmp_path, down_after=300.0, policy=AutoResumePolicy(enabled=True), clock=lambda: now[0])
    t.observe(snap(pod, PodState.ONLINE))
    now[0] += 1_000
    assert t.observe(snap(pod, PodState.STALE)) == []  # silent while connected: no outage
    assert t.check() == []
    t.observe(snap(pod, PodState.OFFLINE))
    now[0] += 200
    assert t.observe(snap(pod, PodState.STALE)) == []  # garbage while reconnecting: still the same outage
    now[0] += 101
    [d] = t.check()
    assert d.kind == "interrupted"
    assert t.observe(snap(pod, PodState.STALE)) == []  # not answering properly: no resume on it
    [r] = t.observe(snap(pod, PodState.ONLINE))
    assert r.kind == "resume"


def test_a_pod_unreachable_since_start_up_counts_as_down(tmp_path):
    """The spot pod that vanished while the laptop was closed: never answering after the App starts is down."""
    now = [10_000.0]
    pod = Pod("gpu", price_per_hr=2.0)
    record(tmp_path, "r1", "gpu", 9_000.0)
    t = PreemptionTracker(tmp_path, down_after=300.0, policy=AutoResumePolicy(enabled=True), clock=lambda: now[0])
    assert t.observe(snap(pod, PodState.CONNECTING)) == []
    now[0] += 299
    assert t.check() == []
    now[0] += 2
    [d] = t.check()
    assert (d.kind, d.run_id) == ("interrupted", "r1")
    assert runs.load_record(tmp_path, "r1")["state"] == "interrupted"


def test_policy_off_provider_terminated_auth_failures_and_finished_runs(tmp_path):
    now = [0.0]
    gone: set[str] = set()
    t = PreemptionTracker(tmp_path, down_after=600.0, clock=lambda: now[0], terminated=lambda n: n in gone)
    a, b, c = Pod("a"), Pod("b"), Pod("c")
    for p in (a, b, c):
        record(tmp_path, f"run-{p.name}", p.name, 0.0)
    t.observe(snap(a, PodState.ONLINE))
    gone.add("a")  # the provider says so: no need to wait N minutes
    [d] = t.check()
    assert d.kind == "interrupted" and d.run_id == "run-a" and "terminated" in d.reason
    t.observe(snap(b, PodState.AUTH_FAILED))  # the user's problem, not a preemption
    t.observe(snap(c, PodState.ONLINE, finished=True))
    t.observe(snap(c, PodState.OFFLINE))  # the run had finished: its pod going away is no preemption
    now[0] += 3600
    assert t.check() == []  # and the policy is off: no resume for a either
    t.observe(snap(a, PodState.ONLINE))
    assert t.check() == []
    assert runs.load_record(tmp_path, "run-b")["state"] == "running"
    assert runs.load_record(tmp_path, "run-c")["state"] == "running"


def test_budget_attempts_and_another_pod(tmp_path):
    now = [100_000.0]
    policy = AutoResumePolicy(enabled=True, max_attempts=2, budget_usd=10.0, target_pod="spare")
    t = PreemptionTracker(tmp_path, down_after=60.0, policy=policy, clock=lambda: now[0])
    gpu, spare = Pod("gpu", price_per_hr=2.0), Pod("spare", price_per_hr=3.0)
    record(tmp_path, "r1", "gpu", now[0] - 3600)  # 1 h so far = $2
    t.observe(snap(gpu, PodState.ONLINE))
    t.observe(snap(gpu, PodState.OFFLINE))
    now[0] += 61
    kinds = [d.kind for d in t.check()]
    assert kinds == ["interrupted"]  # the spare pod is not known to answer yet
    [r] = t.observe(snap(spare, PodState.ONLINE))
    assert (r.kind, r.pod, r.target) == ("resume", "gpu", "spare")
    t.resumed(r, False, error="pre-flight failed")  # a failed attempt counts, and is retried
    [r2] = t.check()
    assert r2.kind == "resume"
    t.resumed(r2, False, error="again")
    [g] = t.check()  # 2 attempts = max
    assert g.kind == "give_up" and "2 auto-resume attempt(s)" in g.reason
    assert runs.load_record(tmp_path, "r1")["auto_resume"].startswith("gave up")
    # the $ budget: 6 h at $2 = $12 > $10
    gpu2 = Pod("gpu2", price_per_hr=2.0)
    record(tmp_path, "r9", "gpu2", now[0] - 6 * 3600)
    t.observe(snap(gpu2, PodState.OFFLINE))
    now[0] += 120
    ds = t.check()
    assert [d.kind for d in ds] == ["interrupted", "give_up"]
    assert "$10 budget" in ds[1].reason


def test_an_outage_is_decided_at_the_next_snapshot_of_any_pod(tmp_path):
    """A pod that stays down sends few snapshots: its outage, once N minutes old, is decided at the next snapshot of
    any other pod (not only at the 5 s timer's check), and a resume waiting on another pod starts at that pod's
    first snapshot online. observe() walks every pod only when an outage may be due: this pins that it is never
    later for that."""
    now = [10_000.0]
    policy = AutoResumePolicy(enabled=True, target_pod="spare")
    t = PreemptionTracker(tmp_path, down_after=300.0, policy=policy, clock=lambda: now[0])
    gpu, other, spare = Pod("gpu"), Pod("other"), Pod("spare")
    record(tmp_path, "r1", "gpu", 9_000.0)
    t.observe(snap(gpu, PodState.ONLINE))
    t.observe(snap(gpu, PodState.OFFLINE))
    now[0] += 299.5
    assert t.observe(snap(other, PodState.ONLINE)) == []
    now[0] += 0.5
    [d] = t.observe(snap(other, PodState.ONLINE))  # exactly N later, another pod's snapshot: decided there
    assert (d.kind, d.pod, d.run_id) == ("interrupted", "gpu", "r1")
    assert t.observe(snap(other, PodState.ONLINE)) == []  # once
    [r] = t.observe(snap(spare, PodState.ONLINE))
    assert (r.kind, r.target) == ("resume", "spare")
    t.resumed(r, False, error="pre-flight failed")  # retried at the next snapshot of any pod, as by the timer
    [r2] = t.observe(snap(other, PodState.ONLINE))
    assert r2.kind == "resume"


def test_observe_decides_as_a_check_of_every_pod_at_each_snapshot(tmp_path):
    """observe() against the straightforward tracker (every pod checked at every snapshot: a ``terminated``
    callback makes it walk them all): a long random run of outages, returns, terminations, timer checks and resume
    outcomes over several pods gives the same decisions, in the same order, and the same run records."""
    import random

    rng = random.Random(36)
    trackers = []
    for i, terminated in enumerate((None, lambda name: False)):
        base = tmp_path / str(i)
        trackers.append(
            PreemptionTracker(
                base,
                down_after=30.0,
                policy=AutoResumePolicy(enabled=True, max_attempts=3),
                clock=lambda: now[0],
                terminated=terminated,
            )
        )
    now = [1_000.0]
    pods = [Pod(f"p{i}") for i in range(6)]
    states = (PodState.ONLINE, PodState.OFFLINE, PodState.CONNECTING, PodState.STALE, PodState.AUTH_FAILED)
    runs_started = 0
    decided: list[list[Decision]] = [[], []]
    for _ in range(3_000):
        now[0] += rng.choice((0.0, 0.25, 1.0, 3.0, 7.0))
        roll = rng.random()
        if roll < 0.03:  # a new run on a pod (recorded as the launch does)
            runs_started += 1
            pod = rng.choice(pods).name
            for t in trackers:
                record(t.runs_dir, f"r{runs_started}", pod, now[0])
            continue
        for t, out in zip(trackers, decided):
            if roll < 0.05:
                got = t.check()
            elif roll < 0.06:
                t.mark_terminated(pods[int(roll * 1000) % len(pods)].name)
                got = []
            else:
                pod = pods[int(roll * 1e6) % len(pods)]
                weights = (6, 2, 1, 1, 1) if int(roll * 1e4) % 3 else (1, 6, 2, 1, 1)
                state = random.Random(int(roll * 1e9)).choices(states, weights)[0]
                got = t.observe(snap(pod, state))
            for d in got:
                if d.kind == "resume":  # half fail (retried), half succeed
                    t.resumed(d, int(now[0]) % 2 == 0, None, "failed")
            out.extend(got)
    assert decided[0] == decided[1]
    kinds = {d.kind for d in decided[0]}
    assert {"interrupted", "resume", "give_up"} <= kinds  # the run went through every kind of decision
    for i in range(1, runs_started + 1):
        assert runs.load_record(tmp_path / "0", f"r{i}") == runs.load_record(tmp_path / "1", f"r{i}")


async def test_auto_resume_goes_through_the_pods_run_target(tmp_path):
    """Auto-resume relaunched every run as a single host's (a detached process group), a Slurm cluster's too. It
    resumes through the pod's run target now, as the dialog and the commands do: on a cluster, only a run that
    was launched there (as a job) is submitted again, and any other is refused by name."""
    cluster = Pod("cluster", kind=PodKind.LOCAL, scheduler="slurm", probe_dir=str(tmp_path / "state"))
    record(tmp_path / "records", "r1", "cluster", 9_000.0)
    tracker = PreemptionTracker(tmp_path / "records", policy=AutoResumePolicy(enabled=True))
    tracker.observe(snap(cluster, PodState.ONLINE))
    resumer = AutoResumer(tracker, make_settings(tmp_path), connect=LocalConnection)
    last = await resumer.execute(Decision("resume", "cluster", "r1", "lost", target="cluster"))
    assert (last.kind, last.message) == (
        "error",
        "run r1 was not launched on the Slurm cluster cluster from here (hint: launch it afresh there)",
    )


async def test_a_pod_that_refuses_the_resume_connection_is_waited_for_not_counted_as_an_attempt(tmp_path):
    """Under load the monitor can read a sample the pod sent before it went down after the outage was decided:
    "online" for a pod that is gone. The resume's connection is then refused. That was counted as a failed
    attempt and pushed as AUTO-RESUME FAILED; the pod simply does not answer yet: the run waits for a fresh
    "online", no attempt is spent (attempts are the user's budget for resumes that ran and failed)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: the connection is refused, as by a pod that is gone
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pod = Pod("gpu", PodKind.SSH, host="127.0.0.1", port=port, user="nobody")
    record(tmp_path, "r1", "gpu", 9_000.0)
    now = [10_000.0]
    t = PreemptionTracker(tmp_path, down_after=300.0, policy=AutoResumePolicy(enabled=True), clock=lambda: now[0])
    t.observe(snap(pod, PodState.OFFLINE))
    now[0] += 301
    [d] = t.check()
    [r] = t.observe(snap(pod, PodState.ONLINE))  # the late sample
    resumer = AutoResumer(t, make_settings(tmp_path), connect=SSHConnection)
    last = await resumer.execute(r)
    assert last.kind == "error" and (last.data or {}).get("waiting") is True, last
    assert "does not answer yet" in last.message
    rec = runs.load_record(tmp_path, "r1")
    assert not rec.get("auto_attempts") and rec["state"] == "interrupted"
    assert t.check() == []  # waits: the pod is not taken for up on the strength of that sample
    [again] = t.observe(snap(pod, PodState.ONLINE))  # a fresh "online": tried again
    assert (again.kind, again.run_id) == ("resume", "r1")


@pytest.mark.ssh
async def test_end_to_end_sshd_stopped_marks_interrupted_restart_resumes(sshd, client_home, tmp_path):
    client_home.trust()
    pod = sshd.pod(probe_dir=str(tmp_path / "podstate"), run_dir=str(tmp_path / "run"))
    settings = make_settings(tmp_path, auto_resume=True, preempt_after_minutes=1 / 60)  # N = 1 s
    events = await _launch(pod, tmp_path, settings)
    first = events[-1].data["id"]
    ck = tmp_path / "run" / "checkpoints"
    assert wait_for(lambda: (ck / "step_4" / "orchestrator" / "progress.pt").exists(), 15)

    tracker = PreemptionTracker.from_settings(settings)
    decisions: list = []
    seen_online = asyncio.Event()

    def observe(snap) -> None:
        # N is 1 s here, shorter than an SSH connect on a loaded machine: the tracker starts judging once the
        # pod has answered (a pod that never answers after start-up is
        # a case of its own, test_a_pod_unreachable_since_start_up_counts_as_down)
        if snap.status.state is PodState.ONLINE:
            seen_online.set()
        if seen_online.is_set():
            decisions.extend(tracker.observe(snap))

    monitor = MonitorService(observe, settings=MonitorSettings(interval=0.5, backoff_max=0.5, stale_after=3.0))
    resumer = AutoResumer(tracker, settings, connect=SSHConnection)
    monitor.add(pod)
    try:

        async def until(pred, timeout=20.0):
            end = asyncio.get_running_loop().time() + timeout
            while not pred() and asyncio.get_running_loop().time() < end:
                if seen_online.is_set():
                    decisions.extend(tracker.check())
                await asyncio.sleep(0.1)
            return pred()

        assert await until(lambda: monitor.snapshot(pod.name).status.state is PodState.ONLINE)
        # the pod is preempted: its sshd and the run die together
        for pid in trainer_pids(tmp_path / "run"):
            os.kill(pid, signal.SIGKILL)
        sshd.kill()
        assert await until(lambda: any(d.kind == "interrupted" for d in decisions))
        assert runs.load_record(settings.runs_dir, first)["state"] == "interrupted"
        assert not any(d.kind == "resume" for d in decisions)  # the pod does not answer yet
        steps_done = sorted(
            int(p.name[5:])
            for p in ck.iterdir()
            if (p / "trainer" / ".metadata").exists() and (p / "orchestrator" / "progress.pt").exists()
        )
        sshd.start()  # the pod is back
        assert await until(lambda: any(d.kind == "resume" for d in decisions))
        [decision] = [d for d in decisions if d.kind == "resume"]
        last = await resumer.execute(decision)
        assert last.kind == "done", last.message
        new = last.data
        assert new["resumed_from"] == first and new["resume_step"] == steps_done[-1]
        assert runs.load_record(settings.runs_dir, new["id"])["auto_resumed_from"] == first
        assert runs.load_record(settings.runs_dir, first)["auto_attempts"] == 1
        assert wait_for(lambda: len(trainer_pids(tmp_path / "run")) == 1, 10)
    finally:
        await monitor.aclose()
    kev = await _kill(pod, settings)
    assert kev[-1].kind == "done"
