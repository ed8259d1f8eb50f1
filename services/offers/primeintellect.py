"""Prime Intellect: ``GET /api/v1/availability/gpus`` (paginated ``{items, totalCount}``).

Prices are USD/hr for the whole offer: ``communityPrice`` for community_cloud, ``onDemand`` otherwise
(the CLI's rule); spot offers are separate items with ``isSpot: true`` priced in ``onDemand``. Offers
without a price or in another currency are skipped, never shown as free. ``gpuMemory`` is documented
per GPU but reported to be the box total for some multi-GPU offers: when it equals the per-GPU figure
in the type name (``H100_80GB``) × ``gpuCount`` it is divided back."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any
from zlib import crc32

from services.offers._http import NOT_FOUND, RetryPolicy, request_json, request_unless_gone
from services.offers.models import (
    MAX_GPU_HOUR,
    MAX_GPUS,
    MAX_VRAM_GB,
    MIN_GPU_HOUR,
    Listed,
    Normalised,
    Offer,
    PodAccess,
    ProviderFailure,
    UnexpectedAnswer,
    canonical_gpu,
    epoch,
    gc_paused,
    impossible,
    listed_price,
    nominal_gb,
    not_an_object,
    number,
    parse_ssh,
    shape,
    short,
)

if TYPE_CHECKING:  # the HTTP client is the caller's; importing it costs ~55 ms of the app's start-up
    import httpx

NAME = "primeintellect"
DEFAULT_URL = "https://api.primeintellect.ai/api/v1"
PAGE_SIZE = 100
MAX_PAGES = 20
MAX_PER_GPU_GB = 300  # no single GPU has more; a larger gpuMemory on a multi-GPU offer is a box total


_FIELD_NAMES = (
    "gpuType",
    "gpuCount",
    "security",
    "prices",
    "gpuMemory",
    "stockStatus",
    "provider",
    "cloudId",
    "socket",
    "dataCenter",
    "country",
    "isSpot",
    "region",
    "disk",
)
_FIELDS = itemgetter(*_FIELD_NAMES)


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


@gc_paused
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
    append, skip = out.append, out.skip
    # (gpuType, gpuMemory, count) → (GB/GPU, type, GB/GPU within MAX_VRAM_GB)
    shapes: dict[tuple[str, Any, int], tuple[float, str, bool]] = {}
    stocks: dict[str, tuple[bool, str]] = {}  # stockStatus → (available, as shown)
    # on the refresh path for every offer (offers_rank): each field read once, repeated work per distinct value,
    # :func:`number` only for what is not already a finite float (or an int, for the disk), the check of
    # Normalised.add inlined (the count is checked above, the memory's part once per shape)
    for item in items:
        if type(item) is not dict:
            skip(f"an offer is {shape(item)}")
            continue
        try:  # every field in one call (Prime lists them all); one at a time when some are missing
            fields = _FIELDS(item)
        except KeyError:
            fields = tuple(map(item.get, _FIELD_NAMES))
        (
            gpu_type,
            raw_count,
            security,
            prices,
            memory,
            stock,
            provider,
            cloud,
            socket,
            centre,
            country,
            spot,
            region,
            disk,
        ) = fields
        if gpu_type == "CPU_NODE":
            continue
        count = raw_count if type(raw_count) is int else int(number(raw_count) or 0)
        if type(gpu_type) is not str or not gpu_type or not 1 <= count <= MAX_GPUS:
            skip(f"gpuType {short(gpu_type)}, gpuCount {short(raw_count)}")
            continue
        # communityPrice for community_cloud, onDemand otherwise (the CLI's rule), each the other's fallback; no
        # prices, null or 0 prices, another currency: not for sale, left out quietly
        price = raw_price = None
        if type(prices) is dict:
            currency = prices.get("currency")
            if currency is None or currency == "USD" or str(currency or "USD").upper() == "USD":
                on_demand, community = prices.get("onDemand"), prices.get("communityPrice")
                first, second = (community, on_demand) if security == "community_cloud" else (on_demand, community)
                raw_price = first if first is not None else second
                price = raw_price if type(raw_price) is float and raw_price - raw_price == 0.0 else number(raw_price)
        if not price:  # null or 0: not for sale now
            if raw_price is not None and raw_price != 0:
                skip(f"price {short(raw_price)}")
            continue
        key = (gpu_type, memory, count) if type(memory) is int or type(memory) is float else None
        known = shapes.get(key) if key is not None else None
        if known is None:
            vram = per_gpu_memory(gpu_type, number(memory), count)
            known = (vram, canonical_gpu(gpu_type, vram), 0 <= vram <= MAX_VRAM_GB)
            if key is not None:
                shapes[key] = known
        vram, canon, vram_ok = known
        stock = stock or "Available"
        status = stocks.get(stock) if type(stock) is str else None
        if status is None:
            text = str(stock)
            status = (text.lower() != "unavailable", text.capitalize())
            if type(stock) is str:
                stocks[stock] = status
        if type(disk) is dict:
            disk = disk.get("defaultCount")
            disk = float(disk) if type(disk) is int and -1e308 < disk < 1e308 else number(disk)
        else:
            disk = None
        params = {
            "cloudId": cloud,
            "socket": socket,
            "dataCenter": centre,
            "security": security,
            "provider": provider,
            "country": country,
        }
        if cloud is None or socket is None or centre is None or security is None or provider is None or country is None:
            params = {k: v for k, v in params.items() if v is not None}
        # Prime offers carry no id: a stable 8-hex digest of what identifies one (CRC-32: cheap, and only needs
        # to tell a listing's offers apart)
        ident = "%08x" % crc32(
            f"{provider or ''}|{cloud or ''}|{gpu_type}|{socket or ''}|{raw_count or ''}|"
            f"{centre or ''}|{security or ''}|{spot or ''}".encode()
        )
        # positional, in Offer's field order: keyword calls cost twice as much over 10,000 offers
        offer = Offer(
            NAME,
            ident,
            canon,
            gpu_type,
            count,
            vram,
            price,
            bool(spot),
            region if type(region) is str and region else str(region or country or ""),
            status[0],
            status[1],
            None,
            disk,
            provider if type(provider) is str else str(provider or ""),
            params,
        )
        if vram_ok and MIN_GPU_HOUR * count <= price <= MAX_GPU_HOUR * count:
            append(offer)
        else:
            skip(impossible(offer) or "impossible")
    return out.done()


async def fetch(
    client: httpx.AsyncClient,
    api_key: str,
    *,
    base_url: str = DEFAULT_URL,
    spot: bool | None = None,
    retry: RetryPolicy | None = None,
) -> list[Offer]:
    url = f"{base_url.rstrip('/')}/availability/gpus"
    items: list[Any] = []
    for page in range(1, MAX_PAGES + 1):
        data = await request_json(
            client, "GET", url, api_key=api_key, retry=retry, params={"page": page, "page_size": PAGE_SIZE}
        )
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


def create_body(
    offer: Offer,
    *,
    name: str,
    max_price: float,
    disk_gb: int | None = None,
    image: str | None = None,
    team_id: str | None = None,
) -> dict[str, Any]:
    """``POST /pods/`` body. ``PodRequestConfig`` rejects unknown keys, so only documented ones are sent;
    ``maxPrice`` is the user's cap: the provider refuses to start the pod above it. ``team_id`` (PRIME_TEAM_ID
    or ~/.prime/config.json): the body's top-level ``team: {teamId}``, as Prime's CLI sends it."""
    p = offer.params
    if not p.get("cloudId") or not p.get("socket") or not p.get("provider"):
        raise ProviderFailure("this offer lacks cloudId/socket/provider: refresh the offers")
    pod: dict[str, Any] = {
        "name": name,
        "cloudId": p["cloudId"],
        "gpuType": offer.gpu_name,
        "socket": p["socket"],
        "gpuCount": offer.gpu_count,
        "maxPrice": round(max_price, 4),
        "image": image or DEFAULT_IMAGE,
        "autoRestart": False,
    }
    if disk_gb or offer.disk_gb:
        pod["diskSize"] = int(disk_gb or offer.disk_gb or 0)
    for key, src in (("dataCenterId", "dataCenter"), ("country", "country"), ("security", "security")):
        if p.get(src):
            pod[key] = p[src]
    body: dict[str, Any] = {"pod": pod, "provider": {"type": p["provider"]}}
    if team_id:
        body["team"] = {"teamId": team_id}
    return body


async def create(
    client: httpx.AsyncClient,
    api_key: str,
    offer: Offer,
    *,
    name: str,
    max_price: float,
    disk_gb: int | None = None,
    image: str | None = None,
    base_url: str = DEFAULT_URL,
    team_id: str | None = None,
) -> str:
    """Create once (a retried create could start a second billed pod); returns the pod id."""
    body = create_body(offer, name=name, max_price=max_price, disk_gb=disk_gb, image=image, team_id=team_id)
    data = await request_json(
        client, "POST", f"{base_url.rstrip('/')}/pods/", api_key=api_key, retry=NO_RETRY, json=body
    )
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
        return PodAccess(
            pod_id,
            "failed",
            price_hr=price,
            message=str(item.get("installationFailure") or "the provider reports ERROR"),
        )
    if status == "ACTIVE" and install == "FINISHED" and ssh:
        return PodAccess(pod_id, "ready", ssh[0], ssh[1], ssh[2], price_hr=price)
    progress = item.get("installationProgress")
    detail = f"{status.lower() or 'pending'}" + (f", installing {progress}%" if progress is not None else "")
    return PodAccess(pod_id, "pending", price_hr=price, message=detail)


async def status(
    client: httpx.AsyncClient,
    api_key: str,
    pod_id: str,
    *,
    base_url: str = DEFAULT_URL,
    retry: RetryPolicy | None = None,
) -> PodAccess:
    data = await request_json(
        client, "GET", f"{base_url.rstrip('/')}/pods/status", api_key=api_key, retry=retry, params={"pod_ids": [pod_id]}
    )
    items = data.get("data") if isinstance(data, dict) else None
    item = next((i for i in items or [] if isinstance(i, dict) and str(i.get("podId")) == pod_id), None)
    return access(item, pod_id)


async def terminate(
    client: httpx.AsyncClient,
    api_key: str,
    pod_id: str,
    *,
    base_url: str = DEFAULT_URL,
    retry: RetryPolicy | None = None,
) -> str:
    data = await request_unless_gone(
        client, "DELETE", f"{base_url.rstrip('/')}/pods/{pod_id}", api_key=api_key, retry=retry
    )
    if data is NOT_FOUND:
        return "already gone"
    return str(data.get("status") or "terminated").lower() if isinstance(data, dict) else "terminated"


LIST_LIMIT = 100


async def pods(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL) -> list[Listed] | None:
    """The account's pods as (id, name, status); None when the answer is not a list or is a full page
    (a pod missing from a truncated list proves nothing)."""
    data = await request_json(
        client, "GET", f"{base_url.rstrip('/')}/pods/", api_key=api_key, params={"offset": 0, "limit": LIST_LIMIT}
    )
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) >= LIST_LIMIT:
        return None
    return [
        Listed(
            str(i["id"]),
            str(i.get("name") or ""),
            str(i.get("status") or "").lower(),
            listed_price(i.get("priceHr")),
            epoch(i.get("createdAt")),
            str(i.get("installationFailure") or ""),
        )
        for i in items
        if isinstance(i, dict) and i.get("id")
    ]


async def find(client: httpx.AsyncClient, api_key: str, name: str, *, base_url: str = DEFAULT_URL) -> str | None:
    """The id of a pod with this name (to reconcile a create whose answer was lost)."""
    return next((p.id for p in await pods(client, api_key, base_url=base_url) or [] if p.name == name), None)
