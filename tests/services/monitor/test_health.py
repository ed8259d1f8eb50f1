"""services.monitor.health: every rule as a pure function and through HealthTracker with an injected clock.

Each rule fires at its threshold, clears when its condition clears, and stays silent on a checkpoint
pause and on W&B lag alone. Samples are real Sample objects; log lines are in prime-rl's console formats
in the probe's "<file stem>: <line>" form.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from services.models import CheckpointInfo, GpuSample, HostSample, RunProgress, Sample, Severity
from services.monitor.health import (
    HealthSettings,
    HealthTracker,
    disk_alert,
    gpu_dead_alert,
    load_patterns,
    match_line,
    nccl_hang_alert,
    no_progress_alert,
    nofile_alert,
    stall_budget,
)

GIB = 1024**3
S = HealthSettings()
T0 = 1_700_000_000.0
HOST = HostSample(
    cpu_pct=10, mem_used=10 * GIB, mem_total=100 * GIB, disk_used=50 * GIB, disk_total=100 * GIB, nofile_soft=1048576
)


def step_line(n: int, seconds: str = "10.0s") -> str:
    return (
        f"trainer: 14:03:12 SUCCESS Step {n} | {seconds:>7} | Loss 0.{n:04d} | Entropy 0.4567 | "
        "Mismatch KL 0.0012 | Grad. Norm 0.2345 | LR 3.00e-06 | Throughput 25341 tokens/s | MFU 31.2% | "
        "Peak Mem. 41.3 GiB"
    )


def gpu(i: int, util: float = 95, mem_gib: float = 60, power: float = 600) -> GpuSample:
    return GpuSample(i, "NVIDIA H100 80GB HBM3", util, int(mem_gib * GIB), 80 * GIB, power, 60)


def sample(t: float, *, log=(), gpus=None, host=HOST, ckpts=(), metrics=()) -> Sample:
    gpus = (gpu(0), gpu(1)) if gpus is None else gpus
    return Sample(t=t, gpus=tuple(gpus), host=host, log=tuple(log), ckpts=tuple(ckpts), metrics=tuple(metrics))


def ids(alerts) -> set[str]:
    return {a.id for a in alerts}


# ------------------------------------------------------------------------------------ no progress
class TestNoProgress:
    def test_budget_is_k_times_step_time_with_floor_and_cap(self) -> None:
        assert stall_budget(10.0, S) == 300.0  # 6 x 10 s = 60 s -> the 5 min floor
        assert stall_budget(100.0, S) == 600.0  # 6 x 100 s
        assert stall_budget(1000.0, S) == 2700.0  # capped at 45 min
        assert stall_budget(None, S) == 2700.0  # no step time yet: the cap

    def test_pure_rule_fires_after_the_budget_only(self) -> None:
        run = RunProgress(step=7, step_time_s=100.0)
        assert no_progress_alert(run, T0, T0 + 600.0, S) is None  # exactly at the budget: still fine
        alert = no_progress_alert(run, T0, T0 + 601.0, S)
        assert alert is not None and alert.id == "no-progress" and alert.severity is Severity.CRITICAL
        assert "step 7" in alert.message and "10 min" in alert.message and "resume" in alert.message
        assert no_progress_alert(replace(run, checkpointing=True), T0, T0 + 5000, S) is None
        assert no_progress_alert(replace(run, finished=True), T0, T0 + 5000, S) is None
        assert no_progress_alert(RunProgress(), None, T0 + 5000, S) is None  # no run seen: nothing to judge

    def test_tracker_fires_and_clears_with_a_new_step(self) -> None:
        h = HealthTracker()
        for i in range(1, 6):  # steps of 100 s each -> budget 600 s
            h.observe(sample(T0 + 100 * i, log=[step_line(i, "1m 40s")]))
        assert h.progress.step == 5 and h.progress.step_time_s == 100.0
        assert "no-progress" not in ids(h.observe(sample(T0 + 500 + 600)))
        assert "no-progress" in ids(h.observe(sample(T0 + 500 + 601)))
        assert "no-progress" not in ids(h.observe(sample(T0 + 1200, log=[step_line(6, "1m 40s")])))

    def test_silent_while_a_checkpoint_is_written_and_budget_restarts_after_it(self) -> None:
        h = HealthTracker()
        for i in range(1, 6):
            h.observe(sample(T0 + 10 * i, log=[step_line(i)]))  # 10 s steps -> 300 s budget (floor)
        h.observe(sample(T0 + 51, log=["trainer: 14:03:12    INFO Saving checkpoint at step 5"]))
        writing = CheckpointInfo(5, "/run/checkpoints/step_5", 10 * GIB, T0 + 1000, complete=False)
        for t in (400, 800, 1100):  # a 20-minute save: way over the budget, and silent
            assert "no-progress" not in ids(h.observe(sample(T0 + t, ckpts=[replace(writing, mtime=T0 + t)])))
            assert h.progress.checkpointing
        done = replace(writing, complete=True, mtime=T0 + 1150)
        assert "no-progress" not in ids(h.observe(sample(T0 + 1150, ckpts=[done])))
        assert not h.progress.checkpointing
        assert "no-progress" not in ids(h.observe(sample(T0 + 1150 + 300, ckpts=[done])))
        assert "no-progress" in ids(h.observe(sample(T0 + 1150 + 301, ckpts=[done])))

    def test_abandoned_half_written_checkpoint_does_not_pause_for_ever(self) -> None:
        h = HealthTracker()
        h.observe(sample(T0, log=[step_line(1)]))
        old = CheckpointInfo(1, "/run/checkpoints/step_1", GIB, T0 - 5000, complete=False)
        assert "no-progress" in ids(h.observe(sample(T0 + 2701, ckpts=[old])))

    def test_wandb_lag_alone_never_raises_it(self) -> None:
        """W&B may say 'heartbeat 20 min ago' or even 'crashed' while the pod's own logs move on."""
        h = HealthTracker()
        note = "W&B: state crashed, heartbeat 20 min ago"
        for i in range(1, 200):
            alerts = h.observe(sample(T0 + 10 * i, log=[step_line(i)]), wandb_note=note)
            assert "no-progress" not in ids(alerts)
        # and when the pod's logs do stop, the W&B note is context, not the reason
        alert = next(a for a in h.observe(sample(T0 + 1990 + 301), wandb_note=note) if a.id == "no-progress")
        assert "context only" in alert.message

    def test_finished_run_is_not_stalled(self) -> None:
        h = HealthTracker()
        h.observe(sample(T0, log=[step_line(20), "trainer: 14:03:12 SUCCESS RL trainer finished!"]))
        assert h.progress.finished
        assert "no-progress" not in ids(h.observe(sample(T0 + 10_000)))

    def test_a_run_that_never_reaches_step_one_is_caught_by_the_start_budget(self) -> None:
        """Inference died while loading, the trainer waits: 15 min (settings), not the 45-min cap."""
        assert S.stall_start_s == 900.0
        assert no_progress_alert(RunProgress(), None, T0 + 900, S, started_at=T0) is None  # at the budget: fine
        alert = no_progress_alert(RunProgress(), None, T0 + 901, S, started_at=T0)
        assert alert is not None and alert.id == "no-progress" and alert.title == "No first step yet"
        assert "inference.log" in alert.message and alert.since == T0 + 900
        h = HealthTracker(HealthSettings(stall_start_s=300.0))
        h.observe(sample(T0, log=["inference: INFO Loading model weights"]))
        assert "no-progress" not in ids(h.observe(sample(T0 + 299, log=["trainer: INFO Waiting for rollouts"])))
        assert "no-progress" in ids(h.observe(sample(T0 + 301)))  # from the FIRST line, not the last
        assert "no-progress" not in ids(h.observe(sample(T0 + 302, log=[step_line(1)])))  # step 1: cleared
        # no run line at all (an idle pod): nothing to judge, however long
        assert "no-progress" not in ids(HealthTracker().observe(sample(T0 + 10_000)))

    def test_inference_gpu_dying_before_step_one(self) -> None:
        h = HealthTracker()
        h.observe(sample(T0, log=["inference: INFO Loading model weights"]))  # both GPUs loaded
        alerts = ()
        for k in range(1, 62):  # GPU 0 empties while the trainer still logs its waiting
            alerts = h.observe(
                sample(
                    T0 + k,
                    log=["trainer: INFO Waiting for rollouts"] if k % 10 == 0 else [],
                    gpus=[gpu(0, util=0, mem_gib=0, power=70), gpu(1)],
                )
            )
        alert = next(a for a in alerts if a.id == "gpu-dead")
        assert "before the first step" in alert.message


