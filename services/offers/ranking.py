"""$ per completed run (issue 4): Est. $ = price/hr × estimated hours, not $/hr.

    train work = steps × train_tokens × 6·P          on the run's training GPUs
    gen work   = steps × gen_tokens × 2·P × decode_penalty   on its inference GPUs (rl; none for sft)
    throughput(n GPUs) = h100_peak_flops × mfu × speed[gpu] × n × parallel_efficiency^log2(n)
    hours      = (train work / throughput(train GPUs) + gen work / throughput(inference GPUs)) / 3600
    on spot    : the expected hours and $ with preemptions priced in (services/offers/spot_risk.py: the
                 provider's interruption rate × (half the run's checkpoint interval + restart + restore));
                 ``Ranked.base_cost`` keeps the no-preemption figure, the low end of the range

prime-rl splits a box: an rl run needs ``num_train_gpus + num_infer_gpus`` GPUs (``[deployment]``,
default 1 + 1), an sft run ``num_train_gpus`` (default 1). An offer with fewer GPUs is a misfit with the
reason; GPUs beyond the split sit idle (they are paid for, so such offers cost more per run). Trainer
and inference are summed rather than overlapped: prime-rl's async steps overlap them partly, and an
over-estimate only makes the auto-terminate deadline safer.

``speed`` is per GPU type relative to an H100 SXM (``gpu_speeds.toml``). "Fits" comes from the memory
estimator: FSDP-sharded training states over the run's training GPUs (optimizer on the CPU, prime-rl's
default) plus activations must stay under 95 % of a GPU's memory. Offers that fit are ranked by Est. $
ascending; misfits (with their reason) follow when asked for."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.config.checks import BYTES_PER_PARAM_CKPT
from services.config.findings import ConfigError
from services.config.memory import GIB, estimate, human
from services.offers.models import Offer, gc_paused
from services.offers.sizing import size_hint, sizing_model
from services.offers.spot_risk import UNKNOWN_RATE, Assumptions, SpotRisk, interruption_rates, spot_risk

HEADROOM = 0.95  # CUDA context, allocator fragmentation
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_CKPT_INTERVAL = 50  # the default run (no config) is priced as checkpointing every 50 steps


@functools.cache
def _table() -> dict[str, Any]:
    # read beside this module rather than through importlib.resources: its first use imports zipfile and the
    # resource readers, 3-8 ms of the first ranking in a fresh process (offers_rank, cold); the package is
    # installed as files (hatchling wheel), never zipped
    return tomllib.loads(Path(__file__).with_name("gpu_speeds.toml").read_text(encoding="utf-8"))


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
    train_gpus: int = 1  # prime-rl's [deployment] split (rl default 1 + 1)
    infer_gpus: int = 1
    infer_tp: int = 1  # [inference.vllm] tensor_parallel_size: the weights are split over this many GPUs
    infer_bytes_per_param: float = 2.0  # bf16; 1 with quantization = "fp8"
    infer_memory_share: float = 0.9  # [inference.vllm] gpu_memory_utilization
    ckpt_interval: int | None = DEFAULT_CKPT_INTERVAL  # [ckpt] interval (steps); None: no checkpoint to resume

    @property
    def gpus_needed(self) -> int:
        return self.train_gpus + self.infer_gpus

    def gpu_need(self) -> str:
        """ "2 GPUs (1 train + 1 inference)", "1 GPU (1 train)"."""
        n = self.gpus_needed
        split = f"{self.train_gpus} train" + (f" + {self.infer_gpus} inference" if self.infer_gpus else "")
        return f"{n} GPU{'s' if n != 1 else ''} ({split})"

    def train_flops(self) -> float:
        p = self.params if self.params is not None else _params(self.model)
        return self.steps * self.train_tokens_per_step * 6 * p

    def gen_flops(self) -> float:
        p = self.params if self.params is not None else _params(self.model)
        return self.steps * self.gen_tokens_per_step * 2 * p * constants()["decode_penalty"]

    def flops(self) -> float:
        return self.train_flops() + self.gen_flops()

    def ckpt_bytes(self) -> float:
        """Bytes of one checkpoint (DCP: weights + optimizer states, services/config/checks.py)."""
        shape = sizing_model(self.model)
        p = self.params if self.params is not None else (shape.params if shape is not None else 0.0)
        return p * BYTES_PER_PARAM_CKPT

    def seconds_on(self, gpu_type: str) -> float:
        """Seconds of the whole run on this GPU type with the run's split (before any spot overhead)."""
        return _seconds(gpu_type, self, self.train_flops(), self.gen_flops())


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
    rl = "orchestrator" in data or "trainer" in data  # (an sft file may carry [inference] for evals)
    train_gpus, infer_gpus = gpu_split(data, rl, notes)
    ckpt = ckpt_interval(data)
    if rl:
        seq = (
            _int(data.get("seq_len"), _get(data, "trainer", "model", "seq_len"), _get(data, "orchestrator", "seq_len"))
            or 2048
        )
        batch = _int(_get(data, "orchestrator", "batch_size")) or 128
        share = _get(data, "inference", "vllm", "gpu_memory_utilization")
        return RunSpec(
            model=model,
            steps=steps,
            train_tokens_per_step=batch * seq,
            gen_tokens_per_step=batch * seq // 2,
            seq_len=seq,
            train_gpus=train_gpus,
            infer_gpus=infer_gpus,
            infer_tp=_int(_get(data, "inference", "vllm", "tensor_parallel_size")) or 1,
            infer_bytes_per_param=1.0 if _get(data, "inference", "vllm", "quantization") == "fp8" else 2.0,
            infer_memory_share=float(share)
            if isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1
            else 0.9,
            ckpt_interval=ckpt,
        ), notes
    seq = _int(_get(data, "data", "seq_len"), data.get("seq_len")) or 128
    batch = _int(_get(data, "data", "batch_size")) or 128
    return RunSpec(
        model=model,
        steps=steps,
        train_tokens_per_step=batch * seq,
        gen_tokens_per_step=0,
        seq_len=seq,
        train_gpus=train_gpus,
        infer_gpus=infer_gpus,
        ckpt_interval=ckpt,
    ), notes


