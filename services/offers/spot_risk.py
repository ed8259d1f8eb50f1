"""What spot's risk costs (issue 20): a spot offer's estimate is a range, from no preemption to the expected.

    H          = hours of the run without a preemption (ranking's estimate)
    preempts   = rate × H                        expected preemptions over the run (rate: per hour, per provider)
    lost       = min(ckpt interval, steps) / 2 × H / steps    work redone after each (half an interval)
    restore    = checkpoint bytes / restore bandwidth         (0 without checkpoints: the run starts over)
    per preemption: lost + restart + restore hours, billed at the offer's price, + the restore traffic
    expected hours = H + preempts × (lost + restart + restore)
    expected $     = expected hours × $/hr + preempts × checkpoint GB × $/GB of restore traffic

A first-order estimate: rework done after a preemption can itself be preempted, which this leaves out (it
matters only when ``rate × lost`` nears 1, where spot is far behind anyway). A run with no checkpoint
interval (prime-rl's default: ``[ckpt]`` absent, or ``[ckpt]`` without ``interval`` = only the final one)
loses everything done so far: half the run per preemption on average.

The per-provider rates are assumptions (no provider publishes one): settings.toml ``[offers]
spot_interruptions_per_hour = {vast = 0.2}`` overrides them, and the rates this user measured override both
(``observed``: the spend ledger's spot rentals and the preemptions the audit log records for each,
services.offers.spend.measured_spot_rates) once a provider's spot rentals add up to MIN_OBSERVED_HOURS."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# interruptions per hour of a spot pod, by provider: ASSUMPTIONS, see docs/offers.md ("How spot risk is priced")
DEFAULT_RATES: dict[str, float] = {"primeintellect": 0.05, "vast": 0.10, "runpod": 0.10, "lambda": 0.0}
UNKNOWN_RATE = 0.10  # a provider without a default
MAX_RATE = 60.0  # per hour: a rate above one a minute is a typo, not a measurement
RESTART_HOURS = 0.25  # rent another pod, pull the image, start prime-rl again: 15 min
RESTORE_BYTES_PER_S = 100e6  # 100 MB/s from the backup bucket to the new pod
EGRESS_PER_GB = 0.09  # USD per GB of restore traffic (S3's internet egress, first 10 TB a month)
MIN_OBSERVED_HOURS = 24.0  # a measured rate replaces the assumed one after this many spot hours
MAX_HOURS = 1e9  # ~114,000 years: any hours figure above is a garbage input, priced at this cap
MAX_TRAFFIC_USD = 1e15  # likewise for the restore traffic (a garbage checkpoint size)

PROVIDER_NOTES = {  # what a spot row of this provider says about the provider's spot itself
    "runpod": "RunPod is removing its interruptible-pod API (not rented from here)",
}


@dataclass(frozen=True, slots=True)
class SpotRisk:
    """The risk of one spot offer for one run."""

    rate: float  # interruptions per hour
    preemptions: float  # expected over the run
    hours_lost: float  # per preemption: redone work + restart + restore
    base_hours: float  # no preemption
    expected_hours: float
    traffic_cost: float  # USD of restore traffic over the run (expected)
    note: str = ""  # the provider's spot is going away / unreliable

    def expected_cost(self, price_hr: float) -> float:
        return self.expected_hours * price_hr + self.traffic_cost


@dataclass(frozen=True, slots=True)
class Assumptions:
    """The figures besides the rates; documented defaults (docs/offers.md)."""

    restart_hours: float = RESTART_HOURS
    restore_bytes_per_s: float = RESTORE_BYTES_PER_S
    egress_per_gb: float = EGRESS_PER_GB


def _rate(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0 <= value <= MAX_RATE else None


def bad_rate(value: object) -> str | None:
    """Why a configured rate cannot be used ("must be a number from 0 to 60"), else None."""
    return None if _rate(value) is not None else f"must be a number of interruptions per hour from 0 to {MAX_RATE:g}"


def observed_rates(history: Iterable[tuple[str, float, int]]) -> dict[str, float]:
    """provider → interruptions/hr this user measured, from (provider, spot hours rented, preemptions seen) per
    rental; a provider counts once its spot rentals add up to :data:`MIN_OBSERVED_HOURS` (24 h: fewer hours
    say too little of a rate of ~0.1/hr)."""
    hours: dict[str, float] = {}
    seen: dict[str, int] = {}
    for provider, h, n in history:
        if isinstance(h, (int, float)) and math.isfinite(h) and h > 0 and isinstance(n, int) and n >= 0:
            hours[provider] = hours.get(provider, 0.0) + h
            seen[provider] = seen.get(provider, 0) + n
    return {p: min(MAX_RATE, seen[p] / h) for p, h in hours.items() if h >= MIN_OBSERVED_HOURS}


def interruption_rates(
    configured: Mapping[str, object] | None = None, observed: Mapping[str, float] | None = None
) -> dict[str, float]:
    """provider → interruptions/hr: the documented defaults, then settings.toml's, then this user's measured
    rates (:func:`observed_rates`) — the later wins. Unusable values are skipped (settings.py refuses them)."""
    rates = dict(DEFAULT_RATES)
    for source in (configured or {}, observed or {}):
        for provider, value in source.items():
            if (r := _rate(value)) is not None:
                rates[str(provider)] = r
    return rates


def spot_risk(
    base_hours: float,
    *,
    steps: int,
    ckpt_interval: int | None,
    ckpt_bytes: float,
    rate: float,
    provider: str = "",
    assumptions: Assumptions = Assumptions(),
) -> SpotRisk:
    """The expected preemptions and their cost for a run of ``base_hours`` on a spot pod (module docstring).
    Always finite and never below the no-preemption figure (garbage inputs count as no risk); the hours are
    capped at :data:`MAX_HOURS`, so ``expected_cost`` stays finite for any sane price (a run of 4e303 hours
    at $41,464/hr once overflowed to inf)."""
    a = assumptions
    base = min(base_hours, MAX_HOURS) if math.isfinite(base_hours) and base_hours > 0 else 0.0
    rate = _rate(rate) or 0.0
    steps = max(1, steps)
    interval = min(ckpt_interval, steps) if ckpt_interval and ckpt_interval > 0 else steps
    checkpoints = bool(ckpt_interval and ckpt_interval > 0 and ckpt_interval < steps)
    size = ckpt_bytes if checkpoints and math.isfinite(ckpt_bytes) and ckpt_bytes > 0 else 0.0
    bandwidth = a.restore_bytes_per_s if a.restore_bytes_per_s > 0 else RESTORE_BYTES_PER_S
    lost = interval / 2 * base / steps + max(0.0, a.restart_hours) + size / bandwidth / 3600
    preemptions = rate * base
    traffic = preemptions * size / 1e9 * max(0.0, a.egress_per_gb)
    expected = base + preemptions * lost
    if not (math.isfinite(expected) and math.isfinite(traffic)):  # astronomically long runs
        expected, traffic = base, 0.0
    expected, traffic = min(expected, MAX_HOURS), min(traffic, MAX_TRAFFIC_USD)
    return SpotRisk(rate, preemptions, lost, base, expected, traffic, PROVIDER_NOTES.get(provider, ""))
