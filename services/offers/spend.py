"""The spend ledger: what every rented pod cost from its creation to its termination, per run and per day.

``spend.jsonl`` in the data dir, beside the audit log (services/offers/rentals.py) it is built from. One
``closed`` line per rental the audit log shows closed (``terminate`` or ``gone``), appended once, with
O_APPEND in one write and fsync'd (the audit log's own writer); a torn or garbled line is skipped on read,
a rental already there is never written again (:meth:`SpendLedger.sync` holds the ledger's lock while it
reads and appends). A closed line never changes: what was paid stays what it was, even when the audit log
is later trimmed or lost. Open rentals are not written: their cost so far is computed at each reading.

The cost is ``billed`` where the closing record carries the provider's own total (``billed_usd``), else
``price x time``: the rental's $/hr × (closed − created). No provider client here reads a billed total
yet, so today every line is ``price x time`` — an estimate the ledger names as one.

Per day: a rental's cost is split over the local calendar days it ran, in proportion to its time in each.
Per run: the rental's ``run`` (given at launch) or, without one, its pod name (one run per rented pod)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from services.offers.rentals import CHANGES, CLOSING, PREEMPTED, AuditLog, Rental, changed, open_rentals

LEDGER_NAME = "spend.jsonl"
BILLED, ESTIMATED = "billed", "price x time"


@dataclass(frozen=True)
class Spend:
    """One rented pod's cost: closed (``end`` set) or still running (cost so far)."""

    name: str
    provider: str
    pod_id: str
    run: str
    title: str
    price_hr: float
    start: float
    end: float | None
    cost: float
    basis: str  # billed | price x time
    budget_usd: float | None = None
    reason: str = ""  # why it closed (deadline, budget, user ...)
    spot: bool = False
    preemptions: int = 0  # "preempted" records the audit log holds for it (services.offers.rentals.PREEMPTED)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Spend | None:
        try:
            spend = cls(
                str(data["name"]),
                str(data["provider"]),
                str(data["pod_id"]),
                str(data.get("run") or data["name"]),
                str(data.get("title") or ""),
                _money(data["price_hr"]),
                _time(data["start"]),
                None if data.get("end") is None else _time(data["end"]),
                _money(data["cost"]),
                str(data.get("basis") or ESTIMATED),
                _opt_money(data.get("budget_usd")),
                str(data.get("reason") or ""),
                data.get("spot") is True,
                _count(data.get("preemptions")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return spend if spend.provider and spend.pod_id else None

    def per_day(self, now: float) -> dict[str, float]:
        """The cost split over the local days it ran: ``{"2025-01-31": 1.5, ...}``."""
        end = self.end if self.end is not None else max(now, self.start)
        if end <= self.start:
            return {_day(self.start): self.cost} if self.cost else {}
        out: dict[str, float] = {}
        t = self.start
        while t < end:
            midnight = (
                datetime.fromtimestamp(t).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
            ).timestamp()
            upto = min(end, midnight)
            out[_day(t)] = out.get(_day(t), 0.0) + self.cost * (upto - t) / (end - self.start)
            t = upto
        return out


def _money(value: Any) -> float:
    v = float(value)
    if not (v == v and 0 <= v < 1e9):
        raise ValueError(f"not an amount: {value!r}")
    return v


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000 else 0


def _opt_money(value: Any) -> float | None:
    return None if value is None else _money(value)


def _time(value: Any) -> float:
    v = float(value)
    if not (v == v and 0 <= v < 1e11):
        raise ValueError(f"not a time: {value!r}")
    return v


def _day(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d")


def open_spend(r: Rental, now: float, preemptions: int = 0) -> Spend:
    return Spend(
        r.name,
        r.provider,
        r.pod_id,
        r.run or r.name,
        r.title,
        r.price_hr,
        r.created_at,
        None,
        round(r.spent(now), 4),
        ESTIMATED,
        r.budget_usd,
        spot=bool(r.spot),
        preemptions=preemptions,
    )


def preemption_counts(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(provider, pod id) -> the preemptions the audit log records for that rental."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for rec in records:
        if rec.get("action") == PREEMPTED:
            out[(str(rec.get("provider") or ""), str(rec.get("pod_id") or ""))] += 1
    return dict(out)


def spot_history(spends: Iterable[Spend], now: float) -> list[tuple[str, float, int]]:
    """(provider, spot hours rented, preemptions seen) per spot rental: spot_risk.observed_rates' input."""
    return [
        (s.provider, max(0.0, (s.end if s.end is not None else now) - s.start) / 3600, s.preemptions)
        for s in spends
        if s.spot
    ]


def closed_spends(records: Iterable[dict[str, Any]]) -> list[Spend]:
    """The rentals the audit records show closed, each with its cost (a rental closed twice: the first)."""
    live: dict[tuple[str, str], Rental] = {}
    out: list[Spend] = []
    records = list(records)
    # all of a rental's preemptions, also those recorded after it closed: a pod its provider reports gone is
    # closed first, and its run is marked lost (and its preemption recorded) just after
    preempted = preemption_counts(records)
    for rec in records:
        if rec.get("action") == PREEMPTED:
            continue
        key = (str(rec.get("provider") or ""), str(rec.get("pod_id") or ""))
        action = rec.get("action")
        if action == "create" and isinstance(rec.get("rental"), dict):
            if (rental := Rental.from_json(rec["rental"])) is not None:
                live[(rental.provider, rental.pod_id)] = replace(rental, provisional=False)
        elif action in CHANGES and key in live:
            live[key] = changed(live[key], rec)
        elif action in CLOSING and key in live:
            r = live.pop(key)
            seen = preempted.get(key, 0)
            try:
                end = max(r.created_at, _time(rec["ts"]))
            except (KeyError, TypeError, ValueError):
                continue
            billed = rec.get("billed_usd")
            try:
                cost, basis = (
                    (_money(billed), BILLED)
                    if billed is not None
                    else (round(max(0.0, end - r.created_at) / 3600 * r.price_hr, 4), ESTIMATED)
                )
            except (TypeError, ValueError):
                cost, basis = round(max(0.0, end - r.created_at) / 3600 * r.price_hr, 4), ESTIMATED
            out.append(
                Spend(
                    r.name,
                    r.provider,
                    r.pod_id,
                    r.run or r.name,
                    r.title,
                    r.price_hr,
                    r.created_at,
                    end,
                    cost,
                    basis,
                    r.budget_usd,
                    str(rec.get("reason") or rec["action"])[:200],
                    bool(r.spot),
                    seen,
                )
            )
    return out


class SpendLedger:
    def __init__(self, path: Path) -> None:
        self.log = AuditLog(Path(path))  # the same append-only writer and reader, its own lock

    @property
    def path(self) -> Path:
        return self.log.path

    def closed(self) -> list[Spend]:
        """The ledger's closed lines (garbled ones skipped; a pod written twice: the first line)."""
        seen: set[tuple[str, str]] = set()
        out = []
        for rec in self.log.records():
            if rec["action"] != "closed" or (spend := Spend.from_json(rec)) is None:
                continue
            if (spend.provider, spend.pod_id) not in seen:
                seen.add((spend.provider, spend.pod_id))
                out.append(spend)
        return out

    def sync(self, audit: AuditLog, now: float | None = None) -> list[Spend]:
        """Append what the audit log shows closed and the ledger lacks; return every rental's spend (the
        ledger's closed ones, then the open ones as of ``now``), oldest first."""
        now = time.time() if now is None else now
        records = audit.records()
        with self.log.locked():
            have = {(s.provider, s.pod_id) for s in self.closed()}
            for spend in closed_spends(records):
                if (spend.provider, spend.pod_id) not in have:
                    have.add((spend.provider, spend.pod_id))
                    self.log.append("closed", now=now, **spend.to_json())
            closed = self.closed()
        shut = {(s.provider, s.pod_id) for s in closed}
        counts = preemption_counts(records)
        live = [
            open_spend(r, now, counts.get((r.provider, r.pod_id), 0))
            for r in open_rentals(records)
            if not r.provisional and (r.provider, r.pod_id) not in shut
        ]
        return sorted(closed + live, key=lambda s: s.start)


def measured_spot_rates(data_dir: Path, now: float | None = None) -> dict[str, float]:
    """provider -> this user's measured spot interruptions/hr (spot_risk.observed_rates over the ledger: only a
    provider with MIN_OBSERVED_HOURS of spot rentals); {} when the ledger cannot be read or written."""
    from services.offers.rentals import AUDIT_NAME
    from services.offers.spot_risk import observed_rates

    now = time.time() if now is None else now
    try:
        spends = SpendLedger(Path(data_dir) / LEDGER_NAME).sync(AuditLog(Path(data_dir) / AUDIT_NAME), now)
    except OSError:
        return {}
    return observed_rates(spot_history(spends, now))


def totals(spends: Iterable[Spend], now: float) -> dict[str, Any]:
    """Per run and per day (local), the total and what is billing now ($/hr of the open rentals)."""
    spends = list(spends)
    runs: dict[str, float] = defaultdict(float)
    days: dict[str, float] = defaultdict(float)
    for s in spends:
        runs[s.run] += s.cost
        for day, amount in s.per_day(now).items():
            days[day] += amount
    return {
        "total": round(sum(s.cost for s in spends), 2),
        "per_hour_now": round(sum(s.price_hr for s in spends if s.end is None), 4),
        "runs": {k: round(v, 2) for k, v in sorted(runs.items())},
        "days": {k: round(v, 2) for k, v in sorted(days.items())},
    }
