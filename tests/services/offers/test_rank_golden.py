"""Issue 17: normalising and ranking stay exactly what they were before they were made fast.

``golden_offers.json.gz`` was written by this module (``python -m tests.services.offers.test_rank_golden
--write``) from the code as it was before the speed-up (commit cbfc3d5; rewrite it only for a change of the
figures made on purpose): every normalised offer (each field, with its type) and every ranked row (fit,
reason, hours and $ to the last bit, the spot risk) for the recorded fixtures and for a large synthetic
listing with odd values mixed in (numbers as strings, nulls, negatives, NaN, another currency, missing
fields, odd regions). The tests compare row by row as JSON text, so 80 and 80.0 or True and 1 differ.

Besides the golden file, :func:`test_rank_is_the_plain_computation_at_10000` ranks the benchmark's 10,000
offers through the plain per-offer computation of ``test_rank_cache`` and compares every row."""

from __future__ import annotations

import copy
import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from services.offers import lambda_, primeintellect, runpod, vast
from services.offers.models import UnexpectedAnswer
from services.offers.ranking import Observed, RunSpec, rank
from tests.shared_data import OFFER_FIXTURES as FIX

GOLDEN = Path(__file__).with_name("golden_offers.json.gz")

PARSERS = {
    "prime": primeintellect.parse,
    "vast": vast.parse,
    "vast-bid": lambda p: vast.parse(p, spot=True),
    "lambda": lambda_.parse,
    "runpod": runpod.parse,
}
FIXTURES = (
    ("prime", "primeintellect-availability-gpus.json"),
    ("prime", "primeintellect-availability-legacy.json"),
    ("prime", "primeintellect-edge-availability-null-prices.json"),
    ("prime", "primeintellect-edge-availability-empty.json"),
    ("vast", "vast-bundles-ondemand.json"),
    ("vast-bid", "vast-bundles-bid.json"),
    ("vast", "vast-edge-null-prices.json"),
    ("vast", "vast-edge-empty-offers.json"),
    ("lambda", "lambda-instance-types.json"),
    ("lambda", "lambda-edge-missing-price.json"),
    ("lambda", "lambda-edge-empty-data.json"),
    ("runpod", "runpod-graphql-gpuTypes.json"),
    ("runpod", "runpod-edge-null-prices.json"),
)

RUNS = (
    RunSpec(model="Qwen/Qwen3-8B"),
    RunSpec(model="Qwen/Qwen3-32B", train_gpus=2, infer_gpus=2, infer_tp=2),
    RunSpec(model="Qwen/Qwen3-0.6B", infer_gpus=0, ckpt_interval=None),
    RunSpec(model="Qwen/Qwen3-30B-A3B", train_gpus=4, infer_gpus=4, infer_tp=4, infer_bytes_per_param=1.0),
)
FILTERS = (
    {"include_misfits": True, "include_unavailable": True},
    {},
    {"max_price": 10.0, "gpus": 8},
    {"spot": True, "include_misfits": True},
    {"providers": ["vast", "lambda"], "max_price": 3.0},
)
OBSERVED = (Observed("Qwen/Qwen3-8B", "H100", 2, 120.0, 256 * 2048),)

# odd values a provider may send in place of a number or a string
ODD = ("12", "1.5", "", None, -1, 0, 0.0, True, False, "nan", "inf", 1e308, [], {}, "abc", 10**400, 2.5)


