"""The ``[offers]`` table of settings.toml as a typed object (app/settings.py ``load_offer_settings`` reads and
checks the file; this is what the Offers pane, the rentals and the commands use): defaults live here, not at the
call sites."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.offers.models import PROVIDERS

# provider -> its base-URL key in [offers] (prime_url = "https://..."): a proxy, a staging API, a test stub
URL_KEYS = {"primeintellect": "prime_url", "vast": "vast_url", "lambda": "lambda_url", "runpod": "runpod_url"}


@dataclass(frozen=True)
class OfferSettings:
    cache_ttl: float = 600.0  # seconds a fetched offer list is reused
    cap_margin: float = 0.10  # default max price = listed price + 10 %
    deadline_margin: float = 0.25  # default deadline = estimate x 1.25 + 30 min
    image: str | None = None  # the pod image a rent asks for (None: the provider's default)
    disk_gb: int | None = None
    warn_minutes: float | None = None
    urls: Mapping[str, str] = field(default_factory=dict)  # provider -> base URL set in [offers]
    keys: Mapping[str, str] = field(default_factory=dict)  # provider -> API key from [offers.keys]
    spot_interruptions_per_hour: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> OfferSettings:
        """From the checked ``[offers]`` table; a value of the wrong shape is left at its default (the loader
        has said so already)."""

        def num(key: str, default: float | None) -> float | None:
            v = table.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

        def text_map(v: Any) -> dict[str, str]:
            return {k: x for k, x in v.items() if isinstance(x, str)} if isinstance(v, Mapping) else {}

        rates = table.get("spot_interruptions_per_hour")
        disk = table.get("disk_gb")
        image = table.get("image")
        return cls(
            cache_ttl=num("cache_ttl", 600.0) or 600.0,
            cap_margin=num("cap_margin", 0.10) or 0.0,
            deadline_margin=num("deadline_margin", 0.25) or 0.0,
            image=image if isinstance(image, str) and image else None,
            disk_gb=disk if isinstance(disk, int) and not isinstance(disk, bool) else None,
            warn_minutes=num("warn_minutes", None),
            urls={p: str(table[k]) for p, k in URL_KEYS.items() if isinstance(table.get(k), str) and table.get(k)},
            keys={p: k for p, k in text_map(table.get("keys")).items() if p in PROVIDERS},
            spot_interruptions_per_hour={
                p: float(r) for p, r in rates.items() if isinstance(r, (int, float)) and not isinstance(r, bool)
            }
            if isinstance(rates, Mapping)
            else {},
        )
