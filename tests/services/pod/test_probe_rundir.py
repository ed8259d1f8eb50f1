"""The probe as a real subprocess reading a real run directory: logs, checkpoints, the resolved configs,
training.csv."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from services.pod.agent.common import checkpoint_complete
from tests.services.pod.probe_support import make_env, wait_samples


def test_run_dir_logs_and_checkpoints(tmp_path: Path, start_probe) -> None:
    run = tmp_path / "run"
    logs = run / "logs"
    (logs / "attempt_1").mkdir(parents=True)
    (logs / "latest").symlink_to("attempt_1")
    trainer = logs / "trainer.log"
    trainer.write_text("old 1\nold 2\n")
    orch = logs / "attempt_1" / "orchestrator.log"
    orch.write_text("old orch\n")
    ck = run / "checkpoints"
    (ck / "step_5" / "trainer").mkdir(parents=True)
    (ck / "step_5" / "trainer" / "a.bin").write_bytes(b"x" * 1000)
    (ck / "step_5" / "STABLE").write_text("")
    (ck / "step_10").mkdir()
    (ck / "step_10" / "b.bin").write_bytes(b"y" * 300)
    (ck / "step_x").mkdir()
    (ck / "notes.txt").write_text("not a checkpoint")
    p = start_probe(
        ["--backend", "none", "--interval", "0.2", "--run-dir", str(run), "--ckpt-scan", "0.2"], make_env(None)
    )
    s = p.sample()
    assert s["log"] == []  # existing content is not replayed
    assert [(c["step"], c["bytes"], c["complete"]) for c in s["ckpts"]] == [(5, 1000, True), (10, 300, False)]
    assert s["ckpts"][0]["path"] == str(ck / "step_5")
    assert s["ckpts"][1]["mtime"] == pytest.approx((ck / "step_10" / "b.bin").stat().st_mtime)
    assert s["host"]["disk_total"] == os.statvfs(run).f_blocks * os.statvfs(run).f_frsize

    with trainer.open("a") as f:
        f.write("Step 12 | loss 0.41\nStep 13 | loss 0.40\nparti")
    with orch.open("a") as f:
        f.write("Step 12 | Reward 0.5\n")
    lines, _ = wait_samples(p, lambda ls, s: len(ls) >= 3)
    assert sorted(lines) == [
        "orchestrator: Step 12 | Reward 0.5",
        "trainer: Step 12 | loss 0.41",
        "trainer: Step 13 | loss 0.40",
    ]
    with trainer.open("a") as f:
        f.write("al line\n")
    lines, _ = wait_samples(p, lambda ls, s: len(ls) >= 1)
    assert lines == ["trainer: partial line"]
    trainer.write_text("after truncate\n")  # truncation -> read from the start
    (logs / "new.log").write_text("born after start\n")  # new file -> read from its start
    (ck / "step_10" / "STABLE").write_text("")
    lines, s = wait_samples(p, lambda ls, s: len(ls) >= 2 and s["ckpts"][1]["complete"])
    assert sorted(lines) == ["new: born after start", "trainer: after truncate"]
    assert [(c["step"], c["complete"]) for c in s["ckpts"]] == [(5, True), (10, True)]
    s = p.sample()
    assert s["log"] == []


def test_log_burst_is_bounded(tmp_path: Path, start_probe) -> None:
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    p = start_probe(["--backend", "none", "--interval", "0.2", "--run-dir", str(tmp_path / "run")], make_env(None))
    p.sample()
    (logs / "burst.log").write_text("".join(f"line {i}\n" for i in range(500)))
    lines, s = wait_samples(p, lambda ls, s: len(ls) > 0)
    assert len(lines) == 200 and lines[-1] == "burst: line 499" and lines[0] == "burst: line 300"
    assert "log: 300 lines skipped" in s["errors"]


def test_checkpoint_completeness_follows_prime_rl_markers(tmp_path: Path) -> None:
    """Real prime-rl checkpoints carry no STABLE file: DCP's trainer/.metadata (written last) and the
    orchestrator's atomically renamed progress.pt say a step_N is whole."""

    def step(name: str, *files: str) -> str:
        d = tmp_path / name
        d.mkdir()
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_bytes(b"x")
        return str(d)

    assert checkpoint_complete(step("full", "trainer/__0_0.distcp", "trainer/.metadata", "orchestrator/progress.pt"))
    assert not checkpoint_complete(step("mid_write", "trainer/__0_0.distcp", "orchestrator/progress.pt"))
    assert not checkpoint_complete(
        step("no_orch_yet", "trainer/__0_0.distcp", "trainer/.metadata", "orchestrator/progress.pt.tmp")
    )
    assert checkpoint_complete(step("trainer_only", "trainer/.metadata"))  # ckpt.output_dir split
    assert checkpoint_complete(step("legacy", "model.safetensors", "STABLE"))
    assert not checkpoint_complete(step("empty"))