# ------------------------------------------------------------------------------------ GPU alive but broken
class TestGpuAliveButBroken:
    def test_pure_rule(self) -> None:
        assert gpu_dead_alert({0: T0}, {0: 12}, True, T0 + 59.9, S) is None
        alert = gpu_dead_alert({0: T0}, {0: 12}, True, T0 + 60, S)
        assert alert is not None and "inference server likely died at step 12" in alert.message
        assert alert.title == "Inference server likely died at step 12"
        assert gpu_dead_alert({0: T0}, {0: 12}, False, T0 + 600, S) is None  # run not active: no claim
        assert gpu_dead_alert({0: T0}, {0: 12}, True, T0 + 60, S, survivors=1) is not None
        assert gpu_dead_alert({0: T0}, {0: 12}, True, T0 + 600, S, survivors=0) is None  # all went down

    def test_a_killed_run_is_not_a_dead_inference_server(self) -> None:
        # every GPU the run used empties at once (a kill): no "inference server likely died" a minute later,
        # even while the run still counts as active (its last step was recent)
        h = HealthTracker()
        t = T0
        for step in range(1, 11):
            t += 1
            h.observe(sample(t, log=[f"trainer: INFO Step {step} | Time: 1.00s | Loss: 0.1"], gpus=[gpu(0), gpu(1)]))
        alerts: tuple = ()
        for k in range(1, 90):
            alerts = h.observe(
                sample(t + k, gpus=[gpu(0, util=0, mem_gib=0, power=70), gpu(1, util=0, mem_gib=0, power=70)])
            )
            assert not any(a.id == "gpu-dead" for a in alerts), (k, alerts)

    def test_inference_gpu_drops_while_trainer_keeps_logging(self) -> None:
        h = HealthTracker()
        t, step = T0, 0
        for _ in range(10):  # healthy: both GPUs hold memory
            t, step = t + 1, step + 1
            h.observe(sample(t, log=[step_line(step, "1.0s")]))
        died_at = step
        alerts = ()
        for k in range(70):  # GPU 0 at 0 MiB / 0 % while steps keep coming
            t += 1
            if k % 2:
                step += 1
            alerts = h.observe(
                sample(
                    t,
                    log=[step_line(step, "1.0s")] if k % 2 else [],
                    gpus=[gpu(0, util=0, mem_gib=0, power=70), gpu(1)],
                )
            )
            if k < 59:
                assert "gpu-dead" not in ids(alerts), k
        alert = next(a for a in alerts if a.id == "gpu-dead")
        assert f"inference server likely died at step {died_at}" in alert.message
        # the GPU comes back (the run was restarted): the alert clears
        assert "gpu-dead" not in ids(h.observe(sample(t + 1, log=[step_line(step + 1, "1.0s")])))

    def test_a_gpu_the_run_never_used_is_not_dead(self) -> None:
        h = HealthTracker()
        for i in range(100):
            alerts = h.observe(
                sample(T0 + i, log=[step_line(i + 1, "1.0s")], gpus=[gpu(0), gpu(1, util=0, mem_gib=0, power=60)])
            )
        assert "gpu-dead" not in ids(alerts)

    def test_nccl_hang_signature(self) -> None:
        assert nccl_hang_alert(T0, None, 8, T0 + 179, S) is None
        assert nccl_hang_alert(T0, T0 - 10, 8, T0 + 180, S) is not None
        assert nccl_hang_alert(T0, T0 + 5, 8, T0 + 500, S) is None  # a step after it started: not a hang
        h = HealthTracker()
        h.observe(sample(T0, log=[step_line(3)]))
        hung = [gpu(i, util=100, mem_gib=60, power=72) for i in range(4)]
        for t in range(1, 180):
            assert "nccl-hang" not in ids(h.observe(sample(T0 + t, gpus=hung)))
        alert = next(a for a in h.observe(sample(T0 + 181, gpus=hung)) if a.id == "nccl-hang")
        assert "NCCL-hang signature" in alert.message and "4 GPU(s)" in alert.message
        assert "nccl-hang" not in ids(h.observe(sample(T0 + 182, gpus=[gpu(i) for i in range(4)])))

    def test_busy_gpus_with_steps_are_not_a_hang(self) -> None:
        h = HealthTracker()
        hot = [gpu(i, util=100, mem_gib=60, power=72) for i in range(2)]
        for i in range(400):
            alerts = h.observe(sample(T0 + i, gpus=hot, log=[step_line(i + 1, "1.0s")]))
        assert "nccl-hang" not in ids(alerts)


