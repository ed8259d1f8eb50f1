"""RunPod end to end: `offers --provider runpod` over a real HTTP server on 127.0.0.1 serving the recorded
GraphQL answers, its errors reaching the command's output while the others still show, and `enter` on a
RunPod offer in the App refusing to rent (a clear reason, no request, nothing in the audit log)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.cli import main
from tests.http_stub import first_segment, serve
from tests.shared_data import OFFER_FIXTURES

H100 = "NVIDIA H100 80GB HBM3"
ROUTES = {"/runpod": (200, "runpod-graphql-gpuTypes.json"), "/vast": (200, "vast-bundles-ondemand.json")}


@pytest.fixture
def served(monkeypatch):
    """prefix → (status, fixture file name or raw bytes); requests seen as (method, path)."""
    routes = dict(ROUTES)
    seen: list[tuple[str, str]] = []

    def answer(method: str, path: str) -> tuple:
        seen.append((method, path))
        status, what = routes.get(first_segment(path), (404, b"{}"))
        return status, what if isinstance(what, bytes) else (OFFER_FIXTURES / what).read_bytes()

    with serve(answer) as base:
        monkeypatch.setenv("PRIME_TRAIN_TUI_RUNPOD_URL", base + "/runpod")
        monkeypatch.setenv("RUNPOD_API_KEY", "test-runpod-key-abcdef")
        monkeypatch.setenv("PRIME_TRAIN_TUI_VAST_URL", base + "/vast")
        monkeypatch.setenv("VAST_API_KEY", "test-vast-key")
        yield routes, seen


def _offers(capsys, *argv: str) -> tuple[int, dict, str]:
    code = main(["offers", "--json", "--timeout", "5", *argv])
    out, err = capsys.readouterr()
    assert "test-runpod-key-abcdef" not in out + err  # the key is never printed
    return code, (json.loads(out) if out.strip() else {}), err


def test_provider_runpod_json_lists_its_offers_ranked_with_whole_box_prices(served, capsys):
    _, seen = served
    code, doc, err = _offers(capsys, "--provider", "runpod", "--all")
    assert code == 0, err
    assert doc["errors"] == [] and doc["offers"]
    offers = doc["offers"]
    assert {o["provider"] for o in offers} == {"runpod"}
    assert any(o["spot"] for o in offers) and not all(o["spot"] for o in offers)  # both kinds by default
    # RunPod's spot is going away: its spot rows say so, its on-demand rows do not
    assert all(("interruptible-pod API" in o["spot_note"]) == o["spot"] for o in offers)
    box = next(o for o in offers if o["id"] == f"{H100}|secure|on-demand|8")
    assert (box["gpu_type"], box["gpu_count"], box["vram_gb"], box["price_hr"]) == ("H100", 8, 80.0, 23.92)
    fits = [o["est_cost"] for o in offers if o["fits"]]
    assert fits and fits == sorted(fits)  # $ per completed run decides the order
    assert seen == [("POST", "/runpod")]  # one GraphQL request, only to RunPod


def test_spot_and_gpu_filters_apply_to_runpod(served, capsys):
    code, doc, err = _offers(capsys, "--provider", "runpod", "--spot", "--gpus", "4")
    assert code == 0, err
    offers = doc["offers"]
    assert offers and all(o["spot"] and o["gpu_count"] == 4 for o in offers)
    community = next(o for o in offers if o["id"] == f"{H100}|community|spot|4")
    assert community["price_hr"] == pytest.approx(1.49 * 4)


@pytest.mark.parametrize(
    "status,what,expect",
    [
        (200, "runpod-edge-graphql-errors.json", "GraphQL error: Something went wrong (synthetic)"),
        (401, b'{"error": "Unauthorized"}', "RUNPOD key rejected"),
    ],
)
def test_runpod_errors_reach_the_cli_while_vast_still_shows(served, capsys, status, what, expect):
    routes, _ = served
    routes["/runpod"] = (status, what)
    code, doc, err = _offers(capsys, "--provider", "vast", "runpod")
    assert code == 0, err
    assert {o["provider"] for o in doc["offers"]} == {"vast"}
    (error,) = doc["errors"]
    assert error["provider"] == "runpod" and expect in error["message"], error


def test_without_a_key_runpod_says_how_to_set_one(served, capsys, monkeypatch):
    _, seen = served
    monkeypatch.delenv("RUNPOD_API_KEY")
    code, doc, _ = _offers(capsys, "--provider", "runpod")
    assert code == 1 and doc["offers"] == []
    assert doc["errors"] == [
        {"provider": "runpod", "message": "no API key: set RUNPOD_API_KEY, or keys.runpod in [offers] of settings.toml"}
    ]
    assert seen == []


async def test_enter_on_a_runpod_offer_refuses_to_rent_before_any_request(tmp_path: Path, monkeypatch):
    from app.screens.rent import RentScreen
    from app.settings import cache_dir
    from services.offers import cache, runpod
    from services.offers.models import FetchResult
    from services.offers.rentals import AuditLog
    from tests.app.helpers import rentals_app, wait_for
    from tests.services.offers.test_launch import Api
    from widgets.offers_view import OffersView

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNPOD_API_KEY", "test-runpod-key-abcdef")
    offers = runpod.parse(json.loads((OFFER_FIXTURES / "runpod-graphql-gpuTypes.json").read_text()))
    cache.save(cache_dir(), False, FetchResult(tuple(offers)), time.time())
    api = Api({})
    audit = AuditLog(tmp_path / "audit.jsonl")
    app = rentals_app([], tmp_path, audit, api, parked=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("2")
        table = app.query_one(OffersView)
        await wait_for(pilot, lambda: table.row_count > 0)
        keys = str(app.offers_pane.query_one("#of-keys").render())
        assert "runpod ✓" in keys and "test-runpod-key-abcdef" not in keys  # masked
        first = table.ordered()[0]
        assert first.offer.provider == "runpod" and first.fits
        table.focus()
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, RentScreen)
        notes = [str(n.message) for n in app._notifications]
        assert any(
            "renting RunPod pods from here is not supported yet: rent it in RunPod's console, then add "
            "the pod with `a`" in n
            for n in notes
        ), notes
    assert api.seen == [] and audit.records() == []
