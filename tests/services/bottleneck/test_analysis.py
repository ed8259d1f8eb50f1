"""The breakdown and diagnosis on runs the simulated trainer really writes, one per timing profile; the
probe's "metrics" field and the monitor's metrics history feeding it live."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from services.bottleneck.analysis import DIAGNOSES, analyze, analyze_lines, analyze_snapshot, gpu_evidence
from services.bottleneck.report import to_markdown, write_markdown
from services.bottleneck.rules import load_rules, recommend
from services.models import GpuProcess, GpuSample, HostSample, Pod, PodKind, Sample
from services.monitor.metrics import parse_run

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "services" / "pod" / "agent" / "probe.py"


def run_trainer(run_dir: Path, profile: str, *extra: str, steps: int = 20) -> Path:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run_dir),
            "--step-seconds",
            "0.001",
            "--max-steps",
            str(steps),
            "--profile",
            profile,
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return run_dir


def read(run_dir: Path) -> tuple[list[str], list[str]]:
    metrics = run_dir / "metrics.jsonl"
    m = metrics.read_text().splitlines() if metrics.exists() else []
    console = [f"{f.stem}: {ln}" for f in sorted((run_dir / "logs").glob("*.log")) for ln in f.read_text().splitlines()]
    return m, console


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        p: run_trainer(root / p, p)
        for p in ("latency-bound", "generation-bound", "trainer-bound", "checkpoint-heavy", "default")
    }


EXPECTED = {
    "latency-bound": ("latency-bound", ["local-executor", "more-in-flight"]),
    "generation-bound": ("throughput-bound", ["more-inference-gpus", "shorter-completions"]),
    "trainer-bound": ("trainer-bound", ["trainer-gpus"]),
    "checkpoint-heavy": ("io-bound", ["checkpoint-interval"]),
    "default": ("balanced", ["balanced"]),
}


@pytest.mark.parametrize("profile", list(EXPECTED))
def test_each_profile_gets_its_diagnosis_and_recommendations(runs, profile):
    metrics, console = read(runs[profile])
    b = analyze_lines(metrics, console, last=20)
    diagnosis, rec_ids = EXPECTED[profile]
    assert (b.diagnosis, b.confidence, b.source) == (diagnosis, "high", "metrics.jsonl")
    assert [r.id for r in b.recommendations] == rec_ids
    assert b.steps == 20 and (b.first_step, b.last_step) == (1, 20)
    top = [c for c in b.components if c.parent is None and c.timeline == "trainer"]
    assert sum(c.share for c in top) == pytest.approx(1.0, abs=0.01)  # the trainer step, fully accounted for
    # every recommendation cites measured numbers, never a placeholder
    for r in b.recommendations:
        assert "N/A" not in r.text and re.search(r"\d+(\.\d)? s|\d+%", r.text), r.text


def test_latency_bound_numbers_are_the_measured_ones(runs):
    metrics, _ = read(runs["latency-bound"])
    rows = [json.loads(x) for x in metrics]
    trainer = [r for r in rows if "time/wait_for_batch" in r]
    mean_wait = sum(r["time/wait_for_batch"] for r in trainer) / 20
    mean_step = sum(r["time/step"] for r in trainer) / 20
    b = analyze_lines(metrics)
    wait = b.component("wait_for_batch")
    assert wait.seconds == pytest.approx(mean_wait) and wait.share == pytest.approx(mean_wait / mean_step)
    tools, gen = b.component("tools"), b.component("inference")
    overhead = b.component("env_overhead")  # setup/finalize/scoring: the third part of a rollout
    assert tools.seconds + gen.seconds + overhead.seconds == pytest.approx(mean_wait)
    assert tools.share > 0.5 > gen.share
    assert f"{100 * tools.share:.0f}%" in b.recommendations[0].text and "10-15x" in b.recommendations[0].text
    assert len(wait.series) == 20  # the trend


def test_last_k_steps_only(runs):
    metrics, _ = read(runs["checkpoint-heavy"])  # saves at steps 10 and 20
    assert analyze_lines(metrics, last=5).component("save_ckpt").seconds > 20  # step 20's save, over 5 steps
    b = analyze(parse_run(metrics[: 3 * 9]), last=5)  # steps 5-9: no save in the window
    assert (b.first_step, b.last_step) == (5, 9) and b.diagnosis == "trainer-bound"  # 6 s of 12
    assert b.component("save_ckpt").seconds == 0.0


def test_console_only_runs_fall_back_with_low_confidence(tmp_path):
    heavy = run_trainer(tmp_path / "heavy", "checkpoint-heavy", "--no-metrics")
    assert not (heavy / "metrics.jsonl").exists()
    b = analyze_lines(*read(heavy))
    assert (b.diagnosis, b.confidence, b.source) == ("io-bound", "low", "console")
    assert any("checkpoint steps took" in e for e in b.evidence)
    held = analyze_lines(*read(run_trainer(tmp_path / "held", "trainer-bound", "--no-metrics")))
    assert (held.diagnosis, held.confidence) == ("trainer-bound", "low")
    assert any("held 20 of 20 batches" in e for e in held.evidence)


def test_garbled_and_partial_lines_do_not_change_the_answer(runs):
    metrics, console = read(runs["latency-bound"])
    clean = analyze_lines(metrics, console)
    noisy = []
    for i, line in enumerate(metrics):
        noisy.append(line)
        if i % 5 == 0:
            noisy += [line[: len(line) // 2], "\x00\x01garbage", "{}", '{"step": null}']
    dirty = analyze_lines(noisy, console + ["trainer: Step 3 | ??? |", "orchestrator: \x1b[31m"])
    assert dirty.diagnosis == clean.diagnosis and dirty.component("tools").seconds == clean.component("tools").seconds
    assert dirty.skipped >= 2 * len(range(0, len(metrics), 5))


def test_no_steps_yet_is_an_answer_not_an_error():
    b = analyze_lines([], ["trainer: 14:00:00    INFO Starting from step 1"])
    assert b.steps == 0 and b.diagnosis == "balanced" and not b.recommendations
    assert b.to_json()["components"] == []


def test_json_document_follows_the_contract(runs):
    doc = analyze_lines(read(runs["trainer-bound"])[0], last=7).to_json()
    json.dumps(doc)  # serialisable
    assert doc["steps"] == 7 and doc["diagnosis"] in DIAGNOSES
    assert all({"name", "seconds", "share"} <= c.keys() for c in doc["components"])
    assert all(isinstance(r, str) for r in doc["recommendations"]) and doc["recommendations"]


def test_rules_file_loads_and_every_rule_formats():
    rules = load_rules()
    assert len({r["id"] for r in rules}) == len(rules) >= 8
    every = {k: 1.0 for r in rules for k in re.findall(r"\{(\w+)\}", r["text"])}
    for diagnosis in DIAGNOSES:
        for rec in recommend(diagnosis, every, rules):
            assert "{" not in rec.text
    with pytest.raises(ValueError, match="bad rule condition"):
        recommend("balanced", {}, [{"id": "x", "when": ["step_s ~ 3"], "text": ""}])
    # a number that was not measured reads N/A rather than failing
    (rec,) = recommend("balanced", {}, [{"id": "x", "when": ["diagnosis == balanced"], "text": "{step_s} s"}])
    assert rec.text == "N/A s"


def test_gpu_evidence_splits_inference_and_trainer_gpus():
    def sample(t, utils):
        gpus = tuple(GpuSample(i, "H100", u, None, None, None, None) for i, u in enumerate(utils))
        procs = (
            GpuProcess(10, 0, None, "python -m vllm.entrypoints.openai.api_server"),
            GpuProcess(11, 1, None, "torchrun --role=trainer -m prime_rl.trainer.rl.train"),
        )
        return Sample(t, gpus, HostSample(), procs)

    ev = gpu_evidence([sample(0, (10.0, 90.0, None)), sample(1, (20.0, 100.0, 50.0))])
    assert (ev.inference_util, ev.trainer_util, ev.gpus, ev.samples) == (15.0, 95.0, 3, 2)
    assert ev.all_util == pytest.approx((10 + 90 + 20 + 100 + 50) / 5)


def test_markdown_export(runs, tmp_path):
    b = analyze_lines(read(runs["latency-bound"])[0])
    path = write_markdown(b, tmp_path / "out" / "profile.md", "Bottleneck profile — pod-a")
    text = path.read_text()
    assert text.startswith("# Bottleneck profile — pod-a") and "**Diagnosis: LATENCY-BOUND**" in text
    assert "| ↳ Tool / environment execution |" in text and text == to_markdown(b, "Bottleneck profile — pod-a")


# ---------------------------------------------------------------------------------------- live plumbing
def probe_lines(args: list[str], stdin_open: bool, count: int, timeout: float = 15.0) -> list[dict]:
    proc = subprocess.Popen(
        [sys.executable, "-u", str(PROBE), "--backend", "none", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out = []
    try:
        for line in proc.stdout:
            out.append(json.loads(line))
            if len(out) >= count:
                break
    finally:
        proc.kill()
        proc.wait()
    return out


def test_probe_backfills_then_tails_metrics(runs, tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    big = read(runs["latency-bound"])[0] * 40  # ~140 KiB: more than the 64 KiB backfill
    (run / "metrics.jsonl").write_text("\n".join(big) + "\n" + '{"step": 99, "time/st')  # partial last line
    proc = subprocess.Popen(
        [sys.executable, "-u", str(PROBE), "--backend", "none", "--interval", "0.2", "--run-dir", str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        first = json.loads(proc.stdout.readline())
        lines = first["metrics"]
        assert 0 < len(lines) <= 200
        assert sum(len(x) + 1 for x in lines) <= 64 * 1024
        assert all(json.loads(x) for x in lines)  # whole lines only: the cut first one and the partial last are held
        with open(run / "metrics.jsonl", "a") as f:
            f.write('ep_ckpt": 1.0}\n{"step": 100, "time/step": 2.0, "time/forward_backward": 1.0}\n')
        seen = []
        for _ in range(20):
            seen += json.loads(proc.stdout.readline())["metrics"]
            if len(seen) >= 2:
                break
        assert seen == [
            '{"step": 99, "time/step_ckpt": 1.0}',
            '{"step": 100, "time/step": 2.0, "time/forward_backward": 1.0}',
        ]
    finally:
        proc.kill()
        proc.wait()


def test_metrics_field_parses_into_sample_and_is_optional():
    base = {"v": 1, "t": 1.0, "gpus": [], "host": {}}
    assert Sample.from_dict(base).metrics == ()
    assert Sample.from_dict({**base, "metrics": ['{"step": 1}', "x"]}).metrics == ('{"step": 1}', "x")


async def test_monitor_keeps_a_bounded_metrics_history_that_the_breakdown_reads(tmp_path):
    from services.monitor.service import MonitorService
    from services.monitor.worker import MonitorSettings

    run = tmp_path / "run"
    trainer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.demo.trainer",
        "--run-dir",
        str(run),
        "--step-seconds",
        "0.05",
        "--max-steps",
        "0",
        "--profile",
        "latency-bound",
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    snaps = []
    settings = MonitorSettings(interval=0.2, metrics_len=30)
    monitor = MonitorService(snaps.append, settings=settings)
    try:
        monitor.add(Pod(name="local", kind=PodKind.LOCAL, run_dir=str(run)))
        for _ in range(150):
            await asyncio.sleep(0.1)
            snap = monitor.snapshot("local")
            if snap.metrics_total > 45:
                break
        snap = monitor.snapshot("local")
        assert snap.metrics_total > 45 and len(snap.metrics) == 30  # bounded, newest kept
        b = analyze_snapshot(snap, last=20)
        assert b.diagnosis == "latency-bound" and b.steps >= 5
    finally:
        await monitor.aclose()
        trainer.kill()
        await trainer.wait()
