"""Rented pods, the append-only audit log of every spending action, and the deadline rules.

The audit log (``audit.jsonl`` in the data dir) is the source of truth for what is being paid for: a
``create`` record opens a rental, a ``terminate`` (or ``gone``) record closes it. A pod whose launch was
interrupted (app killed while polling) therefore still shows up at the next start, and its deadline is
still enforced. Lines are appended with O_APPEND and fsync'd; a torn or garbled line is skipped on read.
No key or token is ever written: records carry provider, ids, prices, times and reasons only.

Deadline rules (pure, clock injected): a rental past its deadline is terminated; one within
``WARN_BEFORE`` seconds of it is warned about once."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

AUDIT_NAME = "audit.jsonl"
WARN_BEFORE = 15 * 60.0
OPENING = "create"
CLOSING = ("terminate", "gone")


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Rental | None":
        try:
            kw = {f.name: data[f.name] for f in fields(cls) if f.name in data}
            rental = cls(**kw)
            float(rental.price_hr), float(rental.created_at)
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
        record = {"ts": round(time.time() if now is None else now, 3), "action": action, **fields_}
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    def records(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("action"), str):
                out.append(rec)
        return out

    def open_rentals(self) -> list[Rental]:
        return open_rentals(self.records())


def open_rentals(records: Iterable[dict[str, Any]]) -> list[Rental]:
    """Rentals created and not yet closed, oldest first (a later ``deadline`` record moves the deadline)."""
    live: dict[tuple[str, str], Rental] = {}
    for rec in records:
        key = (str(rec.get("provider") or ""), str(rec.get("pod_id") or ""))
        if rec["action"] == OPENING and isinstance(rec.get("rental"), dict):
            rental = Rental.from_json(rec["rental"])
            if rental is not None:
                live[(rental.provider, rental.pod_id)] = rental
        elif rec["action"] in CLOSING:
            live.pop(key, None)
        elif rec["action"] == "deadline" and key in live:
            old = live[key]
            live[key] = Rental(**{**old.to_json(), "deadline": rec.get("deadline")})
    return sorted(live.values(), key=lambda r: r.created_at)


def overdue(rentals: Iterable[Rental], now: float) -> list[Rental]:
    return [r for r in rentals if r.deadline is not None and r.deadline <= now]


def due_warnings(rentals: Iterable[Rental], now: float, warned: set[str],
                 before: float = WARN_BEFORE) -> list[Rental]:
    """Rentals entering the last ``before`` seconds before their deadline, each once (``warned`` holds
    the pod ids already warned about and is updated)."""
    out = []
    for r in rentals:
        if r.deadline is not None and 0 < r.deadline - now <= before and r.pod_id not in warned:
            warned.add(r.pod_id)
            out.append(r)
    return out


def default_deadline(now: float, est_hours: float, *, margin: float = 0.25, setup_hours: float = 0.5) -> float:
    """Estimate + margin: the estimated run time × (1 + margin) plus time to set the pod up, rounded up to
    the next 15 minutes."""
    seconds = (est_hours * (1 + margin) + setup_hours) * 3600
    quarter = 15 * 60
    return now + -(-seconds // quarter) * quarter
