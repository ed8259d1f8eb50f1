"""All providers at once: each runs under its own timeout; a failing one yields its reason in
``FetchResult.errors`` while the others' offers still return — whatever its answer was (wrongly shaped, nested
too deep, too big: "unexpected answer: …"). Offers dropped as impossible are counted per provider in
``FetchResult.skipped``. Total time ≈ the slowest provider."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx

from services.offers._http import RetryPolicy
from services.offers.keys import how_to_set
from services.offers.models import (
    FetchResult,
    Normalised,
    Offer,
    ProviderError,
    ProviderFailure,
    Skipped,
    UnexpectedAnswer,
)
from services.offers.providers import PROVIDERS, base_urls


async def fetch_all(
    *,
    keys: Mapping[str, str],
    urls: Mapping[str, str] | None = None,
    spot: bool | None = False,
    providers: list[str] | None = None,
    client: httpx.AsyncClient | None = None,
    timeout: float = 30.0,
    retry: RetryPolicy | None = None,
) -> FetchResult:
    names = [n for n in PROVIDERS if providers is None or n in providers]
    urls = {**base_urls({}), **(urls or {})}
    own = client is None
    client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))

    async def one(name: str) -> list[Offer] | ProviderError:
        key = keys.get(name)
        if not key:
            return ProviderError(name, how_to_set(name))
        try:
            return await asyncio.wait_for(
                PROVIDERS[name].module.fetch(client, key, base_url=urls[name], spot=spot, retry=retry), timeout
            )
        except asyncio.TimeoutError:
            return ProviderError(name, f"timed out after {timeout:g} s")
        except UnexpectedAnswer as exc:  # the provider is named on the line already
            return ProviderError(name, exc.line)
        except ProviderFailure as exc:
            return ProviderError(name, str(exc))
        except httpx.HTTPError as exc:
            return ProviderError(name, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - whatever one provider's answer does, the others still list
            return ProviderError(name, UnexpectedAnswer.line_for(f"{type(exc).__name__}: {exc}"[:200]))

    try:
        results = await asyncio.gather(*(one(n) for n in names))
    finally:
        if own:
            await client.aclose()
    offers = tuple(o for r in results if isinstance(r, list) for o in r)
    errors = tuple(r for r in results if isinstance(r, ProviderError))
    skipped = tuple(Skipped(r.provider, r.skipped, r.why) for r in results if isinstance(r, Normalised) and r.skipped)
    return FetchResult(offers, errors, skipped)
