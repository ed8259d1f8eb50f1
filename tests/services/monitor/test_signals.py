"""The rules over prime-rl's own signals (services/monitor/signals.py) through HealthTracker, with an
injected clock: for each, the incident it must catch (and how fast) and the normal operations that must
not raise it: a slow first step while vLLM loads, a long checkpoint save, a finished or killed run, a
resume, a broadcast slow but within the run's own history."""

from __future__ import annotations

import json
from dataclasses import replace

from services.models import (
    BroadcastMarkers,
    CheckpointInfo,
    EndpointCheck,
    HostSample,
    PodRunRecord,
    PodSignals,
    Sample,
)
from services.monitor.health import HealthSettings, HealthTracker
from services.monitor.signals import broadcast_bound, p90

T0 = 1_700_000_000.0
GIB = 1024**3
S = HealthSettings()
KILLED = PodRunRecord(id="r1", state="killed", alive=False)  # the run's life: a user's kill
ROLES = (("Launcher", 1), ("Trainer", 1), ("Orchestrator", 1), ("Inference", 1), ("EnvServer", 1))
NO_INFERENCE = tuple(r for r in ROLES if r[0] != "Inference")
SIGNAL_IDS = {"broadcast-stall", "inference-down", "trainer-hung", "loop-lag", "stale-drops", "queue"}


def step_line(n: int) -> str:
    return f"trainer: 14:03:12 SUCCESS Step {n} |   60.0s | Loss 0.{n:04d} | Entropy 0.4567 | LR 3.00e-06"


def sample(t: float, *, log=(), metrics=(), ckpts=(), signals: PodSignals | None = None) -> Sample:
    return Sample(
        t=t, gpus=(), host=HostSample(), log=tuple(log), metrics=tuple(metrics), ckpts=tuple(ckpts), signals=signals
    )


def ids(alerts) -> set[str]:
    return {a.id for a in alerts}


def signal_ids(alerts) -> set[str]:
    """The alerts of these rules (a stopped run's other rules are the run's life's to silence)."""
    return ids(alerts) & SIGNAL_IDS


def markers(step: int, *, ready: bool, handshake: float = 2.0, hist: int = 8) -> BroadcastMarkers:
    """Step ``step``'s broadcast as prime-rl leaves it at T0 + 60 s x step; the earlier ``hist`` steps'
    handshakes took ``handshake`` s."""
    stable = T0 + 60 * step
    earlier = tuple((s, handshake) for s in range(max(0, step - hist), step))
    return BroadcastMarkers(step, stable, stable + handshake if ready else None, earlier)


def normal_run(h: HealthTracker, steps: int, *, roles=ROLES, trainer: bool = False) -> float:
    """``steps`` 60-s steps: step i broadcast at T0 + 60 i (2-s handshake), logged 10 s later. Returns the
    time of the last one's log line."""
    for i in range(1, steps + 1):
        t = T0 + 60 * i + 10
        http = EndpointCheck(True, i, t) if trainer else None
        sig = PodSignals(markers(i, ready=True), roles, t, http, EndpointCheck(True))
        h.observe(sample(t, log=[step_line(i)], signals=sig))
    return T0 + 60 * steps + 10


