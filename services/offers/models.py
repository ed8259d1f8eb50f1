"""The normalised offer and the error helpers the provider modules share."""

from __future__ import annotations

import functools
import gc
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.offers.payload import loads
from services.pod.specs import ssh_target

PROVIDERS = ("primeintellect", "vast", "lambda", "runpod")


def gc_paused(fn):
    """Run ``fn`` with the cyclic garbage collector paused. For the loops that build an object per offer
    (normalising, ranking: 10,000 at a time): each 700 new objects start a collection, and every tenth of
    those walks older generations too — in the TUI that is the whole app (~90k objects): 80-100 ms stalls
    inside a 20 ms ranking (tests/benchmarks/offers_rank.py, offers_table.py). These loops make no cycles;
    the collector runs again as soon as they return."""

    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@dataclass(unsafe_hash=True, slots=True)
class Offer:
    """One rentable box. ``price_hr`` is USD per hour for the whole offer (all ``gpu_count`` GPUs);
    ``vram_gb`` is per GPU (GiB as the driver reports it, or the provider's nominal GB).

    Treated as immutable (never assigned to after construction) but not ``frozen``: a frozen dataclass
    costs 5× more to build, and normalising 10,000 offers is on the refresh path (offers_rank)."""

    provider: str
    id: str
    gpu_type: str  # canonical key of the speed table, e.g. "H100", "H100-PCIE", "RTX4090"
    gpu_name: str  # as the provider spells it
    gpu_count: int
    vram_gb: float
    price_hr: float
    spot: bool = False
    region: str = ""
    available: bool = True
    availability: str = ""  # stock status / reliability as the provider words it
    reliability: float | None = None
    disk_gb: float | None = None
    host: str = ""  # the upstream cloud behind an aggregator (Prime Intellect), RunPod's tier (secure/community)
    # what the provider's create call needs (Prime: cloudId/socket/…, Vast: min_bid, Lambda: region);
    # not part of the offer's identity
    params: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def vram_total_gb(self) -> float:
        return self.vram_gb * self.gpu_count

    @property
    def title(self) -> str:
        where = f" {self.region}" if self.region else ""
        return f"{self.provider} {self.gpu_count}× {self.gpu_type}{' spot' if self.spot else ''}{where}"


@dataclass(frozen=True)
class PodAccess:
    """What a provider says about a pod it runs: ``state`` is pending | ready | failed | terminated |
    unknown. ``terminated`` only when the provider says so; a pod its answer does not mention (a 404, an
    empty or odd answer) is ``unknown`` — absence alone never closes a rental (launch.confirm_gone lists
    the provider's pods first)."""

    pod_id: str
    state: str
    user: str = "root"
    host: str = ""
    port: int = 22
    price_hr: float | None = None
    message: str = ""

    @property
    def target(self) -> str:
        return ssh_target(self.user, self.host, self.port) if self.host else ""


@dataclass(frozen=True)
class Listed:
    """One pod in a provider's list of the account's pods: id, name (label) and state as it words it; its
    price and creation time where the list gives them (the sweep shows a pod created elsewhere with both), and
    the provider's own status message (Vast's ``status_msg``)."""

    id: str
    name: str
    state: str
    price_hr: float | None = None
    created_at: float | None = None  # epoch seconds
    message: str = ""

    @property
    def ended(self) -> bool:
        """The list itself says this pod is over (terminated/deleting/preempted/exited)."""
        return self.state in ENDED_STATES


ENDED_STATES = frozenset({"terminated", "terminating", "deleting", "deleted", "preempted", "destroyed"})  # not
# Vast's "exited": a stopped instance still bills its storage


