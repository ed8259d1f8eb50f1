"""Lambda Cloud: ``GET /api/v1/instance-types`` → ``{data: {name: {instance_type, regions_with_capacity_available}}}``.

``price_cents_per_hour`` is US cents for the whole instance (÷100). No spot tier. One offer per region
with capacity; a type sold out everywhere becomes one unavailable offer."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

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
    gc_paused,
    impossible,
    listed_price,
    nominal_gb,
    not_an_object,
    number,
    shape,
    short,
)

if TYPE_CHECKING:  # the HTTP client is the caller's; importing it costs ~55 ms of the app's start-up
    import httpx

NAME = "lambda"
DEFAULT_URL = "https://cloud.lambdalabs.com/api/v1"


@gc_paused
def parse(payload: Any) -> Normalised:
    """``{data: {name: {...}}}``; anything else is :class:`UnexpectedAnswer`, and so is a listing whose types
    are all unreadable or impossible (each one counted in ``skipped`` otherwise). CPU types (no GPUs) and
    types without a price are left out quietly."""
    if type(payload) is not dict:
        raise UnexpectedAnswer(NAME, not_an_object(payload))
    data = payload.get("data")
    if type(data) is not dict:
        raise UnexpectedAnswer(NAME, "no data object" if data is None else f"data is {shape(data)}, not an object")
    out = Normalised(NAME)
    append, skip = out.append, out.skip
    cards: dict[str, tuple[float, str]] = {}  # gpu_description → (GB/GPU, type), when it names its memory
    # on the refresh path (offers_rank): one lookup per field, :func:`number` only for what is not already an
    # int (cents, counts) or a finite float, the check of Normalised.add inlined
    for key, item in data.items():
        it = item.get("instance_type") if type(item) is dict else None
        if type(it) is not dict:
            skip(f"an offer is {shape(item)}" if type(item) is not dict else "an offer has no instance_type")
            continue
        g = it.get
        raw_cents = g("price_cents_per_hour")
        cents = float(raw_cents) if type(raw_cents) is int and -1e308 < raw_cents < 1e308 else number(raw_cents)
        specs = g("specs")
        if type(specs) is not dict:
            specs = {}
        raw_name = g("name")
        name = raw_name if type(raw_name) is str and raw_name else str(key)
        raw_count = specs.get("gpus")
        count = float(raw_count) if type(raw_count) is int and -1e308 < raw_count < 1e308 else number(raw_count)
        if raw_count is None:
            m = re.match(r"gpu_(\d{1,4})x_", name)
            count = float(m.group(1)) if m else 0
        if count is None or count < 0 or count > MAX_GPUS:
            skip(f"gpus {short(raw_count)}")
            continue
        if count < 1:  # a CPU instance type
            continue
        if not cents:  # null or 0: not for sale
            if raw_cents is not None and raw_cents != 0:
                skip(f"price {short(raw_cents)} cents/hr")
            continue
        raw_desc = g("gpu_description")
        desc = raw_desc if type(raw_desc) is str else str(raw_desc or "")
        card = cards.get(desc)
        if card is None:
            vram = nominal_gb(desc) or nominal_gb(name) or 0.0
            gpu_name = desc or name
            gpu = canonical_gpu(gpu_name, vram)
            if desc and nominal_gb(desc):  # the type's own name plays no part
                cards[desc] = (vram, gpu)
        else:
            (vram, gpu), gpu_name = card, desc
        n, price = int(count), cents / 100
        storage = specs.get("storage_gib")
        disk = float(storage) if type(storage) is int and -1e308 < storage < 1e308 else number(storage)
        raw_regions = item.get("regions_with_capacity_available")
        regions = raw_regions if type(raw_regions) is list else []
        for region in regions:  # (a loop, not a comprehension: most types list one region or two)
            if type(region) is not dict:
                regions = [r for r in regions if type(r) is dict]
                break
        ok = MIN_GPU_HOUR * n <= price <= MAX_GPU_HOUR * n and 0 <= vram <= MAX_VRAM_GB
        for region in regions or [None]:
            # positional, in Offer's field order: keyword calls cost twice as much over 10,000 offers
            offer = Offer(
                NAME,
                name,
                gpu,
                gpu_name,
                n,
                vram,
                price,
                False,
                str(region.get("name") or "") if region else "",
                region is not None,
                "Available" if region else "Sold out",
                None,
                disk,
                "",
                {"instance_type_name": name},
            )
            if ok:
                append(offer)
            else:
                skip(impossible(offer) or "impossible")
    return out.done()


async def fetch(
    client: httpx.AsyncClient,
    api_key: str,
    *,
    base_url: str = DEFAULT_URL,
    spot: bool = False,
    retry: RetryPolicy | None = None,
) -> list[Offer]:
    if spot:
        return []  # Lambda has no spot tier
    return parse(
        await request_json(client, "GET", f"{base_url.rstrip('/')}/instance-types", api_key=api_key, retry=retry)
    )


# ------------------------------------------------------------------------------------------ instances
NO_RETRY = RetryPolicy(attempts=1)
USER = "ubuntu"  # Lambda's images log in as ubuntu


async def ssh_key_name(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL) -> str:
    """Launch needs exactly one of the account's SSH key names: the first one."""
    data = await request_json(client, "GET", f"{base_url.rstrip('/')}/ssh-keys", api_key=api_key)
    keys = data.get("data") if isinstance(data, dict) else None
    for key in keys or []:
        if isinstance(key, dict) and key.get("name"):
            return str(key["name"])
    raise ProviderFailure("no SSH key in the Lambda account: add one at cloud.lambda.ai → SSH keys")


