"""Lambda Cloud: ``GET /api/v1/instance-types`` → ``{data: {name: {instance_type, regions_with_capacity_available}}}``.

``price_cents_per_hour`` is US cents for the whole instance (÷100). No spot tier. One offer per region
with capacity; a type sold out everywhere becomes one unavailable offer."""

from __future__ import annotations

import re
from typing import Any

import httpx

from services.offers._http import RetryPolicy, request_json
from services.offers.models import Offer, canonical_gpu, nominal_gb, number

NAME = "lambda"
DEFAULT_URL = "https://cloud.lambdalabs.com/api/v1"


def parse(payload: Any) -> list[Offer]:
    data = payload.get("data") if isinstance(payload, dict) else None
    out: list[Offer] = []
    for key, item in (data.items() if isinstance(data, dict) else []):
        it = item.get("instance_type") if isinstance(item, dict) else None
        if not isinstance(it, dict):
            continue
        cents = number(it.get("price_cents_per_hour"))
        specs = it.get("specs") if isinstance(it.get("specs"), dict) else {}
        name = str(it.get("name") or key)
        count = number(specs.get("gpus"))
        if count is None:
            m = re.match(r"gpu_(\d+)x_", name)
            count = float(m.group(1)) if m else 0
        if cents is None or cents <= 0 or count < 1:
            continue
        desc = str(it.get("gpu_description") or "")
        vram = nominal_gb(desc) or nominal_gb(name) or 0.0
        regions = [r for r in (item.get("regions_with_capacity_available") or []) if isinstance(r, dict)]
        for region in regions or [None]:
            out.append(Offer(
                provider=NAME, id=name, gpu_type=canonical_gpu(desc or name, vram), gpu_name=desc or name,
                gpu_count=int(count), vram_gb=vram, price_hr=cents / 100, spot=False,
                region=str(region.get("name") or "") if region else "", available=region is not None,
                availability="Available" if region else "Sold out", disk_gb=number(specs.get("storage_gib"))))
    return out


async def fetch(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL, spot: bool = False,
                retry: RetryPolicy | None = None) -> list[Offer]:
    if spot:
        return []  # Lambda has no spot tier
    return parse(await request_json(client, "GET", f"{base_url.rstrip('/')}/instance-types", api_key=api_key,
                                    retry=retry))
