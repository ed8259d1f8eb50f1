"""The sweep: every pod at every provider whose key is configured, from the providers' own lists of the
account's pods, joined with the audit log (services/offers/rentals.py). The app knows the pods it rented;
the sweep looks for what it does not know:

- ``open``: ours (the audit log has it open) and listed — or a "creating?" rental's name listed;
- ``billing``: ours and terminated here (a ``terminate``/``gone`` record) while the provider still lists it
  running: it may be billing with nobody watching (critical);
- ``foreign``: not ours (created in the console, by another tool or machine): shown with its price and age,
  never touched unless the user asks;
- ``gone``: open in the audit log but no longer listed (or listed as ended): the deadline pass closes it.

A pod the provider lists as ended (terminated, deleting, preempted) bills nothing and is left out. A
provider whose list cannot be had, or cannot prove absence (a truncated page), is named in ``errors``:
nothing is said about its pods. Listing-only providers (RunPod: no pod API here) are named there too."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from services.offers.launch import Providers, not_rentable
from services.offers.models import ProviderFailure
from services.offers.rentals import CLOSING, OPENING, AuditLog, Rental, open_rentals
from services.text import plain

OPEN, BILLING, FOREIGN, GONE = "open", "billing", "foreign", "gone"
KINDS = (BILLING, FOREIGN, OPEN, GONE)  # the order rows are shown in: what needs the user first


@dataclass(frozen=True)
class SweepRow:
    kind: str  # open | billing | foreign | gone
    provider: str
    pod_id: str
    name: str
    state: str  # as the provider words it; "" when it no longer lists the pod
    price_hr: float | None
    age_s: float | None  # since its creation (the provider's time, else the audit log's)
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Sweep:
    at: float
    rows: tuple[SweepRow, ...] = ()
    swept: tuple[str, ...] = ()  # providers whose whole list was read
    errors: dict[str, str] = field(default_factory=dict)  # provider → why it was not swept

    @property
    def billing(self) -> list[SweepRow]:
        return [r for r in self.rows if r.kind == BILLING]

    def to_json(self) -> dict[str, Any]:
        return {
            "time": round(self.at, 3),
            "swept": list(self.swept),
            "errors": dict(self.errors),
            "billing": len(self.billing),
            "pods": [r.to_json() for r in self.rows],
        }


def _ago(seconds: float) -> str:
    if seconds < 2 * 3600:
        return f"{max(0.0, seconds) / 60:.0f} min"
    return f"{seconds / 3600:.0f} h" if seconds < 72 * 3600 else f"{seconds / 86400:.0f} days"


def _history(records: Iterable[dict[str, Any]]) -> tuple[dict[tuple[str, str], Rental], dict[tuple[str, str], dict]]:
    """Every rental the audit log ever opened, and the closing record of those it closed (the last one)."""
    ours: dict[tuple[str, str], Rental] = {}
    closed: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in records:
        if rec["action"] == OPENING and isinstance(rec.get("rental"), dict):
            if (r := Rental.from_json(rec["rental"])) is not None:
                ours[(r.provider, r.pod_id)] = r
                closed.pop((r.provider, r.pod_id), None)
        elif rec["action"] in CLOSING:
            closed[(str(rec.get("provider") or ""), str(rec.get("pod_id") or ""))] = rec
    return ours, closed


def keyed(providers: Providers) -> list[str]:
    """The providers a key is configured for, in the registry's order."""
    from services.offers.providers import PROVIDERS

    return [name for name in PROVIDERS if providers.has_key(name)]


async def sweep(providers: Providers, audit: AuditLog, now: float, which: Iterable[str] | None = None) -> Sweep:
    """One sweep of ``which`` (default: every provider with a key)."""
    records = audit.records()
    ours, closed = _history(records)
    live = open_rentals(records)
    open_ids = {(r.provider, r.pod_id) for r in live if not r.provisional}
    creating = {(r.provider, r.name) for r in live if r.provisional}
    rows: list[SweepRow] = []
    swept: list[str] = []
    errors: dict[str, str] = {}
    for provider in keyed(providers) if which is None else which:
        if why := not_rentable(provider):
            errors[provider] = plain(why, oneline=True)
            continue
        try:
            listed = await providers.pods(provider)
        except ProviderFailure as exc:
            errors[provider] = plain(str(exc), oneline=True)[:300]
            continue
        if listed is None:
            errors[provider] = "its list of pods is truncated or not a list: pods missing from it prove nothing"
            continue
        swept.append(provider)
        seen: set[str] = set()
        for pod in listed:
            if pod.ended:
                continue
            seen.add(pod.id)
            key = (provider, pod.id)
            rental = ours.get(key)
            age = now - pod.created_at if pod.created_at else now - rental.created_at if rental else None
            name, state = plain(pod.name, oneline=True)[:80], plain(pod.state, oneline=True)[:40]
            price = pod.price_hr if pod.price_hr is not None else rental.price_hr if rental else None
            if key in open_ids or (provider, pod.name) in creating:
                rows.append(SweepRow(OPEN, provider, pod.id, name, state, price, age, "rented here, open"))
            elif key in closed:
                rec = closed[key]
                when = now - float(rec.get("ts") or now)
                why = plain(str(rec.get("reason") or rec["action"]), oneline=True)[:80]
                rows.append(
                    SweepRow(
                        BILLING,
                        provider,
                        pod.id,
                        rental.name if rental else name,
                        state,
                        price,
                        age,
                        f"terminated here {_ago(when)} ago ({why}) but {provider} still lists it as "
                        f"{state or 'no state'!r}: it may be billing",
                    )
                )
            else:
                rows.append(SweepRow(FOREIGN, provider, pod.id, name, state, price, age, "not rented here: left alone"))
        for r in live:
            if r.provider == provider and not r.provisional and r.pod_id not in seen:
                rows.append(
                    SweepRow(
                        GONE,
                        provider,
                        r.pod_id,
                        r.name,
                        "",
                        r.price_hr,
                        now - r.created_at,
                        f"{provider} no longer lists it: closed at the next deadline pass",
                    )
                )
    rows.sort(key=lambda row: (KINDS.index(row.kind), row.provider, row.name))
    return Sweep(now, tuple(rows), tuple(swept), errors)


def describe(row: SweepRow) -> str:
    """One line for a person: "billing  vast 31000007 ours-v  running  $15.20/hr  3 h old — terminated here …"."""
    price = "" if row.price_hr is None else f"  ${row.price_hr:.2f}/hr"
    age = "" if row.age_s is None else f"  {_ago(row.age_s)} old"
    return f"{row.kind:<8} {row.provider} {row.pod_id} {row.name}  {row.state or '-'}{price}{age} — {row.message}"
