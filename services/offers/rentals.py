"""Rented pods, the append-only audit log of every spending action, and the deadline rules.

The audit log (``audit.jsonl`` in the data dir) is the source of truth for what is being paid for: a
``create`` record opens a rental, a ``terminate`` (or ``gone``) record closes it. A pod whose launch was
interrupted (app killed while polling) therefore still shows up at the next start, and its deadline is
still enforced. A ``create-request`` opens a *provisional* rental ("creating?": no pod id yet) — the app
may die mid-create, or the answer may be lost while the provider starts a billed pod — which a ``create``
for the same name replaces (the pod was found by name) and only a ``create-failed`` closes (a definite
refusal, or the provider's list showing no such pod after a grace period; services/offers/launch.py). Lines are
appended with O_APPEND and fsync'd; an append that did not land whole raises AuditWriteError (the
command fails, it never reports success), a torn last line is ended before the next record, and a torn or
garbled line is skipped on read.
No key or token is ever written: records carry provider, ids, prices, times and reasons only.

One create at a time per provider: while a provisional rental is open there, :meth:`AuditLog.claim` writes
no new ``create-request`` unless the caller names every open one in ``also`` (the user was shown them and
said "rent ANOTHER pod anyway") — a lost create answer plus a retry would otherwise bill two pods. The claim
reads the log fresh under an exclusive ``flock`` on ``audit.jsonl.lock``, so two apps (or an app and the
CLI) cannot both pass it.

Deadline rules (pure, clock injected): a rental past its deadline is terminated; one within
``WARN_BEFORE`` seconds of it is warned about once."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from services.errors import AuditWriteError
from services.offers.payload import loads

AUDIT_NAME = "audit.jsonl"
WARN_BEFORE = 15 * 60.0
OPENING = "create"
REQUEST = "create-request"  # opens a provisional rental
REFUSED = "create-failed"  # closes it
CLOSING = ("terminate", "gone")
CHANGES = ("deadline", "budget")  # records that change an open rental's deadline / budget
PREEMPTED = "preempted"  # a run on the rental's pod was lost with its pod (services.lifecycle.preemption)
SAME_OUTAGE_S = 3600.0  # a run's preemption recorded again within this long is the same outage (App + watcher)


@dataclass(frozen=True)
class Rental:
    """One pod created through a provider's API."""

    name: str  # the pod's name in the sidebar / pods.toml
    provider: str
    pod_id: str
    title: str  # "vast 1× H100 spot US"
    price_hr: float
    max_price: float
    created_at: float
    deadline: float | None  # epoch seconds; None = no auto-terminate
    est_cost: float | None = None
    provisional: bool = False  # asked for, no pod id known yet ("creating?")
    run: str | None = None  # the run it is rented for (the spend ledger's "per run"; None: its name)
    budget_usd: float | None = None  # the watcher warns at 80 % of it and may terminate at 100 %
    spot: bool = False  # an interruptible (spot) offer: its preemptions teach services/offers/spot_risk.py

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rental | None:
        try:
            kw = {f.name: data[f.name] for f in fields(cls) if f.name in data}
            rental = cls(**kw)
            float(rental.price_hr), float(rental.created_at)
            if rental.budget_usd is not None and not (
                isinstance(rental.budget_usd, (int, float)) and 0 < rental.budget_usd < 1e9
            ):
                rental = replace(rental, budget_usd=None)  # a garbled budget is no budget, never a crash
            if rental.run is not None and not isinstance(rental.run, str):
                rental = replace(rental, run=None)
            return rental if rental.provider and rental.pod_id else None
        except (KeyError, TypeError, ValueError):
            return None

    def spent(self, now: float) -> float:
        return max(0.0, now - self.created_at) / 3600 * self.price_hr

    def left(self, now: float) -> float | None:
        return None if self.deadline is None else self.deadline - now


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, action: str, *, now: float | None = None, **fields_: Any) -> dict[str, Any]:
        """Append one record and fsync it; raises AuditWriteError when it did not land whole. A torn last
        line (an earlier append cut short by a full disk) is ended first, so this record is never glued to
        it: the fragment stays a garbled line that readers skip. A short write is not continued — the rest
        could land after another process's record — it is reported (the record may be read back later: a
        reader skips it as torn)."""
        record = {"ts": round(time.time() if now is None else now, 3), "action": action, **fields_}
        data = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self._not_recorded(action, exc) from exc
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(
                    errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (only {written} of {len(data)} bytes written)"
                )
            os.fsync(fd)
        except OSError as exc:
            raise self._not_recorded(action, exc) from exc
        finally:
            os.close(fd)
        return record

    def _not_recorded(self, action: str, exc: OSError) -> AuditWriteError:
        why = exc.strerror or str(exc) or type(exc).__name__
        return AuditWriteError(
            f"the audit log {self.path} did not record '{action}': {why}",
            hint=f"free space in {self.path.parent} (or make it writable) and do it again",
        )

    def records(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                rec = loads(line)  # TooDeep is a ValueError: a garbled line is skipped
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("action"), str):
                out.append(rec)
        return out

    def open_rentals(self) -> list[Rental]:
        return open_rentals(self.records())

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The log to this process alone until the block ends (``flock`` on a sibling ``.lock``; every
        process that claims takes it): what the block reads is still true when it appends. Blocking — the
        holders only read and append a local file; a holder that dies releases it with its descriptor."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def claim(
        self, provider: str, name: str, *, also: Collection[str] = (), now: float | None = None, **fields_: Any
    ) -> list[Rental]:
        """Open a provisional rental (a ``create-request``) for a create about to be sent — unless a
        provisional rental at ``provider`` other than those named in ``also`` is open: then nothing is
        written and those are returned (empty: claimed). Read fresh under :meth:`locked`."""
        with self.locked():
            open_ones = [
                r for r in self.open_rentals() if r.provisional and r.provider == provider and r.name not in also
            ]
            if not open_ones:
                self.append(REQUEST, now=now, provider=provider, name=name, **fields_)
            return open_ones

    def record_preemption(self, pod_name: str, run_id: str, *, now: float | None = None) -> dict[str, Any] | None:
        """One ``preempted`` record for a run lost with its rented pod (the spend ledger counts them per rental;
        spot_risk.observed_rates learns this user's interruption rates from them). The App and the watcher both
        track preemptions and see the same outage minutes apart at most: the log is read under :meth:`locked`
        and the same run on the same rental recorded within :data:`SAME_OUTAGE_S` is that outage, not another.
        None when the pod is no open rental (a pod added by hand) or the outage is recorded already."""
        now = time.time() if now is None else now
        with self.locked():
            records = self.records()
            rental = _lost_rental(records, pod_name, now)
            if rental is None or any(
                rec.get("action") == PREEMPTED
                and (rec.get("provider"), rec.get("pod_id"), rec.get("run_id"))
                == (rental.provider, rental.pod_id, run_id)
                and abs(now - _ts(rec)) < SAME_OUTAGE_S
                for rec in records
            ):
                return None
            return self.append(
                PREEMPTED, now=now, provider=rental.provider, pod_id=rental.pod_id, name=rental.name, run_id=run_id
            )


