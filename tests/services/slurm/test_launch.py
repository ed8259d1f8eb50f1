"""Launch on a Slurm cluster (a pod of kind "slurm"), on the real local 2-node Slurm: prime-rl's launcher (here a
stand-in, standin_rl.py, that writes an sbatch script and submits it as prime-rl does) runs on the login node
in the run dir; the job it submitted is recorded and found running on both nodes; the simulated trainer writes
checkpoints; `k` through the real dialog (Pilot) cancels THAT job, not the user's newest one; no process of it
is left. A launcher that fails, or submits nothing, is an error with its output."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App

from app.screens.lifecycle import LifecycleScreen, lifecycle_screen
from services.lifecycle import slurm_jobs, slurm_launch
from services.lifecycle.preflight import LifecycleSettings
from services.pod.local import LocalConnection
from services.slurm.cluster import SlurmCluster
from tests.app.helpers import wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("slurm")]

STANDIN = Path(__file__).with_name("standin_rl.py")
SECRET = "wandb-secret-" + os.urandom(6).hex()


class Host(App):
    def __init__(self, screen: LifecycleScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


def cluster_pod(slurm, tmp_path: Path):
    """The cluster as a pod; the login node's state (records, lock) in the test's own dir."""
    return replace(slurm.connection("mycluster").pod, scheduler="slurm", probe_dir=str(tmp_path / "state"))


def settings_for(tmp_path: Path, **kw) -> LifecycleSettings:
    base = dict(
        command=f"{sys.executable} {STANDIN} @ {{config}}",
        min_free_bytes=1,
        runs_dir=tmp_path / "records",
        secrets=("WANDB_API_KEY",),
    )
    base.update(kw)
    return LifecycleSettings(**base)


def write_config(tmp_path: Path, job_name: str = "rl-multi") -> Path:
    cfg = tmp_path / "rl.toml"
    cfg.write_text(
        'output_dir = "."\nmax_steps = 1000\n[model]\nname = "Qwen/Qwen3-0.6B"\n'
        '[deployment]\ntype = "multi_node"\nnum_train_nodes = 1\nnum_infer_nodes = 1\n'
        f'[slurm]\njob_name = "{job_name}"\n'
    )
    return cfg


def run_procs(run_dir: Path) -> list[int]:
    """Live processes whose command line names the run dir (the job's tasks)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and str(run_dir).encode() in cmd:
            pids.append(int(name))
    return pids


def trainer_pids(run_dir: Path) -> list[int]:
    """The simulated trainer's own processes (not the srun/sh above it, whose command lines name it too)."""
    pids = []
    for p in run_procs(run_dir):
        try:
            argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].endswith(b"/trainer.py"):
            pids.append(p)
    return pids


def complete_steps(run_dir: Path) -> list[int]:
    d = run_dir / "checkpoints"
    return sorted(
        int(p.name[5:])
        for p in d.glob("step_*")
        if (p / "trainer" / ".metadata").is_file() and (p / "orchestrator" / "progress.pt").is_file()
    )


