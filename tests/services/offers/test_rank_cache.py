"""Issue 17: ``rank`` judges each offer shape once and works the memory estimate out once per run, whatever
the offer's memory. Property: its rows are exactly the rows of the plain per-offer computation below (the
cost model's formulas from the module docstring, every offer judged on its own, nothing cached) — for any
offers, runs and filters, memory sizes a hair either side of the fit threshold included."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings, strategies as st

from services.config.memory import GIB, estimate, human
from services.offers.models import Offer
from services.offers.ranking import (
    HEADROOM,
    Observed,
    Ranked,
    RunSpec,
    calibrated_rates,
    constants,
    rank,
    speeds,
)
from services.offers.sizing import sizing_model
from services.offers.spot_risk import UNKNOWN_RATE, Assumptions, interruption_rates, spot_risk

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

RUNS = (
    RunSpec(model="Qwen/Qwen3-8B"),
    RunSpec(model="Qwen/Qwen3-32B", train_gpus=2, infer_gpus=2, infer_tp=2),
    RunSpec(model="Qwen/Qwen3-0.6B", infer_gpus=0, ckpt_interval=None),
    RunSpec(model="Qwen/Qwen3-14B", infer_gpus=3, infer_tp=2),  # tp that does not divide: always a misfit
    RunSpec(
        model="Qwen/Qwen3-4B",
        params=30e9,
        train_gpus=4,
        infer_gpus=1,
        infer_bytes_per_param=1.0,
        infer_memory_share=0.5,
        steps=20,
        ckpt_interval=5,
    ),
)
GPU_TYPES = ("H100", "A100", "RTX4090", "L40S", "NOT-IN-THE-TABLE")
PROVIDERS = ("primeintellect", "vast", "lambda", "runpod", "elsewhere")


def train_limit(run: RunSpec) -> float:
    """The memory (GB) at which the run's training estimate just fits: the sizes around it are generated."""
    need = estimate(
        shape=sizing_model(run.model),
        params=run.params,
        gpus=max(1, run.train_gpus),
        sharding="full",
        seq_len=run.seq_len,
        optim_cpu_offload=True,
    ).total
    return need / (GIB * HEADROOM)


def vram_near(run: RunSpec) -> st.SearchStrategy[float]:
    limit = train_limit(run)
    return (
        st.sampled_from([24.0, 40.0, 48.0, 80.0, 141.0, 24564 / 1024, 81559 / 1024, 0.0])
        | st.floats(min_value=-1e-6, max_value=1e-6).map(lambda d: limit * (1 + d))  # around the threshold
        | st.integers(min_value=-3, max_value=3).map(lambda k: round(limit, 2) + k * 0.001)
        | st.floats(min_value=1.0, max_value=200.0)
    )


def offers_for(run: RunSpec) -> st.SearchStrategy[list[Offer]]:
    offer = st.builds(
        Offer,
        provider=st.sampled_from(PROVIDERS),
        id=st.text("abc123", max_size=3),
        gpu_type=st.sampled_from(GPU_TYPES),
        gpu_name=st.just("x"),
        gpu_count=st.sampled_from([1, 2, 3, 4, 8]),
        vram_gb=vram_near(run),
        price_hr=st.sampled_from([0.5, 1.0, 2.0, 2.5, 8.0]) | st.floats(0.01, 100.0),
        spot=st.booleans(),
        region=st.sampled_from(["", "us", "eu"]),
        available=st.booleans(),
    )
    return st.lists(offer, max_size=60)


# ------------------------------------------------------------------ the plain computation, one offer at a time
def plain_fit(o: Offer, run: RunSpec) -> tuple[bool, str]:
    if o.gpu_count < run.gpus_needed:
        return False, f"needs {run.gpu_need()}, has {o.gpu_count}"
    vram, shape = round(o.vram_gb, 2), sizing_model(run.model)
    if shape is not None or run.params is not None:
        need = estimate(
            shape=shape,
            params=run.params,
            gpus=max(1, run.train_gpus),
            sharding="full",
            seq_len=run.seq_len,
            optim_cpu_offload=True,
        ).total
        if need > vram * GIB * HEADROOM:
            return False, f"needs {human(need)}/GPU on {run.train_gpus} training GPU(s), has {vram:g} GB"
    if not run.infer_gpus:
        return True, ""
    if run.infer_tp > run.infer_gpus or run.infer_gpus % run.infer_tp:
        return False, (
            f"inference: tensor_parallel_size={run.infer_tp} needs a multiple of {run.infer_tp} "
            f"inference GPUs, the run has {run.infer_gpus}"
        )
    p = run.params if run.params is not None else (shape.params if shape is not None else None)
    if p is not None:
        weights = p * run.infer_bytes_per_param / max(1, run.infer_tp)
        if weights > run.infer_memory_share * vram * GIB * 0.95:
            return False, (
                f"inference: weights {human(weights)}/GPU at tensor_parallel_size={run.infer_tp} exceed "
                f"vLLM's {run.infer_memory_share:.0%} of {vram:g} GB"
            )
    return True, ""


