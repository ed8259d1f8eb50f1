"""Issue 20 end to end: `offers` lists spot and on-demand in one ranking, spot priced with its expected
preemptions. A real HTTP server on 127.0.0.1 serves the providers' recorded payloads (Vast's interruptible
search gets the recorded "bid" answer, its on-demand search the on-demand one); the run's config decides
whether a spot offer ranks above or below an on-demand one."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.cli import main
from tests.shared_data import OFFER_FIXTURES

FILES = {
    "/prime": "primeintellect-availability-gpus.json",
    "/lambda": "lambda-instance-types.json",
    "/runpod": "runpod-graphql-gpuTypes.json",
}


@pytest.fixture
def providers(monkeypatch, tmp_path):
    seen: list[tuple[str, str]] = []  # (route, Vast's search type)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            route = "/" + self.path.lstrip("/").split("/", 1)[0]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if route == "/vast":
                kind = json.loads(body).get("type", "")
                seen.append((route, kind))
                data = (OFFER_FIXTURES / f"vast-bundles-{'bid' if kind == 'bid' else 'ondemand'}.json").read_bytes()
            else:
                seen.append((route, ""))
                data = (OFFER_FIXTURES / FILES[route]).read_bytes() if route in FILES else b"{}"
            self.send_response(200 if route in FILES or route == "/vast" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))  # settings.toml of the test's own
    for name, prefix in (("PRIME", "/prime"), ("VAST", "/vast"), ("LAMBDA", "/lambda"), ("RUNPOD", "/runpod")):
        monkeypatch.setenv(f"PRIME_TRAIN_TUI_{name}_URL", base + prefix)
        monkeypatch.setenv(f"{name}_API_KEY", f"test-{name.lower()}-key")
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def _offers(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(["offers", "--json", "--timeout", "5", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out)["offers"] if out.strip() else []), err


def test_both_kinds_in_one_list_sorted_by_cost_with_the_risk_included(providers, capsys):
    code, offers, err = _offers(capsys, "--model", "Qwen/Qwen3-8B", "--all")
    assert code == 0, err
    assert ("/vast", "bid") in providers and ("/vast", "on-demand") in providers  # both Vast searches
    spot, on_demand = [o for o in offers if o["spot"]], [o for o in offers if not o["spot"]]
    assert {o["provider"] for o in spot} >= {"primeintellect", "vast", "runpod"}
    assert {o["provider"] for o in on_demand} >= {"primeintellect", "vast", "lambda", "runpod"}
    fits = [o for o in offers if o["fits"]]
    assert [o["est_cost"] for o in fits] == sorted(o["est_cost"] for o in fits)  # one ranking, the risk in
    assert fits and not all(o["fits"] for o in offers) and not any(o["fits"] for o in offers[len(fits) :])
    for o in offers:
        if o["spot"]:  # the range: no preemption – expected; the expected is what ranks
            assert o["est_cost"] > o["est_cost_no_preemption"] > 0 and o["expected_preemptions"] > 0
            assert o["interruptions_per_hr"] > 0 and o["hours_lost_per_preemption"] > 0
            assert o["est_hours"] > o["est_hours_no_preemption"]
        else:
            assert (o["est_cost"], o["expected_preemptions"], o["spot_note"]) == (o["est_cost_no_preemption"], 0, "")
    assert {o["provider"] for o in spot if "interruptible-pod API" in o["spot_note"]} == {"runpod"}
    # the documented defaults: Prime 0.05/hr, Vast 0.1/hr
    assert {(o["provider"], o["interruptions_per_hr"]) for o in spot if o["provider"] != "runpod"} == {
        ("primeintellect", 0.05),
        ("vast", 0.1),
    }


def test_spot_and_no_spot_narrow_the_list(providers, capsys):
    code, spot, _ = _offers(capsys, "--model", "Qwen/Qwen3-8B", "--all", "--spot")
    assert code == 0 and spot and all(o["spot"] for o in spot)
    assert ("/vast", "on-demand") not in providers and ("/lambda", "") not in providers  # only spot searched
    code, on_demand, _ = _offers(capsys, "--model", "Qwen/Qwen3-8B", "--all", "--no-spot")
    assert code == 0 and on_demand and not any(o["spot"] for o in on_demand)
    code, both, _ = _offers(capsys, "--model", "Qwen/Qwen3-8B", "--all")
    assert sorted(o["id"] + str(o["spot"]) for o in both) == sorted(o["id"] + str(o["spot"]) for o in spot + on_demand)
    from app.settings import cache_dir

    assert (cache_dir() / "offers-on-demand.json").is_file() and (cache_dir() / "offers-spot.json").is_file()


def _config(tmp_path, interval: int | None):
    cfg = tmp_path / f"rl-{interval}.toml"
    ckpt = f"\n[ckpt]\ninterval = {interval}\n" if interval else ""
    cfg.write_text(
        f'max_steps = 1000\n[model]\nname = "Qwen/Qwen3-8B"\n[orchestrator]\nbatch_size = 128\n[trainer]\n{ckpt}'
    )
    return cfg


def _order(capsys, cfg) -> list[tuple[str, bool]]:
    code, offers, err = _offers(capsys, "--config", str(cfg), "--provider", "vast", "--gpus", "2")
    assert code == 0, err
    return [(o["id"], o["spot"]) for o in offers]


def test_the_checkpoint_interval_decides_spot_against_on_demand(providers, capsys, tmp_path):
    """The same offers (Vast's L40S ×2 at $0.70/hr interruptible, $1.30/hr on demand): checkpointing every 5
    steps loses little per preemption, so spot is cheaper to finish; every 500 of 1000 steps, or never,
    a preemption throws away hours and on-demand wins."""
    short = _order(capsys, _config(tmp_path, 5))
    assert short[:2] == [("90000104", True), ("90000104", False)]
    long = _order(capsys, _config(tmp_path, 500))
    assert long[:2] == [("90000104", False), ("90000104", True)]
    assert _order(capsys, _config(tmp_path, None))[:2] == [("90000104", False), ("90000104", True)]


def test_settings_rates_override_the_defaults_and_bad_ones_are_one_line(providers, capsys, tmp_path):
    settings = tmp_path / "config" / "settings.toml"
    settings.parent.mkdir(parents=True)
    settings.write_text("[offers]\nspot_interruptions_per_hour = {vast = 0.0}\n")
    code, offers, err = _offers(capsys, "--provider", "vast", "--spot", "--model", "Qwen/Qwen3-8B")
    assert code == 0, err
    assert offers and all(
        o["interruptions_per_hr"] == 0 and o["est_cost"] == o["est_cost_no_preemption"] for o in offers
    )  # never preempted: nothing to price
    settings.write_text("[offers]\nspot_interruptions_per_hour = {vast = -1}\n")
    code, offers, err = _offers(capsys, "--provider", "vast")
    assert code == 1 and offers == []
    assert "spot_interruptions_per_hour.vast must be a number" in err and "Traceback" not in err
    settings.write_text("[offers]\nspot_interruptions_per_hour = {vsat = 0.1}\n")
    code, _, err = _offers(capsys, "--provider", "vast")
    assert code == 1 and "unknown key" in err and "vast" in err


def test_text_output_shows_the_spot_range(providers, capsys):
    assert main(["offers", "--provider", "runpod", "--gpus", "8", "--timeout", "5"]) == 0
    out = capsys.readouterr().out
    spot_lines = [line for line in out.splitlines() if " · spot " in line]
    assert spot_lines and all(
        re.search(r"spot \d+\.\d\d–\d+\.\d\d,", line)
        and "preemptions expected" in line
        and "interruptible-pod API" in line
        for line in spot_lines
    )
