"""``prime-train-tui status CLUSTER --json`` as a real process against the real local Slurm: the ``slurm`` key
carries each running job's GPUs node by node (n1's and n2's own, from a fake nvidia-smi per node) and the
prime-rl roles on each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.services.slurm.fake_gpus import GPUS, MIB, env_with, fake_bin, role_job

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("slurm")]
REPO = Path(__file__).resolve().parents[3]


def test_status_json_lists_each_nodes_gpus(slurm, tmp_path: Path):
    (tmp_path / "pods.toml").write_text('[pods.mycluster]\ntarget = "local"\nkind = "slurm"\n')
    env = {**os.environ, **env_with(slurm.env, fake_bin(tmp_path / "bin")), "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path)}
    job_id = role_job(slurm, tmp_path / "job")
    try:
        deadline = time.monotonic() + 40
        while True:
            out = subprocess.run(
                [sys.executable, "-m", "app.cli", "status", "mycluster", "--json"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
            )
            pod = json.loads(out.stdout)["pods"][0]
            got = next((g for g in (pod["slurm"] or {}).get("gpus", []) if g["job_id"] == job_id), None)
            if (got and all(n["roles"] for n in got["nodes"])) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert got is not None, pod["slurm"]
        assert got["error"] == "" and [n["node"] for n in got["nodes"]] == ["n1", "n2"]
        for node in got["nodes"]:
            count, name, total_mib = GPUS[node["node"]]
            assert node["error"] == "" and len(node["gpus"]) == count
            assert {(g["name"], g["mem_total"]) for g in node["gpus"]} == {(name, total_mib * MIB)}
        assert [n["roles"] for n in got["nodes"]] == [["inference"], ["orchestrator", "trainer"]]
    finally:
        slurm.run("scancel", job_id, check=False)
        slurm.wait_idle(["n1", "n2"])
