"""validate / estimate / init / config from the command line: exit codes, the JSON contract, files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from services.config.memory import presets
from services.config.validate import validate_text
from tests.services.config.test_rules import FIXTURES, RL_BASE


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "rl.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_validate_clean_file_exits_0(tmp_path, capsys):
    code, out, _ = run(capsys, "validate", str(write(tmp_path, RL_BASE)))
    assert code == 0 and "0 error(s), 0 warning(s)" in out
    # which prime-rl the checks follow: the generated prime_rl_fields.json's header
    header = json.loads((Path(__file__).parents[3] / "services/config/prime_rl_fields.json").read_text())["header"]
    assert f"Checked against prime-rl {header['prime_rl_version']} (commit {header['prime_rl_commit'][:8]}" in out


def test_validate_json_contract_and_exit_1(tmp_path, capsys):
    path = write(
        tmp_path,
        RL_BASE.replace("[trainer]\n", "[trainer]\nmax_step = 3\n") + '[inference.env_vars]\nVLLM_USE_V1 = "0"\n',
    )
    code, out, _ = run(capsys, "validate", str(path), "--json")
    assert code == 1
    doc = json.loads(out)
    assert set(doc) == {"file", "kind", "findings", "errors", "warnings", "prime_rl"}
    assert set(doc["prime_rl"]) == {"version", "commit", "date", "configs_version"}
    assert len(doc["prime_rl"]["commit"]) == 40 and doc["prime_rl"]["configs_version"]
    assert doc["file"] == str(path) and doc["kind"] == "rl" and (doc["errors"], doc["warnings"]) == (1, 1)
    first = doc["findings"][0]
    assert {"id", "severity", "line", "column", "message", "fix"} <= set(first)
    assert (first["id"], first["severity"], first["line"], first["column"]) == ("unknown-key", "error", 7, 1)
    assert "max_steps" in first["fix"]


def test_validate_warnings_only_exit_0(tmp_path, capsys):
    path = write(tmp_path, RL_BASE + "[ckpt]\ninterval = 5\n")
    code, out, _ = run(capsys, "validate", str(path), "--json")
    assert code == 0 and json.loads(out)["warnings"] == 1


def test_validate_unreadable_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "validate", str(tmp_path / "missing.toml"))
    assert code == 2 and "no such file" in err
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe\x00bad")
    assert run(capsys, "validate", str(bad))[0] == 2


def test_validate_kind_and_memory_fit(tmp_path, capsys):
    path = write(tmp_path, RL_BASE.replace("Qwen/Qwen3-0.6B", "Qwen/Qwen3-32B"))
    code, out, _ = run(capsys, "validate", str(path), "--preset", "rtx4090", "--gpus", "2", "--json")
    doc = json.loads(out)
    assert code == 1 and "memory-fit" in [f["id"] for f in doc["findings"]]
    fit = next(f for f in doc["findings"] if f["id"] == "memory-fit")
    assert "too much" in fit["message"] and "LoRA" in fit["fix"]
    code, out, _ = run(capsys, "validate", str(path), "--kind", "trainer", "--json")
    assert json.loads(out)["kind"] == "trainer" and code == 1  # rl sections are unknown to a trainer file


def test_validate_stale_k8s_fixture_like_prime_rl(capsys):
    path = FIXTURES / "k8s__prime-rl__examples__reverse-text__infer.toml"
    code, out, _ = run(capsys, "validate", str(path), "--json")
    assert code == 1 and json.loads(out)["kind"] == "inference"


def test_estimate_json_zero_paper(capsys):
    code, out, _ = run(capsys, "estimate", "--params", "7.5e9", "--gpus", "64", "--sharding", "os+g", "--json")
    per_gpu = json.loads(out)["per_gpu"]
    assert code == 0 and set(per_gpu) == {"weights", "gradients", "optimizer", "activations", "kv_cache", "total"}
    assert abs(per_gpu["total"] / 1e9 - 16.6) < 0.02 * 16.6


def test_estimate_model_lora_and_unknown(capsys):
    code, out, _ = run(
        capsys, "estimate", "--model", "Qwen/Qwen3-8B", "--gpus", "2", "--lora", "--json", "--preset", "h100-80gb"
    )
    doc = json.loads(out)
    assert code == 0 and doc["lora"] and doc["preset"]["fits"] and doc["per_gpu"]["activations"] > 0
    code, _, err = run(capsys, "estimate", "--model", "nobody/unknown")
    assert code == 2 and "not in the model registry" in err


MODELS = ["Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen3-4B", "meta-llama/Llama-3.2-3B-Instruct"]


@pytest.mark.parametrize("preset", sorted(presets()))
def test_init_output_is_clean_for_every_preset(preset, tmp_path, capsys):
    for model in MODELS:
        for gpus in (1, 2, 8):
            out_file = tmp_path / f"{model.replace('/', '_')}-{gpus}.toml"
            code, _, err = run(
                capsys, "init", "--model", model, "--preset", preset, "--gpus", str(gpus), "-o", str(out_file)
            )
            assert code == 0, err
            report = validate_text(out_file.read_text(), preset=preset, gpus=gpus)
            assert report.kind == "rl" and report.errors == 0, (model, gpus, report.findings)


def test_init_tool_env_and_refusals(tmp_path, capsys):
    code, out, _ = run(
        capsys, "init", "--model", "Qwen/Qwen3-4B", "--preset", "h100-80gb", "--gpus", "4", "--env", "wiki-search"
    )
    assert code == 0 and 'type = "subprocess"' in out and "# " in out
    assert validate_text(out).findings == ()
    target = write(tmp_path, "# mine\n")
    code, _, err = run(
        capsys, "init", "--model", "Qwen/Qwen3-0.6B", "--preset", "h100-80gb", "--gpus", "2", "-o", str(target)
    )
    assert code == 2 and "exists" in err and target.read_text() == "# mine\n"
    code, _, err = run(capsys, "init", "--model", "Qwen/Qwen3-32B", "--preset", "rtx4090", "--gpus", "1")
    assert code == 2 and "does not fit" in err


def test_config_versions_roundtrip(tmp_path, capsys):
    path = write(tmp_path, RL_BASE)
    assert run(capsys, "config", "save", str(path), "--name", "baseline", "--notes", "first")[0] == 0
    path.write_text(RL_BASE.replace("max_steps = 20", "max_steps = 50"))
    assert run(capsys, "config", "save", str(path), "--name", "longer")[0] == 0
    code, out, _ = run(capsys, "config", "list", str(path), "--json")
    names = [v["name"] for v in json.loads(out)["versions"]]
    assert code == 0 and names == ["baseline", "longer"]
    code, out, _ = run(capsys, "config", "diff", str(path), "baseline", "longer", "--json")
    assert json.loads(out)["changes"] == [{"key": "max_steps", "old": 20, "new": 50, "kind": "changed"}]
    code, out, _ = run(capsys, "config", "restore", str(path), "baseline")
    assert code == 0 and path.read_text() == RL_BASE
    assert "max_steps = 50" in (tmp_path / "rl.toml.bak").read_text()
    code, out, _ = run(capsys, "config", "list", str(path), "--json")
    assert [v["name"] for v in json.loads(out)["versions"]][-1] == "before restore"
    code, _, err = run(capsys, "config", "restore", str(path), "nope")
    assert code == 2 and "no version" in err


def test_pre_commit_hook_file():
    text = (Path(__file__).resolve().parents[3] / ".pre-commit-hooks.yaml").read_text()
    assert "entry: prime-train-tui validate" in text and "types: [toml]" in text


def test_the_last_opened_config_is_remembered(tmp_path, monkeypatch):
    from app.settings import last_config, remember_config

    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    assert last_config() is None
    cfg = tmp_path / "rl.toml"
    cfg.write_text("max_steps = 5\n")
    remember_config(cfg)
    assert last_config() == cfg.resolve()
    cfg.unlink()
    assert last_config() is None  # a config that is gone is not offered
