"""A stand-in for prime-rl's multi-node launcher (``rl @ CONFIG [--resume.step N]``), for the Slurm tests.

Like prime-rl with ``[deployment] type = "multi_node"`` and ``[slurm]``, it reads the config, writes an sbatch
script into the output dir (``rl.sbatch``) and submits it, printing sbatch's own line ("Submitted batch job
N"). The job runs one task per node with ``srun``: task 0 is the simulated trainer (services/demo/trainer.py,
checkpoints under <output_dir>/checkpoints), the others stand in for inference (they wait). ``--resume.step N``
becomes the trainer's ``--resume-step N``. It exits non-zero with a message, as a launcher does, when the
config is not a multi-node one, or (a launcher that breaks) when its [slurm] job_name is "broken".
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import tomllib

TRAINER = Path(__file__).resolve().parents[3] / "services" / "demo" / "trainer.py"


def main() -> int:
    ap = argparse.ArgumentParser(prog="rl")
    ap.add_argument("at", choices=["@"])
    ap.add_argument("config")
    ap.add_argument("--resume.step", dest="resume_step", type=int)
    a = ap.parse_args()
    cfg = tomllib.loads(Path(a.config).read_text())
    deployment, slurm = cfg.get("deployment") or {}, cfg.get("slurm")
    if deployment.get("type") != "multi_node" or slurm is None:
        print('error: this launcher submits multi-node runs only: set [deployment] type = "multi_node" and [slurm]')
        return 2
    print(f"launcher: starting {slurm.get('job_name', 'prime-rl')}", flush=True)
    if slurm.get("job_name") == "broken":
        print(
            'Traceback (most recent call last):\n  File "rl.py", line 1\nValueError: num_train_nodes must be >= 1',
            flush=True,
        )
        return 1
    out = Path(cfg.get("output_dir", "outputs")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    nodes = int(deployment.get("num_train_nodes", 1)) + int(deployment.get("num_infer_nodes", 1))
    trainer = [
        sys.executable,
        str(TRAINER),
        "--run-dir",
        str(out),
        "--max-steps",
        "0",
        "--step-seconds",
        "0.2",
        "--ckpt-interval",
        "2",
    ]
    if a.resume_step is not None:
        trainer += ["--resume-step", str(a.resume_step)]
    inference = [sys.executable, "-c", "import time; time.sleep(100000)", "inference-standin", str(out)]
    task = f'if [ "$SLURM_PROCID" = 0 ]; then exec {shlex.join(trainer)}; else exec {shlex.join(inference)}; fi'
    script = out / "rl.sbatch"
    script.write_text(
        "\n".join(
            [
                "#!/bin/sh",
                f"#SBATCH --job-name={slurm.get('job_name', 'prime-rl')}",
                f"#SBATCH --nodes={nodes}",
                "#SBATCH --ntasks-per-node=1",
                f"#SBATCH --chdir={out}",
                f"#SBATCH --output={out}/job_%j.log",
                f"srun --kill-on-bad-exit=1 sh -c {shlex.quote(task)}",
                "",
            ]
        )
    )
    res = subprocess.run(["sbatch", str(script)], capture_output=True, text=True)
    sys.stdout.write(res.stdout)
    sys.stdout.write(res.stderr)
    return res.returncode


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
