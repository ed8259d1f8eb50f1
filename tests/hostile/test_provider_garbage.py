"""Issue 13 items 4 and 10: what one provider's garbage did to everyone's offers.

Item 4: JSON nested 100k deep ended `offers` and the TUI with RecursionError. Bodies are now read as a
stream and capped (20 MB; a bigger one is never held whole) and the nesting is measured before json
parses it: that provider gets one error line, the others' offers still show.
Item 10: a wrongly-shaped answer (a list where an object belongs, missing keys, strings for numbers) listed
0 offers and said nothing: each provider's normaliser now says "unexpected answer from <provider>: <what>".
An impossible price (1e308, NaN, negative, over $1,000/GPU-hr) is skipped and counted per offer, and
`offers --json` is always valid JSON. So is one below $0.001/GPU-hr: 1e-300 $/hr ranked first as "$0.00".

A real HTTP server on 127.0.0.1 answers for the providers (tests/http_stub.py); the CLI is the real one."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app.cli import main
from services.offers import lambda_, primeintellect, runpod, vast
from services.offers.models import ProviderFailure
from tests.http_stub import first_segment, serve
from tests.shared_data import OFFER_FIXTURES as FIX

DEEP_LIST = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
GOOD = {
    "/prime": (200, "primeintellect-availability-gpus.json"),
    "/vast": (200, "vast-bundles-ondemand.json"),
    "/lambda": (200, "lambda-instance-types.json"),
    "/runpod": (200, "runpod-graphql-gpuTypes.json"),
}


def fixture(name: str):
    return json.loads((FIX / name).read_text())


@pytest.fixture
def served(monkeypatch):
    """prefix → (status, fixture name | raw bytes | a JSON-able object); change the dict to change answers."""
    routes = dict(GOOD)
    hits: list[str] = []

    def answer(method: str, path: str) -> tuple:
        hits.append(path)
        status, what = routes.get(first_segment(path), (404, b"{}"))
        if isinstance(what, str):
            what = (FIX / what).read_bytes()
        return status, what if isinstance(what, bytes) else json.dumps(what).encode()

    with serve(answer) as base:
        for name, prefix in (("PRIME", "/prime"), ("VAST", "/vast"), ("LAMBDA", "/lambda"), ("RUNPOD", "/runpod")):
            monkeypatch.setenv(f"PRIME_TRAIN_TUI_{name}_URL", base + prefix)
            monkeypatch.setenv(f"{name}_API_KEY", f"test-{name.lower()}-key")
        yield routes, hits


def strict_json(text: str):
    """json.loads that refuses NaN/Infinity (what other JSON readers do)."""

    def refuse(token: str):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def offers_json(capsys, *argv: str) -> tuple[int, dict, str]:
    # --no-spot: one search per provider (by default Vast is searched twice, on-demand and interruptible, and
    # these stubs answer every search with the same garbage)
    code = main(["offers", "--json", "--all", "--no-spot", "--timeout", "10", *argv])
    out, err = capsys.readouterr()
    return code, (strict_json(out) if out.strip() else {}), err


# ------------------------------------------------------------------ item 4: deep and huge bodies
@pytest.mark.parametrize("deep", [DEEP_LIST, DEEP_OBJECT], ids=["arrays", "objects"])
def test_100k_deep_json_is_that_providers_error_line_while_the_other_lists(served, capsys, deep):
    routes, _ = served
    routes["/vast"] = (200, deep)
    code, doc, err = offers_json(capsys, "--provider", "vast", "lambda")
    assert code == 0, err
    assert {o["provider"] for o in doc["offers"]} == {"lambda"} and len(doc["offers"]) > 0
    assert doc["errors"] == [{"provider": "vast", "message": "unexpected answer: nested too deep"}]
    assert "Traceback" not in err and "RecursionError" not in err
    assert main(["offers", "--all", "--provider", "vast", "lambda"]) == 0  # the table, with the error line
    out = capsys.readouterr().out
    assert "! vast: unexpected answer: nested too deep" in out and "lambda" in out


def test_deep_json_in_an_error_answer_is_an_error_line_too(served, capsys, monkeypatch):
    from services.offers._http import RetryPolicy

    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt: 0.0)
    routes, _ = served
    routes["/vast"] = (400, DEEP_LIST)
    routes["/prime"] = (503, DEEP_OBJECT)  # retried, then given up
    code, doc, err = offers_json(capsys, "--provider", "vast", "primeintellect", "lambda")
    assert code == 0, err
    messages = {e["provider"]: e["message"] for e in doc["errors"]}
    assert set(messages) == {"vast", "primeintellect"} and messages["vast"].startswith("HTTP 400"), messages
    assert messages["primeintellect"].startswith("HTTP 503"), messages
    assert all(len(m) < 300 for m in messages.values())


def test_brackets_inside_strings_are_not_nesting(served, capsys):
    routes, _ = served
    doc = fixture("vast-bundles-ondemand.json")
    doc["offers"][0]["gpu_name"] = "H100 " + "[{" * 50_000  # a silly name, not a deep document
    routes["/vast"] = (200, doc)
    code, out, err = offers_json(capsys, "--provider", "vast")
    assert code == 0 and out["errors"] == [] and len(out["offers"]) == len(doc["offers"]), err


def test_a_30_mb_answer_is_refused_while_the_other_lists(served, capsys):
    routes, _ = served
    padding = b"x" * (30 * 1024 * 1024)
    routes["/vast"] = (200, b'{"offers": [], "padding": "' + padding + b'"}')
    code, doc, err = offers_json(capsys, "--provider", "vast", "lambda")
    assert code == 0, err
    assert {o["provider"] for o in doc["offers"]} == {"lambda"}
    assert doc["errors"] == [{"provider": "vast", "message": "unexpected answer: over 20 MB"}]


@contextmanager
def endless_body(total: int) -> Iterator[tuple[str, dict]]:
    """An HTTP server that streams ``total`` bytes of a JSON string with no Content-Length (the body ends when
    the connection does) and counts what it managed to send before the client hung up."""
    sent = {"bytes": 0, "done": threading.Event()}
    srv = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = srv.accept()
        try:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                b'{"offers": [], "padding": "'
            )
            chunk = b"y" * (1024 * 1024)
            while sent["bytes"] < total:
                conn.sendall(chunk)
                sent["bytes"] += len(chunk)
        except OSError:
            pass  # the client hung up: the point
        finally:
            conn.close()
            sent["done"].set()

    threading.Thread(target=run, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", sent
    finally:
        srv.close()


def test_a_body_without_length_is_read_only_up_to_the_cap(served, capsys, monkeypatch):
    total = 200 * 1024 * 1024
    with endless_body(total) as (url, sent):
        monkeypatch.setenv("PRIME_TRAIN_TUI_VAST_URL", url)
        code, doc, err = offers_json(capsys, "--provider", "vast", "lambda")
        assert sent["done"].wait(10)
    assert code == 0, err
    assert doc["errors"] == [{"provider": "vast", "message": "unexpected answer: over 20 MB"}]
    assert {o["provider"] for o in doc["offers"]} == {"lambda"}
    assert sent["bytes"] < 60 * 1024 * 1024, "the client stopped reading at the cap, not at the end"


async def test_the_offers_pane_shows_the_error_line_and_the_app_runs_on(served, tmp_path):
    from textual.widgets import Label

    from app.tui import PrimeTrainApp
    from tests.app.helpers import wait_for

    routes, _ = served
    routes["/vast"] = (200, DEEP_LIST)
    app = PrimeTrainApp([], pods_path=tmp_path / "pods.toml")
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        pane = app.offers_pane
        await wait_for(pilot, lambda: app.tabs.active == "offers")
        pane.action_refresh_offers()
        status = pane.query_one("#of-status", Label)
        await wait_for(pilot, lambda: "nested too deep" in str(status.render()))
        assert app.is_running and app.return_code is None
        assert "vast: unexpected answer: nested too deep" in str(status.render())
        assert {o.provider for o in pane.result.offers} == {"primeintellect", "lambda", "runpod"}


# ------------------------------------------------------------------ item 10: wrongly-shaped answers
def _vast_offer(**kw) -> dict:
    return {**fixture("vast-bundles-ondemand.json")["offers"][0], **kw}


def _prime_item(**kw) -> dict:
    return {**fixture("primeintellect-availability-gpus.json")["items"][0], **kw}


def _lambda_type(**kw) -> dict:
    key, item = next(iter(fixture("lambda-instance-types.json")["data"].items()))
    return {key: {**item, "instance_type": {**item["instance_type"], **kw}}}


def _runpod_type(**kw) -> dict:
    return {**fixture("runpod-graphql-gpuTypes.json")["data"]["gpuTypes"][0], **kw}


SHAPES = {
    "vast": (
        vast.parse,
        [
            ([fixture("vast-bundles-ondemand.json")], "a JSON list, not an object"),
            ({"results": []}, "no offers list"),
            ({"offers": {"0": _vast_offer()}}, "offers is an object, not a list"),
            ({"offers": [[1, 2], [3]]}, "an offer is a list"),
            ({"offers": [_vast_offer(num_gpus="eight", gpu_ram="lots")]}, "num_gpus"),
            ({"offers": [_vast_offer(dph_total="cheap")]}, "price"),
            ({"offers": [{"id": 1}]}, "num_gpus"),
        ],
    ),
    "primeintellect": (
        primeintellect.parse,
        [
            ("[]", "a JSON string, not an object"),
            ({"items": "none"}, "items is a string, not a list"),
            ({"detail": "Not authenticated"}, "no items list"),
            ({"items": [[_prime_item()]]}, "an offer is a list"),
            ({"items": [_prime_item(gpuCount="eight")]}, "gpuCount"),
            ({"items": [_prime_item(prices={"onDemand": "abc", "currency": "USD"})]}, "price"),
            ({"items": [_prime_item(gpuType=None)]}, "gpuType"),
        ],
    ),
    "lambda": (
        lambda_.parse,
        [
            ([], "a JSON list, not an object"),
            ({"data": []}, "data is a list, not an object"),
            ({"error": {"code": "x"}}, "no data object"),
            ({"data": {"gpu_1x_h100": ["not", "an", "object"]}}, "an offer is a list"),
            ({"data": _lambda_type(price_cents_per_hour="abc")}, "price"),
            ({"data": _lambda_type(specs={"gpus": "one"})}, "gpus"),
        ],
    ),
    "runpod": (
        runpod.parse,
        [
            ({"data": {"gpuTypes": [[1], "x"]}}, "an offer is a list"),
            ({"data": {"gpuTypes": [_runpod_type(memoryInGb="lots")]}}, "memoryInGb"),
            (
                {
                    "data": {
                        "gpuTypes": [
                            _runpod_type(
                                securePrice="abc", communityPrice="abc", secureSpotPrice=None, communitySpotPrice=None
                            )
                        ]
                    }
                },
                "price",
            ),
        ],
    ),
}


@pytest.mark.parametrize(
    "provider,payload,what", [(p, payload, what) for p, (_, cases) in SHAPES.items() for payload, what in cases]
)
def test_a_wrongly_shaped_answer_is_an_unexpected_answer_naming_the_provider(provider, payload, what):
    parse = SHAPES[provider][0]
    with pytest.raises(ProviderFailure) as err:
        parse(payload)
    message = str(err.value)
    assert message.startswith(f"unexpected answer from {provider}: "), message
    assert what in message and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize(
    "provider,payload",
    [
        ("vast", {"offers": []}),
        ("primeintellect", {"items": [], "totalCount": 0}),
        ("lambda", {"data": {}}),
        ("runpod", {"data": {"gpuTypes": []}}),
    ],
)
def test_an_empty_listing_is_no_error(provider, payload):
    assert SHAPES[provider][0](payload) == []


LAMBDA_KEY = next(iter(fixture("lambda-instance-types.json")["data"]))
IMPOSSIBLE = [1e308, float("nan"), float("inf"), -2.5, 5000.0, 1e-300, 0.0009]  # $/hr for one GPU


def _one_good_one_priced(provider: str, price: float) -> tuple:
    """(parse, payload) with one offer at ``price`` $/GPU-hr and the fixture's first offer as it is."""
    if provider == "vast":
        return vast.parse, {"offers": [_vast_offer(), _vast_offer(id=2, num_gpus=1, dph_total=price)]}
    if provider == "primeintellect":
        bad = _prime_item(gpuCount=1, cloudId="bad", prices={"onDemand": price, "currency": "USD"})
        return primeintellect.parse, {"items": [_prime_item(), bad]}
    if provider == "lambda":
        good = fixture("lambda-instance-types.json")["data"][LAMBDA_KEY]
        bad = {
            "instance_type": {
                **good["instance_type"],
                "name": "gpu_1x_bad",
                "specs": {"gpus": 1},
                "price_cents_per_hour": price * 100,
            },
            "regions_with_capacity_available": [],
        }
        return lambda_.parse, {"data": {LAMBDA_KEY: good, "gpu_1x_bad": bad}}
    bad = _runpod_type(
        id="BAD GPU 80GB",
        maxGpuCount=1,
        securePrice=price,
        communityPrice=None,
        secureSpotPrice=None,
        communitySpotPrice=None,
    )
    return runpod.parse, {"data": {"gpuTypes": [_runpod_type(), bad]}}