# ------------------------------------------------------------------------------------ disk and ulimit
class TestDiskAndOpenFiles:
    def test_disk_over_85_with_checkpoint_share_and_time_to_full(self) -> None:
        ok = replace(HOST, disk_used=85 * GIB)
        assert disk_alert(ok, (), None, T0, S) is None
        full = replace(HOST, disk_used=90 * GIB)
        ckpts = [CheckpointInfo(s, f"/r/checkpoints/step_{s}", 15 * GIB, T0, True) for s in (10, 20, 30)]
        alert = disk_alert(full, ckpts, 10 * GIB / 3600, T0, S)
        assert alert is not None and alert.severity is Severity.WARNING
        assert "90 %" in alert.message and "checkpoints 45.0 GiB (50 % of used)" in alert.message
        assert "full in ~60 min" in alert.message and "keep_last" in alert.message
        assert disk_alert(replace(HOST, disk_used=96 * GIB), (), None, T0, S).severity is Severity.CRITICAL

    def test_tracker_measures_the_rate_and_clears(self) -> None:
        h = HealthTracker()
        for i in range(61):  # +1 GiB per minute from 86 GiB
            host = replace(HOST, disk_used=int(86 * GIB + i * GIB / 6))
            alerts = h.observe(sample(T0 + 10 * i, host=host))
        alert = next(a for a in alerts if a.id == "disk")
        assert "at the current 60.0 GiB/h" in alert.message and "full in ~4 min" in alert.message
        assert alert.severity is Severity.CRITICAL  # full within the hour
        assert alert.since == T0  # stable while it lasts
        assert "disk" not in ids(h.observe(sample(T0 + 620, host=replace(HOST, disk_used=40 * GIB))))

    def test_open_files(self) -> None:
        assert nofile_alert(replace(HOST, nofile_soft=65536), T0, S) is None
        assert nofile_alert(replace(HOST, nofile_soft=None), T0, S) is None  # unlimited
        alert = nofile_alert(replace(HOST, nofile_soft=1024), T0, S)
        assert alert is not None and "ulimit -n 65536" in alert.message and "1024" in alert.message
        h = HealthTracker()
        assert "nofile" in ids(h.observe(sample(T0, host=replace(HOST, nofile_soft=4096), log=[step_line(1)])))
        assert "nofile" not in ids(h.observe(sample(T0 + 1)))

    def test_open_files_say_nothing_on_a_machine_running_no_run(self) -> None:
        """Every start added this machine as `local` and raised "Open-files limit too low" about the laptop,
        in a toast over the GPU rows: a limit matters for a trainer, and the launch's pre-flight checks it."""
        h = HealthTracker()
        low = replace(HOST, nofile_soft=1024)
        assert "nofile" not in ids(h.observe(sample(T0, host=low)))
        assert "nofile" not in ids(h.observe(sample(T0 + 60, host=low)))
        assert "nofile" in ids(h.observe(sample(T0 + 61, host=low, log=[step_line(1)])))  # a run appeared