def plain_hours(gpu_type: str, run: RunSpec) -> float:
    c, s = constants(), speeds()

    def flops_per_s(n: int) -> float:
        n = max(1, n)
        return (
            c["h100_peak_flops"]
            * c["mfu"]
            * s.get(gpu_type, s["unknown"])
            * n
            * c["parallel_efficiency"] ** math.log2(n)
        )

    secs = run.train_flops() / flops_per_s(run.train_gpus)
    gen = run.gen_flops()
    return (secs + gen / flops_per_s(max(1, run.infer_gpus)) if gen else secs) / 3600


def plain_rank(
    offers: list[Offer],
    run: RunSpec,
    *,
    max_price=None,
    spot=None,
    gpus=None,
    providers=None,
    include_misfits=False,
    include_unavailable=False,
    observed=(),
) -> list[Ranked]:
    rates, spot_rates = calibrated_rates(observed, run), interruption_rates()
    out = []
    for o in offers:
        if (
            (max_price is not None and o.price_hr > max_price)
            or (spot is not None and o.spot != spot)
            or (gpus is not None and o.gpu_count != gpus)
            or (providers is not None and o.provider not in providers)
            or (not include_unavailable and not o.available)
        ):
            continue
        ok, reason = plain_fit(o, run)
        if not ok and not include_misfits:
            continue
        rate = rates.get((o.gpu_type, o.gpu_count))
        hours = run.steps / rate if rate else plain_hours(o.gpu_type, run)
        if o.spot:
            risk = spot_risk(
                hours,
                steps=run.steps,
                ckpt_interval=run.ckpt_interval,
                ckpt_bytes=run.ckpt_bytes(),
                rate=spot_rates.get(o.provider, UNKNOWN_RATE),
                provider=o.provider,
                assumptions=Assumptions(),
            )
            out.append(
                Ranked(
                    o,
                    ok,
                    reason,
                    risk.expected_hours,
                    risk.expected_hours * o.price_hr + risk.traffic_cost,
                    rate is not None,
                    risk,
                )
            )
        else:
            out.append(Ranked(o, ok, reason, hours, hours * o.price_hr, rate is not None))
    return sorted(out, key=lambda r: (not r.fits, r.est_cost, r.offer.price_hr))


@st.composite
def cases(draw):
    run = draw(st.sampled_from(RUNS))
    offers = draw(offers_for(run))
    filters = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "max_price": st.sampled_from([1.0, 2.5, 50.0]),
                "spot": st.booleans(),
                "gpus": st.sampled_from([1, 2, 8]),
                "providers": st.lists(st.sampled_from(PROVIDERS), max_size=2, unique=True),
                "include_misfits": st.booleans(),
                "include_unavailable": st.booleans(),
            },
        )
    )
    observed = draw(
        st.lists(
            st.builds(
                Observed,
                model=st.just(run.model),
                gpu_type=st.sampled_from(GPU_TYPES),
                gpu_count=st.sampled_from([1, 2, 4]),
                steps_per_hr=st.floats(1.0, 500.0),
                tokens_per_step=st.just(run.train_tokens_per_step),
            ),
            max_size=2,
        )
    )
    return run, offers, filters, observed


@SETTINGS
@given(cases())
def test_rank_is_the_plain_per_offer_computation(case):
    run, offers, filters, observed = case
    got = rank(offers, run, observed=observed, **filters)
    assert got == plain_rank(offers, run, observed=observed, **filters)
    assert [r.est_cost for r in got] == [r.est_cost for r in plain_rank(offers, run, observed=observed, **filters)]


