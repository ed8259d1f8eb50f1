"""Cleanup (`c`) on a Slurm cluster, on the real local 2-node Slurm: the run launched there (recorded on the login
node, not in the pods' registry) is found without a run dir given, and keep-last-N deletes its older complete
checkpoints on the shared filesystem through the login node, keeping the newest."""

from __future__ import annotations

import json

import pytest

from services.lifecycle import cleanup as lc_cleanup, slurm_jobs
from services.lifecycle.targets import target_for
from services.pod.local import LocalConnection
from tests.services.slurm.test_launch import (
    cluster_pod,
    complete_steps,
    idle_nodes,
    launched,
    run_procs,
    settings_for,
    until,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("slurm")]


async def test_keep_last_on_the_cluster_runs_shared_filesystem(slurm, tmp_path):
    pod, settings, run_dir = cluster_pod(slurm, tmp_path), settings_for(tmp_path), tmp_path / "run"
    idle_nodes(slurm)
    try:
        events = await launched(slurm, pod, tmp_path, settings)
        assert events[-1].kind == "done", [e.message for e in events]
        job = events[-1].data["job_id"]
        assert until(lambda: len(complete_steps(run_dir)) >= 3)
        async with LocalConnection(pod, env=slurm.env) as conn:
            cancelled = [ev async for ev in slurm_jobs.cancel(conn, job)]
            assert cancelled[-1].kind == "done", [e.message for e in cancelled]
            assert until(lambda: not run_procs(run_dir), 10)
            steps = complete_steps(run_dir)
            # no run dir given: the cluster's target finds the run launched there
            plan = await target_for(conn.pod).plan_cleanup(conn, keep=1, settings=settings)
            assert plan.run_dir == str(run_dir)
            assert sorted(c["step"] for c in plan.delete) == steps[:-1]
            assert [c["step"] for c in plan.kept] == [steps[-1]]
            done = [ev async for ev in lc_cleanup.cleanup(conn, plan, settings=settings)]
        assert done[-1].kind == "done", [e.message for e in done]
        assert complete_steps(run_dir) == [steps[-1]]
        assert not any((run_dir / "checkpoints" / f"step_{s}").exists() for s in steps[:-1])
    finally:
        for r in (tmp_path / "state" / "slurm-runs").glob("*.json"):
            slurm.run("scancel", json.loads(r.read_text())["job_id"], check=False)
