"""services/offers against the recorded fixtures, served through httpx.MockTransport (never the network)."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest

from services.offers import lambda_, primeintellect, vast
from services.offers._http import RetryPolicy
from services.offers.fetch_all import fetch_all
from services.offers.models import Offer
from services.offers.ranking import RunSpec, best, rank
from tests.shared_data import OFFER_FIXTURES

FIX = OFFER_FIXTURES
URLS = {
    "primeintellect": "http://pi.test/api/v1",
    "vast": "http://vast.test/api/v0",
    "lambda": "http://lambda.test/api/v1",
    "runpod": "http://runpod.test/graphql",
}
KEYS = {"primeintellect": "pk", "vast": "vk", "lambda": "lk", "runpod": "rk"}


async def _nosleep(_: float) -> None:
    return None


FAST = RetryPolicy(attempts=3, base=0.0, sleep=_nosleep)


def load(name: str):
    return json.loads((FIX / name).read_text())


def body(name: str) -> bytes:
    return (FIX / name).read_bytes()


def serve(routes: dict[str, list[tuple[int, bytes]]], seen: list | None = None) -> httpx.AsyncClient:
    """host → responses in order (the last repeats)."""

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        queue = routes[request.url.host]
        status, content = queue.pop(0) if len(queue) > 1 else queue[0]
        return httpx.Response(status, content=content)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


OK = {
    "pi.test": [(200, body("primeintellect-availability-gpus.json"))],
    "vast.test": [(200, body("vast-bundles-ondemand.json"))],
    "lambda.test": [(200, body("lambda-instance-types.json"))],
    "runpod.test": [(200, body("runpod-graphql-gpuTypes.json"))],
}


# ------------------------------------------------------------------ normalisation
def test_prime_parse_prices_spot_and_memory():
    offers = primeintellect.parse(load("primeintellect-availability-gpus.json"))
    h100x8 = [o for o in offers if o.gpu_type == "H100" and o.gpu_count == 8]
    assert sorted((o.spot, o.price_hr) for o in h100x8) == [(False, 17.92), (True, 9.6)]
    assert all(o.vram_gb == 80 for o in h100x8)
    community = next(o for o in offers if o.gpu_type == "RTX4090" and o.gpu_count == 1)
    assert community.price_hr == 0.39  # communityPrice for community_cloud
    assert next(o for o in offers if o.gpu_type == "H200" and o.gpu_count == 1).available is False


def test_every_field_of_one_offer_per_provider():
    """Every field, params included: the parsers build offers positionally on the refresh path."""
    prime = primeintellect.parse(load("primeintellect-availability-gpus.json"))[0]
    assert (prime, dict(prime.params)) == (
        Offer(
            "primeintellect",
            prime.id,
            "H100",
            "H100_80GB",
            8,
            80.0,
            17.92,
            spot=False,
            region="united_states",
            available=True,
            availability="Available",
            reliability=None,
            disk_gb=1000.0,
            host="primecompute",
        ),
        {
            "cloudId": "synthetic-h100-sxm5-8x",
            "socket": "SXM5",
            "dataCenter": "us-east-synth-1",
            "security": "secure_cloud",
            "provider": "primecompute",
            "country": "US",
        },
    )
    assert len(prime.id) == 8 and int(prime.id, 16) >= 0
    bid = vast.parse(load("vast-bundles-bid.json"), spot=True)[0]
    assert (bid, dict(bid.params)) == (
        Offer(
            "vast",
            "90000101",
            "H100",
            "H100 SXM",
            8,
            81559 / 1024,
            9.601042,
            spot=True,
            region="Texas, US",
            available=True,
            availability="99.8%",
            reliability=0.9975,
            disk_gb=500.0,
            host="",
        ),
        {"min_bid": 9.6, "machine_id": 41001},
    )
    lam = lambda_.parse(load("lambda-instance-types.json"))[0]
    assert (lam, dict(lam.params)) == (
        Offer(
            "lambda",
            "gpu_1x_h100_pcie",
            "H100",
            "H100 (80 GB PCIe)",
            1,
            80.0,
            2.49,
            spot=False,
            region="us-east-1",
            available=True,
            availability="Available",
            reliability=None,
            disk_gb=1024.0,
            host="",
        ),
        {"instance_type_name": "gpu_1x_h100_pcie"},
    )


def test_prime_gpu_memory_per_box_guard():
    assert primeintellect.per_gpu_memory("H100_80GB", 640, 8) == 80  # box total → per GPU
    assert primeintellect.per_gpu_memory("H100_80GB", 80, 8) == 80  # already per GPU
    assert primeintellect.per_gpu_memory("H200_141GB", 141, 16) == 141
    assert primeintellect.per_gpu_memory("MYSTERY", 1128, 8) == 141  # no nominal: too big for one GPU
    item = load("primeintellect-availability-gpus.json")["items"][0] | {"gpuMemory": 640}
    assert primeintellect.parse({"items": [item]})[0].vram_gb == 80


def test_prime_null_prices_skipped_never_free():
    offers = primeintellect.parse(load("primeintellect-edge-availability-null-prices.json"))
    # null onDemand, missing prices and the EUR offer are dropped; the USD A100 stays
    assert [(o.gpu_type, o.price_hr, o.availability) for o in offers] == [("A100", 1.29, "Available")]
    assert primeintellect.parse(load("primeintellect-edge-availability-empty.json")) == []
    assert len(primeintellect.parse(load("primeintellect-availability-legacy.json"))) > 0


def test_vast_units_mb_to_gib_and_prices():
    offers = vast.parse(load("vast-bundles-ondemand.json"))
    h100 = next(o for o in offers if o.gpu_name == "H100 SXM")
    assert h100.gpu_type == "H100" and h100.gpu_count == 8
    assert h100.vram_gb == pytest.approx(81559 / 1024)  # MB (MiB) per GPU → GiB
    assert h100.price_hr == pytest.approx(15.201042) and h100.id == "90000101" and h100.reliability == 0.9975
    assert next(o for o in offers if o.gpu_name == "H100 PCIE").gpu_type == "H100-PCIE"
    bids = vast.parse(load("vast-bundles-bid.json"), spot=True)
    assert all(o.spot for o in bids) and next(o for o in bids if o.id == "90000101").price_hr == pytest.approx(9.601042)
    edge = vast.parse(load("vast-edge-null-prices.json"))  # null dph_total+search dropped, rentable false dropped
    assert [(o.id, o.price_hr, o.reliability) for o in edge] == [("90000105", 0.340556, None)]  # search.totalHour
    assert vast.parse(load("vast-edge-empty-offers.json")) == []


def test_lambda_cents_and_regions():
    offers = lambda_.parse(load("lambda-instance-types.json"))
    h100 = [o for o in offers if o.id == "gpu_1x_h100_pcie"]
    assert {o.region for o in h100} == {"us-east-1", "us-west-1"} and all(o.price_hr == 2.49 for o in h100)
    assert all(o.vram_gb == 80 and not o.spot for o in h100)
    edge = lambda_.parse(load("lambda-edge-missing-price.json"))
    assert [(o.id, o.price_hr, o.vram_gb, o.available) for o in edge] == [("gpu_1x_a100_sxm4", 1.29, 40, False)]
    assert edge[0].gpu_type == "A100-40GB"
    assert lambda_.parse(load("lambda-edge-empty-data.json")) == []


# ------------------------------------------------------------------ ranking
def _offer(**kw) -> Offer:
    base = dict(provider="x", id="1", gpu_type="H100", gpu_name="H100", gpu_count=1, vram_gb=80, price_hr=2.0)
    return Offer(**(base | kw))


def test_ranking_is_by_cost_per_run_not_price_per_hour():
    run = RunSpec(model="Qwen/Qwen3-0.6B", steps=100, infer_gpus=0, gen_tokens_per_step=0)  # sft-like: 1 GPU
    cheap_slow = _offer(id="a100", gpu_type="A100", price_hr=1.0)  # 0.32× an H100
    fast = _offer(id="h100", price_hr=2.0)
    ranked = rank([cheap_slow, fast], run)
    assert [r.offer.id for r in ranked] == ["h100", "a100"]
    assert ranked[1].est_hours == pytest.approx(ranked[0].est_hours / 0.32)
    assert ranked[0].est_cost == pytest.approx(ranked[0].est_hours * 2.0)
    eight = rank([_offer(gpu_count=8)], replace(run, train_gpus=8))[0]  # training spread over 8
    assert eight.est_hours == pytest.approx(ranked[0].est_hours / (8 * 0.9**3))
    idle = rank([_offer(gpu_count=8)], run)[0]  # a 1-GPU run on an 8-GPU box: 7 idle GPUs, no faster
    assert idle.est_hours == pytest.approx(ranked[0].est_hours)
    spot = rank([_offer(spot=True)], run, spot_rates={_offer().provider: 0.1})[0]  # preemptions priced in
    h = ranked[0].est_hours
    lost = min(run.ckpt_interval, run.steps) / 2 * h / run.steps + 0.25 + run.ckpt_bytes() / 100e6 / 3600
    assert spot.base_hours == pytest.approx(h) and spot.est_hours == pytest.approx(h + 0.1 * h * lost)


def test_fit_filters_and_misfits():
    run = RunSpec(model="Qwen/Qwen3-8B", infer_gpus=0)
    small, big = _offer(id="4090", gpu_type="RTX4090", vram_gb=24, price_hr=0.3), _offer(id="h100")
    assert [r.offer.id for r in rank([small, big], run)] == ["h100"]
    both = rank([small, big], run, include_misfits=True)
    assert [(r.offer.id, r.fits) for r in both] == [("h100", True), ("4090", False)]
    assert "needs" in both[1].reason and "24 GB" in both[1].reason
    assert rank([small, big], run, max_price=1.0) == []
    assert rank([big, _offer(id="s", spot=True)], run, spot=True)[0].offer.id == "s"
    assert rank([big, _offer(id="g8", gpu_count=8)], run, gpus=8)[0].offer.id == "g8"
    assert rank([big, _offer(provider="y", id="y")], run, providers=["y"])[0].offer.id == "y"
    assert rank([_offer(available=False)], run) == []


# ------------------------------------------------------------------ fetching
async def test_fetch_all_three_providers_ranked():
    async with serve(dict(OK)) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=FAST)
    assert res.errors == ()
    assert {o.provider for o in res.offers} == {"primeintellect", "vast", "lambda", "runpod"}
    assert not any(o.spot for o in res.offers)
    ranked = rank(res.offers, RunSpec(model="Qwen/Qwen3-8B"))
    costs = [r.est_cost for r in ranked]
    assert costs == sorted(costs) and best(ranked) is ranked[0]


async def test_requests_carry_key_and_spot_search():
    seen: list[httpx.Request] = []
    routes = {
        "pi.test": [(200, body("primeintellect-availability-gpus.json"))],
        "vast.test": [(200, body("vast-bundles-bid.json"))],
        "lambda.test": [(200, b"{}")],
        "runpod.test": [(200, body("runpod-graphql-gpuTypes.json"))],
    }
    async with serve(routes, seen) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=FAST, spot=True)
    assert all(o.spot for o in res.offers) and {o.provider for o in res.offers} == {"primeintellect", "vast", "runpod"}
    vreq = next(r for r in seen if r.url.host == "vast.test")
    assert vreq.method == "POST" and vreq.url.path == "/api/v0/bundles/"
    assert json.loads(vreq.content)["type"] == "bid" and vreq.headers["authorization"] == "Bearer vk"
    preq = next(r for r in seen if r.url.host == "pi.test")
    assert preq.url.path == "/api/v1/availability/gpus" and preq.url.params["page"] == "1"
    assert not any(r.url.host == "lambda.test" for r in seen)  # Lambda has no spot


@pytest.mark.parametrize(
    "host,status,fixture,expect",
    [
        ("pi.test", 401, "primeintellect-edge-http401.json", "HTTP 401: Not authenticated — check the API key"),
        ("pi.test", 402, "primeintellect-edge-http402.json", "HTTP 402: Insufficient balance — add funds"),
        ("pi.test", 422, "primeintellect-edge-http422-detail-list.json", "pod.socket: Field required"),
        ("pi.test", 422, "primeintellect-edge-http422-errors.json", "gpu_type: Input should be"),
        ("vast.test", 404, "vast-edge-http404-invalid-user-key.json", "Invalid user key — check the API key"),
        ("vast.test", 400, "vast-edge-http400-invalid-request.json", "HTTP 400: Invalid json body"),
        ("lambda.test", 401, "lambda-edge-http401-invalid-api-key.json", "API key was invalid"),
        (
            "lambda.test",
            500,
            "lambda-edge-provider-unavailable.json",
            "Provider unavailable (Try again shortly) (after 3 tries)",
        ),
        ("vast.test", 429, "vast-edge-http429-plaintext.txt", "HTTP 429: API requests too frequent (after 3 tries)"),
    ],
)
async def test_one_provider_failing_others_still_show(host, status, fixture, expect):
    routes = {k: list(v) for k, v in OK.items()} | {host: [(status, body(fixture))]}
    async with serve(routes) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=FAST)
    name = {"pi.test": "primeintellect", "vast.test": "vast", "lambda.test": "lambda"}[host]
    assert [e.provider for e in res.errors] == [name] and expect in res.errors[0].message
    assert {o.provider for o in res.offers} == {"primeintellect", "vast", "lambda", "runpod"} - {name}


async def test_429_plaintext_then_success_is_retried_with_backoff():
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    routes = {k: list(v) for k, v in OK.items()}
    routes["vast.test"] = [
        (429, body("vast-edge-http429-plaintext.txt")),
        (503, b"busy"),
        (200, body("vast-bundles-ondemand.json")),
    ]
    async with serve(routes) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=RetryPolicy(attempts=4, base=1.0, sleep=sleep))
    assert res.errors == () and sum(o.provider == "vast" for o in res.offers) == 7
    assert len(waits) == 2 and 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0  # exponential, jittered


async def test_invalid_json_missing_key_and_timeout():
    import asyncio

    async def slow(request: httpx.Request) -> httpx.Response:
        if request.url.host == "lambda.test":
            await asyncio.sleep(5)
        if request.url.host == "vast.test":
            return httpx.Response(200, content=b"<html>oops")
        return httpx.Response(200, content=body("primeintellect-availability-gpus.json"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(slow)) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=FAST, timeout=0.3)
        missing = await fetch_all(
            keys={"vast": "vk"}, urls=URLS, client=client, retry=FAST, providers=["primeintellect"]
        )
    errs = {e.provider: e.message for e in res.errors}
    assert errs == {
        "vast": "HTTP 200: invalid JSON in the answer",
        "lambda": "timed out after 0.3 s",
        "runpod": "unexpected answer: no data.gpuTypes",
    }  # served Prime's answer
    assert len(res.offers) == 8  # 10 Prime items, 2 of them spot
    assert missing.errors[0].message.startswith("no API key: set PRIME_API_KEY") and missing.offers == ()
    assert "prime login" in missing.errors[0].message  # and the provider's own CLI way


async def test_prime_pagination_stops_on_short_page():
    calls: list[httpx.Request] = []
    async with serve({"pi.test": [(200, body("primeintellect-edge-availability-null-prices.json"))]}, calls) as c:
        offers = await primeintellect.fetch(c, "pk", base_url=URLS["primeintellect"], retry=FAST)
    assert len(calls) == 1 and len(offers) == 1  # totalCount 37 overstates: no endless loop