def _lost_rental(records: list[dict[str, Any]], name: str, now: float) -> Rental | None:
    """The rental a pod named ``name`` is: open, or closed as ``gone`` within :data:`SAME_OUTAGE_S` (its provider
    said the pod was taken back: the preemption itself, recorded just before the run is marked lost)."""
    rental, closed = None, None
    for rec in records:
        if rec["action"] == OPENING and isinstance(rec.get("rental"), dict):
            r = Rental.from_json(rec["rental"])
            if r is not None and r.name == name:
                rental, closed = r, None
        elif (
            rental is not None
            and rec["action"] in CLOSING
            and (rec.get("provider"), rec.get("pod_id")) == (rental.provider, rental.pod_id)
        ):
            closed = rec
    if rental is None or closed is None:
        return rental
    return rental if closed["action"] == "gone" and abs(now - _ts(closed)) < SAME_OUTAGE_S else None


def _ts(rec: dict[str, Any]) -> float:
    """A record's time; 0 for a garbled one (it then counts as long ago)."""
    ts = rec.get("ts")
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else 0.0


def _provisional(rec: dict[str, Any]) -> Rental | None:
    try:
        return Rental(
            str(rec["name"]),
            str(rec["provider"]),
            "",
            str(rec.get("title") or f"{rec['provider']} offer {rec.get('offer') or '?'}"),
            float(rec.get("price_hr") or 0),
            float(rec.get("max_price") or 0),
            float(rec["ts"]),
            rec.get("deadline"),
            rec.get("est_cost"),
            provisional=True,
        )
    except (KeyError, TypeError, ValueError):
        return None


