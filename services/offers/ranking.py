"""$ per completed run (issue 4): Est. $ = price/hr × estimated hours, not $/hr.

    work (FLOPs) = steps × (train_tokens × 6·P  +  gen_tokens × 2·P × decode_penalty)
    throughput   = h100_peak_flops × mfu × speed[gpu] × gpu_count × parallel_efficiency^log2(gpu_count)
    hours        = work / throughput / 3600     × (1 + spot_overhead) on spot

``speed`` is per GPU type relative to an H100 SXM (``gpu_speeds.toml``). "Fits" comes from the memory
estimator: FSDP-sharded training states over the offer's GPUs (optimizer on the CPU, prime-rl's
default) plus activations must stay under 95 % of a GPU's memory. Offers that fit are ranked by Est. $
ascending; misfits (with their reason) follow when asked for."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from services.config.findings import ConfigError
from services.config.memory import GIB, estimate, human, lookup_model
from services.offers.models import Offer

HEADROOM = 0.95  # CUDA context, allocator fragmentation
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


@functools.lru_cache(maxsize=None)
def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("services.offers").joinpath("gpu_speeds.toml").read_text(encoding="utf-8"))


def speeds() -> dict[str, float]:
    return dict(_table()["speed"])


def constants() -> dict[str, float]:
    return dict(_table()["model"])


@dataclass(frozen=True)
class RunSpec:
    """The run to price. Defaults: a prime-rl RL run of 500 steps, 256 rollouts × 2k tokens per step."""

    model: str = DEFAULT_MODEL
    params: float | None = None  # overrides the registry
    steps: int = 500
    train_tokens_per_step: int = 256 * 2048
    gen_tokens_per_step: int = 256 * 1024
    seq_len: int = 2048

    def flops(self) -> float:
        p = self.params if self.params is not None else _params(self.model)
        c = constants()
        return self.steps * (self.train_tokens_per_step * 6 * p
                             + self.gen_tokens_per_step * 2 * p * c["decode_penalty"])


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _int(*values: Any) -> int | None:
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def run_spec_from_config(data: dict[str, Any], *, default_steps: int = 500) -> tuple[RunSpec, list[str]]:
    """The run a prime-rl config describes (rl or sft) → (RunSpec, notes on what was assumed).

    rl: tokens per step = orchestrator.batch_size (default 128) × seq_len trained, and as many
    generated at half the length; sft: data.batch_size × data.seq_len, nothing generated."""
    notes: list[str] = []
    model = _get(data, "model", "name") or _get(data, "trainer", "model", "name")
    if not isinstance(model, str):
        model = data.get("model") if isinstance(data.get("model"), str) else None
    if not model:
        model = DEFAULT_MODEL
        notes.append(f"no model name in the config: priced as {DEFAULT_MODEL}")
    steps = _int(data.get("max_steps"), _get(data, "trainer", "max_steps"), _get(data, "orchestrator", "max_steps"))
    if steps is None:
        steps = default_steps
        notes.append(f"max_steps is not set (runs until stopped): priced for {default_steps} steps")
    if "orchestrator" in data or "trainer" in data:  # rl (an sft file may carry [inference] for evals)
        seq = _int(data.get("seq_len"), _get(data, "trainer", "model", "seq_len"),
                   _get(data, "orchestrator", "seq_len")) or 2048
        batch = _int(_get(data, "orchestrator", "batch_size")) or 128
        return RunSpec(model=model, steps=steps, train_tokens_per_step=batch * seq,
                       gen_tokens_per_step=batch * seq // 2, seq_len=seq), notes
    seq = _int(_get(data, "data", "seq_len"), data.get("seq_len")) or 128
    batch = _int(_get(data, "data", "batch_size")) or 128
    return RunSpec(model=model, steps=steps, train_tokens_per_step=batch * seq, gen_tokens_per_step=0,
                   seq_len=seq), notes


def _params(model: str) -> float:
    shape = lookup_model(model)
    if shape is None:
        raise ConfigError(f"{model} is not in the model registry", hint="pick a registry model")
    return shape.active_params or shape.params


@dataclass(unsafe_hash=True, slots=True)  # not frozen: built 10,000 times per ranking (see Offer)
class Ranked:
    offer: Offer
    fits: bool
    reason: str  # why it does not fit ("" when it does)
    est_hours: float
    est_cost: float
    measured: bool = False  # est_hours comes from the steps/hr this user's runs reached, not the model

    def to_json(self) -> dict[str, Any]:
        o = self.offer
        return {"provider": o.provider, "id": o.id, "gpu_type": o.gpu_type, "gpu_count": o.gpu_count,
                "vram_gb": round(o.vram_gb, 1), "price_hr": round(o.price_hr, 4), "spot": o.spot,
                "region": o.region, "fits": self.fits, "reason": self.reason,
                "est_hours": round(self.est_hours, 3), "est_cost": round(self.est_cost, 2),
                "measured": self.measured}


@dataclass(frozen=True)
class Observed:
    """The rate an earlier run actually reached on a GPU type (recorded by the monitor)."""

    model: str
    gpu_type: str
    gpu_count: int
    steps_per_hr: float
    tokens_per_step: int


def calibrated_rates(observed: Iterable[Observed], run: RunSpec) -> dict[tuple[str, int], float]:
    """(gpu type, count) → steps/hr for ``run``: runs of the same model, scaled by tokens per step
    (a run with twice the tokens per step takes twice as long per step); the median of the runs."""
    by_key: dict[tuple[str, int], list[float]] = {}
    for ob in observed:
        if ob.model.lower() != run.model.lower() or ob.steps_per_hr <= 0 or ob.tokens_per_step <= 0:
            continue
        scale = ob.tokens_per_step / max(1, run.train_tokens_per_step)
        by_key.setdefault((ob.gpu_type, ob.gpu_count), []).append(ob.steps_per_hr * scale)
    return {k: sorted(v)[len(v) // 2] for k, v in by_key.items()}


def throughput(offer: Offer) -> float:
    """Effective FLOP/s of the whole offer."""
    return _throughput(offer.gpu_type, offer.gpu_count)


def _throughput(gpu_type: str, count: int) -> float:
    c, s = constants(), speeds()
    n = max(1, count)
    return c["h100_peak_flops"] * c["mfu"] * s.get(gpu_type, s["unknown"]) * n * c["parallel_efficiency"] ** math.log2(n)


def est_hours(offer: Offer, run: RunSpec) -> float:
    hours = run.flops() / throughput(offer) / 3600
    return hours * (1 + constants()["spot_overhead"]) if offer.spot else hours


def fit(offer: Offer, run: RunSpec) -> tuple[bool, str]:
    return _fit(run.model, run.params, run.seq_len, offer.gpu_count, round(offer.vram_gb, 2))


@functools.lru_cache(maxsize=4096)
def _fit(model: str, params: float | None, seq_len: int, gpus: int, vram_gb: float) -> tuple[bool, str]:
    shape = lookup_model(model)
    if shape is None and params is None:
        return True, ""  # nothing to judge by; the CLI refuses unknown models before this
    est = estimate(shape=shape, params=params, gpus=max(1, gpus), sharding="full", seq_len=seq_len,
                   optim_cpu_offload=True)
    have = vram_gb * GIB * HEADROOM
    if est.total > have:
        return False, f"needs {human(est.total)}/GPU on {gpus} GPU(s), has {vram_gb:g} GB"
    return True, ""


def rank(offers: Iterable[Offer], run: RunSpec | None = None, *, max_price: float | None = None,
         spot: bool | None = None, gpus: int | None = None, providers: Iterable[str] | None = None,
         include_misfits: bool = False, include_unavailable: bool = False,
         observed: Iterable[Observed] = ()) -> list[Ranked]:
    """Filter, judge the fit, price the run; fits first by Est. $ (then $/hr), misfits after.

    Fit and hours depend only on (GPU type, count, memory, spot), which repeat across offers: they are
    worked out once per shape in this call."""
    run = run or RunSpec()
    wanted = set(providers) if providers is not None else None
    work = run.flops()
    overhead = 1 + constants()["spot_overhead"]
    rates = calibrated_rates(observed, run)
    shapes: dict[tuple[str, int, float, bool], tuple[bool, str, float, bool]] = {}
    out: list[Ranked] = []
    for o in offers:
        if (max_price is not None and o.price_hr > max_price) or (spot is not None and o.spot != spot) \
                or (gpus is not None and o.gpu_count != gpus) or (wanted is not None and o.provider not in wanted) \
                or (not include_unavailable and not o.available):
            continue
        key = (o.gpu_type, o.gpu_count, o.vram_gb, o.spot)
        shape = shapes.get(key)
        if shape is None:
            ok, reason = fit(o, run)
            rate = rates.get((o.gpu_type, o.gpu_count))
            hours = run.steps / rate if rate else work / _throughput(o.gpu_type, o.gpu_count) / 3600
            shape = shapes[key] = (ok, reason, hours * overhead if o.spot else hours, rate is not None)
        ok, reason, hours, measured = shape
        if not ok and not include_misfits:
            continue
        out.append(Ranked(o, ok, reason, hours, hours * o.price_hr, measured))
    out.sort(key=lambda r: (not r.fits, r.est_cost, r.offer.price_hr))
    return out


def best(ranked: list[Ranked]) -> Ranked | None:
    return next((r for r in ranked if r.fits), None)
