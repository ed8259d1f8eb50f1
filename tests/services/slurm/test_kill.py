"""`k` on a Slurm cluster (a pod of kind "slurm"): the kill dialog names the run's job (your newest running one)
and leaves your other jobs alone; "Kill job" runs scancel and waits until the job has left the queue, on the
real local Slurm, through the real dialog (Pilot) as the app shows it."""

from __future__ import annotations

import time

import pytest
from textual.app import App

from app.screens.lifecycle import LifecycleScreen, lifecycle_screen
from services.lifecycle import slurm_jobs
from services.lifecycle.events import LifecycleError
from services.pod.local import LocalConnection
from services.slurm.cluster import SlurmCluster
from tests.app.helpers import wait_for
from tests.services.slurm.test_cluster import wait_for_job

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("slurm")]


class Host(App):
    def __init__(self, screen: LifecycleScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


def cluster_pod(slurm):
    from dataclasses import replace

    return replace(slurm.connection("mycluster").pod, scheduler="slurm")


async def test_k_cancels_the_newest_running_job_and_leaves_the_others(slurm):
    older = slurm.sbatch("--job-name=other work", "--wrap", "sleep 300")
    time.sleep(1.1)  # submit times are whole seconds
    run = slurm.sbatch("--nodes=2", "--job-name=rl multi", "--wrap", "sleep 300")
    time.sleep(1.1)
    held = slurm.sbatch("--hold", "--job-name=eval later", "--wrap", "sleep 1")  # newer, but not the run
    pod = cluster_pod(slurm)
    try:
        async with LocalConnection(pod, env=slurm.env) as conn:
            await wait_for_job(SlurmCluster(conn), run, "RUNNING")
        screen = lifecycle_screen("kill", pod, connect=lambda p: LocalConnection(p, env=slurm.env))
        app = Host(screen)
        async with app.run_test(size=(100, 30)) as pilot:
            go = screen.query_one("#lc-go")
            await wait_for(pilot, lambda: not go.disabled, timeout=30)
            plan = str(screen.query_one("#lc-plan").render())
            assert plan.startswith(f"Cancel job {run} (rl multi), running on n1, n2")
            assert "left alone" in plan and f"job {older} (other work)" in plan
            assert f"job {held} (eval later), pending: it is held" in plan
            assert str(go.label) == "Kill job"
            await pilot.press("y")
            await wait_for(pilot, lambda: screen.result is not None, timeout=60)
            assert screen.result.kind == "done", screen.lines
            assert f"job {run} cancelled: it left the queue" in screen.result.message
        async with LocalConnection(pod, env=slurm.env) as conn:
            jobs = {j.id: j for j in await SlurmCluster(conn).jobs()}
        assert run not in jobs and jobs[older].state in ("RUNNING", "PENDING")
        out = slurm.run("squeue", "-h", "-t", "CG", "-o", "%i", check=False).stdout.split()
        assert run not in out  # no process of it left: nothing is still completing
    finally:
        slurm.run("scancel", older, run, held, check=False)


async def test_nothing_to_cancel_says_so(slurm):
    pod = cluster_pod(slurm)
    slurm.run("scancel", "--user", __import__("getpass").getuser(), check=False)
    # scancel only asks: a job of an earlier test may still read RUNNING for a moment (seen once in 7 runs)
    deadline = time.monotonic() + 20
    while slurm.run("squeue", "-h", "--me", "-t", "PENDING,RUNNING,SUSPENDED", "-o", "%i").stdout.strip():
        assert time.monotonic() < deadline, "the user's jobs did not leave the queue within 20 s"
        time.sleep(0.2)
    async with LocalConnection(pod, env=slurm.env) as conn:
        with pytest.raises(LifecycleError, match="no Slurm job of yours is pending or running on mycluster"):
            await slurm_jobs.plan_cancel(conn)
        events = [ev async for ev in slurm_jobs.cancel(conn, "1; rm -rf /")]
    assert events[-1].kind == "error" and "not a Slurm job id" in events[-1].message