def ckpt_interval(data: dict[str, Any]) -> int | None:
    """prime-rl's checkpoint interval in steps: ``[ckpt] interval`` (rl's shared table, sft's own), else
    ``[trainer.ckpt] interval``. None when checkpoints are off (no ``[ckpt]``, ``ckpt = "None"``) or only the
    final one is written (``[ckpt]`` without ``interval``): a preemption then loses the whole run so far."""
    return _int(_get(data, "ckpt", "interval"), _get(data, "trainer", "ckpt", "interval"))


def gpu_split(data: dict[str, Any], rl: bool, notes: list[str]) -> tuple[int, int]:
    """(training GPUs, inference GPUs) from prime-rl's ``[deployment]``: single_node ``num_train_gpus``
    (1) and ``num_infer_gpus`` (1; sft: ``num_eval_gpus``, only used with ``[inference]``); multi_node
    counts nodes × ``gpus_per_node`` (8) and is priced as one box of that many GPUs."""
    dep = raw_dep if isinstance(raw_dep := data.get("deployment"), dict) else {}
    uses_infer = rl or "inference" in data
    if dep.get("type") == "multi_node":
        per_node = _int(dep.get("gpus_per_node")) or 8
        train_nodes = _int(dep.get("num_train_nodes")) or 2
        infer_nodes = dep.get("num_infer_nodes", dep.get("num_eval_nodes"))
        infer_nodes = infer_nodes if isinstance(infer_nodes, int) and infer_nodes >= 0 else (1 if rl else 0)
        train, infer = train_nodes * per_node, infer_nodes * per_node if uses_infer else 0
        notes.append(f"multi-node deployment: needs {train + infer} GPUs, priced as one box of that many")
        return train, infer
    train = _int(dep.get("num_train_gpus")) or 1
    raw_infer = dep.get("num_infer_gpus", dep.get("num_eval_gpus", 1))
    infer = raw_infer if isinstance(raw_infer, int) and not isinstance(raw_infer, bool) and raw_infer >= 0 else 1
    return train, infer if uses_infer else 0


def _params(model: str) -> float:
    shape = sizing_model(model)
    if shape is None:
        raise ConfigError(f"{model} is not in the model registry", hint=size_hint(model))
    return shape.active_params or shape.params


