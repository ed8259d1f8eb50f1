"""`R` on a Slurm cluster, on the real local 2-node Slurm: refused while the recorded run's job is still running;
once it has ended, the launcher (the stand-in, standin_rl.py) submits a new job from the newest COMPLETE
checkpoint on the shared filesystem (a newer half-written one is skipped), through the real dialog (Pilot),
and the new job is recorded as the resumed run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.screens.lifecycle import lifecycle_screen
from services.lifecycle import slurm_jobs, slurm_launch
from services.lifecycle.events import LifecycleError
from services.pod.local import LocalConnection
from services.slurm.cluster import SlurmCluster
from tests.app.helpers import wait_for
from tests.services.slurm.test_launch import (
    STANDIN,
    Host,
    cluster_pod,
    complete_steps,
    idle_nodes,
    launched,
    run_procs,
    settings_for,
    trainer_pids,
    until,
    write_config,
)

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("slurm")]


async def test_resume_refused_while_running_then_resubmits_from_the_newest_complete_checkpoint(slurm, tmp_path):
    pod, settings, run_dir = cluster_pod(slurm, tmp_path), settings_for(tmp_path), tmp_path / "run"
    idle_nodes(slurm)
    try:
        async with LocalConnection(pod, env=slurm.env) as conn:
            with pytest.raises(LifecycleError, match="no run has been launched on mycluster from here"):
                await slurm_launch.plan_resume(conn, settings)
        events = await launched(slurm, pod, tmp_path, settings)
        assert events[-1].kind == "done", [e.message for e in events]
        first = events[-1].data
        assert until(lambda: len(complete_steps(run_dir)) >= 2)
        async with LocalConnection(pod, env=slurm.env) as conn:
            with pytest.raises(LifecycleError, match=f"job {first['job_id']} of run {first['id']} is still running"):
                await slurm_launch.plan_resume(conn, settings)
            refused = [ev async for ev in slurm_launch.resume(conn, settings=settings)]
            assert refused[-1].kind == "error" and "is still running" in refused[-1].message
            cancelled = [ev async for ev in slurm_jobs.cancel(conn, first["job_id"])]
            assert cancelled[-1].kind == "done", [e.message for e in cancelled]
        assert until(lambda: not run_procs(run_dir), 10)
        idle_nodes(slurm)  # the new job runs (not pends) once the cancelled one has left both nodes
        best = complete_steps(run_dir)[-1]
        torn = run_dir / "checkpoints" / f"step_{best + 10}" / "trainer"  # a save cut short: newer, incomplete
        torn.mkdir(parents=True)
        (torn / "model.bin").write_bytes(b"half")

        screen = lifecycle_screen("resume", pod, settings=settings, connect=lambda p: LocalConnection(p, env=slurm.env))
        async with Host(screen).run_test(size=(110, 32)) as pilot:
            go = screen.query_one("#lc-go")
            await wait_for(pilot, lambda: not go.disabled, timeout=30)
            plan = str(screen.query_one("#lc-plan").render())
            head = f"Resume run {first['id']} (job {first['job_id']}, cancelled) from step_{best}"
            assert plan.startswith(head), plan
            assert f"step_{best + 10} is incomplete — skipped" in plan
            assert f"{STANDIN} @ {first['config']} --resume.step {best}" in plan
            await pilot.press("y")
            await wait_for(pilot, lambda: screen.result is not None, timeout=90)
            assert screen.result.kind == "done", screen.lines
        second = screen.result.data
        assert second["job_id"] != first["job_id"] and second["job_state"] == "RUNNING"
        assert second["resume_step"] == best and second["resumed_from"] == first["id"]
        assert second["command"].endswith(f"@ {first['config']} --resume.step {best}")
        assert second["run_dir"] == first["run_dir"] and second["config"] == first["config"]
        async with LocalConnection(pod, env=slurm.env) as conn:
            records = await slurm_jobs.slurm_runs(conn)
            jobs = {j.id: j for j in await SlurmCluster(conn).jobs()}
        assert [r["id"] for r in records] == [first["id"], second["id"]]
        assert jobs[second["job_id"]].nodes == ("n1", "n2")
        # the new job's trainer carries the step and continues from that checkpoint
        log = run_dir / "logs" / "trainer.log"
        assert until(lambda: f"Resuming from checkpoint step_{best}" in log.read_text())
        trainer = trainer_pids(run_dir)
        assert len(trainer) == 1
        assert f"--resume-step\0{best}\0".encode() in open(f"/proc/{trainer[0]}/cmdline", "rb").read()
    finally:
        for r in (tmp_path / "state" / "slurm-runs").glob("*.json"):
            slurm.run("scancel", json.loads(r.read_text())["job_id"], check=False)


def cli(slurm, config_dir: Path, *args: str) -> tuple[int, dict]:
    env = {**os.environ, **slurm.env, "PRIME_TRAIN_TUI_CONFIG_DIR": str(config_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", *args, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else {"stderr": out.stderr}


def test_cli_launch_kill_and_resume_dispatch_to_the_cluster(slurm, tmp_path):
    """`launch mycluster CONFIG`, `kill mycluster --yes` and `resume mycluster --yes` on a pods.toml cluster,
    as real processes."""
    run_dir, state = tmp_path / "run", tmp_path / "state"
    (tmp_path / "pods.toml").write_text(
        f'[pods.mycluster]\ntarget = "local"\nkind = "slurm"\nrun_dir = "{run_dir}"\nprobe_dir = "{state}"\n'
    )
    (tmp_path / "settings.toml").write_text(
        f'[lifecycle]\ncommand = "{sys.executable} {STANDIN} @ {{config}}"\nmin_free_bytes = 1\n'
    )
    idle_nodes(slurm)
    try:
        code, doc = cli(slurm, tmp_path, "launch", "mycluster", str(write_config(tmp_path)))
        assert code == 0 and doc["ok"], doc
        first = doc["result"]
        assert first["run_dir"] == str(run_dir) and first["job_state"] == "RUNNING"
        code, doc = cli(slurm, tmp_path, "resume", "mycluster", "--yes")
        assert code == 1 and f"job {first['job_id']} of run {first['id']} is still running" in doc["stderr"]
        assert until(lambda: len(complete_steps(run_dir)) >= 1)
        code, doc = cli(slurm, tmp_path, "kill", "mycluster", "--yes")  # scancel of the run's job, waited for
        assert code == 0 and doc["ok"] and doc["target"]["job"] == first["job_id"], doc
        assert doc["target"]["run"] == first["id"]
        assert until(lambda: not run_procs(run_dir), 20)
        idle_nodes(slurm)  # a job still completing is rightly refused: "is still completing"
        best = complete_steps(run_dir)[-1]
        code, doc = cli(slurm, tmp_path, "resume", "mycluster", "--yes")
        assert code == 0 and doc["ok"], doc
        assert doc["plan"]["job"] == first["job_id"] and doc["plan"]["step"] == best
        assert doc["result"]["resume_step"] == best and doc["result"]["job_id"] != first["job_id"]
    finally:
        for r in (state / "slurm-runs").glob("*.json"):
            slurm.run("scancel", json.loads(r.read_text())["job_id"], check=False)
