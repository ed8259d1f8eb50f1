"""Prime Intellect: ``GET /api/v1/availability/gpus`` (paginated ``{items, totalCount}``).

Prices are USD/hr for the whole offer: ``communityPrice`` for community_cloud, ``onDemand`` otherwise
(the CLI's rule); spot offers are separate items with ``isSpot: true`` priced in ``onDemand``. Offers
without a price or in another currency are skipped, never shown as free. ``gpuMemory`` is documented
per GPU but reported to be the box total for some multi-GPU offers: when it equals the per-GPU figure
in the type name (``H100_80GB``) × ``gpuCount`` it is divided back."""

from __future__ import annotations

import zlib
from typing import Any

import httpx

from services.offers._http import NOT_FOUND, RetryPolicy, request_json, request_unless_gone
from services.offers.models import (MAX_GPUS, Listed, Normalised, Offer, PodAccess, ProviderFailure, UnexpectedAnswer,
                                   canonical_gpu, nominal_gb, not_an_object, number, parse_ssh, shape, short)

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


def _price(item: dict[str, Any]) -> tuple[float | None, Any]:
    """(USD/hr or None, the raw value it came from). None without a price — no ``prices``, null or 0 prices,
    another currency: not for sale, left out quietly — or when the raw value is garbage (the caller counts it)."""
    prices = item.get("prices")
    if not isinstance(prices, dict) or str(prices.get("currency") or "USD").upper() != "USD":
        return None, None
    raw_on_demand, raw_community = prices.get("onDemand"), prices.get("communityPrice")
    first, second = ((raw_community, raw_on_demand) if item.get("security") == "community_cloud"
                     else (raw_on_demand, raw_community))
    raw = first if first is not None else second
    return number(raw), raw


def _id(item: dict[str, Any]) -> str:
    """Prime offers carry no id: a stable 8-hex digest of what identifies one (CRC-32: cheap, and only
    needs to tell a listing's offers apart): provider, cloudId, gpuType, socket, gpuCount, dataCenter,
    security, isSpot."""
    g = item.get
    key = (f"{g('provider') or ''}|{g('cloudId') or ''}|{g('gpuType') or ''}|{g('socket') or ''}|"
           f"{g('gpuCount') or ''}|{g('dataCenter') or ''}|{g('security') or ''}|{g('isSpot') or ''}")
    return format(zlib.crc32(key.encode()), "08x")


_PARAM_KEYS = ("cloudId", "socket", "dataCenter", "security", "provider", "country")


def parse(payload: Any) -> Normalised:
    """``{items: [...]}`` (current) or the legacy object keyed by gpuType (every value a list); anything else
    is :class:`UnexpectedAnswer`, and so is a list whose offers are all unreadable or impossible (each one
    counted in ``skipped`` otherwise)."""
    if type(payload) is not dict:
        raise UnexpectedAnswer(NAME, not_an_object(payload))
    items = payload.get("items")
    if items is None and payload and all(type(v) is list for v in payload.values()):
        items = [i for v in payload.values() for i in v]
    elif type(items) is not list:
        raise UnexpectedAnswer(NAME, "no items list" if items is None else f"items is {shape(items)}, not a list")
    out = Normalised(NAME)
    for item in items:  # on the refresh path for every offer: one dict lookup per field (offers_rank)
        if type(item) is not dict:
            out.skip(f"an offer is {shape(item)}")
            continue
        g = item.get
        (price, raw_price), raw_count = _price(item), g("gpuCount")
        count = raw_count if type(raw_count) is int else int(number(raw_count) or 0)
        gpu_type = g("gpuType")
        if gpu_type == "CPU_NODE":
            continue
        if type(gpu_type) is not str or not gpu_type or not 1 <= count <= MAX_GPUS:
            out.skip(f"gpuType {short(gpu_type)}, gpuCount {short(raw_count)}")
            continue
        if not price:  # null or 0: not for sale now
            if raw_price is not None and raw_price != 0:
                out.skip(f"price {short(raw_price)}")
            continue
        vram = per_gpu_memory(gpu_type, number(g("gpuMemory")), count)
        stock = g("stockStatus") or "Available"
        disk = g("disk")
        stock = str(stock)
        # positional, in Offer's field order: keyword calls cost twice as much over 10,000 offers
        out.add(Offer(
            NAME, _id(item), canonical_gpu(gpu_type, vram), gpu_type, count, vram, price, bool(g("isSpot")),
            str(g("region") or g("country") or ""), stock.lower() != "unavailable", stock.capitalize(), None,
            number(disk.get("defaultCount")) if type(disk) is dict else None, str(g("provider") or ""),
            {k: v for k in _PARAM_KEYS if (v := g(k)) is not None}))
    return out.done()


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
    return offers if spot is None else offers.only(lambda o: o.spot == spot)


# ------------------------------------------------------------------------------------------ pods
NO_RETRY = RetryPolicy(attempts=1)
DEFAULT_IMAGE = "ubuntu_22_cuda_12"