@dataclass(unsafe_hash=True, slots=True)  # not frozen: built 10,000 times per ranking (see Offer)
class Ranked:
    offer: Offer
    fits: bool
    reason: str  # why it does not fit ("" when it does)
    est_hours: float  # spot: expected, preemptions included
    est_cost: float  # spot: expected, preemptions and restore traffic included (the ranking's key)
    measured: bool = False  # est_hours comes from the steps/hr this user's runs reached, not the model
    risk: SpotRisk | None = None  # spot offers only

    @property
    def base_hours(self) -> float:
        """Hours without a preemption (the low end of a spot offer's range)."""
        return self.risk.base_hours if self.risk is not None else self.est_hours

    @property
    def base_cost(self) -> float:
        return self.risk.base_hours * self.offer.price_hr if self.risk is not None else self.est_cost

    def to_json(self) -> dict[str, Any]:
        o = self.offer
        return {
            "provider": o.provider,
            "id": o.id,
            "gpu_type": o.gpu_type,
            "gpu_count": o.gpu_count,
            "vram_gb": round(o.vram_gb, 1),
            "price_hr": round(o.price_hr, 4),
            "spot": o.spot,
            "region": o.region,
            "fits": self.fits,
            "reason": self.reason,
            "est_hours": round(self.est_hours, 3),
            "est_cost": round(self.est_cost, 2),
            "measured": self.measured,
            **risk_json(self),
        }


RISK_KEYS = (
    "est_cost_no_preemption",
    "est_hours_no_preemption",
    "interruptions_per_hr",
    "expected_preemptions",
    "hours_lost_per_preemption",
    "spot_note",
)


def risk_json(r: Ranked) -> dict[str, Any]:
    """The spot-risk fields of ``--json`` (on-demand rows: the same estimate, no preemption)."""
    risk = r.risk
    return {
        "est_cost_no_preemption": round(r.base_cost, 2),
        "est_hours_no_preemption": round(r.base_hours, 3),
        "interruptions_per_hr": risk.rate if risk else 0.0,
        "expected_preemptions": round(risk.preemptions, 3) if risk else 0.0,
        "hours_lost_per_preemption": round(risk.hours_lost, 3) if risk else 0.0,
        "spot_note": risk.note if risk else "",
    }


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
    return (
        c["h100_peak_flops"] * c["mfu"] * s.get(gpu_type, s["unknown"]) * n * c["parallel_efficiency"] ** math.log2(n)
    )


def _seconds(gpu_type: str, run: RunSpec, train: float, gen: float) -> float:
    secs = train / _throughput(gpu_type, run.train_gpus)
    return secs + gen / _throughput(gpu_type, max(1, run.infer_gpus)) if gen else secs


def est_hours(offer: Offer, run: RunSpec, rates: Mapping[str, float] | None = None) -> float:
    """Hours of the run on this offer: the run's own GPU split, never the offer's spare GPUs; on spot the
    expected hours with preemptions (services/offers/spot_risk.py)."""
    hours = run.seconds_on(offer.gpu_type) / 3600
    return (
        _risk(offer.provider, hours, run, rates or interruption_rates(), Assumptions()).expected_hours
        if offer.spot
        else hours
    )


def _risk(provider: str, hours: float, run: RunSpec, rates: Mapping[str, float], a: Assumptions) -> SpotRisk:
    return spot_risk(
        hours,
        steps=run.steps,
        ckpt_interval=run.ckpt_interval,
        ckpt_bytes=run.ckpt_bytes(),
        rate=rates.get(provider, UNKNOWN_RATE),
        provider=provider,
        assumptions=a,
    )


def fit(offer: Offer, run: RunSpec) -> tuple[bool, str]:
    if offer.gpu_count < run.gpus_needed:
        return False, f"needs {run.gpu_need()}, has {offer.gpu_count}"
    vram = round(offer.vram_gb, 2)
    ok, reason = _fit(run.model, run.params, run.seq_len, run.train_gpus, vram)
    if ok and run.infer_gpus and (run.infer_tp > run.infer_gpus or run.infer_gpus % run.infer_tp):
        return False, (
            f"inference: tensor_parallel_size={run.infer_tp} needs a multiple of {run.infer_tp} inference "
            f"GPUs, the run has {run.infer_gpus}"
        )
    if ok and run.infer_gpus:
        ok, reason = _infer_fit(
            run.model, run.params, run.infer_tp, run.infer_bytes_per_param, run.infer_memory_share, vram
        )
    return ok, reason


