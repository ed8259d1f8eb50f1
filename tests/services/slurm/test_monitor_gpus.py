"""The monitor's cluster view carries the running jobs' GPUs node by node (services/monitor/cluster.py reading
services/slurm/gpus.py every look), against the real local Slurm: a 2-node job's snapshot holds n1's and n2's
own GPUs (a fake nvidia-smi per node) and roles; on a login node whose nodes have no nvidia-smi the job's nodes
say so while its jobs and nodes are shown as usual."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from services.models import Pod, PodKind, PodSnapshot
from services.monitor.cluster import ClusterState
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.local import LocalConnection
from services.slurm.models import ClusterView, JobGpus, NodeGpus, SlurmJob
from tests.services.slurm.fake_gpus import GPUS, env_with, fake_bin, role_job

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("slurm")]

SETTINGS = MonitorSettings(interval=0.5, stale_after=5.0, slurm_interval=1.0, slurm_timeout=15.0)


async def wait_until(latest: dict[str, PodSnapshot], name: str, predicate, what: str) -> PodSnapshot:
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        snap = latest.get(name)
        if snap is not None and isinstance(snap.cluster, ClusterView) and predicate(snap.cluster):
            return snap
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} within 40 s; last cluster view: {latest.get(name) and latest[name].cluster}")


async def test_snapshot_carries_each_nodes_gpus_and_roles(slurm, tmp_path: Path):
    bin_dir = fake_bin(tmp_path / "bin")
    envs = {"gpus": env_with(slurm.env, bin_dir), "bare": env_with(slurm.env, None)}
    latest: dict[str, PodSnapshot] = {}
    service = MonitorService(
        lambda snap: latest.__setitem__(snap.pod.name, snap),
        settings=SETTINGS,
        connector=lambda pod: LocalConnection(pod, env=envs[pod.name]),
    )
    job_id = role_job(slurm, tmp_path / "job")
    try:
        service.add(Pod(name="gpus", kind=PodKind.LOCAL, scheduler="slurm"))
        service.add(Pod(name="bare", kind=PodKind.LOCAL, scheduler="slurm"))

        def read(view: ClusterView) -> bool:
            got = view.gpus_of(job_id)
            return got is not None and len(got.nodes) == 2 and all(n.roles and n.gpus for n in got.nodes)

        snap = await wait_until(latest, "gpus", read, f"job {job_id}'s GPUs and roles on both nodes")
        view = snap.cluster
        assert view.error == "" and next(j for j in view.jobs if j.id == job_id).nodes == ("n1", "n2")
        got = view.gpus_of(job_id)
        assert got.error == "" and got.checked_at is not None
        assert {n.node: (len(n.gpus), n.gpus[0].name, n.roles) for n in got.nodes} == {
            "n1": (GPUS["n1"][0], GPUS["n1"][1], ("inference",)),
            "n2": (GPUS["n2"][0], GPUS["n2"][1], ("orchestrator", "trainer")),
        }

        # no nvidia-smi on the nodes: each node says so; the jobs and nodes are there as always
        bare = await wait_until(latest, "bare", lambda v: v.gpus_of(job_id) is not None, f"job {job_id}'s GPU errors")
        view = bare.cluster
        assert view.error == "" and any(j.id == job_id and j.state == "RUNNING" for j in view.jobs)
        assert {n.name for n in view.nodes} == {"n1", "n2"}
        assert [n.error for n in view.gpus_of(job_id).nodes] == [
            "no NVIDIA driver on n1 (nvidia-smi is not installed there)",
            "no NVIDIA driver on n2 (nvidia-smi is not installed there)",
        ]
    finally:
        await service.aclose()
        slurm.run("scancel", job_id, check=False)
        slurm.wait_idle(["n1", "n2"])


def test_a_jobs_gpus_stay_until_read_again_and_leave_with_the_job():
    state = ClusterState()
    running = SlurmJob("7", state="RUNNING", nodes=("n1",))
    state.looked(ClusterView(jobs=(running,), checked_at=1.0), [])
    gpus = (JobGpus("7", nodes=(NodeGpus("n1", error="n1 did not answer"),), checked_at=2.0),)
    state.read_gpus(gpus)
    state.looked(ClusterView(jobs=(running,), checked_at=3.0), [])  # the next look keeps them
    assert state.view.gpus == gpus and state.view.checked_at == 3.0
    state.looked(ClusterView(jobs=(replace(running, state="COMPLETED"),), checked_at=4.0), [])
    assert state.view.gpus == ()