def synthetic(seed: int = 17, per: int = 900) -> dict[str, Any]:
    """Each provider's recorded payload grown to ``per`` offers, varied like tests/benchmarks/offers_rank.py, with
    about one offer in six given an odd value in one of the fields its parser reads."""
    rnd = random.Random(seed)

    def odd(item: dict[str, Any], keys: tuple[str, ...]) -> None:
        if rnd.random() < 1 / 6:
            key = rnd.choice(keys)
            if rnd.random() < 0.2:
                item.pop(key, None)
            else:
                item[key] = rnd.choice(ODD)

    prime = json.loads((FIX / "primeintellect-availability-gpus.json").read_text())
    items = []
    for i in range(per):
        item = copy.deepcopy(prime["items"][i % len(prime["items"])])
        item["cloudId"] = f"c{i}"
        item["gpuCount"] = [1, 2, 4, 8][i % 4]
        item["isSpot"] = i % 5 == 0
        item["security"] = ["secure_cloud", "community_cloud"][i % 2]
        prices = item.setdefault("prices", {}) if isinstance(item.get("prices"), dict) else item
        if isinstance(prices, dict) and prices is not item:
            prices["onDemand"] = round((prices.get("onDemand") or 2.0) * (0.8 + (i % 40) / 100), 3)
            prices["communityPrice"] = [None, 1.25, 0, "3.5"][i % 4]
            if i % 37 == 0:
                prices["currency"] = rnd.choice(["EUR", "usd", None, 5])
            if i % 29 == 0:
                prices["onDemand"] = rnd.choice(ODD)
        item["gpuMemory"] = [80, 80 * item["gpuCount"], 640, 24.5, None, "80"][i % 6]
        item["stockStatus"] = ["Available", "Low", "unavailable", None, 3][i % 5]
        odd(
            item,
            (
                "gpuType",
                "gpuCount",
                "gpuMemory",
                "region",
                "disk",
                "country",
                "dataCenter",
                "socket",
                "provider",
                "stockStatus",
                "isSpot",
            ),
        )
        items.append(item)
    if items:
        items[3] = "not an offer"
        items[4] = {"gpuType": "CPU_NODE", "gpuCount": 1}
    vast_doc = json.loads((FIX / "vast-bundles-ondemand.json").read_text())
    offers = []
    for i in range(per):
        o = dict(vast_doc["offers"][i % len(vast_doc["offers"])])
        o["id"] = 40_000_000 + i if i % 7 else str(40_000_000 + i)
        o["num_gpus"] = [1, 2, 4, 8][i % 4]
        o["dph_total"] = round(float(o.get("dph_total") or 1.0) * (0.8 + (i % 50) / 100), 4)
        o["gpu_ram"] = [24564, 49140, 81559, 81559.0, 40960][i % 5]
        o["reliability"] = [0.998, 0.9, None, "0.95", 0.0, -0.0][i % 6]
        o["is_bid"] = i % 9 == 0
        o["rentable"] = i % 23 != 0
        odd(
            o,
            (
                "dph_total",
                "num_gpus",
                "gpu_ram",
                "gpu_name",
                "reliability",
                "geolocation",
                "disk_space",
                "min_bid",
                "id",
            ),
        )
        if i % 31 == 0:
            o.pop("dph_total", None)
            o["search"] = {"totalHour": rnd.choice([1.5, "2", None])}
        offers.append(o)
    lam = json.loads((FIX / "lambda-instance-types.json").read_text())
    types = list(lam["data"].items())
    data: dict[str, Any] = {}
    for i in range(per):
        key, val = types[i % len(types)]
        val = copy.deepcopy(val)
        it = val["instance_type"]
        it["name"] = f"{key}_{i}" if i % 11 else None
        val["regions_with_capacity_available"] = [{"name": f"r{j}", "description": "x"} for j in range(i % 3)]
        if i % 13 == 0:
            val["regions_with_capacity_available"] = ["r", {"name": None}, None, {"name": "r9"}] if i % 2 else "r"
        odd(it, ("price_cents_per_hour", "gpu_description", "name", "specs"))
        if isinstance(it.get("specs"), dict):
            odd(it["specs"], ("gpus", "storage_gib"))
        data[f"{key}_{i}"] = val
    data["junk"] = "not a type"
    data["no_type"] = {"regions_with_capacity_available": []}
    return {"prime": {"items": items, "totalCount": len(items)}, "vast": {"offers": offers}, "lambda": {"data": data}}


def offer_row(o: Any) -> list[Any]:
    return [
        o.provider,
        o.id,
        o.gpu_type,
        o.gpu_name,
        o.gpu_count,
        o.vram_gb,
        o.price_hr,
        o.spot,
        o.region,
        o.available,
        o.availability,
        o.reliability,
        o.disk_gb,
        o.host,
        dict(o.params),
    ]


def ranked_row(r: Any, index: dict[int, int]) -> list[Any]:
    risk = r.risk
    return [
        index[id(r.offer)],
        r.fits,
        r.reason,
        r.est_hours,
        r.est_cost,
        r.measured,
        None
        if risk is None
        else [
            risk.rate,
            risk.preemptions,
            risk.hours_lost,
            risk.expected_hours,
            risk.base_hours,
            risk.traffic_cost,
            risk.note,
        ],
    ]


