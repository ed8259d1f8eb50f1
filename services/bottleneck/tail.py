"""Tail percentiles of tool time per env, from the per-trace timings of prime-rl's traces.jsonl (pure
computation). A batch waits for its slowest rollouts, so a few episodes stuck in a slow tool hold back
every step even when the mean looks fine: a slow tail is a finding of its own, whatever the diagnosis.

"Slow" is data: the ``[tool_tail]`` table of ``rules.toml`` (beside this module) sets the least number of
episodes, the p95/p50 ratio and the least p95 in seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from services.bottleneck.rules import RULES_PATH
from services.monitor.metrics import EpisodeTiming

DEFAULTS = {"min_episodes": 20, "p95_over_p50": 3.0, "min_p95_s": 5.0}


@dataclass(frozen=True)
class ToolTail:
    """Tool (agent/harness) seconds per trace of one env over the profiled window."""

    env: str  # "" when the traces named no env
    episodes: int
    p50: float
    p95: float
    max: float
    slow: bool = False

    @property
    def label(self) -> str:
        return self.env or "all envs"

    def to_json(self) -> dict[str, Any]:
        return {
            "env": self.env or None,
            "episodes": self.episodes,
            "p50_s": round(self.p50, 3),
            "p95_s": round(self.p95, 3),
            "max_s": round(self.max, 3),
            "slow": self.slow,
        }


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default, prime-rl's ``Stat``); ``values``
    sorted, not empty."""
    rank = q / 100.0 * (len(values) - 1)
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[tuple[str, float], ...]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        table = tomllib.load(f).get("tool_tail", {})
    return tuple((k, float(table.get(k, v))) for k, v in DEFAULTS.items())


def thresholds(path: str | None = None) -> dict[str, float]:
    """The ``[tool_tail]`` thresholds of rules.toml (DEFAULTS for any it leaves out)."""
    return dict(_load(str(path or RULES_PATH)))


def is_slow(p50: float, p95: float, episodes: int, limits: dict[str, float]) -> bool:
    return episodes >= limits["min_episodes"] and p95 >= limits["min_p95_s"] and p95 >= limits["p95_over_p50"] * p50


def tool_tails(
    episodes: Iterable[EpisodeTiming],
    since_step: int | None = None,
    until_step: int | None = None,
    limits: dict[str, float] | None = None,
) -> tuple[ToolTail, ...]:
    """p50/p95/max of tool time per env over the traces of steps since_step..until_step (either bound
    may be None), the slowest p95 first; traces whose tool time was not measured are left out."""
    limits = limits or thresholds()
    by_env: dict[str, list[float]] = {}
    for e in episodes:
        if (
            e.tool_s is None
            or (since_step is not None and e.step < since_step)
            or (until_step is not None and e.step > until_step)
        ):
            continue
        by_env.setdefault(e.env, []).append(e.tool_s)
    out = []
    for env, values in by_env.items():
        values.sort()
        p50, p95 = percentile(values, 50), percentile(values, 95)
        out.append(ToolTail(env, len(values), p50, p95, values[-1], is_slow(p50, p95, len(values), limits)))
    return tuple(sorted(out, key=lambda t: (-t.p95, t.env)))


def tail_variables(tails: tuple[ToolTail, ...]) -> dict[str, Any]:
    """The slowest slow tail's numbers for the rules' texts: tail_env, tail_p50_s, tail_p95_s, tail_max_s,
    tail_episodes, tail_ratio, tail_others ("" or the other slow envs); {} when no tail is slow."""
    slow = [t for t in tails if t.slow]
    if not slow:
        return {}
    t = slow[0]
    others = ", ".join(x.label for x in slow[1:4])
    return {
        "tail_env": t.label,
        "tail_p50_s": t.p50,
        "tail_p95_s": t.p95,
        "tail_max_s": t.max,
        "tail_episodes": t.episodes,
        "tail_ratio": t.p95 / t.p50 if t.p50 else None,
        "tail_others": f" (also slow: {others})" if others else "",
    }
