"""The watcher's cleanup daemons (services/watch/cleanup.py) over real parts: the real sshd as the pod, a real
prime-rl checkpoint layout on disk (trainer halves under a separate ckpt output dir, orchestrator halves and
broadcasts in the run dir), a webhook receiver on 127.0.0.1. Headless, a daemon deletes only with
``[watch] cleanup = true``; without it the dry-run preview is pushed once and nothing is deleted; ``once``
acts on nothing. Auto-resume onto the pod the policy names (``auto_resume_pod``); the same pod coming back,
and auto-resume off: test_watch_resume.py."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from services import runs
from services.errors import SettingsError
from services.models import Pod, PodKind
from services.monitor.health import HealthSettings
from services.monitor.worker import MonitorSettings
from services.watch.notify import NotifySettings
from services.watch.state import STATE_NAME, read_state
from services.watch.watcher import Watcher, WatchOptions
from tests.conftest import free_port
from tests.services.lifecycle.test_actions import _kill, _launch, make_settings, trainer_pids, wait_for
from tests.services.lifecycle.test_auto_cleanup import layout, steps  # noqa: F401 (layout: a fixture)
from tests.services.watch.receiver import receiver
from tests.services.watch.test_watcher import until

# no host alerts from this machine's disk or ulimit: the only messages are the watcher's own
QUIET = MonitorSettings(
    interval=0.5, backoff_max=0.5, health=HealthSettings(nofile_min=0, disk_pct=100.0, disk_critical_pct=100.0)
)
BEFORE = ([10, 20, 30, 40, 50], [5, 10, 20, 30, 40], [10, 20, 30, 40, 50])  # trainer, orchestrator, broadcasts


def on_disk(run: Path, out: Path) -> tuple[list[int], ...]:
    return steps(out), steps(run / "checkpoints"), steps(run / "broadcasts")


def cleanup_pod(sshd, client_home, tmp_path):
    client_home.trust()
    return sshd.pod(probe_dir=str(tmp_path / "podstate"), run_dir=str(tmp_path / "run"))


def titles(rx) -> list[str]:
    return [str(b.get("title", "")) for b in rx.bodies]


@pytest.mark.ssh
async def test_with_watch_cleanup_on_the_daemon_deletes_by_itself(sshd, client_home, tmp_path, layout):
    run, out = layout
    assert on_disk(run, out) == BEFORE
    pod = cleanup_pod(sshd, client_home, tmp_path)
    data = tmp_path / "data"
    settings = make_settings(
        tmp_path,
        ckpt_subdir=str(out),
        keep_last=2,
        keep_broadcasts=2,
        disk_threshold_pct=100.0,
        cleanup_pods=(pod.name,),
        runs_dir=data / "runs",
    )
    said: list[dict] = []
    stop = asyncio.Event()
    with receiver() as rx:
        watcher = Watcher(
            [pod],
            WatchOptions(
                data,
                notify=NotifySettings((rx.url(),), min_interval_s=0.0),
                tick_s=0.1,
                lifecycle=settings,
                cleanup=True,
            ),
            monitor_settings=QUIET,
            out=said.append,
        )
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await until(lambda: any(e["event"] == "cleanup done" for e in said), 30, "the daemon's deletions")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        assert not any(t.startswith("[CLEANUP]") for t in titles(rx)), rx.bodies  # nothing to approve
    assert on_disk(run, out) == ([30, 40, 50], [30, 40], [40, 50])  # keep-last 2, the one in progress, 2 broadcasts
    done = next(e for e in said if e["event"] == "cleanup done")
    assert done["pod"] == pod.name and done["deleted"] == 8 and str(out / "step_10") in done["paths"]
    assert f"{pod.name}: cleanup deleted 8 dir(s)" in done["message"]
    assert f"deleted {out / 'step_10'} (5001 bytes)" in (settings.runs_dir / "lifecycle.log").read_text()
    actions = read_state(data / STATE_NAME)["actions"]
    (recorded,) = [a for a in actions if a["what"] == "cleanup done"]
    assert recorded["deleted"] == 8 and "paths" not in recorded  # the state file stays small
    assert not watcher.cleanup._tasks  # stopped with the watcher


@pytest.mark.ssh
async def test_with_watch_cleanup_off_the_preview_is_pushed_once_and_nothing_deleted(
    sshd, client_home, tmp_path, layout
):
    run, out = layout
    pod = cleanup_pod(sshd, client_home, tmp_path)
    data = tmp_path / "data"
    settings = make_settings(
        tmp_path,
        ckpt_subdir=str(out),
        keep_last=2,
        keep_broadcasts=2,
        disk_threshold_pct=100.0,
        cleanup_pods=("*",),
        runs_dir=data / "runs",
    )
    stop = asyncio.Event()
    with receiver() as rx:
        watcher = Watcher(
            [pod],
            WatchOptions(data, notify=NotifySettings((rx.url(),), min_interval_s=0.0), tick_s=0.1, lifecycle=settings),
            monitor_settings=QUIET,
        )
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await asyncio.to_thread(
                rx.wait_for, lambda b: any("[CLEANUP]" in str(x.get("title")) for x in b), 30.0, "the cleanup preview"
            )
            daemon = watcher.cleanup.daemons[pod.name]
            daemon.nudge("a second round")  # plans the same deletions again: not pushed again
            await until(lambda: len(daemon.rounds) >= 2, 30, "the second round")
            assert all(r.waiting and not r.deleted for r in daemon.rounds)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)  # the queued messages leave before it returns
        assert titles(rx) == [f"[CLEANUP] {pod.name}: waiting for your approval"], rx.bodies
    body = rx.bodies[0]["message"]
    assert f"{pod.name}: cleanup would delete step_10, step_20 and 6 leftover dir(s)" in body
    assert "approve it in the TUI (its cleanup preview) or set [watch] cleanup = true in settings.toml" in body
    assert "DELETE step_10" in body and f"{run}/broadcasts/step_10" in body and "DELETE step_30" not in body
    assert on_disk(run, out) == BEFORE
    assert (
        not (settings.runs_dir / "lifecycle.log").exists()
        or "deleted" not in (settings.runs_dir / "lifecycle.log").read_text()
    )
    actions = read_state(data / STATE_NAME)["actions"]
    assert [a["what"] for a in actions].count("cleanup waiting") == 1


@pytest.mark.ssh
async def test_a_failing_daemon_is_pushed_once_per_streak(sshd, client_home, tmp_path):
    """A pod in cleanup_pods with no run to clean (no run recorded on it, no run_dir): said once, not per round."""
    client_home.trust()
    pod = sshd.pod(probe_dir=str(tmp_path / "podstate"))
    data = tmp_path / "data"
    settings = make_settings(tmp_path, cleanup_pods=("*",), runs_dir=data / "runs")
    stop = asyncio.Event()
    with receiver() as rx:
        watcher = Watcher(
            [pod],
            WatchOptions(
                data,
                notify=NotifySettings((rx.url(),), min_interval_s=0.0),
                tick_s=0.1,
                lifecycle=settings,
                cleanup=True,
            ),
            monitor_settings=QUIET,
        )
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await until(lambda: (d := watcher.cleanup.daemons.get(pod.name)) and d.rounds, 30, "the first round")
            daemon = watcher.cleanup.daemons[pod.name]
            daemon.nudge("again")
            await until(lambda: len(daemon.rounds) >= 2, 30, "the second round")
            assert all("no run recorded on" in r.error for r in daemon.rounds)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        assert titles(rx) == [f"[CLEANUP] {pod.name}: failed"], rx.bodies
    assert rx.bodies[0]["message"].startswith(f"{pod.name}: cleanup failed (no run recorded on {pod.name}")


@pytest.mark.ssh
async def test_once_acts_on_nothing(sshd, client_home, tmp_path, layout):
    run, out = layout
    pod = cleanup_pod(sshd, client_home, tmp_path)
    data = tmp_path / "data"
    settings = make_settings(
        tmp_path,
        ckpt_subdir=str(out),
        keep_last=1,
        disk_threshold_pct=100.0,
        cleanup_pods=("*",),
        runs_dir=data / "runs",
        auto_resume=True,
    )
    watcher = Watcher([pod], WatchOptions(data, lifecycle=settings, cleanup=True), monitor_settings=QUIET)
    summary = await watcher.once(timeout=30)
    assert summary["reached"] == 1
    assert watcher.cleanup.daemons == {} and on_disk(run, out) == BEFORE
    assert not (data / STATE_NAME).exists()


def test_watch_table_reads_cleanup_and_refuses_what_it_does_not_know(tmp_path, monkeypatch):
    from app.commands.watch import load_watch_options
    from app.settings import load_watch_table

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(conf))
    assert load_watch_table() == {
        "terminate_over_budget": False,
        "terminate_idle": False,
        "cleanup": False,
        "sweep_minutes": 30.0,
    }
    (conf / "settings.toml").write_text("[watch]\ncleanup = true\nterminate_idle = true\n")
    assert load_watch_table() == {
        "terminate_over_budget": False,
        "terminate_idle": True,
        "cleanup": True,
        "sweep_minutes": 30.0,
    }
    options = load_watch_options()
    assert options["cleanup"] is True and options["terminate_over_budget"] is False
    assert WatchOptions(tmp_path, **options).cleanup is True and WatchOptions(tmp_path, **options).terminate_idle
    (conf / "settings.toml").write_text('[watch]\ncleanup = "yes"\n')
    with pytest.raises(SettingsError, match="watch.cleanup must be"):
        load_watch_table()
    (conf / "settings.toml").write_text("[watch]\ncleanups = true\n")
    with pytest.raises(SettingsError, match="unknown key cleanups in \\[watch\\]"):
        load_watch_table()


@pytest.mark.ssh
async def test_the_watcher_resumes_onto_the_pod_the_policy_names(sshd, client_home, tmp_path):
    """[lifecycle] auto_resume_pod = "b": pod a is gone for good (its run died with it), b is up and sees the
    same run dir (a shared volume): the run is resumed on b from the newest complete checkpoint, one [RESUMED]
    is pushed, and the watcher follows the new run on b."""
    client_home.trust()
    data, run = tmp_path / "data", tmp_path / "run"
    a = sshd.pod("a", probe_dir=str(tmp_path / "podstate"), run_dir=str(run))
    b = sshd.pod("b", probe_dir=str(tmp_path / "podstate"))
    settings = make_settings(tmp_path, auto_resume=True, auto_resume_pod="b", runs_dir=data / "runs")
    first = (await _launch(a, tmp_path, settings))[-1].data["id"]
    ck = run / "checkpoints"
    assert wait_for(lambda: (ck / "step_4" / "orchestrator" / "progress.pt").exists(), 15)
    for pid in trainer_pids(run):  # the run dies with its pod
        os.kill(pid, signal.SIGKILL)
    done_steps = sorted(
        int(d.name[5:])
        for d in ck.iterdir()
        if (d / "trainer" / ".metadata").exists() and (d / "orchestrator" / "progress.pt").exists()
    )
    gone = Pod("a", PodKind.SSH, host="127.0.0.1", port=free_port(), user=a.user, run_dir=str(run))  # never answers
    stop = asyncio.Event()
    try:
        with receiver() as rx:
            options = WatchOptions(
                data,
                notify=NotifySettings((rx.url(),), min_interval_s=0.0),
                tick_s=0.1,
                offline_after_s=3600.0,
                preempt_after_s=1.0,
                lifecycle=settings,
            )
            watcher = Watcher([gone, b], options, monitor_settings=QUIET)
            task = asyncio.ensure_future(watcher.run(stop))
            await asyncio.to_thread(
                rx.wait_for, lambda bs: any("[RESUMED]" in str(x.get("title")) for x in bs), 60.0, "the resumed message"
            )
            await until(
                lambda: (s := watcher.snapshots.get("b")) and s.pod.run_dir == str(run),
                30,
                "the watcher following the run on b",
            )
            stop.set()
            await asyncio.wait_for(task, 30)
        assert titles(rx) == [f"[PREEMPTED] a: run {first} interrupted", f"[RESUMED] b: run {first} resumed"], rx.bodies
        assert "the watcher resumes it when b answers again" in rx.bodies[0]["message"]
        (new,) = [r for r in runs.list_records(settings.runs_dir) if r.get("auto_resumed_from") == first]
        assert new["pod"] == "b" and new["run_dir"] == str(run) and new["resume_step"] == done_steps[-1]
        done = [x for x in read_state(data / STATE_NAME)["actions"] if x["what"] == "auto-resume done"]
        assert [(x["pod"], x["run_id"], x["new_run"]) for x in done] == [("b", first, new["id"])]
        assert wait_for(lambda: len(trainer_pids(run)) == 1, 15)  # running again, once
    finally:
        stop.set()
        killed = await _kill(b, settings)
    assert killed[-1].kind == "done", [e.message for e in killed]