def until(pred, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def idle_nodes(slurm) -> None:
    """Both nodes free: jobs that earlier tests cancelled may still be completing on them (a launch onto busy
    nodes is rightly reported pending, not running)."""
    slurm.wait_idle(("n1", "n2"))


async def launched(slurm, pod, tmp_path: Path, settings: LifecycleSettings, **kw) -> list:
    async with LocalConnection(pod, env=slurm.env) as conn:
        return [
            ev
            async for ev in slurm_launch.launch(
                conn,
                write_config(tmp_path, **kw),
                settings=settings,
                run_dir=str(tmp_path / "run"),
                environ={"WANDB_API_KEY": SECRET},
            )
        ]


async def test_launch_records_the_running_job_and_k_cancels_that_job(slurm, tmp_path):
    pod, settings, run_dir = cluster_pod(slurm, tmp_path), settings_for(tmp_path), tmp_path / "run"
    newer = ""
    idle_nodes(slurm)
    try:
        events = await launched(slurm, pod, tmp_path, settings)
        done = events[-1]
        assert done.kind == "done", " | ".join(e.message + (f" {e.check.detail}" if e.check else "") for e in events)
        job = done.data["job_id"]
        assert done.data["job_state"] == "RUNNING" and done.data["nodes"] == ["n1", "n2"]
        assert done.message.startswith(f"job {job} running on n1, n2")
        # the launcher's own output was streamed, sbatch's line included
        assert any(e.message == f"launcher: Submitted batch job {job}" for e in events)
        checks = {e.check.name: e.check.status for e in events if e.check is not None}
        # the test nodes have no nvidia-smi on the job's PATH: the compute-node check warns and says so
        assert checks == {
            "config validates": "ok",
            "free disk": "ok",
            "trainer command": "ok",
            "no job in this run dir": "ok",
            "a compute node": "warn",
        }
        node = next(e.check for e in events if e.check is not None and e.check.name == "a compute node")
        assert node.detail.endswith("runs tasks and sees the run dir, but has no nvidia-smi"), node.detail
        assert node.detail.split()[0] in ("n1", "n2")
        # recorded on the login node (registry and run dir) and on this machine, secret names only
        async with LocalConnection(pod, env=slurm.env) as conn:
            records = await slurm_jobs.slurm_runs(conn)
        assert [(r["job_id"], r["run_dir"]) for r in records] == [(job, str(run_dir))]
        rec = records[0]
        assert rec["config"] == f"{run_dir}/.ptt/config/{rec['config_hash']}/rl.toml"
        assert Path(rec["config"]).read_text() == (tmp_path / "rl.toml").read_text()
        assert rec["command"] == f"{sys.executable} {STANDIN} @ {rec['config']}"
        assert rec["secret_names"] == ["WANDB_API_KEY"] and rec["resume_step"] is None
        assert json.loads((run_dir / ".ptt" / "slurm-run.json").read_text())["id"] == rec["id"]
        assert json.loads((tmp_path / "records" / f"{rec['id']}.json").read_text())["job_id"] == job
        # the job runs across both nodes and the simulated trainer writes checkpoints in the run dir
        assert (run_dir / "rl.sbatch").is_file()
        assert until(lambda: len(complete_steps(run_dir)) >= 2)
        assert until(lambda: len(run_procs(run_dir)) >= 2)
        # the secret reached the trainer through the environment, never a file
        trainer = trainer_pids(run_dir)
        assert len(trainer) == 1 and SECRET.encode() in Path(f"/proc/{trainer[0]}/environ").read_bytes()
        written = [p for d in (run_dir, tmp_path / "state", tmp_path / "records") for p in d.rglob("*") if p.is_file()]
        assert written and not [p for p in written if SECRET.encode() in p.read_bytes()]
        assert SECRET not in "".join(e.message for e in events)

        # a newer job of the user: `k` still names the recorded run's job
        time.sleep(1.1)  # submit times are whole seconds
        newer = slurm.sbatch("--job-name=eval", "--wrap", "sleep 300")
        screen = lifecycle_screen("kill", pod, connect=lambda p: LocalConnection(p, env=slurm.env))
        async with Host(screen).run_test(size=(100, 30)) as pilot:
            go = screen.query_one("#lc-go")
            await wait_for(pilot, lambda: not go.disabled, timeout=30)
            plan = str(screen.query_one("#lc-plan").render())
            assert plan.startswith(f"Cancel job {job} (rl-multi), running on n1, n2"), plan
            assert f"in {run_dir} (run {rec['id']})" in plan and f"job {newer} (eval)" in plan
            await pilot.press("y")
            await wait_for(pilot, lambda: screen.result is not None, timeout=60)
            assert screen.result.kind == "done", screen.lines
            assert f"job {job} cancelled" in screen.result.message
        async with LocalConnection(pod, env=slurm.env) as conn:
            left = {j.id for j in await SlurmCluster(conn).jobs()}
        assert job not in left and newer in left
        assert until(lambda: not run_procs(run_dir), 10), run_procs(run_dir)
    finally:
        slurm.run("scancel", *[j for j in (newer,) if j], check=False)
        for r in (tmp_path / "state" / "slurm-runs").glob("*.json"):
            slurm.run("scancel", json.loads(r.read_text())["job_id"], check=False)


async def test_a_failing_launcher_is_an_error_with_its_output(slurm, tmp_path):
    pod = cluster_pod(slurm, tmp_path)
    events = await launched(slurm, pod, tmp_path, settings_for(tmp_path), job_name="broken")
    assert events[-1].kind == "error"
    assert events[-1].message.startswith(
        "the launcher exited with status 1 on mycluster: ValueError: num_train_nodes must be >= 1"
    )
    assert "launcher: Traceback (most recent call last):" in [e.message for e in events]
    async with LocalConnection(pod, env=slurm.env) as conn:
        assert await slurm_jobs.slurm_runs(conn) == []  # nothing submitted, nothing recorded


async def test_a_launcher_that_submits_nothing_is_an_error(slurm, tmp_path):
    pod = cluster_pod(slurm, tmp_path)
    settings = settings_for(tmp_path, command="echo preparing {config}; echo all done")
    events = await launched(slurm, pod, tmp_path, settings)
    assert events[-1].kind == "error", [e.message for e in events]
    assert events[-1].message.startswith("the launcher submitted no job on mycluster: all done")
    async with LocalConnection(pod, env=slurm.env) as conn:
        assert await slurm_jobs.slurm_runs(conn) == []


async def test_a_job_found_without_sbatch_s_line_and_a_busy_run_dir_refused(slurm, tmp_path):
    """A launcher that does not print sbatch's line: the user's job that appeared meanwhile is the run's.
    Launching again into the run dir while that job runs is refused by the pre-flight."""
    pod = cluster_pod(slurm, tmp_path)
    quiet = settings_for(tmp_path, command=f"{sys.executable} {STANDIN} @ {{config}} > /dev/null")
    idle_nodes(slurm)
    try:
        events = await launched(slurm, pod, tmp_path, quiet)
        assert events[-1].kind == "done", [e.message for e in events]
        job = events[-1].data["job_id"]
        assert slurm.run("squeue", "-h", "-j", job, "-o", "%j").stdout.strip() == "rl-multi"
        again = await launched(slurm, pod, tmp_path, quiet)
        assert again[-1].kind == "error"
        assert again[-1].message.startswith(f"pre-flight failed: no job in this run dir — job {job} of run ")
        async with LocalConnection(pod, env=slurm.env) as conn:
            assert [r["job_id"] for r in await slurm_jobs.slurm_runs(conn)] == [job]
    finally:
        for r in (tmp_path / "state" / "slurm-runs").glob("*.json"):
            slurm.run("scancel", json.loads(r.read_text())["job_id"], check=False)


async def test_the_launch_dialog_on_a_cluster_submits_through_the_launcher(slurm, tmp_path):
    """L's dialog on a cluster (the real dialog, Pilot): its plan names the cluster and the launcher, y submits."""
    pod, settings = cluster_pod(slurm, tmp_path), settings_for(tmp_path)
    idle_nodes(slurm)
    screen = lifecycle_screen(
        "launch",
        pod,
        config=write_config(tmp_path),
        run_dir=str(tmp_path / "run"),
        settings=settings,
        connect=lambda p: LocalConnection(p, env=slurm.env),
    )
    try:
        async with Host(screen).run_test(size=(110, 32)) as pilot:
            go = screen.query_one("#lc-go")
            await wait_for(pilot, lambda: not go.disabled, timeout=30)
            plan = str(screen.query_one("#lc-plan").render())
            assert plan.startswith("Launch rl.toml on the Slurm cluster mycluster"), plan
            assert "prime-rl's launcher runs on the login node and submits the job" in plan
            await pilot.press("y")
            await wait_for(pilot, lambda: screen.result is not None, timeout=90)
            assert screen.result.kind == "done", screen.lines
        assert screen.result.data["job_state"] == "RUNNING" and screen.result.data["nodes"] == ["n1", "n2"]
    finally:
        for r in (tmp_path / "state" / "slurm-runs").glob("*.json"):
            slurm.run("scancel", json.loads(r.read_text())["job_id"], check=False)