@SETTINGS
@given(cases())
def test_a_rankings_answers_for_its_rows_without_building_them(case):
    """Issue 36: a ranking builds a row only when it is read (the Offers pane reads the 200 it shows of 10,000);
    what the pane needs from every row — the spot risks behind its explanation line, whether any time is
    measured, the rows in the table's default order — comes from the shapes, and must be what the rows say."""
    run, offers, filters, observed = case
    for got in (
        rank(offers, run, observed=observed, **filters),
        rank(tuple(offers), run, observed=observed, **filters),
    ):
        rows = list(got)
        want = plain_rank(offers, run, observed=observed, **filters)
        assert rows == want and got[: len(rows) // 2] == want[: len(want) // 2]
        assert all(got[i] is rows[i] for i in range(len(rows)))  # built once, then the same object
        assert sorted({id(r) for r in got.risks()}) == sorted({id(r.risk) for r in rows if r.risk is not None})
        assert got.any_measured() == any(r.measured for r in rows)
        fits = sorted((r for r in rows if r.fits), key=lambda r: r.est_cost)  # the table's default order
        assert rows == fits + sorted((r for r in rows if not r.fits), key=lambda r: r.est_cost)


def test_memory_a_hair_either_side_of_the_limit_is_judged_exactly():
    """Vast reports each card's memory (MiB / 1024): neighbouring sizes share the cached estimate but not the
    verdict — a size just under the limit does not fit, one just over does, in one ranking."""
    run = RUNS[0]
    limit = round(train_limit(run), 2)
    sizes = [limit - 0.01, limit, limit + 0.01]
    offers = [Offer("vast", str(i), "H100", "H100", 2, v, 2.0) for i, v in enumerate(sizes)]
    rows = {r.offer.vram_gb: r for r in rank(offers, run, include_misfits=True)}
    assert [rows[v].fits for v in sizes] == [plain_fit(o, run)[0] for o in offers]
    assert not rows[sizes[0]].fits and rows[sizes[2]].fits
    assert f"has {sizes[0]:g} GB" in rows[sizes[0]].reason


def test_ties_in_cost_break_by_price_then_keep_the_given_order():
    run = RUNS[2]  # one GPU, no inference: every H100 offer costs hours × price
    a, b, c = (Offer("vast", i, "H100", "H100", 1, 80.0, 2.0) for i in "abc")
    cheap = Offer("lambda", "d", "H100", "H100", 1, 80.0, 1.0)
    assert [r.offer.id for r in rank([a, b, cheap, c], run)] == ["d", "a", "b", "c"]


def test_memory_sizes_that_differ_share_one_estimate(monkeypatch):
    """1,000 offers whose memory differs by a few MiB each (as Vast lists cards): one training estimate for
    the run, not one per size; the verdicts are still each offer's own."""
    from services.offers import ranking

    calls = []

    def counted(**kwargs):
        calls.append(kwargs)
        return estimate(**kwargs)

    monkeypatch.setattr(ranking, "estimate", counted)
    ranking._train_need.cache_clear()
    run = RunSpec(model="Qwen/Qwen3-8B", seq_len=3072)  # a run no other test has estimated
    limit = train_limit(run)
    offers = [Offer("vast", str(i), "H100", "H100", 2, limit - 0.5 + i / 1000, 2.0) for i in range(1000)]
    rows = rank(offers, run, include_misfits=True)
    assert len(calls) == 1
    assert [r.fits for r in sorted(rows, key=lambda r: r.offer.vram_gb)] == [plain_fit(o, run)[0] for o in offers]
    assert 0 < sum(r.fits for r in rows) < 1000


@SETTINGS
@given(cases(), st.sampled_from(RUNS))
def test_a_fetched_tuple_filtered_again_is_the_plain_computation(case, other_run):
    """Issue 36: a fetch's offers (a tuple) are judged once per run, rates and assumptions; a filter key in the
    Offers pane keeps the rankings that pass (a few ms at 10,000 offers, not a ranking). The rows must be what
    ranking the filtered offers gives, and another run, other rates or other offers are never served stale."""
    run, offers, filters, observed = case
    fetched = tuple(offers)
    rank(fetched, run)  # a ranking with other filters and no observed rates before: the cache holds it
    assert rank(fetched, run, observed=observed, **filters) == plain_rank(offers, run, observed=observed, **filters)
    assert rank(fetched, run, observed=observed, **filters) == plain_rank(offers, run, observed=observed, **filters)
    assert rank(fetched, other_run, **filters) == plain_rank(offers, other_run, **filters)
    assert rank(fetched, other_run, spot_rates={"vast": 0.5}, **filters) == rank(  # a list is ranked afresh
        list(offers), other_run, spot_rates={"vast": 0.5}, **filters
    )
    assert rank(tuple(offers[1:]), other_run, **filters) == plain_rank(offers[1:], other_run, **filters)


def test_a_filter_change_on_fetched_offers_judges_nothing_again():
    """Issue 36: typing in a filter field re-ranked all 10,000 offers per key (~37 ms); the rows of the fetch's one
    ranking are kept instead, the very same objects, in the same order."""
    run = RUNS[0]
    fetched = tuple(
        Offer(
            "vast",
            f"o{i}",
            "H100",
            "H100 SXM",
            1 + i % 8,
            80.0,
            1.0 + (i % 13) / 4,
            spot=i % 3 == 0,
            available=i % 11 != 0,
        )
        for i in range(300)
    )
    everything = rank(fetched, run, include_misfits=True, include_unavailable=True)
    narrowed = rank(fetched, run, max_price=2.0, gpus=8, include_misfits=True)
    assert narrowed and all(any(r is e for e in everything) for r in narrowed)
    assert narrowed == [
        r for r in everything if r.offer.price_hr <= 2.0 and r.offer.gpu_count == 8 and r.offer.available
    ]


def test_a_model_read_alone_is_the_registry_s():
    """The first ranking in a process reads only its model's table of models.toml (the whole registry is 3-4 ms
    of tomllib): every model read that way is the registry's, field for field, and a name with no table of its
    own still finds its model (by basename, case-insensitively)."""
    from services.config.memory import _exact, lookup_model, registry

    assert registry() and all(_exact(name) == shape for name, shape in registry().items())
    assert _exact("qwen/qwen3-8b") is None and lookup_model("qwen/qwen3-8b") == registry()["Qwen/Qwen3-8B"]
    assert lookup_model("Qwen3-8B") == registry()["Qwen/Qwen3-8B"] and lookup_model("no/such-model") is None