# ------------------------------------------------------------------------------------ log patterns
LOG_CASES = {
    "cuda-oom": "trainer: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "too-many-open-files": "orchestrator: OSError: [Errno 24] Too many open files: '/tmp/x'",
    "nccl-timeout": "trainer: [rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds",
    "vllm-engine-dead": "inference: vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    "vllm-rejected": "inference: ERROR 10-01 This model's maximum context length is 4096 tokens. However, you "
    "requested 5000 tokens",
    "traceback": "\x1b[31mtrainer: Traceback (most recent call last):\x1b[0m",
}


class TestLogPatterns:
    def test_every_pattern_in_the_data_file_has_a_case(self) -> None:
        patterns = load_patterns()
        assert {p.id for p in patterns} == set(LOG_CASES)
        for pid, line in LOG_CASES.items():
            found = match_line(line, patterns)
            assert found is not None and found.id == pid, (pid, line)
        assert match_line(step_line(3), patterns) is None
        assert match_line("trainer: 14:00:00    INFO all good, no traceback here", patterns) is None

    def test_surfaces_once_with_its_line_then_clears_when_the_run_moves_on(self) -> None:
        h = HealthTracker()
        h.observe(sample(T0, log=[step_line(1)]))
        oom = LOG_CASES["cuda-oom"]
        alerts = h.observe(sample(T0 + 1, log=[oom, oom, "trainer: garbage \x00\xff", oom]))
        hits = [a for a in alerts if a.id == "log:cuda-oom"]
        assert len(hits) == 1 and hits[0].line == oom and hits[0].count == 3
        assert oom in hits[0].message and "micro_batch_size" in hits[0].message
        assert hits[0].severity is Severity.CRITICAL
        assert "log:cuda-oom" in ids(h.observe(sample(T0 + 100)))  # no step since: still there
        assert "log:cuda-oom" not in ids(h.observe(sample(T0 + 101, log=[step_line(2)])))
        assert "log:cuda-oom" in ids(h.observe(sample(T0 + 102, log=[oom])))  # fires again when it recurs

    def test_old_news_clears_after_a_ttl_when_one_is_set(self) -> None:
        h = HealthTracker(HealthSettings(log_alert_ttl_s=1800.0))
        h.observe(sample(T0, log=[LOG_CASES["nccl-timeout"]]))
        assert "log:nccl-timeout" in ids(h.observe(sample(T0 + 1800)))
        assert "log:nccl-timeout" not in ids(h.observe(sample(T0 + 1801)))

    def test_a_dead_runs_error_stays_the_news_until_the_run_moves_past_it(self) -> None:
        """By default no TTL: the OOM that stopped the run is still the answer two hours later (as `status`
        says), and it clears when the run moves on."""
        h = HealthTracker()
        h.observe(sample(T0, log=[step_line(1)]))
        oom = LOG_CASES["cuda-oom"]
        h.observe(sample(T0 + 1, log=[oom]))
        later = ids(h.observe(sample(T0 + 7200)))
        assert "log:cuda-oom" in later and "no-progress" in later
        assert "log:cuda-oom" not in ids(h.observe(sample(T0 + 7201, log=[step_line(2)])))

    def test_a_checkpoint_write_ending_does_not_move_past_an_error(self) -> None:
        """The end of a write restarts the stall budget, but it is not a step: the OOM stays."""
        h = HealthTracker()
        h.observe(sample(T0, metrics=['{"step": 1, "loss/mean": 0.5}']))
        h.observe(sample(T0 + 1, log=[LOG_CASES["cuda-oom"]]))
        writing = CheckpointInfo(1, "/run/checkpoints/step_1", GIB, T0 + 2, complete=False)
        h.observe(sample(T0 + 2, ckpts=[writing]))
        done = CheckpointInfo(1, "/run/checkpoints/step_1", GIB, T0 + 3, complete=True)
        assert "log:cuda-oom" in ids(h.observe(sample(T0 + 60, ckpts=[done])))

    def test_in_a_run_without_step_lines_metrics_progress_moves_past_an_error(self) -> None:
        h = HealthTracker()
        h.observe(sample(T0, metrics=['{"step": 1, "loss/mean": 0.5}']))
        h.observe(sample(T0 + 1, log=[LOG_CASES["nccl-timeout"]]))
        assert "log:nccl-timeout" in ids(h.observe(sample(T0 + 3600)))
        assert "log:nccl-timeout" not in ids(h.observe(sample(T0 + 3601, metrics=['{"step": 2, "loss/mean": 0.4}'])))

    def test_custom_pattern_file(self, tmp_path: Path) -> None:
        f = tmp_path / "p.toml"
        f.write_text(
            '[[pattern]]\nid = "boom"\nseverity = "warning"\ntitle = "Boom"\nregex = "BOOM"\nadvice = "duck"\n'
        )
        h = HealthTracker(patterns=load_patterns(f))
        alert = next(a for a in h.observe(sample(T0, log=["trainer: BOOM"])) if a.id == "log:boom")
        assert alert.message.endswith("duck")


