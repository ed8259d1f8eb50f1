"""DemoPod: an embedded simulated pod (fake nvidia-smi + fake /proc + a simulated trainer run dir).

    async with DemoPod(seed=0, gpus=8, scenario="training") as pod:
        await pod.start_trainer()
        proc = await asyncio.create_subprocess_exec(*pod.probe_command(), env=pod.env(), ...)

Layout of the temp dir: bin/nvidia-smi (a tiny sh wrapper exec'ing this interpreter on
services/demo/nvidia_smi.py), proc/{stat,meminfo} (rewritten by the fake nvidia-smi each tick), run/.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from services.demo import nvidia_smi
from services.pod import agent

DEMO_DIR = Path(__file__).resolve().parent
PROBE_PATH = agent.PROBE
FAKE_SMI_PATH = DEMO_DIR / "nvidia_smi.py"
TRAINER_PATH = DEMO_DIR / "trainer.py"


class DemoPod:
    def __init__(
        self,
        *,
        seed: int = 0,
        gpus: int = 8,
        scenario: str = "training",
        max_ticks: int | None = None,
        interval: float = 1.0,
        gpu_name: str | None = None,
        step_seconds: float = 2.0,
        max_steps: int = 0,
        ckpt_interval: int = 10,
        runbook: bool = False,
    ) -> None:
        if scenario not in nvidia_smi.SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; one of {nvidia_smi.SCENARIOS}")
        self.seed, self.gpus, self.scenario = seed, gpus, scenario
        self.max_ticks, self.interval, self.gpu_name = max_ticks, interval, gpu_name
        self.step_seconds, self.max_steps, self.ckpt_interval = step_seconds, max_steps, ckpt_interval
        self.runbook = runbook  # a plain script writing training.csv instead of prime-rl's logs
        self.root = Path(tempfile.mkdtemp(prefix="ptt-demo-pod-"))
        self.bin_dir = self.root / "bin"
        self.proc_root = self.root / "proc"
        self.run_dir = self.root / "run"
        for d in (self.bin_dir, self.proc_root, self.run_dir / "logs", self.run_dir / "checkpoints"):
            d.mkdir(parents=True)
        smi = self.bin_dir / "nvidia-smi"
        smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SMI_PATH}" "$@"\n')
        smi.chmod(0o755)
        # tick-0 "hardware" exists before anything reads it (the fake rewrites it per tick)
        nvidia_smi.write_proc(nvidia_smi.Config(self.fake_env()), 0, str(self.proc_root))
        self.trainer: asyncio.subprocess.Process | None = None
        self._closed = False

    def fake_env(self) -> dict[str, str]:
        """Only the PTT_FAKE_* variables."""
        env = {
            "PTT_FAKE_GPUS": str(self.gpus),
            "PTT_FAKE_SEED": str(self.seed),
            "PTT_FAKE_SCENARIO": self.scenario,
            "PTT_FAKE_PROC_ROOT": str(self.proc_root),
        }
        if self.gpu_name:
            env["PTT_FAKE_GPU_NAME"] = self.gpu_name
        if self.max_ticks is not None:
            env["PTT_FAKE_MAX_TICKS"] = str(self.max_ticks)
        return env

    def env(self) -> dict[str, str]:
        """A complete environment for the probe: os.environ + PATH with bin/ first + PTT_FAKE_*."""
        env = dict(os.environ)
        env["PATH"] = str(self.bin_dir) + os.pathsep + env.get("PATH", "")
        env.update(self.fake_env())
        return env

    def probe_args(self) -> list[str]:
        return [
            "--backend", "nvidia-smi",
            "--proc-root", str(self.proc_root),
            "--run-dir", str(self.run_dir),
            "--interval", str(self.interval),
        ]

    def probe_command(self) -> list[str]:
        return [sys.executable, "-u", str(PROBE_PATH), *self.probe_args()]

    async def start_trainer(self) -> asyncio.subprocess.Process:
        if self.trainer is not None and self.trainer.returncode is None:
            return self.trainer
        self.trainer = await asyncio.create_subprocess_exec(
            sys.executable, str(TRAINER_PATH),
            "--run-dir", str(self.run_dir), "--seed", str(self.seed),
            "--step-seconds", str(self.step_seconds), "--max-steps", str(self.max_steps),
            "--ckpt-interval", str(self.ckpt_interval), *(["--runbook"] if self.runbook else []),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return self.trainer

    async def stop_trainer(self) -> None:
        proc, self.trainer = self.trainer, None
        if proc is None or proc.returncode is not None:
            return
        proc.kill()
        await proc.wait()

    async def stop(self) -> None:
        """Kill the trainer and delete the temp dir. Idempotent."""
        await self.stop_trainer()
        if not self._closed:
            self._closed = True
            shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> DemoPod:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
