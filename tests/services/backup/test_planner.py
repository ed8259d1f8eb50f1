"""The auto-backup planner (services/backup/planner.py): which step, when, one at a time, backoff, reports."""

from __future__ import annotations

from dataclasses import replace

from services.backup.planner import AutoBackupPlanner
from services.models import CheckpointInfo, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


POD = Pod(name="p", kind=PodKind.SSH, host="h", run_dir="/w/run")


def snap(*steps: tuple[int, bool], pod: Pod = POD, state: PodState = PodState.ONLINE) -> PodSnapshot:
    ckpts = tuple(CheckpointInfo(s, f"/w/run/checkpoints/step_{s}", 100, 0.0, complete) for s, complete in steps)
    return PodSnapshot(
        pod=pod, status=PodStatus(state), history=(Sample(t=0.0, gpus=(), host=HostSample(), ckpts=ckpts),)
    )


def test_the_newest_complete_step_once_never_a_half_written_one_and_one_at_a_time():
    planner = AutoBackupPlanner(clock=Clock())
    assert planner.want(snap((2, True), (4, False))).step == 2  # step 4 is still being written
    assert planner.want(snap((2, True), (4, True))) is None  # one backup at a time per pod
    assert planner.running("p") == 2
    assert not planner.succeeded("p", 2)
    job = planner.want(snap((2, True), (4, True)))
    assert (job.step, job.list_first) == (4, True)  # the bucket was never listed: list first
    assert planner.listed("p", {4}) is True  # already verified there: nothing to send
    assert planner.running("p") is None and planner.want(snap((2, True), (4, True))) is None
    job = planner.want(snap((2, True), (4, True), (6, True)))
    assert (job.step, job.list_first) == (6, False)


def test_nothing_when_disabled_offline_simulated_without_run_dir_or_held_by_the_pane():
    planner = AutoBackupPlanner(clock=Clock())
    assert planner.want(snap((2, True)), enabled=False) is None
    assert planner.want(snap((2, True), state=PodState.OFFLINE)) is None
    assert planner.want(snap((2, True), pod=replace(POD, run_dir=None))) is None
    assert planner.want(snap((2, True), pod=Pod(name="demo", kind=PodKind.DEMO, run_dir="/r"))) is None
    assert planner.want(snap()) is None
    planner.hold("p", "restore")
    assert planner.want(snap((2, True))) is None
    planner.release("p")
    assert planner.want(snap((2, True))).step == 2


def test_a_failure_is_reported_once_retried_with_doubling_backoff_and_recovery_said():
    clock = Clock()
    planner = AutoBackupPlanner(clock=clock, retry_base=10, retry_max=35)
    s = snap((2, True))
    assert planner.want(s).step == 2
    reports, waits = [planner.failed("p", 2, "bucket gone")], []
    for _ in range(4):
        start = clock.t
        while planner.want(s) is None:  # each retry waits its backoff, then the same step goes again
            clock.t += 1
            assert clock.t - start < 100
        waits.append(clock.t - start)
        reports.append(planner.failed("p", 2, "bucket gone"))
    assert reports == [True, False, False, False, False]  # reported once, not at every retry
    assert waits == [10, 20, 35, 35]
    assert "retry in 35 s" in planner.status("p") and "bucket gone" in planner.status("p")
    clock.t += 35
    assert planner.want(s).step == 2
    assert planner.succeeded("p", 2) is True  # after failures: "working again"
    assert planner.status("p") == "" and planner.failures("p") == 0


def test_a_cancelled_step_is_not_retried_but_the_next_complete_one_is():
    planner = AutoBackupPlanner(clock=Clock())
    assert planner.want(snap((2, True))).step == 2
    planner.cancelled("p", 2)
    assert planner.want(snap((2, True))) is None
    assert planner.want(snap((2, True), (3, True))).step == 3


def snap_at(*steps: tuple[int, float], run_dir: str = "/w/run") -> PodSnapshot:
    """Complete checkpoints (step, mtime) of the pod's run in ``run_dir``."""
    pod = replace(POD, run_dir=run_dir)
    ckpts = tuple(CheckpointInfo(s, f"{run_dir}/checkpoints/step_{s}", 100, m, True) for s, m in steps)
    return PodSnapshot(
        pod=pod, status=PodStatus(PodState.ONLINE), history=(Sample(t=0.0, gpus=(), host=HostSample(), ckpts=ckpts),)
    )


def test_steps_below_the_highest_one_in_the_bucket_or_sent_are_still_backed_up():
    planner = AutoBackupPlanner(clock=Clock())
    # the bucket lists this run's 5000 (backed up before a resume from step 400): 400 is the pod's newest
    job = planner.want(snap_at((400, 1.0)))
    assert job.list_first and job.mtime == 1.0
    assert planner.listed("p", {5000}) is False  # 400 itself is not in the bucket: it goes
    planner.succeeded("p", 400, job.mtime)
    assert planner.want(snap_at((400, 1.0))) is None  # sent, same checkpoint
    assert planner.want(snap_at((400, 1.0), (450, 2.0))).step == 450  # below 5000: backed up all the same
    planner.succeeded("p", 450, 2.0)
    # a fresh run in the same dir wrote its own step_450 (another mtime): another checkpoint, not "sent"
    assert planner.want(snap_at((450, 9.0))).step == 450


def test_another_run_dir_starts_afresh_and_a_manual_backup_counts_as_sent():
    planner = AutoBackupPlanner(clock=Clock())
    assert planner.want(snap_at((8, 1.0))).step == 8
    planner.listed("p", {8})
    assert planner.want(snap_at((8, 1.0))) is None
    job = planner.want(snap_at((8, 1.0), run_dir="/w/other"))  # the pod now follows another run
    assert (job.step, job.run_dir, job.list_first) == (8, "/w/other", True)
    planner2 = AutoBackupPlanner(clock=Clock())
    planner2.hold("p", "backup")
    planner2.succeeded("p", 8, 1.0, "/w/run")  # the user's b verified it: auto-backup does not send it again
    planner2.release("p")
    assert planner2.want(snap_at((8, 1.0))) is None and planner2.want(snap_at((8, 1.0), (9, 2.0))).step == 9


def test_a_step_verified_in_the_bucket_is_skipped_only_while_it_is_the_same_checkpoint():
    """A relaunch by hand in the same run dir writes step 4 again (another mtime): it is sent."""
    planner = AutoBackupPlanner(clock=Clock())
    first = snap((4, True))
    assert planner.want(first).list_first and planner.listed("p", {4}) is True
    assert planner.want(first) is None  # that checkpoint is in the bucket
    again = replace(first, history=(replace(first.latest, ckpts=(replace(first.latest.ckpts[0], mtime=50.0),)),))
    job = planner.want(again)
    assert job is not None and job.step == 4 and job.mtime == 50.0
