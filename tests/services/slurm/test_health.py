"""services/slurm/health.py: the alerts one look at a cluster decides (pure: jobs and nodes in)."""

from __future__ import annotations

from services.models import Severity
from services.slurm.health import PENDING_ALERT_S, judge
from services.slurm.models import SlurmJob, SlurmNode

NOW = 1_700_000_000.0


def test_a_lost_node_under_a_running_job_is_critical_and_a_lost_idle_node_is_not():
    jobs = [SlurmJob("12", name="rl", state="RUNNING", nodelist="n[1-2]", nodes=("n1", "n2"))]
    nodes = [
        SlurmNode("n1", "ALLOCATED"),
        SlurmNode("n2", "ALLOCATED+NOT_RESPONDING", reason="Not responding"),
        SlurmNode("n3", "DOWN"),
    ]
    (alert,) = judge(jobs, nodes, NOW)
    assert alert.severity is Severity.CRITICAL and alert.id == "slurm-node-down:12:n2"
    assert "n2" in alert.title and "job 12 (rl)" in alert.message and "Not responding" in alert.message
    assert judge(jobs, [SlurmNode("n1", "ALLOCATED"), SlurmNode("n2", "ALLOCATED")], NOW) == []


def test_a_long_wait_names_slurms_reason_in_words():
    waited = SlurmJob("13", state="PENDING", reason="QOSMaxGRESPerUser", submit_time=NOW - PENDING_ALERT_S - 60)
    fresh = SlurmJob("14", state="PENDING", reason="Priority", submit_time=NOW - 60)
    odd = SlurmJob("15", state="PENDING", reason="SomethingNew", submit_time=NOW - 2 * PENDING_ALERT_S)
    alerts = {a.id: a for a in judge([waited, fresh, odd], [], NOW)}
    assert set(alerts) == {"slurm-pending:13", "slurm-pending:15"}
    assert "as many GPUs as your QOS allows" in alerts["slurm-pending:13"].message
    assert alerts["slurm-pending:13"].title == "Job 13 has waited 31 min 00 s"
    assert "Slurm's reason: SomethingNew" in alerts["slurm-pending:15"].message


def test_a_job_that_ended_badly_says_why_and_a_cancelled_or_completed_one_is_quiet():
    jobs = [
        SlurmJob("20", state="NODE_FAIL", nodes=("n2",), end_time=NOW - 5),
        SlurmJob("21", state="TIMEOUT"),
        SlurmJob("22", state="CANCELLED"),
        SlurmJob("23", state="COMPLETED"),
        SlurmJob("24", state="DEADLINE"),
    ]
    alerts = judge(jobs, [], NOW)
    assert [a.id for a in alerts] == ["slurm-ended:20", "slurm-ended:21", "slurm-ended:24"]  # worst first
    assert "a node failed under it (on n2)" in alerts[0].message and alerts[0].since == NOW - 5
    assert "time limit" in alerts[1].message and alerts[2].severity is Severity.WARNING
