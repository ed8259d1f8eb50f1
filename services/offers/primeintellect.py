"""Prime Intellect: ``GET /api/v1/availability/gpus`` (paginated ``{items, totalCount}``).

Prices are USD/hr for the whole offer: ``communityPrice`` for community_cloud, ``onDemand`` otherwise
(the CLI's rule); spot offers are separate items with ``isSpot: true`` priced in ``onDemand``. Offers
without a price or in another currency are skipped, never shown as free. ``gpuMemory`` is documented
per GPU but reported to be the box total for some multi-GPU offers: when it equals the per-GPU figure
in the type name (``H100_80GB``) × ``gpuCount`` it is divided back."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from services.offers._http import RetryPolicy, request_json
from services.offers.models import Offer, canonical_gpu, nominal_gb, number

NAME = "primeintellect"
DEFAULT_URL = "https://api.primeintellect.ai/api/v1"
PAGE_SIZE = 100
MAX_PAGES = 20
MAX_PER_GPU_GB = 300  # no single GPU has more; a larger gpuMemory on a multi-GPU offer is a box total


def per_gpu_memory(gpu_type: str, gpu_memory: float | None, gpu_count: int) -> float:
    nominal = nominal_gb(gpu_type)
    if gpu_memory is None or gpu_memory <= 0:
        return nominal or 0.0
    if gpu_count > 1:
        if nominal is not None and abs(gpu_memory - nominal * gpu_count) < 1 and abs(gpu_memory - nominal) >= 1:
            return gpu_memory / gpu_count
        if nominal is None and gpu_memory > MAX_PER_GPU_GB:
            return gpu_memory / gpu_count
    return float(gpu_memory)


def _price(item: dict[str, Any]) -> float | None:
    prices = item.get("prices")
    if not isinstance(prices, dict) or str(prices.get("currency") or "USD").upper() != "USD":
        return None
    on_demand, community = number(prices.get("onDemand")), number(prices.get("communityPrice"))
    first, second = (community, on_demand) if item.get("security") == "community_cloud" else (on_demand, community)
    price = first if first is not None else second
    return price if price is not None and price > 0 else None


def _id(item: dict[str, Any]) -> str:
    key = "|".join(str(item.get(k) or "") for k in ("provider", "cloudId", "gpuType", "socket", "gpuCount",
                                                    "dataCenter", "security", "isSpot"))
    return hashlib.md5(key.encode()).hexdigest()[:8]


def parse(payload: Any) -> list[Offer]:
    """``{items: [...]}`` (current) or the legacy object keyed by gpuType."""
    if isinstance(payload, dict) and isinstance(payload.get("items"), list):
        items = payload["items"]
    elif isinstance(payload, dict):
        items = [i for v in payload.values() if isinstance(v, list) for i in v]
    else:
        items = []
    out: list[Offer] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        price, count = _price(item), int(number(item.get("gpuCount")) or 0)
        gpu_type = str(item.get("gpuType") or "")
        if price is None or count < 1 or not gpu_type or gpu_type == "CPU_NODE":
            continue
        vram = per_gpu_memory(gpu_type, number(item.get("gpuMemory")), count)
        stock = str(item.get("stockStatus") or "Available")
        disk = item.get("disk") if isinstance(item.get("disk"), dict) else {}
        out.append(Offer(
            provider=NAME, id=_id(item), gpu_type=canonical_gpu(gpu_type, vram), gpu_name=gpu_type,
            gpu_count=count, vram_gb=vram, price_hr=price, spot=bool(item.get("isSpot")),
            region=str(item.get("region") or item.get("country") or ""),
            available=stock.lower() != "unavailable", availability=stock.capitalize(),
            disk_gb=number(disk.get("defaultCount")), host=str(item.get("provider") or "")))
    return out


async def fetch(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL, spot: bool | None = None,
                retry: RetryPolicy | None = None) -> list[Offer]:
    url = f"{base_url.rstrip('/')}/availability/gpus"
    items: list[Any] = []
    for page in range(1, MAX_PAGES + 1):
        data = await request_json(client, "GET", url, api_key=api_key, retry=retry,
                                  params={"page": page, "page_size": PAGE_SIZE})
        batch = data.get("items") if isinstance(data, dict) else None
        if not isinstance(batch, list):
            return parse(data)  # legacy shape: one object
        items.extend(batch)
        total = number(data.get("totalCount")) or 0
        if len(batch) < PAGE_SIZE or len(items) >= total:  # stop on a short page: totalCount may overstate
            break
    offers = parse({"items": items})
    return offers if spot is None else [o for o in offers if o.spot == spot]