def test_alerts_are_worst_first_and_stable() -> None:
    h = HealthTracker()
    host = replace(HOST, nofile_soft=1024, disk_used=99 * GIB)
    a1 = h.observe(sample(T0, host=host, log=[LOG_CASES["traceback"]]))
    assert [a.severity for a in a1] == sorted((a.severity for a in a1), key=lambda s: -s.rank)
    a2 = h.observe(sample(T0 + 1, host=host))
    assert a1 == a2  # same conditions, same alerts (ids, since, text)


@pytest.mark.parametrize("n", [1000])
def test_cost_is_per_new_data(n: int) -> None:
    """Many samples without new lines stay cheap: nothing is re-scanned."""
    import time as _time

    h = HealthTracker()
    h.observe(sample(T0, log=[step_line(1)] * 200))
    start = _time.perf_counter()
    for i in range(n):
        h.observe(sample(T0 + i, gpus=[gpu(k) for k in range(8)]))
    assert (_time.perf_counter() - start) / n < 0.0005  # < 0.5 ms per 8-GPU sample


# ------------------------------------------------------------------------------------ W&B (information only)
class TestWandbStatus:
    def test_lazy_import_and_off_without_a_key(self) -> None:
        import subprocess
        import sys

        code = (
            "import sys, services.monitor.wandb_status as w; assert 'wandb' not in sys.modules; "
            "assert not w.enabled({}); assert w.enabled({'WANDB_API_KEY': 'x'})"
        )
        subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], check=True)

    def test_poller_is_rate_limited_and_backs_off_on_errors(self) -> None:
        from services.monitor.wandb_status import WandbPoller, parse_time

        class Run:
            state = "running"
            heartbeatAt = "2023-11-14T22:13:20Z"  # T0

        calls: list[str] = []
        fail = {"now": False}

        class Api:
            def run(self, path: str) -> Run:
                calls.append(path)
                if fail["now"]:
                    raise ConnectionError("429 Too Many Requests")
                return Run()

        clock = {"t": T0 + 45}
        p = WandbPoller("ent/proj/abc", min_interval=60, clock=lambda: clock["t"], api_factory=Api)
        st = p.fetch()
        assert parse_time(Run.heartbeatAt) == T0 and st.lag(T0 + 45) == 45
        assert st.note(T0 + 45) == "W&B: running, heartbeat 45 s ago"
        clock["t"] += 30
        assert p.fetch() is st and len(calls) == 1  # within the interval: no request
        clock["t"] += 31
        fail["now"] = True
        bad = p.fetch()
        assert len(calls) == 2 and "unavailable" in bad.note(clock["t"])
        clock["t"] += 61
        p.fetch()
        assert len(calls) == 2  # backed off to 120 s after the error
        clock["t"] += 60
        p.fetch()
        assert len(calls) == 3

    def test_crashed_on_wandb_but_steps_on_the_pod_is_not_stalled(self) -> None:
        from services.models import WandbStatus

        st = WandbStatus("e/p/r", T0, state="crashed", heartbeat_at=T0 - 3600)
        h = HealthTracker()
        for i in range(1, 100):
            t = T0 + 10 * i
            assert not h.observe(sample(t, log=[step_line(i)]), wandb_note=st.note(t))


def test_max_steps_from_the_runs_configs_gives_an_eta_and_the_cost_to_finish():
    from dataclasses import replace

    tracker = HealthTracker(S, price_per_hr=36.0)
    tracker.observe(sample(T0, log=[step_line(1)]))
    assert tracker.progress.eta_s is None  # nothing says where the run ends yet
    for n in range(2, 6):
        tracker.observe(replace(sample(T0 + 10 * n, log=[step_line(n)]), max_steps=105))
    p = tracker.progress
    assert p.max_steps == 105 and p.step == 5
    assert p.eta_s == pytest.approx(100 * 10.0)  # 100 steps left at 10 s a step
