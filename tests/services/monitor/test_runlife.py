"""A run's life (services.monitor.runlife) and the alerts judged against it, through HealthTracker.

Each normal ending (a user's kill, a finish, a resume) must raise nothing however long the pod is watched after
it, and a crash exactly one alert; the same evidence without the life record raises the stall alert, so each
silence below is the life's doing. Log lines are prime-rl's console formats in the probe's "<stem>: " form.
"""

from __future__ import annotations

import pytest

from services.models import PodRunRecord, Sample
from services.monitor.health import HealthSettings, HealthTracker
from services.monitor.runlife import Phase, judge
from tests.services.monitor.test_health import HOST, T0, gpu, ids, step_line

S = HealthSettings(stall_floor_s=60.0, stall_k=3.0, stall_cap_s=600.0)
RUNNING = PodRunRecord(id="r1", state="running", started=T0 - 100, alive=True)


def look(t: float, *, log=(), life: PodRunRecord | None = None, gpus=None) -> Sample:
    gpus = (gpu(0), gpu(1)) if gpus is None else gpus
    return Sample(t=t, gpus=tuple(gpus), host=HOST, log=tuple(log), life=life)


def steps(tracker: HealthTracker, n: int, life: PodRunRecord | None = RUNNING) -> float:
    """n steps 10 s apart from T0; returns the time of the last."""
    t = T0
    for i in range(1, n + 1):
        t = T0 + 10 * i
        tracker.observe(look(t, log=[step_line(i)], life=life))
    return t


def test_without_the_life_record_a_silent_run_is_a_stall() -> None:
    """The control: the same steps then silence, no record of a kill, raise the stall alert."""
    tracker = HealthTracker(S)
    last = steps(tracker, 5)
    alerts = tracker.observe(look(last + 120, life=RUNNING))
    assert "no-progress" in ids(alerts)


@pytest.mark.parametrize(
    ("record", "phase"),
    [
        (PodRunRecord(id="r1", state="killing", alive=True), "killed"),
        (PodRunRecord(id="r1", state="killed", ended=T0 + 55, alive=False), "killed"),
        (PodRunRecord(id="r1", state="running", alive=False, exit_code=0), "finished"),
        (PodRunRecord(id="r1", state="running", alive=False), "interrupted"),
    ],
)
def test_a_run_that_ended_never_stalls_and_has_no_eta(record: PodRunRecord, phase: str) -> None:
    tracker = HealthTracker(S, max_steps=100, price_per_hr=10.0)
    last = steps(tracker, 5)
    assert tracker.progress.eta_s is not None and tracker.progress.cost_to_finish is not None
    for later in (1, 120, 3600, 86400):  # however long it is watched after its end
        alerts = tracker.observe(
            look(last + later, life=record, gpus=(gpu(0, util=0, mem_gib=0), gpu(1, util=0, mem_gib=0)))
        )
        assert alerts == (), (later, alerts)
    progress = tracker.progress
    assert progress.phase == phase
    assert progress.eta_s is None and progress.cost_to_finish is None
    assert progress.cost_so_far is not None  # what it cost stays


def test_an_open_stall_alert_closes_when_the_kill_is_recorded() -> None:
    tracker = HealthTracker(S)
    last = steps(tracker, 5)
    assert "no-progress" in ids(tracker.observe(look(last + 120, life=RUNNING)))
    assert tracker.observe(look(last + 121, life=PodRunRecord(id="r1", state="killed", alive=False))) == ()


def test_what_a_kill_makes_the_processes_print_is_no_alert() -> None:
    tracker = HealthTracker(S)
    last = steps(tracker, 5)
    echo = ["trainer: 14:04:01 ERROR Traceback (most recent call last):", "trainer: KeyboardInterrupt"]
    tracker.observe(look(last + 2, log=echo, life=PodRunRecord(id="r1", state="killing", alive=True)))
    alerts = tracker.observe(look(last + 3, life=PodRunRecord(id="r1", state="killed", alive=False)))
    assert alerts == ()


def test_a_crash_is_one_alert_quoting_its_last_error() -> None:
    tracker = HealthTracker(S)
    last = steps(tracker, 5)
    oom = "trainer: 14:04:01 ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    tracker.observe(look(last + 2, log=["trainer: Traceback (most recent call last):", oom], life=RUNNING))
    crashed = PodRunRecord(id="r1", state="running", alive=False, exit_code=1)
    alerts = tracker.observe(look(last + 3, life=crashed))
    assert "run-crashed" in ids(alerts) and "no-progress" not in ids(alerts)
    assert "traceback" not in {a.id.removeprefix("log:") for a in alerts}  # the crash alert quotes it
    crash = next(a for a in alerts if a.id == "run-crashed")
    assert crash.title == "Run crashed (exit code 1)" and "CUDA out of memory" in crash.message
    later = tracker.observe(look(last + 3600, life=crashed))
    assert [a.id for a in later].count("run-crashed") == 1 and "no-progress" not in ids(later)
    assert tracker.progress.phase == "crashed" and tracker.progress.eta_s is None


