"""Fake GPUs per Slurm node, and a job that runs prime-rl-like roles on both nodes, for the per-node GPU tests.

``fake_bin(dir)`` writes an ``nvidia-smi`` that wraps the demo's fake (services/demo/nvidia_smi.py) with
different GPUs per node, chosen by ``$SLURMD_NODENAME`` (both test nodes are this machine): n1 has 2 × H100
80GB (81559 MiB each), n2 4 × H200 (143771 MiB each). A node named in ``$PTT_TEST_NO_DRIVER`` answers as
nvidia-smi does on a machine whose driver is not loaded. ``srun`` exports the login node's environment to
the nodes, so the fake is put on the PATH of the connection that asks.

``role_job(slurm, dir)`` submits a 2-node job whose processes look like prime-rl's: inference (vLLM) on n1,
the orchestrator and the trainer (torchrun) on n2; each a sleeping Python.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FAKE = REPO / "services" / "demo" / "nvidia_smi.py"
GPUS = {"n1": (2, "NVIDIA H100 80GB HBM3", 81559), "n2": (4, "NVIDIA H200", 143771)}
MIB = 1024 * 1024
# what nvidia-smi prints when the driver is not loaded
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
    "latest NVIDIA driver is installed and running."
)


def fake_bin(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    smi = d / "nvidia-smi"
    cases = "\n".join(
        f'  {node}) export PTT_FAKE_GPUS={n} PTT_FAKE_GPU_NAME="{name}" PTT_FAKE_SEED={i} ;;'
        for i, (node, (n, name, _)) in enumerate(GPUS.items())
    )
    smi.write_text(f"""#!/bin/sh
for n in $PTT_TEST_NO_DRIVER; do
  if [ "$n" = "$SLURMD_NODENAME" ]; then
    echo "{NO_DRIVER}"
    exit 9
  fi
done
case "$SLURMD_NODENAME" in
{cases}
  *) echo "fake nvidia-smi: unknown node $SLURMD_NODENAME" >&2; exit 3 ;;
esac
exec "{sys.executable}" "{FAKE}" "$@"
""")
    smi.chmod(0o755)
    return d


def env_with(slurm_env: dict[str, str], bin_dir: Path | None, **extra: str) -> dict[str, str]:
    """The cluster's environment with (or without) the fake nvidia-smi first on PATH."""
    system = "/usr/local/bin:/usr/bin:/bin"
    path = f"{bin_dir}:{system}" if bin_dir else system
    return {**slurm_env, "PATH": path, "PTT_TEST_NO_DRIVER": "", **extra}


def role_job(slurm, d: Path, name: str = "rl multi") -> str:
    """Submit the 2-node job with a role per node; its id."""
    d.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    sleeper = f'"{py}" -c "import time; time.sleep(300)"'
    script = d / "roles.sh"
    script.write_text(f"""#!/bin/sh
srun --ntasks-per-node=1 sh -c '
case "$SLURMD_NODENAME" in
  n1) exec {sleeper} uv run inference @ configs/inference.toml --model.name Qwen/Qwen3-0.6B ;;
  *) {sleeper} uv run orchestrator @ configs/orch.toml &
     exec {sleeper} torchrun --nproc-per-node 4 src/prime_rl/trainer/rl/train.py ;;
esac'
""")
    script.chmod(0o755)
    return slurm.sbatch("--nodes=2", f"--job-name={name}", "--time=30", str(script))


def no_nvidia_smi_on(path: str) -> bool:
    return not any(os.access(os.path.join(p, "nvidia-smi"), os.X_OK) for p in path.split(":") if p)