def test_run_info_reads_max_steps_from_the_resolved_configs(tmp_path: Path, start_probe) -> None:
    run = tmp_path / "run"
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "orchestrator.json").write_text("{not json")  # garbage is reported, not fatal
    (run / "configs" / "rl.json").write_text(json.dumps({"trainer": {"max_steps": 400}}))
    p = start_probe(
        ["--backend", "none", "--interval", "0.2", "--run-dir", str(run), "--ckpt-scan", "0.2"], make_env(None)
    )
    s = p.sample()
    assert s["run"] == {"max_steps": 400}
    assert any("orchestrator.json" in e for e in s["errors"])


def test_a_run_launched_after_the_probe_is_known_at_the_next_sample(tmp_path: Path, start_probe) -> None:
    """The resolved configs appear after the probe started (the app launched the run meanwhile): max_steps is
    in the next samples, not --ckpt-scan (here 60) seconds later; found once, it is re-read at that cadence."""
    run = tmp_path / "run"
    run.mkdir()
    p = start_probe(
        ["--backend", "none", "--interval", "0.2", "--run-dir", str(run), "--ckpt-scan", "60"], make_env(None)
    )
    assert p.sample()["run"] == {}
    (run / "configs").mkdir()
    (run / "configs" / "trainer.json").write_text(json.dumps({"max_steps": 300}))
    _, s = wait_samples(p, lambda ls, s: s["run"] != {}, timeout=3.0)
    assert s["run"] == {"max_steps": 300}
    (run / "configs" / "trainer.json").write_text(json.dumps({"max_steps": 900}))
    assert [p.sample()["run"] for _ in range(3)] == [{"max_steps": 300}] * 3  # the cadence holds once found


def test_run_info_names_the_model_and_tokens_per_step(tmp_path: Path, start_probe) -> None:
    """prime-rl's split configs: the model in trainer.json, the batch and packing length in orchestrator.json."""
    from services.models import Sample

    run = tmp_path / "run"
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "trainer.json").write_text(json.dumps({"max_steps": 200, "model": {"name": "Qwen/Qwen3-4B"}}))
    (run / "configs" / "orchestrator.json").write_text(
        json.dumps({"max_steps": 200, "batch_size": 64, "seq_len": 2048, "model": {"name": "x"}})
    )
    p = start_probe(
        ["--backend", "none", "--interval", "0.2", "--run-dir", str(run), "--ckpt-scan", "0.2"], make_env(None)
    )
    s = p.sample()
    assert s["run"] == {"max_steps": 200, "model": "Qwen/Qwen3-4B", "tokens_per_step": 64 * 2048}
    parsed = Sample.from_dict(s)
    assert (parsed.max_steps, parsed.model, parsed.tokens_per_step) == (200, "Qwen/Qwen3-4B", 131072)


def test_training_csv_rows_follow_the_header_and_skip_partial_lines(tmp_path: Path, start_probe) -> None:
    run = tmp_path / "run"
    run.mkdir()
    csv = run / "training.csv"
    csv.write_text("step,toks_per_s,loss,lr\n1,900,2.5,1e-5\n2,950,2.4,1e-5\n")  # columns in the file's order
    p = start_probe(["--backend", "none", "--interval", "0.2", "--run-dir", str(run)], make_env(None))
    first = [json.loads(m) for m in p.sample()["metrics"]]
    assert first == [
        {"source": "training.csv", "step": 1, "toks_per_s": 900.0, "loss": 2.5, "lr": 1e-5},
        {"source": "training.csv", "step": 2, "toks_per_s": 950.0, "loss": 2.4, "lr": 1e-5},
    ]
    with csv.open("a") as f:
        f.write("3,1000,2.3,1e-5\ngarbage\n4,10")  # a garbled row, then half a row still being written
        f.flush()
    rows: list[dict] = []
    for _ in range(10):
        rows += [json.loads(m) for m in p.sample()["metrics"]]
        if len(rows) >= 2:
            break
    assert rows == [
        {"source": "training.csv", "step": 3, "toks_per_s": 1000.0, "loss": 2.3, "lr": 1e-5},
        {"source": "training.csv", "raw": "garbage"},
    ]
    with csv.open("a") as f:
        f.write("50,2.2,1e-5\n")
    for _ in range(10):
        if rows := [json.loads(m) for m in p.sample()["metrics"]]:
            break
    assert rows == [{"source": "training.csv", "step": 4, "toks_per_s": 1050.0, "loss": 2.2, "lr": 1e-5}]