@pytest.mark.parametrize(
    "price", IMPOSSIBLE, ids=["1e308", "nan", "inf", "negative", "5000", "1e-300", "under-a-tenth-of-a-cent"]
)
@pytest.mark.parametrize("provider", ["vast", "primeintellect", "lambda", "runpod"])
def test_an_impossible_price_skips_that_offer_and_is_counted(provider, price):
    parse, payload = _one_good_one_priced(provider, price)
    offers = parse(json.loads(json.dumps(payload)))
    listed = next(v for v in payload.values())
    good_only = parse(
        {
            **payload,
            **{
                k: (
                    {LAMBDA_KEY: v[LAMBDA_KEY]}
                    if provider == "lambda"
                    else {"gpuTypes": v["gpuTypes"][:1]}
                    if provider == "runpod"
                    else v[:1]
                )
                for k, v in payload.items()
            },
        }
    )
    assert listed and offers == good_only and len(offers) > 0
    assert all(0.001 * o.gpu_count <= o.price_hr <= 1000 * o.gpu_count for o in offers)
    assert offers.skipped == 1 and "price" in offers.why, (offers.skipped, offers.why)


def test_only_impossible_prices_is_an_unexpected_answer():
    with pytest.raises(ProviderFailure, match=r"^unexpected answer from vast: .*price"):
        vast.parse({"offers": [_vast_offer(dph_total=1e308), _vast_offer(id=3, dph_total=-1)]})