def parse_ssh(value: Any, default_user: str = "root") -> tuple[str, str, int] | None:
    """``"root@1.2.3.4 -p 22"``, ``"ubuntu@h:2200"``, ``"root@[v6]:2200"``, ``"h"``, or a list of those (first non-null;
    ``[null]`` is none) → (user, host, port)."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    if not isinstance(value, str) or not value.strip():
        return None
    text, port = value.strip(), 22
    m = re.search(r"\s-p\s*(\d+)", text)
    if m:
        port, text = int(m.group(1)), (text[: m.start()] + text[m.end() :]).strip()
    user, _, host = text.rpartition("@")
    m = re.fullmatch(r"([^:\s]+):(\d+)", host) or re.fullmatch(r"\[([^\]\s]+)\](?::(\d+))?", host)  # [v6]:port
    if m:
        host, port = m.group(1), int(m.group(2) or port)
    if not host or " " in host or not 0 < port < 65536:
        return None
    return (user or default_user), host, port


@dataclass(frozen=True)
class ProviderError:
    provider: str
    message: str


@dataclass(frozen=True)
class Skipped:
    """Offers a provider listed that were dropped as impossible (price, GPU count, memory), with the first reason."""

    provider: str
    count: int
    why: str


@dataclass(frozen=True)
class FetchResult:
    offers: tuple[Offer, ...] = ()
    errors: tuple[ProviderError, ...] = field(default=())
    skipped: tuple[Skipped, ...] = field(default=())


class ProviderFailure(Exception):
    """A provider answered with an error (or not at all); ``str()`` is the reason shown to the user.

    ``auth``: the provider rejected the key (401/403, or Vast's 404 "Invalid user key") — it says nothing
    about any pod. ``uncertain``: the request may have taken effect (no answer, a 5xx, an unreadable 2xx):
    a create that fails this way may still have started a billed pod."""

    def __init__(self, message: str, status: int | None = None, *, auth: bool = False, uncertain: bool = False) -> None:
        super().__init__(message)
        self.status, self.auth, self.uncertain = status, auth, uncertain


class UnexpectedAnswer(ProviderFailure):
    """An answer that is not what the provider documents: wrongly shaped, nested too deep, too big.
    ``str()``: "unexpected answer from vast: offers is a string, not a list"; :attr:`line` leaves the
    provider out, for where it is named already ("vast: unexpected answer: nested too deep")."""

    def __init__(self, provider: str, what: str, status: int | None = None, *, uncertain: bool = False) -> None:
        self.provider, self.what = provider, what
        super().__init__(
            f"unexpected answer from {provider}: {what}" if provider else self.line_for(what),
            status,
            uncertain=uncertain,
        )

    @staticmethod
    def line_for(what: str) -> str:
        return f"unexpected answer: {what}"

    @property
    def line(self) -> str:
        return self.line_for(self.what)


def shape(value: Any) -> str:
    """What a JSON value is, in words: "a JSON list", "an object", "a string", "a number", "null"."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


def not_an_object(payload: Any) -> str:
    """What an answer that should be a JSON object is instead: "a JSON list, not an object"."""
    what = shape(payload)
    return f"{what.replace('a ', 'a JSON ', 1) if what.startswith('a ') else what}, not an object"


def short(value: Any) -> str:
    """A value as it may appear in a one-line message: at most ~40 characters."""
    if isinstance(value, (list, dict)):
        return shape(value)
    if type(value) is int and abs(value) > 10**12:  # str() of a 5000-digit int raises; float() of 400 digits
        return f"an integer of ~{int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


# ------------------------------------------------------------------------------------------ sanity
MAX_GPU_HOUR = 1000.0  # USD per GPU-hour: the dearest GPU rents for ~$10; anything above is garbage
# and below a tenth of a cent it is no price either (1e-300 would rank first, shown as $0.00)
MIN_GPU_HOUR = 0.001
MAX_GPUS = 1024
MAX_VRAM_GB = 4096.0  # per GPU


def impossible(offer: Offer) -> str | None:
    """Why an offer cannot be real (price not finite or outside [$0.001, $1000] per GPU-hour, GPU count, memory), else
    None. Every normaliser checks each offer with it before listing it."""
    n, price, vram = offer.gpu_count, offer.price_hr, offer.vram_gb
    if type(n) is not int or not 1 <= n <= MAX_GPUS:
        return f"{short(n)} GPUs"
    if not MIN_GPU_HOUR * n <= price <= MAX_GPU_HOUR * n:  # False for NaN too
        return f"price {short(price)} $/hr for {n} GPU{'s' if n > 1 else ''}"
    if not 0 <= vram <= MAX_VRAM_GB:
        return f"{short(vram)} GB per GPU"
    return None


class Normalised(list):  # list[Offer]
    """One provider's offers from one answer, each checked with :func:`impossible`. ``skipped`` counts the
    offers dropped as unreadable or impossible (``why``: the first reason); an offer the provider lists
    without a price (null, 0: not for sale) is left out quietly, as before. :meth:`done` turns an answer
    with offers but none usable into :class:`UnexpectedAnswer`."""

    def __init__(self, provider: str) -> None:
        super().__init__()
        self.provider, self.skipped, self.why = provider, 0, ""

    def skip(self, why: str) -> None:
        self.skipped += 1
        if not self.why:
            self.why = why

    def add(self, offer: Offer) -> None:
        n = offer.gpu_count  # impossible(), inlined (Prime's, Vast's and Lambda's parsers inline this very check)
        if (
            type(n) is int
            and 1 <= n <= MAX_GPUS
            and MIN_GPU_HOUR * n <= offer.price_hr <= MAX_GPU_HOUR * n
            and 0 <= offer.vram_gb <= MAX_VRAM_GB
        ):
            self.append(offer)
        else:
            self.skip(impossible(offer) or "impossible")

    def done(self) -> Normalised:
        if not self and self.skipped:
            many = f"all {self.skipped} offers" if self.skipped > 1 else "its one offer"
            raise UnexpectedAnswer(self.provider, f"{many} unreadable or impossible ({self.why})")
        return self

    def only(self, keep: Any) -> Normalised:
        """The offers ``keep(offer)`` is true for, with the counts kept."""
        out = Normalised(self.provider)
        out.extend(o for o in self if keep(o))
        out.skipped, out.why = self.skipped, self.why
        return out


# ------------------------------------------------------------------------------------------ GPU names

_CANON = (  # (needle in the squashed upper-case name, canonical type); first match wins
    ("GH200", "GH200"),
    ("B300", "B300"),
    ("B200", "B200"),
    ("H200", "H200"),
    ("H100PCIE", "H100-PCIE"),
    ("H100NVL", "H100-PCIE"),
    ("H100", "H100"),
    ("A10080", "A100"),
    ("A10040", "A100-40GB"),
    ("A100", "A100"),
    ("L40S", "L40S"),
    ("L40", "L40"),
    ("RTXPRO6000", "RTX-PRO-6000"),
    ("RTX6000ADA", "RTX6000-ADA"),
    ("A6000", "A6000"),
    ("RTX5090", "RTX5090"),
    ("RTX4090", "RTX4090"),
    ("RTX3090", "RTX3090"),
    ("A40", "A40"),
    ("A10", "A10"),
    ("L4", "L4"),
    ("V100", "V100"),
)


@functools.lru_cache(maxsize=1024)
def canonical_gpu(name: str, memory_gb: float | None = None) -> str:
    """Map a provider's GPU name to the speed table's key ("H100 SXM" → "H100", "RTX_4090" → "RTX4090")."""
    squashed = re.sub(r"[^A-Z0-9]", "", name.upper())
    for needle, canon in _CANON:
        if needle in squashed:
            if canon == "A100" and memory_gb is not None and memory_gb < 60:
                return "A100-40GB"
            return canon
    return squashed or "UNKNOWN"


@functools.lru_cache(maxsize=1024)
def nominal_gb(name: str) -> float | None:
    """Per-GPU memory written into a type name: "H100_80GB" → 80, "A100 (40 GB SXM4)" → 40."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*GB", name, re.IGNORECASE)
    return float(m.group(1)) if m else None


# ------------------------------------------------------------------------------------------ errors


def error_message(status: int, body: str) -> str:
    """One line from any of the four error shapes: FastAPI ``detail`` (str or list), Prime's
    ``errors[]`` (or GraphQL's ``errors[{message}]``), Vast's ``{error, msg}``, Lambda's
    ``{error: {code, message, suggestion}}``, or text."""
    text = body.strip()
    try:
        data: Any = loads(text) if text else None
    except ValueError:  # TooDeep too: a deep error body is shown as its first line
        data = None
    msg = ""
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            msg = str(err.get("message") or err.get("code") or "")
            if err.get("suggestion"):
                msg += f" ({err['suggestion']})"
        elif isinstance(data.get("detail"), list):
            msg = "; ".join(
                f"{'.'.join(str(x) for x in d.get('loc', [])[1:])}: {d.get('msg', '')}"
                if isinstance(d, dict)
                else str(d)
                for d in data["detail"]
            )
        elif data.get("detail"):
            msg = str(data["detail"])
        elif isinstance(data.get("errors"), list):
            msg = "; ".join(
                (
                    f"{e.get('param', '')}: {e.get('details', '')}"
                    if "message" not in e or "details" in e
                    else str(e["message"])
                )
                if isinstance(e, dict)
                else str(e)  # GraphQL: {message}
                for e in data["errors"]
            )
        elif data.get("msg") or data.get("message"):
            msg = str(data.get("msg") or data.get("message"))
        elif isinstance(err, str):
            msg = err
    if not msg:
        msg = text.splitlines()[0][:200] if text else ""
    return f"HTTP {status}: {msg}" if msg else f"HTTP {status}"


_INF = (float("inf"), float("-inf"))


def number(value: Any) -> float | None:
    """A finite float, or None for null/missing/garbage (never 0 for an unknown price)."""
    kind = type(value)
    if kind is float:
        return value if value == value and value not in _INF else None
    if kind is int:
        return float(value) if -1e308 < value < 1e308 else None  # json reads 400 digits as one int
    if kind is bool or value is None:
        return None
    try:
        f = float(value)  # an int subclass beyond a float's range overflows
    except (TypeError, ValueError, OverflowError):
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def epoch(value: Any) -> float | None:
    """A time a provider lists: epoch seconds (Vast's ``start_date``) or ISO 8601 (Prime's ``createdAt``,
    ``Z`` or an offset; without one: UTC) → epoch seconds; None for anything else or a time out of range."""
    t: float | None
    if isinstance(value, str):
        from datetime import datetime, timezone

        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        t = when.timestamp()
    else:
        t = number(value)
    return t if t is not None and 0 < t < 1e11 else None


def listed_price(value: Any) -> float | None:
    """A listed pod's $/hr, or None when it is not a usable price."""
    price = number(value)
    return price if price is not None and 0 <= price < 1e6 else None
