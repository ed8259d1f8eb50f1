"""Vast.ai: ``POST /api/v0/bundles/`` with a search query; ``type: "bid"`` for interruptible (spot).

``dph_total`` is USD/hr for the whole offer including storage (for bids: the minimum bid plus storage).
``gpu_ram`` is per GPU in MB as nvidia-smi counts them (MiB: an H100 reads 81559), converted to GiB."""

from __future__ import annotations

from operator import itemgetter
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
    epoch,
    gc_paused,
    impossible,
    listed_price,
    not_an_object,
    number,
    shape,
    short,
)

if TYPE_CHECKING:  # the HTTP client is the caller's; importing it costs ~55 ms of the app's start-up
    import httpx

NAME = "vast"
DEFAULT_URL = "https://console.vast.ai/api/v0"
MIB_PER_GIB = 1024


_FIELD_NAMES = (
    "rentable",
    "dph_total",
    "num_gpus",
    "gpu_ram",
    "gpu_name",
    "reliability",
    "id",
    "geolocation",
    "disk_space",
    "min_bid",
    "is_bid",
    "machine_id",
)
_FIELDS = itemgetter(*_FIELD_NAMES)


def query(*, spot: bool = False, limit: int = 200) -> dict[str, Any]:
    return {
        "verified": {"eq": True},
        "external": {"eq": False},
        "rentable": {"eq": True},
        "order": [["dph_total", "asc"]],
        "type": "bid" if spot else "on-demand",
        "limit": limit,
        "allocated_storage": 100.0,
    }


@gc_paused
def parse(payload: Any, *, spot: bool = False) -> Normalised:
    """``{offers: [...]}``; anything else is :class:`UnexpectedAnswer`, and so is a list whose offers are all
    unreadable or impossible (each one counted in ``skipped`` otherwise). An offer without a price (null)
    is left out quietly."""
    if type(payload) is not dict:
        raise UnexpectedAnswer(NAME, not_an_object(payload))
    offers = payload.get("offers")
    if type(offers) is not list:
        raise UnexpectedAnswer(NAME, "no offers list" if offers is None else f"offers is {shape(offers)}, not a list")
    out = Normalised(NAME)
    append, skip = out.append, out.skip
    # (gpu_ram, gpu_name) → (GiB, type, name, GiB within MAX_VRAM_GB)
    cards: dict[tuple[Any, Any], tuple[float, str, str, bool]] = {}
    reliabilities: dict[float, str] = {}  # reliability → "99.8%"
    # on the refresh path for every offer (offers_rank): one lookup per field, repeated work per distinct value,
    # :func:`number` only for what is not already a finite float (or an int, for the memory), the check of
    # Normalised.add inlined (the memory's part once per card)
    for o in offers:
        if type(o) is not dict:
            skip(f"an offer is {shape(o)}")
            continue
        try:  # every field in one call (Vast lists them all); one at a time when some are missing
            rentable, raw_price, raw_count, raw_ram, raw_name, raw_rel, ident, where, disk, bid, is_bid, machine = (
                _FIELDS(o)
            )
        except KeyError:
            rentable, raw_price, raw_count, raw_ram, raw_name, raw_rel, ident, where, disk, bid, is_bid, machine = map(
                o.get, _FIELD_NAMES
            )
        if rentable is False:
            continue
        if raw_price is None and type(o.get("search")) is dict:
            raw_price = o["search"].get("totalHour")
        price = raw_price if type(raw_price) is float and raw_price - raw_price == 0.0 else number(raw_price)
        count = raw_count if type(raw_count) is int else int(number(raw_count) or 0)
        kind = type(raw_ram)
        ram_mb = (
            raw_ram
            if kind is float and raw_ram - raw_ram == 0.0
            else float(raw_ram)
            if kind is int and -1e308 < raw_ram < 1e308
            else number(raw_ram)
        )
        if not 1 <= count <= MAX_GPUS or not ram_mb or ram_mb < 0:
            skip(f"num_gpus {short(raw_count)}, gpu_ram {short(raw_ram)}")
            continue
        if not price:  # null or 0: not for sale now
            if raw_price is not None and raw_price != 0:
                skip(f"price {short(raw_price)}")
            continue
        key = (ram_mb, raw_name) if type(raw_name) is str else None
        card = cards.get(key) if key is not None else None
        if card is None:
            vram = ram_mb / MIB_PER_GIB
            name = raw_name if type(raw_name) is str else str(raw_name or "")
            card = (vram, canonical_gpu(name, vram), name, 0 <= vram <= MAX_VRAM_GB)
            if key is not None:
                cards[key] = card
        vram, gpu, name, vram_ok = card
        rel = raw_rel if type(raw_rel) is float and raw_rel - raw_rel == 0.0 else number(raw_rel)
        if rel is None:
            shown = ""
        else:
            cached = reliabilities.get(rel)
            if cached is None or rel == 0:  # (0.0 and -0.0 are one key but print apart)
                cached = reliabilities[rel] = f"{rel:.1%}"
            shown = cached
        # positional, in Offer's field order: keyword calls cost twice as much over 10,000 offers
        offer = Offer(
            NAME,
            ident if type(ident) is str else str(ident),
            gpu,
            name,
            count,
            vram,
            price,
            spot or bool(is_bid),
            where if type(where) is str else str(where or ""),
            True,
            shown,
            rel,
            disk if type(disk) is float and disk - disk == 0.0 else number(disk),
            "",
            {"min_bid": bid if type(bid) is float and bid - bid == 0.0 else number(bid), "machine_id": machine},
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
    spot: bool | None = False,
    retry: RetryPolicy | None = None,
) -> Normalised:
    if spot is None:  # both: Vast searches on-demand and interruptible ("bid") separately
        import asyncio

        on_demand, bids = await asyncio.gather(
            *(fetch(client, api_key, base_url=base_url, spot=s, retry=retry) for s in (False, True)),
            return_exceptions=True,
        )
        # both searches end before either's error is raised
        if isinstance(on_demand, BaseException):
            raise on_demand
        if isinstance(bids, BaseException):
            raise bids
        both = Normalised(NAME)
        both.extend([*on_demand, *bids])
        both.skipped, both.why = on_demand.skipped + bids.skipped, on_demand.why or bids.why
        return both
    data = await request_json(
        client, "POST", f"{base_url.rstrip('/')}/bundles/", api_key=api_key, retry=retry, json=query(spot=spot)
    )
    return parse(data, spot=spot)


