"""Issue 13 (habit): property tests for the parsers of the providers' answers. Whatever JSON-like data a
provider sends — arbitrary, or shaped like its listing with any value in any field (NaN, ±inf, 1e308,
400-digit integers, strings for numbers, lists for objects) — its normaliser returns offers that are all
possible (finite prices in (0, $1000/GPU-hr], 1..1024 GPUs, finite memory) or raises ProviderFailure;
never anything else. The HTTP layer's reader (nesting measured before json parses) is checked against
json itself."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings, strategies as st

from services.offers import lambda_, primeintellect, runpod, vast
from services.offers.models import MAX_GPU_HOUR, MAX_GPUS, MAX_VRAM_GB, Offer, ProviderFailure, error_message
from services.offers.payload import TooDeep, depth, loads

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e308, -1e308, 5e-324, 0.0, -0.0])
    | st.text(max_size=12)
    | st.sampled_from(["8", "1e308", "nan", "inf", "-1", "H100_80GB", "9" * 400 + "GB"])
)


def json_like(keys: list[str]) -> st.SearchStrategy:
    """Arbitrary JSON-like data whose object keys are mostly the provider's own field names."""
    names = st.sampled_from(keys) | st.text(max_size=6)
    return st.recursive(
        SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(names, kids, max_size=6), max_leaves=25
    )


def record(keys: list[str], values: st.SearchStrategy) -> st.SearchStrategy:
    """An object with any subset of ``keys``, each holding any value."""
    return st.fixed_dictionaries({}, optional={k: values for k in keys})


VAST_KEYS = [
    "id",
    "num_gpus",
    "gpu_ram",
    "gpu_name",
    "dph_total",
    "search",
    "totalHour",
    "rentable",
    "reliability",
    "geolocation",
    "disk_space",
    "min_bid",
    "machine_id",
    "is_bid",
    "offers",
]
PRIME_KEYS = [
    "items",
    "totalCount",
    "gpuType",
    "gpuCount",
    "gpuMemory",
    "prices",
    "onDemand",
    "communityPrice",
    "currency",
    "security",
    "isSpot",
    "stockStatus",
    "disk",
    "defaultCount",
    "region",
    "country",
    "provider",
    "cloudId",
    "socket",
    "dataCenter",
]
LAMBDA_KEYS = [
    "data",
    "instance_type",
    "name",
    "price_cents_per_hour",
    "specs",
    "gpus",
    "storage_gib",
    "gpu_description",
    "regions_with_capacity_available",
    "description",
]
RUNPOD_KEYS = [
    "data",
    "gpuTypes",
    "errors",
    "message",
    "id",
    "displayName",
    "memoryInGb",
    "maxGpuCount",
    "secureCloud",
    "communityCloud",
    "securePrice",
    "communityPrice",
    "secureSpotPrice",
    "communitySpotPrice",
]


def shaped() -> dict[str, st.SearchStrategy]:
    """Per provider: answers shaped like its listing, every field any value."""
    any_value = json_like(VAST_KEYS + PRIME_KEYS)
    vast_offer = record(VAST_KEYS[:-1], any_value)
    prime_item = st.fixed_dictionaries(
        {},
        optional={
            **{k: any_value for k in PRIME_KEYS[2:]},
            "prices": record(["onDemand", "communityPrice", "currency"], SCALARS),
        },
    )
    lambda_type = st.fixed_dictionaries(
        {},
        optional={
            "instance_type": record(["name", "price_cents_per_hour", "gpu_description"], SCALARS).flatmap(
                lambda it: st.fixed_dictionaries({"specs": record(["gpus", "storage_gib"], SCALARS)}).map(
                    lambda s: {**it, **s}
                )
            ),
            "regions_with_capacity_available": any_value,
        },
    )
    runpod_type = record(RUNPOD_KEYS[4:], SCALARS)
    return {
        "vast": st.fixed_dictionaries({"offers": st.lists(vast_offer | any_value, max_size=6)}),
        "primeintellect": st.fixed_dictionaries({"items": st.lists(prime_item | any_value, max_size=6)}),
        "lambda": st.fixed_dictionaries(
            {"data": st.dictionaries(st.text(max_size=10), lambda_type | any_value, max_size=5)}
        ),
        "runpod": st.fixed_dictionaries(
            {"data": st.fixed_dictionaries({"gpuTypes": st.lists(runpod_type | any_value, max_size=5)})}
        ),
    }


SHAPED = shaped()
PARSERS = {"vast": vast.parse, "primeintellect": primeintellect.parse, "lambda": lambda_.parse, "runpod": runpod.parse}
ARBITRARY = json_like(sorted(set(VAST_KEYS + PRIME_KEYS + LAMBDA_KEYS + RUNPOD_KEYS)))


def check(provider: str, payload) -> None:
    try:
        offers = PARSERS[provider](payload)
    except ProviderFailure as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 400, message
        return
    assert isinstance(offers, list)
    for o in offers:
        assert isinstance(o, Offer) and o.provider == provider
        assert type(o.gpu_count) is int and 1 <= o.gpu_count <= MAX_GPUS, o
        assert isinstance(o.price_hr, float) and math.isfinite(o.price_hr), o
        assert 0 < o.price_hr <= MAX_GPU_HOUR * o.gpu_count, o
        assert math.isfinite(o.vram_gb) and 0 <= o.vram_gb <= MAX_VRAM_GB, o
        assert isinstance(o.id, str) and isinstance(o.gpu_type, str) and isinstance(o.region, str)
        hash(o)  # offers go in sets and dict keys (the fit cache)
    json.dumps([o.price_hr for o in offers], allow_nan=False)


@SETTINGS
@given(provider=st.sampled_from(sorted(PARSERS)), payload=ARBITRARY)
def test_any_json_gives_possible_offers_or_a_provider_failure(provider, payload):
    check(provider, payload)


@SETTINGS
@given(data=st.data(), provider=st.sampled_from(sorted(PARSERS)))
def test_a_listing_shaped_answer_with_any_values_gives_possible_offers_or_a_provider_failure(data, provider):
    check(provider, data.draw(SHAPED[provider]))


@SETTINGS
@given(payload=ARBITRARY)
def test_the_depth_scan_agrees_with_json(payload):
    text = json.dumps(payload)
    nested = depth(text.encode())
    assert nested == _depth(payload)
    if nested <= 100:
        assert json.dumps(loads(text)) == json.dumps(json.loads(text))  # texts: NaN != NaN
    else:  # pragma: no cover - json_like nests at most ~25 deep
        try:
            loads(text)
        except TooDeep:
            pass


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@SETTINGS
@given(
    body=st.binary(max_size=300) | st.text(alphabet='[]{}":,\\ax1', max_size=300).map(str.encode),
    status=st.integers(100, 599),
)
def test_error_bodies_of_any_bytes_are_one_line(body, status):
    line = error_message(status, body.decode("utf-8", "replace"))
    assert line.startswith(f"HTTP {status}") and "\n" not in line


def test_deep_nesting_is_refused_before_json_sees_it():
    for deep in ("[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000):
        try:
            loads(deep)
        except TooDeep:
            continue
        raise AssertionError("a 100k-deep document was parsed")
    assert loads('["[[[[[[", {"{": "}}}}"}]') == ["[[[[[[", {"{": "}}}}"}]
    assert error_message(400, "[" * 100_000).startswith("HTTP 400: [[[")