# ------------------------------------------------------------------------------------ broadcast stall
class TestBroadcastStall:
    def test_bound_is_k_times_the_runs_own_p90_with_a_floor(self) -> None:
        assert p90([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 100.0]) == 9.0
        assert broadcast_bound([2.0, 3.0], S) == S.broadcast_floor_s
        assert broadcast_bound([60.0, 100.0], S) == 500.0

    def test_inference_never_gets_ready_named_with_step_and_side(self) -> None:
        h = HealthTracker()
        normal_run(h, 8)
        stuck = PodSignals(markers(9, ready=False), ROLES)  # STABLE at T0 + 540, no NCCL_READY
        overdue = T0 + 540 + S.broadcast_floor_s
        assert "broadcast-stall" not in ids(h.observe(sample(overdue, signals=stuck)))
        alerts = h.observe(sample(overdue + 2, signals=stuck))  # detected at the next sample
        a = next(a for a in alerts if a.id == "broadcast-stall")
        assert "waited 2 min for inference to get ready for step 9's weights" in a.message
        assert a.since == overdue and a.severity.value == "critical"
        later = h.observe(sample(T0 + 540 + 900, signals=stuck))  # past no-progress's budget too: said once
        assert "broadcast-stall" in ids(later) and "no-progress" not in ids(later)

    def test_transfer_that_never_ends(self) -> None:
        h = HealthTracker()
        normal_run(h, 8)
        metrics = [json.dumps({"step": i, "time/broadcast_weights": 3.0}) for i in range(1, 9)]
        h.observe(sample(T0 + 531, metrics=metrics))
        stuck = PodSignals(markers(9, ready=True), ROLES)  # both met at T0 + 542; no "Step 9" line follows
        assert "broadcast-stall" not in ids(h.observe(sample(T0 + 542 + 120, signals=stuck)))
        a = next(a for a in h.observe(sample(T0 + 542 + 200, signals=stuck)) if a.id == "broadcast-stall")
        assert "weight transfer of step 9 has run 3 min" in a.message and "weight broadcasts" in a.message
        done = h.observe(sample(T0 + 542 + 201, log=[step_line(9)], signals=stuck))
        assert "broadcast-stall" not in ids(done)  # the trainer's step 9 line: the transfer ended

    def test_slow_but_within_its_own_history(self) -> None:
        h = HealthTracker()
        normal_run(h, 8)
        slow = PodSignals(markers(9, ready=False, handshake=100.0), ROLES)  # handshakes of 100 s: bound 500 s
        for dt in (200, 400, 499):
            assert "broadcast-stall" not in ids(h.observe(sample(T0 + 540 + dt, signals=slow)))

    def test_first_broadcasts_while_vllm_loads_are_silent(self) -> None:
        h = HealthTracker()
        h.observe(sample(T0, log=["orchestrator: INFO Waiting for policy inference pool to be ready"]))
        start = PodSignals(BroadcastMarkers(0, T0 + 5, None, ()), ROLES)  # the start broadcast, no history
        for dt in (60, 600, 1200):
            assert "broadcast-stall" not in ids(h.observe(sample(T0 + dt, signals=start)))
        # vLLM up: step 0's handshake done; step 1 broadcast waits while no trainer step was logged yet
        first = PodSignals(BroadcastMarkers(1, T0 + 1300, None, ((0, 1290.0),)), ROLES)
        assert "broadcast-stall" not in ids(h.observe(sample(T0 + 1300 + 600, signals=first)))

    def test_a_resume_rebroadcasting_its_step_is_silent(self) -> None:
        h = HealthTracker()
        normal_run(h, 50)
        again = PodSignals(BroadcastMarkers(50, T0 + 9000, None, tuple((s, 2.0) for s in range(40, 50))), ROLES)
        for dt in (100, 600, 1200):  # vLLM reloads after the resume: step 50 is the trainer's own, not new
            assert "broadcast-stall" not in ids(h.observe(sample(T0 + 9000 + dt, signals=again)))

    def test_long_checkpoint_save_after_the_transfer_is_silent(self) -> None:
        h = HealthTracker()
        normal_run(h, 8)
        after = PodSignals(markers(9, ready=True), ROLES)
        h.observe(sample(T0 + 545, log=["trainer: 14:03:12    INFO Saving checkpoint at step 9"], signals=after))
        writing = CheckpointInfo(9, "/run/checkpoints/step_9", 10 * GIB, T0 + 550, complete=False)
        for dt in (200, 600, 1100):  # a 20-minute save
            alerts = h.observe(sample(T0 + 542 + dt, ckpts=[replace(writing, mtime=T0 + 542 + dt)], signals=after))
            assert h.progress.checkpointing and alerts == ()

    def test_stopped_or_finished_run_is_silent(self) -> None:
        h = HealthTracker()
        normal_run(h, 8)
        stuck = PodSignals(markers(9, ready=False), ROLES)
        h.life.record = PodRunRecord(id="r1", state="killed", alive=False)  # killed: the markers stay as they were
        assert signal_ids(h.observe(sample(T0 + 540 + 900, signals=stuck))) == set()
        h.life.record = PodRunRecord(id="r1", state="running", alive=True)
        assert "broadcast-stall" in ids(h.observe(sample(T0 + 540 + 901, signals=stuck)))
        h.feed_log("trainer: 14:03:12 SUCCESS RL trainer finished!", T0 + 1500)
        assert h.observe(sample(T0 + 1600, signals=stuck)) == ()