def snapshot() -> dict[str, list[str]]:
    """Section name → rows as JSON text: each listing's offers (or its error), then each ranking of them all."""
    out: dict[str, list[str]] = {}
    every = []
    sources = [(kind, f"fixture {name}", json.loads((FIX / name).read_text())) for kind, name in FIXTURES]
    grown = synthetic()
    sources += [
        ("prime", "synthetic prime", grown["prime"]),
        ("vast", "synthetic vast", grown["vast"]),
        ("vast-bid", "synthetic vast bids", grown["vast"]),
        ("lambda", "synthetic lambda", grown["lambda"]),
    ]
    for kind, label, payload in sources:
        try:
            offers = PARSERS[kind](payload)
        except UnexpectedAnswer as exc:
            out[label] = [json.dumps(["error", str(exc)])]
            continue
        rows = [json.dumps(offer_row(o)) for o in offers]
        rows.append(json.dumps(["skipped", getattr(offers, "skipped", None), getattr(offers, "why", None)]))
        out[label] = rows
        every += offers
    index = {id(o): i for i, o in enumerate(every)}
    for r, run in enumerate(RUNS):
        for f, filters in enumerate(FILTERS):
            for observed in ((), OBSERVED) if r == f == 0 else ((),):
                got = rank(every, run, observed=observed, **filters)
                out[f"rank run {r} filters {f} observed {len(observed)}"] = [
                    json.dumps(ranked_row(x, index)) for x in got
                ]
    return out


@pytest.fixture(scope="module")
def golden() -> dict[str, list[str]]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def now() -> dict[str, list[str]]:
    return snapshot()


def test_the_golden_file_covers_every_case(golden):
    assert len(golden) == len(FIXTURES) + 4 + len(RUNS) * len(FILTERS) + 1
    synthetic_offers = sum(len(v) - 1 for k, v in golden.items() if k.startswith("synthetic"))
    assert synthetic_offers > 3000
    skipped = [json.loads(v[-1]) for k, v in golden.items() if k.startswith("synthetic")]
    assert all(s[1] > 0 and s[2] for s in skipped)  # the odd values did reach the parsers' error paths
    ranked = [json.loads(row) for k, v in golden.items() if k.startswith("rank") for row in v]
    assert any(not r[1] for r in ranked) and any(r[6] for r in ranked) and any(r[5] for r in ranked)


def test_normalised_offers_are_unchanged(golden, now):
    for label in golden:
        if label.startswith("rank"):
            continue
        assert len(now[label]) == len(golden[label]), label
        for i, (got, want) in enumerate(zip(now[label], golden[label])):
            assert got == want, f"{label} row {i}"


def test_rankings_are_unchanged(golden, now):
    assert set(now) == set(golden)
    for label in golden:
        if not label.startswith("rank"):
            continue
        assert len(now[label]) == len(golden[label]), label
        for i, (got, want) in enumerate(zip(now[label], golden[label])):
            assert got == want, f"{label} row {i}"


def test_rank_is_the_plain_computation_at_10000():
    """The benchmark's own 10,000 offers (tests/benchmarks/offers_rank.py), every row compared with the plain
    per-offer computation: order, fit, reason, hours and $."""
    from tests.benchmarks.offers_rank import grown_payloads, normalise
    from tests.services.offers.test_rank_cache import plain_rank

    docs = {k: json.loads(t) for k, t in grown_payloads(10_000).items()}
    offers = normalise(docs)
    assert len(offers) > 9000
    for run in RUNS[:2]:
        for filters in FILTERS[:3]:
            got = rank(offers, run, **filters)
            want = plain_rank(offers, run, **filters)
            assert len(got) == len(want) and got
            for a, b in zip(got, want):
                assert (a.offer is b.offer, a.fits, a.reason, a.est_hours, a.est_cost, a.risk) == (
                    True,
                    b.fits,
                    b.reason,
                    b.est_hours,
                    b.est_cost,
                    b.risk,
                )


if __name__ == "__main__" and "--write" in sys.argv:
    with gzip.open(GOLDEN, "wt", encoding="utf-8") as fh:
        json.dump(snapshot(), fh)
    print(f"wrote {GOLDEN}")
