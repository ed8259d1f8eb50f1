"""Prime Intellect's API (FastAPI) answers a path without its trailing slash (or with one too many) with a
307/308 redirect; httpx does not follow redirects unless told. Every
call through services/offers must follow them — the listing, and a create whose body (the price cap) must
survive the 308. Served by httpx.MockTransport."""

from __future__ import annotations

import json

import httpx
import pytest

from services.offers import primeintellect
from services.offers._http import RetryPolicy
from tests.services.offers.test_fetch import URLS, load
from tests.services.offers.test_launch import prime_offer

FAST = RetryPolicy(attempts=1)


def _redirecting(canonical: dict[str, object], status: int, seen: list[httpx.Request]) -> httpx.MockTransport:
    """Serve ``canonical`` (path → JSON) and redirect the same path with/without a trailing slash to it."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path in canonical:
            return httpx.Response(200, json=canonical[path])
        other = path[:-1] if path.endswith("/") else path + "/"
        if other in canonical:
            return httpx.Response(status, headers={"Location": str(request.url.copy_with(path=other))})
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("status", [307, 308])
async def test_prime_listing_follows_a_trailing_slash_redirect(status):
    seen: list[httpx.Request] = []
    canonical = {"/api/v1/availability/gpus/": load("primeintellect-availability-gpus.json")}
    async with httpx.AsyncClient(transport=_redirecting(canonical, status, seen)) as client:
        offers = await primeintellect.fetch(client, "pk", base_url=URLS["primeintellect"], retry=FAST)
    assert offers == primeintellect.parse(load("primeintellect-availability-gpus.json")) and offers
    assert [r.url.path for r in seen] == ["/api/v1/availability/gpus", "/api/v1/availability/gpus/"]
    assert seen[1].url.params["page"] == "1" and seen[1].headers["authorization"] == "Bearer pk"


@pytest.mark.parametrize("status", [307, 308])
async def test_a_prime_create_keeps_its_method_and_price_cap_through_the_redirect(status):
    seen: list[httpx.Request] = []
    canonical = {"/api/v1/pods": load("primeintellect-pods-create.json")}  # here the slash is the wrong one
    async with httpx.AsyncClient(transport=_redirecting(canonical, status, seen)) as client:
        pod_id = await primeintellect.create(
            client, "pk", prime_offer(), name="p1", max_price=19.72, base_url=URLS["primeintellect"]
        )
    assert pod_id == load("primeintellect-pods-create.json")["id"]
    assert [(r.method, r.url.path) for r in seen] == [("POST", "/api/v1/pods/"), ("POST", "/api/v1/pods")]
    assert json.loads(seen[1].content)["pod"]["maxPrice"] == 19.72