@functools.lru_cache(maxsize=256)
def _infer_weights(model: str, params: float | None, tp: int, bytes_per_param: float) -> float | None:
    """Bytes of the weights on each inference GPU (None: the model cannot be sized, nothing to judge)."""
    shape = sizing_model(model)
    p = params if params is not None else (shape.params if shape is not None else None)
    return None if p is None else p * bytes_per_param / max(1, tp)


def _infer_fit(
    model: str, params: float | None, tp: int, bytes_per_param: float, share: float, vram_gb: float
) -> tuple[bool, str]:
    """vLLM on the inference GPUs must hold the weights (split over ``tp`` GPUs) inside its memory share,
    with room left for a KV cache (5 %): the same rule as the Config pane's memory check. The weights do not
    depend on the GPU's memory: they are worked out once per run, so every memory size costs one comparison."""
    weights = _infer_weights(model, params, tp, bytes_per_param)
    if weights is None:
        return True, ""
    room = share * vram_gb * GIB * 0.95
    if weights > room:
        return False, (
            f"inference: weights {human(weights)}/GPU at tensor_parallel_size={tp} exceed vLLM's "
            f"{share:.0%} of {vram_gb:g} GB"
        )
    return True, ""


@functools.lru_cache(maxsize=256)
def _train_need(model: str, params: float | None, seq_len: int, gpus: int) -> float | None:
    """Bytes needed on each of the run's ``gpus`` training GPUs (FSDP shards over those only); None when
    there is nothing to judge by (the CLI refuses unknown models before this)."""
    shape = sizing_model(model)
    if shape is None and params is None:
        return None
    return estimate(
        shape=shape, params=params, gpus=max(1, gpus), sharding="full", seq_len=seq_len, optim_cpu_offload=True
    ).total


def _fit(model: str, params: float | None, seq_len: int, gpus: int, vram_gb: float) -> tuple[bool, str]:
    """Memory on each training GPU. The estimate is worked out once per run (:func:`_train_need`), never per
    memory size: offers whose memory differs by a few MiB (Vast reports each card's own) share it, and the
    verdict is the exact comparison for each, not a bucket's."""
    need = _train_need(model, params, seq_len, gpus)
    if need is None:
        return True, ""
    have = vram_gb * GIB * HEADROOM
    if need > have:
        return False, f"needs {human(need)}/GPU on {gpus} training GPU(s), has {vram_gb:g} GB"
    return True, ""


@gc_paused
def rank(
    offers: Iterable[Offer],
    run: RunSpec | None = None,
    *,
    max_price: float | None = None,
    spot: bool | None = None,
    gpus: int | None = None,
    providers: Iterable[str] | None = None,
    include_misfits: bool = False,
    include_unavailable: bool = False,
    observed: Iterable[Observed] = (),
    spot_rates: Mapping[str, float] | None = None,
    assumptions: Assumptions = Assumptions(),
) -> Rankings:
    """Filter, judge the fit, price the run; fits first by Est. $ (then $/hr), misfits after. ``spot``:
    None lists both kinds in one ranking, a spot offer by its expected $ with preemptions priced in
    (``spot_rates``: provider → interruptions/hr, default :func:`spot_risk.interruption_rates`).

    Everything but the price depends only on the offer's shape (GPU type, count, memory, spot, provider),
    and shapes repeat: each is judged once per call (:class:`_Judge`), and the hours and spot risk once per
    (GPU type, count, spot, provider), whatever the memory. Per offer there is one dict lookup and one
    multiply-add; the offers' positions are sorted, and a ``Ranked`` is built only for a row that is read
    (:class:`Rankings`: the Offers pane reads the ``MAX_ROWS`` it shows of 10,000).

    A tuple of offers (a fetch's result, immutable) is judged and sorted once for a run, its rates and
    assumptions; filtering it again (the Offers pane's filter keys) keeps the rankings that pass, in order: the
    same list a ranking of the filtered offers gives (both sorts are stable on the same keys)."""
    run = run or RunSpec()
    if isinstance(offers, tuple):
        rates = None if spot_rates is None else tuple(sorted(spot_rates.items()))
        key = (run, tuple(observed), rates, assumptions)
        cached = _last_full
        if cached is None or cached[0] is not offers or cached[1] != key:
            full = _Full(offers, run, key[1], spot_rates, assumptions)
            cached = _remember(offers, key, full)
        return cached[2].rows(max_price, spot, gpus, providers, include_misfits, include_unavailable)
    rows = list(offers)  # a copy: the rows are built later, from these very offers
    if not include_unavailable:
        rows = [o for o in rows if o.available]
    if max_price is not None:
        rows = [o for o in rows if o.price_hr <= max_price]
    if spot is not None:
        rows = [o for o in rows if o.spot == spot]
    if gpus is not None:
        rows = [o for o in rows if o.gpu_count == gpus]
    if providers is not None:
        wanted = set(providers)
        rows = [o for o in rows if o.provider in wanted]
    return _Full(rows, run, observed, spot_rates, assumptions).rows(None, None, None, None, include_misfits, True)


