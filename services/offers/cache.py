"""The last offers per search (spot / on-demand) on disk, so the pane opens with offers at once and a
refresh within the TTL is not needed. Only offers are cached, never errors or keys. A corrupt or
foreign cache file is ignored (and overwritten by the next fetch), and so is an impossible offer in it."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from services.atomic import atomic_write_text
from services.offers.models import FetchResult, Offer, impossible
from services.offers.payload import loads

VERSION = 1
DEFAULT_TTL = 600.0
_FIELDS = {f.name for f in fields(Offer)}


def cache_path(base: Path, spot: bool) -> Path:
    return Path(base) / f"offers-{'spot' if spot else 'on-demand'}.json"


def save(base: Path, spot: bool, result: FetchResult, now: float) -> None:
    doc = {
        "version": VERSION,
        "fetched_at": now,
        "offers": [dict(asdict(o), params=dict(o.params)) for o in result.offers],
    }
    atomic_write_text(cache_path(base, spot), json.dumps(doc, separators=(",", ":"), default=str))


def load(base: Path, spot: bool, now: float, ttl: float = DEFAULT_TTL) -> tuple[FetchResult, float] | None:
    """(offers, age in seconds) when a fresh cache exists, else None."""
    try:
        doc: Any = loads(cache_path(base, spot).read_bytes())  # a tampered file nested 100k deep: ignored
        if doc.get("version") != VERSION:
            return None
        age = now - float(doc["fetched_at"])
        if not 0 <= age <= ttl:
            return None
        offers = tuple(
            o
            for o in (Offer(**{k: v for k, v in o.items() if k in _FIELDS}) for o in doc["offers"])
            if impossible(o) is None
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return FetchResult(offers), age
