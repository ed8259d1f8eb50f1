"""RunPod (GraphQL): ``POST https://api.runpod.io/graphql`` with a ``gpuTypes`` query, ``Authorization:
Bearer <key>``.

RunPod lists GPU *types*, not boxes: each type has per-GPU prices (USD per GPU-hour) for two cloud tiers
(``securePrice``/``secureSpotPrice`` for Secure Cloud, ``communityPrice``/``communitySpotPrice`` for
Community Cloud), the tier flags ``secureCloud``/``communityCloud``, ``memoryInGb`` per GPU and
``maxGpuCount``. One offer is made per (type, tier, on-demand/spot, GPU count) with the counts
:data:`GPU_COUNTS` (1, 2, 4, 8 — the shapes prime-rl's single-node deployments use) up to the type's
``maxGpuCount`` (only 1 when it is missing or garbage); ``price_hr`` is the per-GPU price × the count.
A null, zero or garbage price skips that (tier, spot) pair — never a free offer; spot is not assumed
cheaper than on-demand (it is listed at whatever RunPod says). A tier whose flag is ``false`` is listed
as unavailable (the ranking drops it); a missing flag is not taken as "no stock". The tier shows as the
offer's ``host`` ("secure" / "community"); there is no region in this query.

Errors: a bad key is HTTP 401 ("RUNPOD key rejected: …"); anything else GraphQL answers with HTTP 200 and
``{"errors": [{message, …}]}`` — the first message is the provider's error line (as runpod-python raises
it). An answer without ``data.gpuTypes`` is an error too, not an empty listing.

Renting is not implemented: we have no verified description or recorded answers of RunPod's pod
create/status/terminate APIs, so :data:`RENTABLE` is False and launch refuses with :data:`NOT_RENTABLE`
before any request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.offers._http import RetryPolicy, request_json
from services.offers.models import (
    MAX_VRAM_GB,
    Normalised,
    Offer,
    ProviderFailure,
    UnexpectedAnswer,
    canonical_gpu,
    gc_paused,
    not_an_object,
    number,
    shape,
    short,
)

if TYPE_CHECKING:  # the HTTP client is the caller's; importing it costs ~55 ms of the app's start-up
    import httpx

NAME = "runpod"
DEFAULT_URL = "https://api.runpod.io/graphql"
GPU_COUNTS = (1, 2, 4, 8)
RENTABLE = False
NOT_RENTABLE = (
    "renting RunPod pods from here is not supported yet: rent it in RunPod's console, then add the pod with `a`"
)

# only fields runpod-python's generate_gpu_query selects; lowestPrice is left out: its
# gpuCount input is per query, and the per-tier prices already say what each count costs
QUERY = (
    "query GpuTypes { gpuTypes { id displayName manufacturer memoryInGb maxGpuCount secureCloud "
    "communityCloud securePrice communityPrice secureSpotPrice communitySpotPrice } }"
)

# (tier, its flag, on-demand price field, spot price field)
TIERS = (
    ("secure", "secureCloud", "securePrice", "secureSpotPrice"),
    ("community", "communityCloud", "communityPrice", "communitySpotPrice"),
)


def gpu_types(payload: Any) -> list[Any]:
    """``data.gpuTypes``; a GraphQL ``errors`` answer raises its first message, an answer without the
    list raises too (an odd answer is an error, not "no offers")."""
    if not isinstance(payload, dict):
        raise UnexpectedAnswer(NAME, not_an_object(payload))
    errors = payload.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        msg = first.get("message") if isinstance(first, dict) else first
        text = str(msg or "").strip().splitlines()
        raise ProviderFailure(f"GraphQL error: {text[0][:200] if text else 'no message'}")
    data = payload.get("data")
    types = data.get("gpuTypes") if isinstance(data, dict) else None
    if not isinstance(types, list):
        raise UnexpectedAnswer(NAME, "no data.gpuTypes")
    return types


def counts(max_gpu_count: Any) -> tuple[int, ...]:
    """The GPU counts listed for a type: :data:`GPU_COUNTS` up to ``maxGpuCount`` (1 when unknown)."""
    top = number(max_gpu_count)
    if top is None or top < 1:
        return (1,)
    return tuple(n for n in GPU_COUNTS if n <= top)


@gc_paused
def parse(payload: Any) -> Normalised:
    """Offers per (type, tier, on-demand/spot, GPU count); a type that is unreadable, or a price that is
    garbage or impossible, is skipped and counted (all of them: :class:`UnexpectedAnswer`)."""
    out = Normalised(NAME)
    for t in gpu_types(payload):
        if type(t) is not dict:
            out.skip(f"an offer is {shape(t)}")
            continue
        g = t.get
        type_id = g("id")
        type_id = type_id if type(type_id) is str else str(type_id or "")
        shown = g("displayName")
        name = shown if type(shown) is str and shown.strip() else type_id
        vram = number(g("memoryInGb"))
        if not type_id or vram is None or not 0 < vram <= MAX_VRAM_GB:
            out.skip(f"id {short(g('id'))}, memoryInGb {short(g('memoryInGb'))}")
            continue
        # the id carries the memory ("NVIDIA H100 80GB HBM3"), the display name the form factor ("H100 PCIe")
        gpu = canonical_gpu(f"{name} {type_id}" if name != type_id else name, vram)
        sizes = counts(g("maxGpuCount"))
        for tier, flag, on_demand, spot_field in TIERS:
            offered = g(flag) is not False
            for spot, field in ((False, on_demand), (True, spot_field)):
                raw = g(field)
                per_gpu = number(raw)
                if not per_gpu:  # null or 0: not sold in this tier
                    if raw is not None and raw != 0:
                        out.skip(f"{field} {short(raw)} is not a price")
                    continue
                kind = "spot" if spot else "on-demand"
                for n in sizes:
                    # positional, in Offer's field order (the others' convention on the refresh path)
                    out.add(
                        Offer(
                            NAME,
                            f"{type_id}|{tier}|{kind}|{n}",
                            gpu,
                            name,
                            n,
                            vram,
                            round(per_gpu * n, 6),
                            spot,
                            "",
                            offered,
                            f"{tier.capitalize()} Cloud" if offered else f"not in {tier.capitalize()} Cloud",
                            None,
                            None,
                            tier,
                            {"gpu_type_id": type_id, "cloud": tier.upper(), "per_gpu_price": per_gpu},
                        )
                    )
    return out.done()


async def fetch(
    client: httpx.AsyncClient,
    api_key: str,
    *,
    base_url: str = DEFAULT_URL,
    spot: bool | None = None,
    retry: RetryPolicy | None = None,
) -> list[Offer]:
    try:
        data = await request_json(
            client, "POST", base_url.rstrip("/"), api_key=api_key, retry=retry, json={"query": QUERY}
        )
    except ProviderFailure as exc:
        if exc.auth:
            raise ProviderFailure(f"RUNPOD key rejected: {exc}", exc.status, auth=True) from None
        raise
    offers = parse(data)
    return offers if spot is None else offers.only(lambda o: o.spot == spot)