# ------------------------------------------------------------------------------------------ instances
NO_RETRY = RetryPolicy(attempts=1)
DEFAULT_IMAGE = "vastai/base-image:@vastai-automatic-tag"
GONE = ("exited", "unknown", "offline")  # never lead to running (vast-cli): stop polling


def create_body(
    offer: Offer, *, name: str, max_price: float, disk_gb: int | None = None, image: str | None = None
) -> dict[str, Any]:
    """``PUT /asks/{id}/``. On-demand has no server-side cap (the caller checks the price against the cap
    before and after); an interruptible bid is the offer's minimum bid, never above the cap."""
    body: dict[str, Any] = {
        "client_id": "me",
        "image": image or DEFAULT_IMAGE,
        "disk": float(disk_gb or 100),
        "label": name,
        "runtype": "ssh_direc ssh_proxy",
        "cancel_unavail": not offer.spot,
    }
    if offer.spot:
        bid = number(offer.params.get("min_bid")) or offer.price_hr
        if bid > max_price:
            raise ProviderFailure(f"the minimum bid ${bid:.3f}/hr is above the cap ${max_price:.3f}/hr")
        body["price"] = round(bid, 4)
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
) -> str:
    data = await request_json(
        client,
        "PUT",
        f"{base_url.rstrip('/')}/asks/{offer.id}/",
        api_key=api_key,
        retry=NO_RETRY,
        json=create_body(offer, name=name, max_price=max_price, disk_gb=disk_gb, image=image),
    )
    if isinstance(data, dict) and data.get("success") is False:
        raise ProviderFailure(str(data.get("msg") or data.get("error") or "the create was refused"))
    if not isinstance(data, dict) or data.get("new_contract") is None:  # a 2xx without an id: it may exist
        raise ProviderFailure("the create answer has no instance id", uncertain=True)
    return str(data["new_contract"])