_last_full: tuple[tuple[Offer, ...], tuple[Any, ...], _Full] | None = None  # the last tuple's full ranking


def _remember(
    offers: tuple[Offer, ...], key: tuple[Any, ...], full: _Full
) -> tuple[tuple[Offer, ...], tuple[Any, ...], _Full]:
    global _last_full
    _last_full = (offers, key, full)
    return _last_full


class _Full:
    """Every offer of one ranking, judged and in order, as positions into ``offers``: ``jids[i]`` is offer
    i's shape verdict in ``verdicts`` (fits, reason, hours, measured, risk, restore traffic $), ``costs[i]``
    its Est. $; ``good``/``bad``: the positions of the fits/misfits by Est. $, then $/hr, then position (the
    order two stable sorts give). A row's ``Ranked`` is built when it is first read, and kept: every
    filtering of this ranking hands out the same objects."""

    def __init__(
        self,
        offers: Sequence[Offer],
        run: RunSpec,
        observed: Iterable[Observed],
        spot_rates: Mapping[str, float] | None,
        assumptions: Assumptions,
    ) -> None:
        judge = _Judge(
            run,
            calibrated_rates(observed, run),
            interruption_rates() if spot_rates is None else spot_rates,
            assumptions,
        )
        shapes, verdicts = judge.shapes, judge.verdicts
        jids: list[int] = []
        costs: list[float] = []
        add_jid, add_cost = jids.append, costs.append
        for o in offers:
            j = shapes.get((o.gpu_type, o.gpu_count, o.vram_gb, o.spot, o.provider))
            if j is None:
                j = judge(o)
            add_jid(j)
            v = verdicts[j]
            add_cost(v[2] * o.price_hr + v[5])
        prices = [o.price_hr for o in offers]
        # by $/hr first, then (stable) by Est. $: the order of the key (Est. $, $/hr), ties kept in the given
        # order, with both sorts on plain float keys (a tuple key costs 5x more at 10,000 rows)
        order = sorted(range(len(prices)), key=prices.__getitem__)
        order.sort(key=costs.__getitem__)
        fits = [v[0] for v in verdicts]
        if all(fits):
            good, bad = order, []
        else:
            good = [i for i in order if fits[jids[i]]]
            bad = [i for i in order if not fits[jids[i]]]
        self.offers, self.jids, self.costs, self.verdicts = offers, jids, costs, verdicts
        self.good, self.bad = good, bad
        self.built: list[Ranked | None] = [None] * len(prices)

    def row(self, i: int) -> Ranked:
        r = self.built[i]
        if r is None:
            ok, reason, hours, measured, risk, _ = self.verdicts[self.jids[i]]
            r = self.built[i] = Ranked(self.offers[i], ok, reason, hours, self.costs[i], measured, risk)
        return r

    def rows(
        self,
        max_price: float | None,
        spot: bool | None,
        gpus: int | None,
        providers: Iterable[str] | None,
        include_misfits: bool,
        include_unavailable: bool,
    ) -> Rankings:
        order = self.good + self.bad if include_misfits and self.bad else self.good
        offers = self.offers
        if not include_unavailable:
            order = [i for i in order if offers[i].available]
        if max_price is not None:
            order = [i for i in order if offers[i].price_hr <= max_price]
        if spot is not None:
            order = [i for i in order if offers[i].spot == spot]
        if gpus is not None:
            order = [i for i in order if offers[i].gpu_count == gpus]
        if providers is not None:
            wanted = set(providers)
            order = [i for i in order if offers[i].provider in wanted]
        return Rankings(self, order)