# ------------------------------------------------------------------------------------ inference down
class TestInferenceDown:
    def test_process_gone_while_trainer_and_orchestrator_live(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 5)
        died = last + 5
        for dt in range(0, 61, 2):
            ok = dt < 10  # /health asked every 10 s: the first look after the death fails
            http_at = died - 5 + 10 * (dt // 10)
            sig = PodSignals(markers(6, ready=False), NO_INFERENCE, http_at, None, EndpointCheck(ok))
            alerts = h.observe(sample(died + dt, signals=sig))
            if "inference-down" in ids(alerts):
                break
        assert dt <= 20, dt  # target: < 60 s
        a = next(a for a in alerts if a.id == "inference-down")
        assert "PRIME-RL::Inference process is gone" in a.message and a.since == died
        assert "gpu-dead" not in ids(alerts) and "no-progress" not in ids(alerts)

    def test_health_failing_twice_on_a_prime_rl_without_titles(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 5, roles=())
        t = last + 1
        h.observe(sample(t, signals=PodSignals(None, (), t, None, EndpointCheck(True))))
        h.observe(sample(t + 10, signals=PodSignals(None, (), t + 10, None, EndpointCheck(False))))
        assert "inference-down" not in ids(h.alerts)  # one failure is not a death
        h.observe(
            sample(
                t + 12,
                log=["orchestrator: INFO still dispatching"],
                signals=PodSignals(None, (), t + 10, None, EndpointCheck(False)),
            )
        )
        assert "inference-down" not in ids(h.alerts)  # the same answer twice is still one failure
        alerts = h.observe(sample(t + 20, signals=PodSignals(None, (), t + 20, None, EndpointCheck(False))))
        assert "inference-down" in ids(alerts)
        assert "failed 2 times in a row" in next(a for a in alerts if a.id == "inference-down").message

    def test_vllm_still_loading_a_kill_and_a_finish_are_silent(self) -> None:
        h = HealthTracker()
        for dt in range(0, 1200, 10):  # vLLM loading: /health refused from the start, the process lives
            h.observe(sample(T0 + dt, signals=PodSignals(None, ROLES, T0 + dt, None, EndpointCheck(False))))
            assert "inference-down" not in ids(h.alerts)
        h = HealthTracker()
        last = normal_run(h, 5)
        for dt in range(0, 120, 10):  # a kill: every process goes at once
            h.observe(sample(last + dt, signals=PodSignals(None, (), last + dt, None, EndpointCheck(False))))
            assert "inference-down" not in ids(h.alerts)
        h = HealthTracker()
        last = normal_run(h, 5)
        h.observe(sample(last + 1, log=["trainer: INFO Writing final checkpoint"]))
        # the run's life says finished while the launcher stops inference first
        h.life.record = PodRunRecord(id="r1", state="running", alive=False, exit_code=0)
        for dt in range(0, 120, 10):
            assert (
                signal_ids(
                    h.observe(
                        sample(last + dt, signals=PodSignals(None, NO_INFERENCE, last + dt, None, EndpointCheck(False)))
                    )
                )
                == set()
            )


# ------------------------------------------------------------------------------------ trainer hung
class TestTrainerHung:
    def test_alive_but_hung_instead_of_no_progress(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 8, trainer=True)  # 60-s steps: budget 360 s
        budget = 6 * 60.0
        for dt in range(10, 700, 10):
            sig = PodSignals(
                markers(8, ready=True), ROLES, last + dt, EndpointCheck(True, 8, last), EndpointCheck(True)
            )
            alerts = h.observe(sample(last + dt, signals=sig))
            if alerts:
                break
        assert dt == budget + 10 and ids(alerts) == {"trainer-hung"}  # no-progress would have said it too
        a = alerts[0]
        assert "alive but hung" in a.message and "step 8 was 6 min ago" in a.message and a.since == last + budget

    def test_dead_metrics_server_leaves_it_to_no_progress(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 8, trainer=True)
        sig = PodSignals(markers(8, ready=True), ROLES, last + 400, EndpointCheck(False), EndpointCheck(True))
        assert ids(h.observe(sample(last + 400, signals=sig))) == {"no-progress"}

    def test_checkpoint_save_no_step_yet_and_stopped_are_silent(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 8, trainer=True)
        h.observe(sample(last + 1, log=["trainer: 14:03:12    INFO Saving checkpoint at step 8"]))
        writing = CheckpointInfo(8, "/run/checkpoints/step_8", 10 * GIB, last, complete=False)
        for dt in (200, 600, 1100):
            sig = PodSignals(None, ROLES, last + dt, EndpointCheck(True, 8, last), EndpointCheck(True))
            assert h.observe(sample(last + dt, ckpts=[replace(writing, mtime=last + dt)], signals=sig)) == ()
        h = HealthTracker()  # before the first step the gauge is 0
        sig = PodSignals(None, ROLES, T0 + 600, EndpointCheck(True, 0, 0.0), EndpointCheck(False))
        assert "trainer-hung" not in ids(h.observe(sample(T0 + 600, signals=sig)))
        h = HealthTracker()
        last = normal_run(h, 8, trainer=True)
        h.life.record = KILLED
        sig = PodSignals(None, ROLES, last + 900, EndpointCheck(True, 8, last), EndpointCheck(True))
        assert signal_ids(h.observe(sample(last + 900, signals=sig))) == set()


# ------------------------------------------------------------------------------------ orchestrator warnings
class TestOrchestratorWarnings:
    def test_event_loop_lag_warns_over_the_threshold_and_clears(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 3)

        def lag(t: float, v: float):
            return h.observe(sample(t, metrics=[json.dumps({"event_loop_lag/max": v, "event_loop_lag/n": 9.0})]))

        assert "loop-lag" not in ids(lag(last + 1, 30.0))
        a = next(a for a in lag(last + 11, 90.0) if a.id == "loop-lag")
        assert a.severity.value == "warning" and "lagged 90 s" in a.message and "above 60 s" in a.message
        assert "700 s" in a.message
        assert "loop-lag" in ids(lag(last + 21, 120.0)) and h.alerts[0].since == last + 11
        assert "loop-lag" not in ids(lag(last + 31, 0.2))
        lag(last + 41, 300.0)
        h.life.record = KILLED
        assert signal_ids(h.observe(sample(last + 42))) == set()

    def test_stale_drops_warn_only_when_they_persist(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 3)

        def step(t: float, n: int, dropped: float):
            rec = {"step": n, "off_policy/dropped": dropped, "off_policy/max": 3.0}
            return h.observe(sample(t, metrics=[json.dumps(rec)]))

        for i, d in enumerate((0.0, 5.0, 5.0)):
            assert "stale-drops" not in ids(step(last + i, 4 + i, d))
        a = next(a for a in step(last + 3, 7, 6.0) if a.id == "stale-drops")
        assert "16 rollouts were dropped as too stale over the last 3 steps" in a.message
        assert "3 steps behind" in a.message

    def test_inference_queue_backed_up_for_five_minutes(self) -> None:
        h = HealthTracker()
        last = normal_run(h, 3)

        def poll(t: float, waiting: float, running: float):
            rec = {
                "inference/agg/num_requests_waiting/mean": waiting,
                "inference/agg/num_requests_running/mean": running,
                "_timestamp": t,
            }
            return h.observe(sample(t, log=[step_line(4)] if t == last + 1 else (), metrics=[json.dumps(rec)]))

        assert "queue" not in ids(poll(last + 1, 10, 100))  # 10 % waiting: prime-rl's normal
        for dt in range(11, 311, 10):
            assert "queue" not in ids(poll(last + dt, 80, 100))  # a burst prime-rl cuts by itself
        a = next(a for a in poll(last + 311, 80, 100) if a.id == "queue")
        assert "80 requests waiting for 100 running" in a.message and a.severity.value == "warning"
        assert "queue" not in ids(poll(last + 321, 20, 100))


def test_an_inference_server_never_seen_alive_is_down_once_the_run_stepped_without_it() -> None:
    """The probe started after the inference server had already died (it died within seconds): no sample
    showed its process or a healthy /health. The run stepped, so it was up; a configured local server now gone
    is down. Before, nothing was ever said (the incident corpus missed it under load)."""
    h = HealthTracker()
    for i in range(1, 6):  # five steps seen; never a sample with its process or an answer from its /health
        t = T0 + 60 * i + 10
        h.observe(sample(t, log=[step_line(i)], signals=PodSignals(markers(i, ready=True), NO_INFERENCE)))
    last = T0 + 60 * 5 + 10
    for dt in range(0, 40, 2):
        sig = PodSignals(markers(6, ready=False), NO_INFERENCE, last + 10 * (dt // 10), None, EndpointCheck(False))
        alerts = h.observe(sample(last + dt, signals=sig))
        if "inference-down" in ids(alerts):
            break
    assert "inference-down" in ids(alerts) and dt <= 30, dt
