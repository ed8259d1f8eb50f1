"""``prime-train-tui status CLUSTER --json`` as a real process against the real local Slurm: a pods.toml
pod of ``kind = "slurm"`` lists the user's jobs with their nodes and every node's state; a slurmd killed
under a running 2-node job turns into a critical alert naming the node and the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.services.slurm.test_cluster import WAIT_S

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("slurm")]
REPO = Path(__file__).resolve().parents[3]


def status(slurm, config: Path, *args: str) -> tuple[int, dict | str]:
    env = {**os.environ, **slurm.env, "PRIME_TRAIN_TUI_CONFIG_DIR": str(config)}
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "status", "mycluster", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert not out.stderr.strip() or out.returncode != 0, out.stderr
    return out.returncode, (json.loads(out.stdout)["pods"][0] if "--json" in args else out.stdout)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "pods.toml").write_text('[pods.mycluster]\ntarget = "local"\nkind = "slurm"\n')
    return tmp_path


def test_status_lists_the_jobs_and_nodes_and_a_lost_node_is_an_alert(slurm, config):
    job_id = slurm.sbatch("--nodes=2", "--job-name=rl multi", "--time=30", "--wrap", "sleep 300")
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            code, pod = status(slurm, config, "--json")
            job = next((j for j in pod["slurm"]["jobs"] if j["id"] == job_id), None)
            if (job and job["state"] == "RUNNING") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert code == 0 and pod["reached"] and pod["slurm"]["error"] is None
        assert job is not None and (job["name"], job["state"], job["nodes"]) == ("rl multi", "RUNNING", ["n1", "n2"])
        assert job["time_limit_s"] == 1800 and not job["finished"]
        assert {n["name"]: n["responding"] for n in pod["slurm"]["nodes"]} == {"n1": True, "n2": True}
        assert not [a for a in pod["alerts"] if a["id"].startswith("slurm-")]

        code, text = status(slurm, config)  # the human table says the same
        assert "your Slurm jobs" in text and "rl multi" in text and "n1, n2" in text and "all responding" in text

        slurm.kill_node("n2")
        deadline = time.monotonic() + 60
        while True:
            code, pod = status(slurm, config, "--json")
            down = [a for a in pod["alerts"] if a["id"] == f"slurm-node-down:{job_id}:n2"]
            if down or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert down, pod["slurm"]
        assert down[0]["severity"] == "critical" and f"job {job_id} (rl multi)" in down[0]["message"]
        assert {n["name"]: n["responding"] for n in pod["slurm"]["nodes"]} == {"n1": True, "n2": False}
    finally:
        slurm.run("scancel", job_id, check=False)
        if "slurmd-n2" not in slurm.procs:
            slurm.start_node("n2")
            slurm.wait_idle(["n1", "n2"])


def test_a_login_node_without_slurm_says_so(slurm, config, tmp_path):
    bin_dir = tmp_path / "bin"  # a shell's basic tools and no Slurm
    bin_dir.mkdir()
    for tool in ("date", "id", "sh", "cat"):
        (bin_dir / tool).symlink_to(f"/usr/bin/{tool}" if Path(f"/usr/bin/{tool}").exists() else f"/bin/{tool}")
    env_path = {"PATH": str(bin_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "status", "mycluster", "--json"],
        cwd=REPO,
        env={**os.environ, **env_path, "PRIME_TRAIN_TUI_CONFIG_DIR": str(config)},
        capture_output=True,
        text=True,
        timeout=90,
    )
    pod = json.loads(out.stdout)["pods"][0]
    assert pod["slurm"]["error"].startswith("squeue is not installed on mycluster")
    assert pod["alerts"][0]["id"] == "slurm-unreachable" and "login node" in pod["alerts"][0]["message"]