def create_body(offer: Offer, *, name: str, key_name: str) -> dict[str, Any]:
    if not offer.region:
        raise ProviderFailure(f"{offer.gpu_name} has no region with capacity: it is sold out")
    return {
        "region_name": offer.region,
        "instance_type_name": str(offer.params.get("instance_type_name") or offer.id),
        "ssh_key_names": [key_name],
        "name": name[:64],
    }


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
) -> str:
    """Lambda has no price cap in the API: the caller checks the fixed price against the cap first."""
    key = await ssh_key_name(client, api_key, base_url=base_url)
    data = await request_json(
        client,
        "POST",
        f"{base_url.rstrip('/')}/instance-operations/launch",
        api_key=api_key,
        retry=NO_RETRY,
        json=create_body(offer, name=name, key_name=key),
    )
    ids = (data.get("data") or {}).get("instance_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not ids:  # a 2xx without an id: the instance may exist
        raise ProviderFailure("the launch answer has no instance id", uncertain=True)
    return str(ids[0])


def access(inst: Any, pod_id: str) -> PodAccess:
    if not isinstance(inst, dict):
        return PodAccess(pod_id, "unknown", message="the status answer does not mention this instance")
    state = str(inst.get("status") or "").lower()
    it = raw_it if isinstance(raw_it := inst.get("instance_type"), dict) else {}
    cents = number(it.get("price_cents_per_hour"))
    price = cents / 100 if cents is not None else None
    if state in ("terminated", "terminating", "preempted"):
        return PodAccess(pod_id, "terminated", price_hr=price, message=state)
    if state == "unhealthy":
        return PodAccess(pod_id, "failed", price_hr=price, message="instance unhealthy")
    if state == "active" and inst.get("ip"):
        return PodAccess(pod_id, "ready", USER, str(inst["ip"]), 22, price_hr=price)
    return PodAccess(pod_id, "pending", price_hr=price, message=state or "booting")


async def status(
    client: httpx.AsyncClient,
    api_key: str,
    pod_id: str,
    *,
    base_url: str = DEFAULT_URL,
    retry: RetryPolicy | None = None,
) -> PodAccess:
    data = await request_unless_gone(
        client, "GET", f"{base_url.rstrip('/')}/instances/{pod_id}", api_key=api_key, retry=retry
    )
    if data is NOT_FOUND:
        return PodAccess(pod_id, "unknown", message="the provider answers 404 for this instance")
    return access(data.get("data") if isinstance(data, dict) else None, pod_id)


async def terminate(
    client: httpx.AsyncClient,
    api_key: str,
    pod_id: str,
    *,
    base_url: str = DEFAULT_URL,
    retry: RetryPolicy | None = None,
) -> str:
    data = await request_unless_gone(
        client,
        "POST",
        f"{base_url.rstrip('/')}/instance-operations/terminate",
        api_key=api_key,
        retry=retry,
        json={"instance_ids": [pod_id]},
    )
    return "already gone" if data is NOT_FOUND else "terminated"


async def pods(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL) -> list[Listed] | None:
    """The account's instances as (id, name, status); None when the answer is not a list."""
    data = await request_json(client, "GET", f"{base_url.rstrip('/')}/instances", api_key=api_key)
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return [
        Listed(str(i["id"]), str(i.get("name") or ""), str(i.get("status") or "").lower(), _listed_price(i))
        for i in items
        if isinstance(i, dict) and i.get("id")
    ]


def _listed_price(item: dict[str, Any]) -> float | None:
    kind = item.get("instance_type")
    cents = listed_price(kind.get("price_cents_per_hour")) if isinstance(kind, dict) else None
    return None if cents is None else cents / 100


async def find(client: httpx.AsyncClient, api_key: str, name: str, *, base_url: str = DEFAULT_URL) -> str | None:
    return next((p.id for p in await pods(client, api_key, base_url=base_url) or [] if p.name == name), None)
