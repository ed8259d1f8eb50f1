"""RunPod as the fourth offers provider: its GraphQL gpuTypes answer (recorded fixtures served through
httpx.MockTransport) normalised to offers, its errors as the provider's one line while the others still
show, its keys and URLs, and renting refused before any request."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import httpx
import pytest

from services.offers import runpod
from services.offers._http import RetryPolicy
from services.offers.fetch_all import fetch_all
from services.offers.keys import find_keys, find_urls, how_to_set
from services.offers.launch import Providers, launch_offer, not_rentable, plan_launch
from services.offers.models import Offer, ProviderFailure, error_message
from services.offers.ranking import RunSpec, rank
from services.offers.rentals import AuditLog
from services.offers.settings import OfferSettings
from tests.services.offers.test_fetch import FAST, KEYS, OK, URLS, body, load, serve

GOOD = "runpod-graphql-gpuTypes.json"
H100 = "NVIDIA H100 80GB HBM3"


# ------------------------------------------------------------------ normalisation
def test_every_field_of_one_offer_and_the_per_gpu_price_times_the_count():
    offers = runpod.parse(load(GOOD))
    by_id = {o.id: o for o in offers}
    assert len(by_id) == len(offers)  # ids are unique per (type, tier, spot, count)
    one = by_id[f"{H100}|secure|on-demand|8"]
    assert (one, dict(one.params)) == (
        Offer(
            "runpod",
            f"{H100}|secure|on-demand|8",
            "H100",
            "H100 SXM",
            8,
            80.0,
            23.92,
            spot=False,
            region="",
            available=True,
            availability="Secure Cloud",
            reliability=None,
            disk_gb=None,
            host="secure",
        ),
        {"gpu_type_id": H100, "cloud": "SECURE", "per_gpu_price": 2.99},
    )
    # each (tier, spot) takes its own per-GPU field, × the GPU count
    for tier, kind, per_gpu in (
        ("secure", "on-demand", 2.99),
        ("community", "on-demand", 2.49),
        ("secure", "spot", 1.75),
        ("community", "spot", 1.49),
    ):
        for n in (1, 2, 4, 8):
            o = by_id[f"{H100}|{tier}|{kind}|{n}"]
            assert (o.price_hr, o.gpu_count, o.spot, o.host, o.vram_gb) == (
                pytest.approx(per_gpu * n),
                n,
                kind == "spot",
                tier,
                80.0,
            )
    assert by_id[f"{H100}|community|spot|4"].availability == "Community Cloud"


def test_types_tiers_and_counts_from_the_fixture():
    offers = runpod.parse(load(GOOD))
    assert {(o.gpu_name, o.gpu_type) for o in offers} == {
        ("H100 SXM", "H100"),
        ("H100 PCIe", "H100-PCIE"),
        ("A100 SXM", "A100"),
        ("L40S", "L40S"),
        ("RTX 4090", "RTX4090"),
        ("H200 SXM", "H200"),
    }
    assert {o.gpu_count for o in offers} == {1, 2, 4, 8}
    # A100 and H200 have no community price: secure offers only, on-demand and spot
    a100 = {(o.host, o.spot) for o in offers if o.gpu_type == "A100"}
    assert a100 == {("secure", False), ("secure", True)}
    assert len(offers) == 4 * 16 + 2 * 8  # 4 types × 2 tiers × 2 kinds × 4 counts + 2 secure-only types
    assert {o.vram_gb for o in offers if o.gpu_type == "H200"} == {141.0}
    assert all(o.price_hr > 0 and o.region == "" for o in offers)


def test_counts_follow_max_gpu_count_and_garbage_means_one():
    assert runpod.counts(8) == runpod.counts(16) == (1, 2, 4, 8)
    assert runpod.counts(3) == (1, 2) and runpod.counts(4.0) == (1, 2, 4)
    for bad in (None, "many", 0, -2, True, float("nan")):
        assert runpod.counts(bad) == (1,), bad
    doc = load(GOOD)
    doc["data"]["gpuTypes"] = [dict(doc["data"]["gpuTypes"][0], maxGpuCount=2)]
    assert {o.gpu_count for o in runpod.parse(doc)} == {1, 2}


def test_null_zero_and_missing_prices_are_skipped_never_free():
    offers = runpod.parse(load("runpod-edge-null-prices.json"))
    kinds = {(o.gpu_type, o.host, o.spot) for o in offers}
    # H100: securePrice null and secureSpotPrice 0 → only community; RTX 4090: communityPrice 0 and no
    # communitySpotPrice key → only secure; a null lowestPrice changes nothing
    assert kinds == {
        ("H100", "community", False),
        ("H100", "community", True),
        ("RTX4090", "secure", False),
        ("RTX4090", "secure", True),
    }
    assert len(offers) == 16 and all(o.price_hr > 0 for o in offers)


def test_tier_flags_decide_availability_and_the_ranking_drops_unavailable_tiers():
    doc = load(GOOD)
    h100 = doc["data"]["gpuTypes"][0]
    del h100["secureCloud"]  # missing: not taken as "no stock"
    h100["communityCloud"] = False
    doc["data"]["gpuTypes"] = [h100, "garbage", {"id": "no memory", "memoryInGb": None, "securePrice": 1}]
    offers = runpod.parse(doc)
    assert {o.host for o in offers if o.available} == {"secure"}
    gone = [o for o in offers if not o.available]
    assert gone and {o.host for o in gone} == {"community"}
    assert all(o.availability == "not in Community Cloud" for o in gone)
    ranked = rank(offers, RunSpec(model="Qwen/Qwen3-0.6B"), include_misfits=True)
    assert ranked and all(r.offer.host == "secure" for r in ranked)


def test_spot_is_not_assumed_cheaper():
    doc = load(GOOD)
    doc["data"]["gpuTypes"][0]["secureSpotPrice"] = 3.5  # above the on-demand 2.99: listed as RunPod says
    spot = next(o for o in runpod.parse(doc) if o.id == f"{H100}|secure|spot|2")
    assert spot.spot and spot.price_hr == pytest.approx(7.0)


@pytest.mark.parametrize(
    "payload,expect",
    [
        (load("runpod-edge-graphql-errors.json"), "GraphQL error: Something went wrong (synthetic)"),
        ({"errors": ["plain text\nsecond line"]}, "GraphQL error: plain text"),
        ({"errors": [{}]}, "GraphQL error: no message"),
        ({"data": None}, "unexpected answer from runpod: no data.gpuTypes"),
        ({"data": {"gpuTypes": {"not": "a list"}}}, "unexpected answer from runpod: no data.gpuTypes"),
        ([1, 2], "unexpected answer from runpod: a JSON list, not an object"),
    ],
)
def test_graphql_errors_and_odd_answers_are_one_line_errors(payload, expect):
    with pytest.raises(ProviderFailure) as err:
        runpod.parse(payload)
    assert str(err.value) == expect and "\n" not in str(err.value)
    assert runpod.parse({"data": {"gpuTypes": []}}) == []  # a real empty listing is no error


# ------------------------------------------------------------------ fetching
def _routes(runpod_answers: list[tuple[int, bytes]]) -> dict:
    return {k: list(v) for k, v in OK.items()} | {"runpod.test": runpod_answers}


async def test_the_request_and_spot_kept_apart():
    seen: list[httpx.Request] = []
    async with serve({"runpod.test": [(200, body(GOOD))]}, seen) as client:
        on_demand = await runpod.fetch(client, "rk-secret", base_url=URLS["runpod"], spot=False, retry=FAST)
        spot = await runpod.fetch(client, "rk-secret", base_url=URLS["runpod"], spot=True, retry=FAST)
    assert on_demand and not any(o.spot for o in on_demand) and spot and all(o.spot for o in spot)
    assert len(on_demand) + len(spot) == len(runpod.parse(load(GOOD)))
    req = seen[0]
    assert (req.method, str(req.url)) == ("POST", URLS["runpod"])
    assert req.headers["authorization"] == "Bearer rk-secret"
    query = json.loads(req.content)["query"]
    fields = set(query.replace("{", " ").replace("}", " ").split()) - {"query", "GpuTypes", "gpuTypes"}
    documented = {
        "id",
        "displayName",
        "manufacturer",
        "memoryInGb",
        "cudaCores",
        "maxGpuCount",
        "secureCloud",
        "communityCloud",
        "securePrice",
        "communityPrice",
        "secureSpotPrice",
        "communitySpotPrice",
        "oneWeekPrice",
        "oneMonthPrice",
        "threeMonthPrice",
    }
    assert fields and fields <= documented, fields - documented  # only fields RunPod documents


async def test_fetch_all_lists_runpod_with_the_others():
    async with serve(_routes([(200, body(GOOD))])) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=FAST)
    assert res.errors == ()
    assert {o.provider for o in res.offers} == {"primeintellect", "vast", "lambda", "runpod"}
    assert not any(o.spot for o in res.offers if o.provider == "runpod")


@pytest.mark.parametrize(
    "status,content,expect,tries",
    [
        (200, body("runpod-edge-graphql-errors.json"), "GraphQL error: Something went wrong (synthetic)", 1),
        (401, b'{"error": "Unauthorized"}', "RUNPOD key rejected: HTTP 401: Unauthorized — check the API key", 1),
        (401, b"", "RUNPOD key rejected: HTTP 401 — check the API key", 1),
        (
            400,
            b'{"errors": [{"message": "Cannot query field \\"x\\" on type \\"GpuType\\"."}]}',
            'HTTP 400: Cannot query field "x" on type "GpuType".',
            1,
        ),
        (502, b"<html>bad gateway</html>", "HTTP 502: <html>bad gateway</html> (after 3 tries)", 3),
        (200, b"<html>oops", "HTTP 200: invalid JSON in the answer", 1),
    ],
)
async def test_runpod_failing_is_its_error_line_while_the_others_show(status, content, expect, tries):
    seen: list[httpx.Request] = []
    async with serve(_routes([(status, content)]), seen) as client:
        res = await fetch_all(keys=KEYS, urls=URLS, client=client, retry=FAST)
    assert [(e.provider, e.message) for e in res.errors] == [("runpod", expect)]
    assert {o.provider for o in res.offers} == {"primeintellect", "vast", "lambda"}
    assert sum(r.url.host == "runpod.test" for r in seen) == tries  # a 401 or a GraphQL error: never retried


async def test_a_5xx_then_the_answer_is_retried():
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    async with serve({"runpod.test": [(503, b"busy"), (200, body(GOOD))]}) as client:
        offers = await runpod.fetch(
            client, "rk", base_url=URLS["runpod"], retry=RetryPolicy(attempts=3, base=1.0, sleep=sleep)
        )
    assert len(offers) == 80 and len(waits) == 1


def test_error_message_reads_graphql_errors_and_keeps_the_documented_shape():
    assert (
        error_message(400, '{"errors": [{"message": "bad query"}, {"message": "and more"}]}')
        == "HTTP 400: bad query; and more"
    )
    assert (
        error_message(422, '{"errors": [{"param": "gpu_type", "details": "unknown"}]}') == "HTTP 422: gpu_type: unknown"
    )


# ------------------------------------------------------------------ keys and URLs
def test_keys_and_urls_for_runpod(tmp_path: Path):
    from app.settings import load_offer_settings

    (tmp_path / ".runpod").mkdir()  # RunPod's CLI file: its format is not known, never read
    (tmp_path / ".runpod" / "config.toml").write_text('[default]\napikey = "rp-file-key-0000"\n')
    assert "runpod" not in find_keys(env={}, home=tmp_path, settings=None)
    keys = find_keys(
        env={"RUNPOD_API_KEY": " rp-env-key-123456 "},
        home=tmp_path,
        settings=OfferSettings.from_table({"keys": {"runpod": "rp-settings-key-99"}}),
    )
    assert (keys["runpod"].key, keys["runpod"].source) == ("rp-env-key-123456", "RUNPOD_API_KEY")
    assert "rp-env-key-123456" not in repr(keys) and "rp-env-key-123456" not in keys["runpod"].masked
    table = OfferSettings.from_table({"keys": {"runpod": "rp-settings-key-99"}})
    keys = find_keys(env={}, home=tmp_path, settings=table)
    assert (keys["runpod"].key, keys["runpod"].source) == ("rp-settings-key-99", "settings.toml")
    assert "RUNPOD_API_KEY" in how_to_set("runpod") and "keys.runpod" in how_to_set("runpod")

    default = find_urls(env={}, settings=OfferSettings())["runpod"]
    assert default == "https://api.runpod.io/graphql" == runpod.DEFAULT_URL
    settings = tmp_path / "settings.toml"
    settings.write_text('[offers]\nrunpod_url = "http://proxy/runpod/"\n')
    table = load_offer_settings(settings)
    assert find_urls(env={}, settings=table)["runpod"] == "http://proxy/runpod"
    assert (
        find_urls(env={"PRIME_TRAIN_TUI_RUNPOD_URL": "http://env/graphql"}, settings=table)["runpod"]
        == "http://env/graphql"
    )


# ------------------------------------------------------------------ renting refused
async def test_renting_a_runpod_offer_is_refused_before_any_request(tmp_path: Path):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "should-never-happen"})

    offer = next(o for o in runpod.parse(load(GOOD)) if o.id == f"{H100}|secure|on-demand|2")
    why = not_rentable("runpod")
    assert why == (
        "renting RunPod pods from here is not supported yet: rent it in RunPod's console, then add the pod with `a`"
    )
    assert not_rentable("primeintellect") is None and not_rentable("vast") is None
    audit = AuditLog(tmp_path / "audit.jsonl")
    plan = plan_launch(offer, 2.0, now=1_800_000_000.0)
    async with Providers(
        {**KEYS, "runpod": "rk-secret"}, URLS, client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    ) as providers:
        events = [ev async for ev in launch_offer(providers, plan, audit)]
        with pytest.raises(ProviderFailure, match="not supported yet"):
            await providers.create(offer, name="x", max_price=10.0)
        for call in (
            providers.status("runpod", "p1"),
            providers.terminate("runpod", "p1"),
            providers.find("runpod", "x"),
            providers.pods("runpod"),
        ):
            with pytest.raises(ProviderFailure, match="not supported yet"):
                await call
    assert [(e.kind, e.message) for e in events] == [("failed", why)]
    assert seen == [] and audit.records() == []  # no request, nothing recorded as spent


def test_cache_keeps_the_tier(tmp_path: Path):
    from services.offers import cache
    from services.offers.models import FetchResult

    offers = tuple(runpod.parse(load(GOOD))[:3])
    cache.save(tmp_path, False, FetchResult(offers), now=10.0)
    got = cache.load(tmp_path, False, now=20.0)
    assert got is not None and got[0].offers == offers
    assert [(o.host, dict(o.params)) for o in got[0].offers] == [(o.host, dict(o.params)) for o in offers]


def test_parse_never_mutates_its_input():
    """The parser never mutates its input (the pane re-ranks the same answer)."""
    doc = load(GOOD)
    before = copy.deepcopy(doc)
    runpod.parse(doc)
    assert doc == before