def test_offers_json_is_valid_json_and_says_what_was_skipped(served, capsys):
    routes, _ = served
    doc = fixture("vast-bundles-ondemand.json")
    doc["offers"][0]["dph_total"] = 1e308
    doc["offers"][1]["dph_total"] = float("nan")  # json.dumps writes NaN: what a sloppy server sends
    routes["/vast"] = (200, json.dumps(doc).encode())
    code, out, err = offers_json(capsys, "--provider", "vast", "lambda")  # strict: NaN/Infinity would raise
    assert code == 0, err
    vast_ids = {o["id"] for o in out["offers"] if o["provider"] == "vast"}
    assert len(vast_ids) == len(doc["offers"]) - 2 and str(doc["offers"][0]["id"]) not in vast_ids
    assert out["skipped"] == [{"provider": "vast", "count": 2, "why": out["skipped"][0]["why"]}]
    assert "price" in out["skipped"][0]["why"]
    assert "vast: 2 offers skipped" in err
    for o in out["offers"]:
        assert all(isinstance(o[k], (int, float)) for k in ("price_hr", "est_hours", "est_cost"))


def test_a_price_near_zero_does_not_rank_first(served, capsys):
    # a provider listing a box at 1e-300 $/hr: it came first in the ranking, shown as $0.00
    routes, _ = served
    doc = fixture("vast-bundles-ondemand.json")
    doc["offers"][0]["dph_total"] = 1e-300
    routes["/vast"] = (200, json.dumps(doc).encode())
    code, out, err = offers_json(capsys, "--provider", "vast")
    assert code == 0, err
    assert str(doc["offers"][0]["id"]) not in {o["id"] for o in out["offers"]}
    assert min(o["price_hr"] for o in out["offers"]) >= 0.001
    assert out["skipped"] == [{"provider": "vast", "count": 1, "why": out["skipped"][0]["why"]}]
    assert "price" in out["skipped"][0]["why"] and "vast: 1 offer skipped" in err


def test_a_wrongly_shaped_answer_reaches_the_cli_as_that_providers_error(served, capsys):
    routes, _ = served
    routes["/vast"] = (200, [fixture("vast-bundles-ondemand.json")])
    routes["/lambda"] = (200, {"data": [1, 2]})
    code, out, err = offers_json(capsys, "--provider", "vast", "lambda", "primeintellect")
    assert code == 0, err
    assert out["errors"] == [
        {"provider": "vast", "message": "unexpected answer: a JSON list, not an object"},
        {"provider": "lambda", "message": "unexpected answer: data is a list, not an object"},
    ]
    assert {o["provider"] for o in out["offers"]} == {"primeintellect"}