def open_rentals(records: Iterable[dict[str, Any]]) -> list[Rental]:
    """Rentals created and not yet closed, oldest first (a later ``deadline`` record moves the deadline),
    provisional ones (a ``create-request`` not yet matched to a pod) included."""
    live: dict[tuple[str, str], Rental] = {}
    for rec in records:
        provider = str(rec.get("provider") or "")
        key = (provider, str(rec.get("pod_id") or ""))
        if rec["action"] == REQUEST and rec.get("name") and provider:
            if (rental := _provisional(rec)) is not None:
                live[(provider, "?" + rental.name)] = rental
        elif rec["action"] == REFUSED:
            live.pop((provider, "?" + str(rec.get("name") or "")), None)
        elif rec["action"] == OPENING and isinstance(rec.get("rental"), dict):
            rental = Rental.from_json(rec["rental"])
            if rental is not None:
                live.pop((rental.provider, "?" + rental.name), None)
                live[(rental.provider, rental.pod_id)] = replace(rental, provisional=False)
        elif rec["action"] in CLOSING:
            live.pop(key, None)
        elif rec["action"] in CHANGES and key in live:
            live[key] = changed(live[key], rec)
    return sorted(live.values(), key=lambda r: r.created_at)


def changed(old: Rental, rec: dict[str, Any]) -> Rental:
    """A ``deadline`` record moves the deadline; a ``budget`` record sets the budget (a bad value: unchanged)."""
    if rec["action"] == "deadline":
        return replace(old, deadline=rec.get("deadline"))
    budget = rec.get("budget_usd")
    if budget is None or (isinstance(budget, (int, float)) and not isinstance(budget, bool) and 0 < budget < 1e9):
        return replace(old, budget_usd=None if budget is None else float(budget))
    return old


def still_starting(open_ones: Iterable[Rental], now: float) -> str:
    """The question before renting beside provisional rentals: "a rental on primeintellect may still be
    starting: ptt-abc (asked 4 min ago, no answer). Rent ANOTHER pod anyway?" and what to do instead."""
    rentals = list(open_ones)
    provider = rentals[0].provider if rentals else "?"
    which = ", ".join(f"{r.name} (asked {_ago(now - r.created_at)} ago, no answer)" for r in rentals)
    one = len(rentals) == 1
    return (
        f"{'a rental' if one else 'rentals'} on {provider} may still be starting: {which}. Rent ANOTHER pod "
        f"anyway?\n\nIts create answer was lost or has not come yet: {'that pod' if one else 'those pods'} may "
        f"be billing. Both would bill. It is looked for by name (the Spend view lists it); check the "
        f"{provider} console first."
    )


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def overdue(rentals: Iterable[Rental], now: float) -> list[Rental]:
    """Rentals past their deadline that can be terminated (a provisional one has no pod id yet: it is
    matched by name first, launch.resolve_provisional)."""
    return [r for r in rentals if r.deadline is not None and r.deadline <= now and not r.provisional]


def due_warnings(rentals: Iterable[Rental], now: float, warned: set[str], before: float = WARN_BEFORE) -> list[Rental]:
    """Rentals entering the last ``before`` seconds before their deadline, each once (``warned`` holds
    the pod ids already warned about and is updated)."""
    out = []
    for r in rentals:
        if r.deadline is not None and 0 < r.deadline - now <= before and r.pod_id not in warned and not r.provisional:
            warned.add(r.pod_id)
            out.append(r)
    return out


def default_deadline(now: float, est_hours: float, *, margin: float = 0.25, setup_hours: float = 0.5) -> float:
    """Estimate + margin: the estimated run time × (1 + margin) plus time to set the pod up, rounded up to
    the next 15 minutes."""
    seconds = (est_hours * (1 + margin) + setup_hours) * 3600
    quarter = 15 * 60
    return now + -(-seconds // quarter) * quarter
