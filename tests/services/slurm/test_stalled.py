"""A stalled rank: one node of a running job idles for minutes while another node of the job works.

Pure rules (services.slurm.health) and the monitor's cluster state that carries them between reads
(services.monitor.cluster.ClusterState), driven by read GPUs and an explicit clock."""

from __future__ import annotations

from services.models import GpuSample, Severity
from services.monitor.cluster import ClusterState
from services.slurm.health import STALL_S, stalled_ranks, track_idle
from services.slurm.models import ClusterView, JobGpus, NodeGpus, SlurmJob, SlurmNode


def node(name: str, *utils: float | None, roles: tuple[str, ...] = (), error: str = "") -> NodeGpus:
    gpus = tuple(GpuSample(i, "H100", u, 10 << 30, 80 << 30, 300.0, 60.0) for i, u in enumerate(utils))
    return NodeGpus(name, gpus=gpus, roles=roles, error=error)


def job_gpus(*nodes: NodeGpus, job: str = "42") -> tuple[JobGpus, ...]:
    return (JobGpus(job, nodes=nodes, checked_at=0.0),)


def reads(state: ClusterState, seq: list[tuple[float, tuple[JobGpus, ...]]]) -> None:
    for t, gpus in seq:
        state.read_gpus(gpus, t)


def test_a_node_idle_past_the_limit_while_another_works_is_a_stalled_rank():
    idle = {}
    for t in (0.0, 300.0, STALL_S):
        gpus = job_gpus(node("n1", 95.0, 88.0, roles=("trainer",)), node("n2", 0.0, 2.0, roles=("inference",)))
        idle = track_idle(idle, gpus, t)
        alerts = stalled_ranks(gpus, idle, t)
        if t < STALL_S:
            assert alerts == [], t  # idle, but not for long enough yet
    assert idle == {("42", "n2"): 0.0}  # the first idle read counts, not the latest
    [alert] = alerts
    assert alert.id == "slurm-stalled:42:n2" and alert.severity is Severity.WARNING
    assert alert.title == "n2 looks stalled" and alert.since == 0.0
    assert "(inference)" in alert.message and "for 10 min 00 s" in alert.message and "n1 works (92 %)" in alert.message


def test_a_busy_read_between_idle_ones_starts_the_count_again():
    idle = track_idle({}, job_gpus(node("n1", 90.0), node("n2", 0.0)), 0.0)
    idle = track_idle(idle, job_gpus(node("n1", 90.0), node("n2", 70.0)), 400.0)  # it worked again
    gpus = job_gpus(node("n1", 90.0), node("n2", 1.0))
    idle = track_idle(idle, gpus, 700.0)
    assert idle == {("42", "n2"): 700.0}
    assert stalled_ranks(gpus, idle, 700.0 + STALL_S - 1) == []
    assert len(stalled_ranks(gpus, idle, 700.0 + STALL_S)) == 1


def test_a_whole_job_idling_or_an_unread_node_is_no_stall():
    gpus = job_gpus(node("n1", 1.0), node("n2", 0.0))  # loading, evaluating, between phases: everyone idles
    idle = track_idle({}, gpus, 0.0)
    assert len(idle) == 2 and stalled_ranks(gpus, idle, 10 * STALL_S) == []
    # a node whose GPUs could not be read is never judged idle (an error is its own story)
    gpus = job_gpus(node("n1", 90.0), node("n2", error="no NVIDIA driver on n2"), node("n3", None))
    idle = track_idle({}, gpus, 0.0)
    assert idle == {} and stalled_ranks(gpus, idle, 10 * STALL_S) == []


def test_the_monitor_state_carries_idle_times_between_reads_and_forgets_ended_jobs():
    state = ClusterState()
    running = SlurmJob(id="42", name="rl", state="RUNNING", nodes=("n1", "n2"))
    nodes = (SlurmNode(name="n1", state="ALLOCATED"), SlurmNode(name="n2", state="ALLOCATED"))
    state.looked(ClusterView(jobs=(running,), nodes=nodes, checked_at=0.0), [])
    gpus = job_gpus(node("n1", 80.0), node("n2", 0.0))
    reads(state, [(0.0, gpus), (STALL_S / 2, gpus)])
    assert state.alerts == ()
    reads(state, [(STALL_S + 1, gpus)])
    assert [a.id for a in state.alerts] == ["slurm-stalled:42:n2"]
    # a new look at jobs and nodes keeps the stall while the job runs (the GPUs read stay until read again) ...
    state.looked(ClusterView(jobs=(running,), nodes=nodes, checked_at=STALL_S + 5), [])
    assert [a.id for a in state.alerts] == ["slurm-stalled:42:n2"]
    # ... and forgets it once the job has ended
    ended = SlurmJob(id="42", name="rl", state="CANCELLED", nodes=("n1", "n2"))
    state.looked(ClusterView(jobs=(ended,), nodes=nodes, checked_at=STALL_S + 20), [])
    assert state.alerts == () and state.idle_since == {}
