"""`init` and `estimate` agree on memory and say which assumptions they use; an unknown model is
answered with the closest known ones (or every known one), never a bare refusal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.cli import main
from services.config.memory import registry


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [("init", "--preset", "h100-80gb", "--gpus", "2"), ("estimate",)])
def test_an_unknown_model_is_answered_with_the_closest_known_ones(capsys, command) -> None:
    code, _, err = run(capsys, command[0], "--model", "Qwen/Qwen3-5B", *command[1:])
    assert code == 2 and "not in the model registry" in err
    assert "Qwen/Qwen3-4B" in err and "Qwen/Qwen3-8B" in err, err


@pytest.mark.parametrize("command", [("init", "--preset", "h100-80gb", "--gpus", "2"), ("estimate",)])
def test_a_model_like_none_known_lists_every_known_one(capsys, command) -> None:
    code, _, err = run(capsys, command[0], "--model", "zzzz", *command[1:])
    assert code == 2
    assert all(name in err for name in registry()), err


def gib(text: str, label: str) -> float:
    found = re.search(label + r"[^\d]*([\d.]+) GiB", text)
    assert found, (label, text)
    return float(found.group(1))


def test_init_and_estimate_give_the_same_figure_for_the_same_assumptions(capsys, tmp_path) -> None:
    out_file = tmp_path / "rl.toml"
    code, _, err = run(
        capsys, "init", "--model", "Qwen/Qwen3-4B", "--preset", "h100-80gb", "--gpus", "2", "-o", str(out_file)
    )
    assert code == 0, err
    # init says what it assumed: FSDP over the trainer GPU(s), optimizer states in host RAM (prime-rl's default)
    assert "optimizer states in host RAM" in err and "FSDP over 1 GPU" in err and "seq_len 2048" in err, err
    init_gib = gib(err, "trainer")
    # and how to get the same figure from estimate
    assert "estimate --model Qwen/Qwen3-4B --gpus 1 --optim-cpu-offload --seq-len 2048" in err, err

    code, out, _ = run(
        capsys, "estimate", "--model", "Qwen/Qwen3-4B", "--gpus", "1", "--optim-cpu-offload", "--seq-len", "2048"
    )
    assert code == 0 and "optimizer states in host RAM" in out, out
    assert gib(out, "total") == pytest.approx(init_gib, abs=0.05)


def test_estimate_without_offload_says_why_it_differs_from_prime_rls_default(capsys) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "Qwen/Qwen3-4B", "--gpus", "1")
    assert code == 0
    assert "optimizer states in GPU memory" in out and "optim_cpu_offload = true" in out, out
    assert "--optim-cpu-offload" in out, out  # the flag that gives init's figure
    code, out, _ = run(capsys, "estimate", "--model", "Qwen/Qwen3-4B", "--gpus", "1", "--json")
    doc = json.loads(out)
    assert doc["assumptions"]["optimizer"] == "GPU memory" and doc["assumptions"]["fsdp_gpus"] == 1
    assert doc["assumptions"]["activation_checkpointing"] is True and doc["assumptions"]["seq_len"] == 2048