def access(inst: Any, pod_id: str) -> PodAccess:
    """Direct SSH (``ports["22/tcp"]`` on the public address) when mapped, else Vast's SSH proxy."""
    if not isinstance(inst, dict):
        return PodAccess(pod_id, "unknown", message="the status answer does not mention this instance")
    state = str(inst.get("actual_status") or "").lower()
    price = number(inst.get("dph_total"))
    if state in GONE:
        return PodAccess(
            pod_id,
            "failed",
            price_hr=price,
            message=f"instance {state}: {inst.get('status_msg') or ''}".strip().rstrip(":"),
        )
    if state != "running":
        return PodAccess(pod_id, "pending", price_hr=price, message=state or "provisioning")
    ports = raw_ports if isinstance(raw_ports := inst.get("ports"), dict) else {}
    direct = raw_direct if isinstance(raw_direct := ports.get("22/tcp"), list) else []
    hp = direct[0].get("HostPort") if direct and isinstance(direct[0], dict) else None
    if hp and inst.get("public_ipaddr"):
        return PodAccess(pod_id, "ready", "root", str(inst["public_ipaddr"]).strip(), int(hp), price_hr=price)
    if inst.get("ssh_host") and number(inst.get("ssh_port")):
        return PodAccess(
            pod_id, "ready", "root", str(inst["ssh_host"]), int(number(inst["ssh_port"]) or 22), price_hr=price
        )
    return PodAccess(pod_id, "pending", price_hr=price, message="running, no SSH address yet")


async def status(
    client: httpx.AsyncClient,
    api_key: str,
    pod_id: str,
    *,
    base_url: str = DEFAULT_URL,
    retry: RetryPolicy | None = None,
) -> PodAccess:
    data = await request_unless_gone(
        client,
        "GET",
        f"{base_url.rstrip('/')}/instances/{pod_id}/",
        api_key=api_key,
        retry=retry,
        params={"owner": "me"},
    )
    if data is NOT_FOUND:
        return PodAccess(pod_id, "unknown", message="the provider answers 404 for this instance")
    inst = data.get("instances") if isinstance(data, dict) else None
    if isinstance(inst, list):  # the list shape of other endpoints
        inst = next((i for i in inst if isinstance(i, dict) and str(i.get("id")) == pod_id), None)
    return access(inst, pod_id)


async def terminate(
    client: httpx.AsyncClient,
    api_key: str,
    pod_id: str,
    *,
    base_url: str = DEFAULT_URL,
    retry: RetryPolicy | None = None,
) -> str:
    data = await request_unless_gone(
        client, "DELETE", f"{base_url.rstrip('/')}/instances/{pod_id}/", api_key=api_key, retry=retry
    )
    if data is NOT_FOUND:
        return "already gone"
    if isinstance(data, dict) and data.get("success") is False:
        raise ProviderFailure(str(data.get("msg") or data.get("error") or "destroy refused"))
    return "destroyed"


async def pods(client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_URL) -> list[Listed] | None:
    """Every instance of the account as (id, label, actual_status); None when the answer is not a list."""
    data = await request_json(
        client, "GET", f"{base_url.rstrip('/')}/instances", api_key=api_key, params={"owner": "me"}
    )
    items = data.get("instances") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return [
        Listed(
            str(i["id"]),
            str(i.get("label") or ""),
            str(i.get("actual_status") or "").lower(),
            listed_price(i.get("dph_total")),
            epoch(i.get("start_date")),
            str(i.get("status_msg") or ""),
        )
        for i in items
        if isinstance(i, dict) and i.get("id") is not None
    ]


async def find(client: httpx.AsyncClient, api_key: str, name: str, *, base_url: str = DEFAULT_URL) -> str | None:
    return next((p.id for p in await pods(client, api_key, base_url=base_url) or [] if p.name == name), None)
