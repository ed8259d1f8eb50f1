"""Vast.ai: ``POST /api/v0/bundles/`` with a search query; ``type: "bid"`` for interruptible (spot).

``dph_total`` is USD/hr for the whole offer including storage (for bids: the minimum bid plus storage).
``gpu_ram`` is per GPU in MB as nvidia-smi counts them (MiB: an H100 reads 81559), converted to GiB."""

from __future__ import annotations

from typing import Any

import httpx

from services.offers._http import RetryPolicy, request_json
from services.offers.models import Offer, canonical_gpu, number

NAME = "vast"
DEFAULT_URL = "https://console.vast.ai/api/v0"
MIB_PER_GIB = 1024


def query(*, spot: bool = False, limit: int = 200) -> dict[str, Any]:
    return {"verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True},
            "order": [["dph_total", "asc"]], "type": "bid" if spot else "on-demand", "limit": limit,
            "allocated_storage": 100.0}


def parse(payload: Any, *, spot: bool = False) -> list[Offer]:
    offers = payload.get("offers") if isinstance(payload, dict) else None
    out: list[Offer] = []
    for o in offers if isinstance(offers, list) else []:
        if not isinstance(o, dict) or o.get("rentable") is False:
            continue
        price = number(o.get("dph_total"))
        if price is None and isinstance(o.get("search"), dict):
            price = number(o["search"].get("totalHour"))
        count, ram_mb = int(number(o.get("num_gpus")) or 0), number(o.get("gpu_ram"))
        if price is None or price <= 0 or count < 1 or not ram_mb:
            continue
        vram = ram_mb / MIB_PER_GIB
        rel = number(o.get("reliability"))
        name = str(o.get("gpu_name") or "")
        out.append(Offer(
            provider=NAME, id=str(o.get("id")), gpu_type=canonical_gpu(name, vram), gpu_name=name, gpu_count=count,
            vram_gb=vram, price_hr=price, spot=spot or bool(o.get("is_bid")),
            region=str(o.get("geolocation") or ""), available=True,
            availability=f"{rel:.1%}" if rel is not None else "", reliability=rel,
            disk_gb=number(o.get("disk_space"))))
    return out


async def fetch(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL, spot: bool = False,
                retry: RetryPolicy | None = None) -> list[Offer]:
    data = await request_json(client, "POST", f"{base_url.rstrip('/')}/bundles/", api_key=api_key, retry=retry,
                              json=query(spot=spot))
    return parse(data, spot=spot)