class Rankings(Sequence[Ranked]):
    """One ranking's rows in order (fits by Est. $, then misfits), each ``Ranked`` built when it is read.
    :attr:`sorted_by` names the table column whose ascending order this is. :meth:`risks` and
    :meth:`any_measured` answer for every row without building them (they depend on the shape only)."""

    sorted_by = "cost"

    def __init__(self, full: _Full, order: list[int]) -> None:
        self._full, self._order = full, order

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> Ranked: ...

    @overload
    def __getitem__(self, index: slice) -> list[Ranked]: ...

    def __getitem__(self, index: int | slice) -> Ranked | list[Ranked]:
        if isinstance(index, slice):
            row = self._full.row
            return [row(i) for i in self._order[index]]
        return self._full.row(self._order[index])

    def __iter__(self) -> Iterator[Ranked]:
        row = self._full.row
        return (row(i) for i in self._order)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Rankings, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rankings({len(self)} rows)"

    def _verdicts(self) -> list[tuple[Any, ...]]:
        jids, verdicts = self._full.jids, self._full.verdicts
        return [verdicts[j] for j in sorted({jids[i] for i in self._order})]

    def risks(self) -> list[SpotRisk]:
        """The distinct spot risks of the rows (one per provider and run length)."""
        return [v[4] for v in self._verdicts() if v[4] is not None]

    def any_measured(self) -> bool:
        """Whether any row's time comes from this user's earlier runs."""
        return any(v[3] for v in self._verdicts())


class _Judge:
    """One ranking's caches: an offer shape → the index of its verdict in ``verdicts``: (fits, reason, hours,
    measured, risk, restore traffic $): ``est_cost = hours × $/hr + traffic`` (on demand: traffic 0, hours
    without risk)."""

    def __init__(
        self,
        run: RunSpec,
        rates: Mapping[tuple[str, int], float],
        spot_rates: Mapping[str, float],
        assumptions: Assumptions,
    ) -> None:
        self.run, self.rates, self.spot_rates, self.assumptions = run, rates, spot_rates, assumptions
        self.train, self.gen = run.train_flops(), run.gen_flops()
        self.shapes: dict[tuple[str, int, float, bool, str], int] = {}
        self.verdicts: list[tuple[bool, str, float, bool, SpotRisk | None, float]] = []
        self.groups: dict[tuple[str, int, bool, str], tuple[float, bool, SpotRisk | None]] = {}

    def __call__(self, o: Offer) -> int:
        ok, reason = fit(o, self.run)
        gkey = (o.gpu_type, o.gpu_count, o.spot, o.provider)
        group = self.groups.get(gkey)
        if group is None:
            rate = self.rates.get((o.gpu_type, o.gpu_count))
            hours = self.run.steps / rate if rate else _seconds(o.gpu_type, self.run, self.train, self.gen) / 3600
            risk = _risk(o.provider, hours, self.run, self.spot_rates, self.assumptions) if o.spot else None
            group = self.groups[gkey] = (hours, rate is not None, risk)
        hours, measured, risk = group
        if risk is not None:
            hours, traffic = risk.expected_hours, risk.traffic_cost
        else:
            traffic = 0.0
        j = len(self.verdicts)
        self.verdicts.append((ok, reason, hours, measured, risk, traffic))
        self.shapes[(o.gpu_type, o.gpu_count, o.vram_gb, o.spot, o.provider)] = j
        return j


def best(ranked: Iterable[Ranked]) -> Ranked | None:
    return next((r for r in ranked if r.fits), None)