def create_body(offer: Offer, *, name: str, max_price: float, disk_gb: int | None = None,
                image: str | None = None) -> dict[str, Any]:
    """``POST /pods/`` body. ``PodRequestConfig`` rejects unknown keys, so only documented ones are sent;
    ``maxPrice`` is the user's cap: the provider refuses to start the pod above it."""
    p = offer.params
    if not p.get("cloudId") or not p.get("socket") or not p.get("provider"):
        raise ProviderFailure("this offer lacks cloudId/socket/provider: refresh the offers")
    pod: dict[str, Any] = {"name": name, "cloudId": p["cloudId"], "gpuType": offer.gpu_name, "socket": p["socket"],
                           "gpuCount": offer.gpu_count, "maxPrice": round(max_price, 4),
                           "image": image or DEFAULT_IMAGE, "autoRestart": False}
    if disk_gb or offer.disk_gb:
        pod["diskSize"] = int(disk_gb or offer.disk_gb or 0)
    for key, src in (("dataCenterId", "dataCenter"), ("country", "country"), ("security", "security")):
        if p.get(src):
            pod[key] = p[src]
    return {"pod": pod, "provider": {"type": p["provider"]}}


async def create(client: httpx.AsyncClient, api_key: str, offer: Offer, *, name: str, max_price: float,
                 disk_gb: int | None = None, image: str | None = None, base_url: str = DEFAULT_URL) -> str:
    """Create once (a retried create could start a second billed pod); returns the pod id."""
    data = await request_json(client, "POST", f"{base_url.rstrip('/')}/pods/", api_key=api_key, retry=NO_RETRY,
                              json=create_body(offer, name=name, max_price=max_price, disk_gb=disk_gb, image=image))
    pod_id = data.get("id") if isinstance(data, dict) else None
    if not pod_id:  # a 2xx without an id: the pod may exist
        raise ProviderFailure("the create answer has no pod id", uncertain=True)
    return str(pod_id)


def access(item: Any, pod_id: str) -> PodAccess:
    """One ``APIPodStatusResponse``/``APIPodConfig``: ready = ACTIVE + installation FINISHED + an SSH string."""
    if not isinstance(item, dict):
        return PodAccess(pod_id, "unknown", message="the status answer does not mention this pod")
    status = str(item.get("status") or "").upper()
    install = str(item.get("installationStatus") or "").upper()
    price = number(item.get("priceHr")) if item.get("priceHr") is not None else number(item.get("costPerHr"))
    ssh = parse_ssh(item.get("sshConnection"))
    if status in ("TERMINATED", "DELETING"):
        return PodAccess(pod_id, "terminated", price_hr=price, message=status.lower())
    if status == "ERROR" or install == "ERROR":
        return PodAccess(pod_id, "failed", price_hr=price,
                         message=str(item.get("installationFailure") or "the provider reports ERROR"))
    if status == "ACTIVE" and install == "FINISHED" and ssh:
        return PodAccess(pod_id, "ready", ssh[0], ssh[1], ssh[2], price_hr=price)
    progress = item.get("installationProgress")
    detail = f"{status.lower() or 'pending'}" + (f", installing {progress}%" if progress is not None else "")
    return PodAccess(pod_id, "pending", price_hr=price, message=detail)


async def status(client: httpx.AsyncClient, api_key: str, pod_id: str, *, base_url: str = DEFAULT_URL,
                 retry: RetryPolicy | None = None) -> PodAccess:
    data = await request_json(client, "GET", f"{base_url.rstrip('/')}/pods/status", api_key=api_key, retry=retry,
                              params={"pod_ids": [pod_id]})
    items = data.get("data") if isinstance(data, dict) else None
    item = next((i for i in items or [] if isinstance(i, dict) and str(i.get("podId")) == pod_id), None)
    return access(item, pod_id)


async def terminate(client: httpx.AsyncClient, api_key: str, pod_id: str, *, base_url: str = DEFAULT_URL,
                    retry: RetryPolicy | None = None) -> str:
    data = await request_unless_gone(client, "DELETE", f"{base_url.rstrip('/')}/pods/{pod_id}", api_key=api_key,
                                     retry=retry)
    if data is NOT_FOUND:
        return "already gone"
    return str(data.get("status") or "terminated").lower() if isinstance(data, dict) else "terminated"


LIST_LIMIT = 100


async def pods(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL) -> list[Listed] | None:
    """The account's pods as (id, name, status); None when the answer is not a list or is a full page
    (a pod missing from a truncated list proves nothing)."""
    data = await request_json(client, "GET", f"{base_url.rstrip('/')}/pods/", api_key=api_key,
                              params={"offset": 0, "limit": LIST_LIMIT})
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) >= LIST_LIMIT:
        return None
    return [Listed(str(i["id"]), str(i.get("name") or ""), str(i.get("status") or "").lower())
            for i in items if isinstance(i, dict) and i.get("id")]


async def find(client: httpx.AsyncClient, api_key: str, name: str, *, base_url: str = DEFAULT_URL) -> str | None:
    """The id of a pod with this name (to reconcile a create whose answer was lost)."""
    return next((p.id for p in await pods(client, api_key, base_url=base_url) or [] if p.name == name), None)
