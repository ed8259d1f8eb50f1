"""`offers --json` end to end: a real HTTP server on 127.0.0.1 serves the providers' recorded payloads."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from tests.http_stub import first_segment, serve
from tests.shared_data import OFFER_FIXTURES

FIXTURES = OFFER_FIXTURES
SERVED = {
    "/prime": "primeintellect-availability-gpus.json",
    "/vast": "vast-bundles-ondemand.json",
    "/lambda": "lambda-instance-types.json",
    "/runpod": "runpod-graphql-gpuTypes.json",
}


@pytest.fixture
def providers(monkeypatch):
    def answer(method: str, path: str) -> tuple:
        prefix = first_segment(path)
        return (200, (FIXTURES / SERVED[prefix]).read_bytes()) if prefix in SERVED else (404, b"{}")

    with serve(answer) as base:
        for name, prefix in (("PRIME", "/prime"), ("VAST", "/vast"), ("LAMBDA", "/lambda"), ("RUNPOD", "/runpod")):
            monkeypatch.setenv(f"PRIME_TRAIN_TUI_{name}_URL", base + prefix)
            monkeypatch.setenv(f"{name}_API_KEY", f"test-{name.lower()}-key")
        yield


def test_offers_json_ranks_all_providers_by_estimated_dollars(providers, capsys):
    if not FIXTURES.is_dir():
        pytest.fail(f"fixtures missing: {FIXTURES}")
    code = main(["offers", "--json"])  # the default run: 1 train + 1 inference GPU, so 2+ GPU offers
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 0, (doc.get("errors"), err)
    assert doc["errors"] == []
    offers = doc["offers"]
    assert {o["provider"] for o in offers} >= {"vast", "lambda", "runpod"}
    costs = [o["est_cost"] for o in offers if o.get("est_cost") is not None]
    assert costs and costs == sorted(costs)  # $ per completed run, not $/hr, decides the order
    assert "test-vast-key" not in out and "test-vast-key" not in err  # keys never printed


def test_offers_config_prices_the_configs_run_and_fills_the_cache(providers, capsys, tmp_path):
    cfg = tmp_path / "rl.toml"
    cfg.write_text('max_steps = 20\n[model]\nname = "Qwen/Qwen3-0.6B"\n[orchestrator]\nbatch_size = 64\n')
    assert main(["offers", "--json", "--config", str(cfg), "--provider", "vast"]) == 0
    short = json.loads(capsys.readouterr().out)["offers"]
    cfg.write_text(cfg.read_text().replace("max_steps = 20", "max_steps = 200"))
    assert main(["offers", "--json", "--config", str(cfg), "--provider", "vast"]) == 0
    long = json.loads(capsys.readouterr().out)["offers"]
    assert [o["id"] for o in short] == [o["id"] for o in long]
    assert long[0]["est_hours"] == pytest.approx(10 * short[0]["est_hours"], rel=0.01)  # 10× the steps
    assert main(["offers", "--json", "--gpus", "2"]) == 0  # all providers: the pane's cache is written
    from app.settings import cache_dir

    assert (cache_dir() / "offers-on-demand.json").is_file()


def test_offers_config_errors_are_one_line_and_usage(providers, capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    assert main(["offers", "--config", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    odd = tmp_path / "odd.toml"
    odd.write_text('[model]\nname = "someone/Unknown-7B-Custom"\n')
    assert main(["offers", "--config", str(odd)]) == 2
    assert "--model" in capsys.readouterr().err


def test_split_sets_the_runs_gpus_for_a_model_run(providers, capsys):
    """`--split 4+4`: only boxes of 8+ GPUs fit (others are misfits saying why); `1+0` prices a run without
    an inference server; garbage is a usage error."""
    assert main(["offers", "--json", "--all", "--split", "4+4"]) == 0
    offers = json.loads(capsys.readouterr().out)["offers"]
    assert offers and all(o["fits"] == (o["gpu_count"] >= 8) for o in offers)
    assert any(o["gpu_count"] >= 8 for o in offers) and any(not o["fits"] for o in offers)
    assert main(["offers", "--json", "--split", "1+0"]) == 0
    solo = json.loads(capsys.readouterr().out)["offers"]
    assert any(o["gpu_count"] == 1 for o in solo)  # one GPU is enough without generation
    with pytest.raises(SystemExit) as exc:
        main(["offers", "--split", "two+six"])
    assert exc.value.code == 2 and "TRAIN+INFER" in capsys.readouterr().err
