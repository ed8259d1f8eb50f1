"""The simulated pod: fake nvidia-smi output formats, the simulated trainer, DemoPod end to end."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.demo import nvidia_smi as fake
from services.demo.pod import DemoPod
from services.pod.agent import probe as probe_mod

REPO = Path(__file__).resolve().parents[3]
WRAPPER = REPO / "services" / "demo" / "bin" / "nvidia-smi"


def smi(*args: str, **fake_env: object) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTT_FAKE_")}
    env.update({f"PTT_FAKE_{k.upper()}": str(v) for k, v in fake_env.items()})
    return subprocess.run([sys.executable, str(WRAPPER), *args], env=env, capture_output=True, text=True, timeout=10)


def test_wrapper_is_executable_and_lists_gpus() -> None:
    assert os.access(WRAPPER, os.X_OK)
    out = subprocess.run(
        [str(WRAPPER), "-L"], capture_output=True, text=True, timeout=10, env={**os.environ, "PTT_FAKE_GPUS": "3"}
    )
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines):
        uuid = r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}"
        assert re.fullmatch(rf"GPU {i}: NVIDIA H100 80GB HBM3 \(UUID: {uuid}\)", line), line
    assert len({line.split("UUID: ")[1] for line in lines}) == 3


def test_csv_with_header_and_units() -> None:
    q = "--query-gpu=index,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,pstate,clocks.sm"
    out = smi(q, "--format=csv", gpus=2, seed=1)
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], "
        "power.draw [W], temperature.gpu, pstate, clocks.current.sm [MHz]"
    )
    cfg = fake.Config({"PTT_FAKE_GPUS": "2", "PTT_FAKE_SEED": "1"})
    for g, line in enumerate(lines[1:]):
        v = fake.gpu_values(cfg, 0, g)
        assert line == (
            f"{g}, NVIDIA H100 80GB HBM3, {v['utilization.gpu']} %, {v['memory.used']} MiB, "
            f"81559 MiB, {v['power.draw']:.2f} W, {v['temperature.gpu']}, P0, {v['clocks.sm']} MHz"
        )
    assert len(lines) == 3


def test_noheader_nounits_respects_field_order() -> None:
    out = smi("--query-gpu=memory.total,index,uuid", "--format=csv,noheader,nounits", gpus=2)
    rows = [r.split(", ") for r in out.stdout.splitlines()]
    assert [r[:2] for r in rows] == [["81559", "0"], ["81559", "1"]]
    assert all(r[2].startswith("GPU-") for r in rows)
    out = smi("--query-gpu=memory.total", "--format=csv,noheader,nounits", gpus=1, gpu_name="NVIDIA A100-SXM4-40GB")
    assert out.stdout == "40960\n"


def test_bad_arguments_exit_2() -> None:
    out = smi("--bogus")
    assert out.returncode == 2 and "Invalid combination of input arguments" in out.stdout
    out = smi("--query-gpu=index,foo", "--format=csv")
    assert out.returncode == 2 and 'Field "foo" is not a valid field to query.' in out.stdout
    assert smi("--query-gpu=index", "--format=xml").returncode == 2


def test_loop_max_ticks_then_silent_and_deterministic(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PTT_FAKE_GPUS": "2",
        "PTT_FAKE_MAX_TICKS": "3",
        "PTT_FAKE_SEED": "4",
        "PTT_FAKE_PROC_ROOT": str(tmp_path),
    }
    args = [
        sys.executable,
        str(WRAPPER),
        "--query-gpu=index,utilization.gpu,power.draw",
        "--format=csv,noheader,nounits",
        "-lms",
        "50",
    ]
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(6)]
        time.sleep(0.4)
        assert p.poll() is None  # still alive, silent
        assert (tmp_path / "stat").exists() and (tmp_path / "meminfo").exists()
    finally:
        p.kill()
        rest = p.communicate()[0]
    assert rest == ""
    cfg = fake.Config(env)
    expect = [
        f"{g}, {fake.gpu_values(cfg, t, g)['utilization.gpu']}, {fake.gpu_values(cfg, t, g)['power.draw']:.2f}\n"
        for t in range(3)
        for g in range(2)
    ]
    assert lines == expect
    assert len(set(lines)) > 2  # values change per tick


def test_scenarios() -> None:
    def vals(scenario: str, tick: int, gpu: int) -> dict:
        return fake.gpu_values(fake.Config({"PTT_FAKE_SCENARIO": scenario}), tick, gpu)

    for t in range(10):
        for g in range(8):
            v = vals("training", t, g)
            assert 85 <= v["utilization.gpu"] <= 100 and 550 <= v["power.draw"] <= 690
            assert 60 <= v["temperature.gpu"] <= 75 and 59000 < v["memory.used"] < 76000
            h = vals("nccl_hang", t, g)
            assert h["utilization.gpu"] == 100 and h["power.draw"] < 80
    assert vals("idle", 3, 0)["utilization.gpu"] == 0
    assert vals("inference_dead", 5, 0)["utilization.gpu"] >= 85
    dead = vals("inference_dead", 6, 0)
    assert dead["utilization.gpu"] == 0 and dead["memory.used"] == 0
    assert vals("inference_dead", 6, 1)["utilization.gpu"] >= 85
    with pytest.raises(ValueError):
        fake.Config({"PTT_FAKE_SCENARIO": "nope"})


def test_fake_proc_matches_probe_parsers(tmp_path: Path) -> None:
    cfg = fake.Config({"PTT_FAKE_SEED": "2"})
    snaps = []
    for tick in range(4):
        fake.write_proc(cfg, tick, str(tmp_path))
        snaps.append(probe_mod.parse_stat((tmp_path / "stat").read_text()))
        used, total = probe_mod.parse_meminfo((tmp_path / "meminfo").read_text())
        t_kb, a_kb = fake.meminfo_kb(cfg, tick)
        assert (used, total) == ((t_kb - a_kb) * 1024, t_kb * 1024)
        assert 0.2 < used / total < 0.3
    for tick in (1, 2, 3):
        assert probe_mod.cpu_pct(snaps[tick - 1], snaps[tick]) == pytest.approx(
            fake.expected_cpu_pct(cfg, tick), abs=0.01
        )
    assert list(tmp_path.iterdir()) and not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def run_trainer(run_dir: Path, seed: int) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run_dir),
            "--seed",
            str(seed),
            "--step-seconds",
            "0.01",
            "--max-steps",
            "7",
            "--ckpt-interval",
            "3",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr


def test_trainer_writes_logs_metrics_and_checkpoints(tmp_path: Path) -> None:
    run_trainer(tmp_path / "a", seed=1)
    run_trainer(tmp_path / "b", seed=1)
    run_trainer(tmp_path / "c", seed=2)
    a = tmp_path / "a"
    tr = (a / "logs" / "trainer.log").read_text().splitlines()
    steps = [ln for ln in tr if " SUCCESS Step " in ln]
    assert len(steps) == 7
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d SUCCESS Step 1 \| +\S+ \| Loss \d\.\d{4} \| Entropy \d\.\d{4} \| "
        r"Mismatch KL \d\.\d{4} \| Grad\. Norm \d\.\d{4} \| LR 3\.00e-06 \| Throughput \d+ tokens/s "
        r"\| MFU \d+\.\d% \| Peak Mem\. \d+\.\d GiB",
        steps[0],
    ), steps[0]
    assert "Saving checkpoint at step 3" in "\n".join(tr) and "Writing final checkpoint" in tr[-2]
    assert tr[-1].endswith("RL trainer finished!")
    orch = [ln for ln in (a / "logs" / "orchestrator.log").read_text().splitlines() if "SUCCESS Step" in ln]
    assert len(orch) == 7 and re.search(r"Step 7 \| +\S+ \| Reward \d\.\d{4} \| Trainable \d+/128", orch[-1])
    rows = [json.loads(x) for x in (a / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 8)) and "loss/mean" in rows[0]
    ckpts = sorted(p.name for p in (a / "checkpoints").iterdir())
    assert ckpts == ["step_3", "step_6", "step_7"]
    for c in ckpts:
        assert (a / "checkpoints" / c / "trainer" / ".metadata").is_file()
        assert (a / "checkpoints" / c / "orchestrator" / "progress.pt").is_file()
        assert (a / "checkpoints" / c / "trainer" / "model.bin").stat().st_size == 4096
    # deterministic given the seed
    assert tr == (tmp_path / "b" / "logs" / "trainer.log").read_text().splitlines()
    assert tr != (tmp_path / "c" / "logs" / "trainer.log").read_text().splitlines()


async def test_demo_pod_end_to_end() -> None:
    async with DemoPod(seed=0, gpus=3, interval=0.2, step_seconds=0.1, ckpt_interval=2, max_steps=0) as pod:
        env = pod.env()
        assert env["PATH"].split(os.pathsep)[0] == str(pod.bin_dir)
        assert env["PTT_FAKE_PROC_ROOT"] == str(pod.proc_root) and env["PTT_FAKE_GPUS"] == "3"
        assert pod.probe_args()[:4] == ["--backend", "nvidia-smi", "--proc-root", str(pod.proc_root)]
        trainer = await pod.start_trainer()
        proc = await asyncio.create_subprocess_exec(
            *pod.probe_command(),
            "--ckpt-scan",
            "0.2",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        logs: list[str] = []
        ckpts: list = []
        samples = []
        for _ in range(30):
            s = json.loads(await asyncio.wait_for(proc.stdout.readline(), 5))
            samples.append(s)
            logs += s["log"]
            ckpts = s["ckpts"]
            if ckpts and any(ln.startswith("trainer: ") for ln in logs) and len(samples) >= 3:
                break
        assert all(len(s["gpus"]["name"]) == 3 and s["source"] == "nvidia-smi" for s in samples)
        # CPU % needs two reads of the fake /proc/stat a tick apart: under load two samples can read the same tick
        assert any(s["host"]["cpu_pct"] is not None for s in samples[1:])
        assert samples[1]["host"]["mem_total"] == fake.MEM_TOTAL_KB * 1024
        assert any(ln.startswith("orchestrator: ") for ln in logs)
        assert ckpts[0]["step"] % 2 == 0 and ckpts[0]["complete"] is True
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 2) == 0
        root = pod.root
    assert trainer.returncode is not None  # killed by stop()
    assert not root.exists()
