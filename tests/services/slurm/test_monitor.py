"""The monitor service on a Slurm login node (services/monitor/cluster.py) against the real local Slurm
(tests/services/slurm/conftest.py): a kind=slurm pod reached through a LocalConnection that sees the cluster
streams its samples as any pod and, beside them, carries the user's jobs and the nodes in its snapshots; a
2-node job shows with both nodes; a killed slurmd turns into a critical alert in the snapshot's alerts; a
controller that cannot be reached is the cluster's error while the samples go on; other pods carry no
cluster at all."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from services.models import Pod, PodKind, PodSnapshot, PodState, Severity
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.local import LocalConnection
from services.slurm.models import ClusterView

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("slurm")]

SETTINGS = MonitorSettings(interval=0.5, stale_after=5.0, slurm_interval=1.0, slurm_timeout=15.0)


class Snapshots:
    def __init__(self) -> None:
        self.latest: dict[str, PodSnapshot] = {}

    def __call__(self, snap: PodSnapshot) -> None:
        self.latest[snap.pod.name] = snap


async def wait_until(snaps: Snapshots, name: str, predicate, timeout: float, what: str) -> PodSnapshot:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = snaps.latest.get(name)
        if snap is not None and predicate(snap):
            return snap
        await asyncio.sleep(0.2)
    raise AssertionError(
        f"{what} within {timeout:g} s; last snapshot's cluster: {snaps.latest.get(name) and snaps.latest[name].cluster}"
    )


def cluster_pod(name: str = "cluster") -> Pod:
    return Pod(name=name, kind=PodKind.LOCAL, scheduler="slurm")


def job(snap: PodSnapshot, job_id: str):
    view = snap.cluster
    return next((j for j in view.jobs if j.id == job_id), None) if isinstance(view, ClusterView) else None


@pytest.fixture
async def monitored(slurm):
    """A MonitorService whose pods reach this machine with the cluster in their environment."""
    snaps = Snapshots()
    service = MonitorService(snaps, settings=SETTINGS, connector=lambda pod: LocalConnection(pod, env=slurm.env))
    yield service, snaps
    await service.aclose()


async def test_two_node_job_and_a_lost_node_show_in_the_snapshot(slurm, monitored):
    service, snaps = monitored
    job_id = slurm.sbatch("--nodes=2", "--job-name=rl multi", "--time=30", "--wrap", "sleep 300")
    service.add(cluster_pod())
    try:
        first = snaps.latest["cluster"]  # before any look: an empty view, not yet checked
        assert isinstance(first.cluster, ClusterView) and first.cluster.checked_at is None

        snap = await wait_until(
            snaps,
            "cluster",
            lambda s: getattr(job(s, job_id), "state", "") == "RUNNING",
            30,
            f"job {job_id} running in the snapshot",
        )
        seen = job(snap, job_id)
        assert seen.name == "rl multi" and seen.nodes == ("n1", "n2") and seen.time_limit_s == 1800
        assert {n.name for n in snap.cluster.nodes} == {"n1", "n2"}
        assert all(n.responding for n in snap.cluster.nodes) and snap.cluster.error == ""
        assert not [a for a in snap.alerts if a.id.startswith("slurm-")]
        # the pod's own samples go on beside the cluster
        await wait_until(
            snaps,
            "cluster",
            lambda s: s.status.state is PodState.ONLINE and s.samples_total >= 2,
            15,
            "samples from the login node",
        )

        slurm.kill_node("n2")
        try:
            down = f"slurm-node-down:{job_id}:n2"
            snap = await wait_until(
                snaps, "cluster", lambda s: any(a.id == down for a in s.alerts), 60, "a node-down alert"
            )
            alert = next(a for a in snap.alerts if a.id == down)
            assert alert.severity is Severity.CRITICAL and alert.title == "Node n2 is not responding"
            assert snap.alerts[0].severity is Severity.CRITICAL  # worst first, merged with the pod's own
            nodes = {n.name: n for n in snap.cluster.nodes}
            assert not nodes["n2"].responding and nodes["n1"].responding
            assert snap.status.state is PodState.ONLINE  # the pod's monitoring is untouched
        finally:
            slurm.start_node("n2")
    finally:
        slurm.run("scancel", job_id, check=False)
        slurm.wait_idle(["n1", "n2"])


async def test_unreachable_controller_is_the_clusters_error_not_the_pods(slurm, tmp_path: Path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(slurm.conf.read_text().replace("SlurmctldHost=localhost", "SlurmctldHost=ptt-no-such-host"))
    snaps = Snapshots()
    service = MonitorService(
        snaps, settings=SETTINGS, connector=lambda pod: LocalConnection(pod, env={"SLURM_CONF": str(conf)})
    )
    try:
        service.add(cluster_pod("lost"))
        service.add(Pod(name="plain", kind=PodKind.LOCAL))
        snap = await wait_until(
            snaps, "lost", lambda s: s.cluster is not None and s.cluster.error, 30, "the cluster's error"
        )
        assert snap.cluster.error.startswith("squeue failed on lost: ") and snap.cluster.jobs == ()
        warning = next(a for a in snap.alerts if a.id == "slurm-unreachable")
        assert warning.severity is Severity.WARNING and warning.message == snap.cluster.error
        await wait_until(
            snaps,
            "lost",
            lambda s: s.status.state is PodState.ONLINE and s.samples_total >= 2,
            15,
            "samples from the login node despite Slurm's error",
        )
        plain = await wait_until(snaps, "plain", lambda s: s.samples_total >= 1, 15, "samples from a plain pod")
        assert plain.cluster is None and not [a for a in plain.alerts if a.id.startswith("slurm-")]
    finally:
        await service.aclose()