def test_sigkill_from_outside_is_a_crash_that_names_the_oom_killer() -> None:
    phase, reason, code = judge(
        HealthTracker(S).progress, record=PodRunRecord(id="r1", state="running", alive=False, exit_code=137)
    )
    assert phase is Phase.CRASHED and code == 137 and "out-of-memory" in reason


def test_an_eval_pauses_the_stall_budget_and_it_restarts_after() -> None:
    tracker = HealthTracker(S)
    last = steps(tracker, 5)  # step time 10 s: budget 60 s (the floor)
    start = "orchestrator: 14:04:00    INFO Starting evals in gsm8k, math (512 total rollouts)"
    tracker.observe(look(last + 5, log=[start], life=RUNNING))
    assert tracker.progress.phase == "evaluating"
    assert tracker.observe(look(last + 500, life=RUNNING)) == ()  # a long eval: no stall
    tracker.observe(
        look(
            last + 510,
            log=["orchestrator: 14:12:30 SUCCESS Evaluated gsm8k (Step 5) | Policy v5 |   8m 25s | Reward 0.51"],
            life=RUNNING,
        )
    )
    assert tracker.progress.phase == "evaluating"  # math still runs
    done = "orchestrator: 14:12:40 SUCCESS Evaluated math (Step 5) | Policy v5 |   8m 35s | Reward 0.33"
    assert tracker.observe(look(last + 520, log=[done], life=RUNNING)) == ()
    assert tracker.progress.phase == "running"
    assert tracker.observe(look(last + 570, life=RUNNING)) == ()  # the budget starts again at the eval's end ...
    assert "no-progress" in ids(tracker.observe(look(last + 600, life=RUNNING)))  # ... and runs out


def test_a_checkpoint_being_written_is_a_phase() -> None:
    tracker = HealthTracker(S)
    last = steps(tracker, 5)
    tracker.observe(look(last + 1, log=["trainer: 14:04:00    INFO Saving checkpoint at step 5"], life=RUNNING))
    assert tracker.progress.phase == "checkpointing"
    assert tracker.observe(look(last + 900, life=RUNNING)) == ()


def test_starting_then_running_then_resumed() -> None:
    tracker = HealthTracker(S)
    resumed = PodRunRecord(id="r2", state="running", alive=True, resumed=True)
    tracker.observe(look(T0, log=["trainer: 14:00:00    INFO Resuming training from checkpoint step 10"], life=resumed))
    assert tracker.progress.phase == "starting" and tracker.life.life.resumed
    tracker.observe(look(T0 + 30, log=[step_line(11)], life=resumed))
    assert tracker.progress.phase == "running"


def test_the_trainers_own_finish_line_ends_a_run_not_launched_by_the_app() -> None:
    tracker = HealthTracker(S, max_steps=5)
    last = steps(tracker, 5, life=None)
    tracker.observe(look(last + 1, log=["trainer: 14:04:00 SUCCESS RL trainer finished!"]))
    assert tracker.progress.phase == "finished"
    assert tracker.observe(look(last + 7200)) == ()


def test_the_step_in_flight_does_not_end_an_eval_but_an_eval_that_never_reports_stops_pausing() -> None:
    tracker = HealthTracker(S)
    last = steps(tracker, 5)
    tracker.observe(
        look(last + 1, log=["orchestrator: 14:04:00    INFO Starting evals in gsm8k (64 total rollouts)"], life=RUNNING)
    )
    tracker.observe(look(last + 8, log=[step_line(6)], life=RUNNING))  # the batch already shipped: step 6 ends
    assert tracker.progress.phase == "evaluating"
    assert tracker.observe(look(last + 8 + S.stall_cap_s - 10, life=RUNNING)) == ()
    over = last + 1 + S.stall_cap_s + 5  # the eval stops pausing: the budget (60 s) runs from here
    assert tracker.observe(look(over, life=RUNNING)) == ()
    assert "no-progress" in ids(tracker.observe(look(over + 61, life=RUNNING)))


def test_a_resumed_run_in_the_same_dir_is_judged_as_starting_from_its_own_start() -> None:
    """Kill, then resume into the same run dir: the new run loads its checkpoint before its first step. Before,
    the old run's last step and its step time (10 s: budget 60 s) judged it, and "no progress" opened while the
    resumed run was still loading."""
    tracker = HealthTracker(S)  # start budget 900 s
    last = steps(tracker, 5)
    tracker.observe(look(last + 5, life=PodRunRecord(id="r1", state="killed", alive=False)))
    resumed = PodRunRecord(id="r2", state="running", alive=True, resumed=True)
    start = last + 20
    tracker.observe(
        look(start, log=["trainer: 14:05:00    INFO Resuming training from checkpoint step 4"], life=resumed)
    )
    assert tracker.progress.phase == "starting"
    assert tracker.observe(look(start + 600, life=resumed)) == ()  # loading, within the start budget
    late = tracker.observe(look(start + 901, life=resumed))
    assert "no-progress" in ids(late) and next(a for a in late if a.id == "no-progress").title == "No first step yet"
    tracker.observe(look(start + 902, log=[step_line(5)], life=resumed))  # it steps: a running run again
    assert tracker.progress.phase == "running" and tracker.observe(look(start + 903, life=resumed)) == ()
