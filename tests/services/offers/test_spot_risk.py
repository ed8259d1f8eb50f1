"""Spot's risk priced in (issue 20): expected preemptions × (half the checkpoint interval + restart +
restore) + restore traffic; never below the no-preemption cost, always finite; the rates' sources."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from services.offers.models import Offer
from services.offers.ranking import RunSpec, est_hours, rank, run_spec_from_config
from services.offers.spot_risk import (
    DEFAULT_RATES,
    MAX_HOURS,
    MIN_OBSERVED_HOURS,
    Assumptions,
    interruption_rates,
    observed_rates,
    spot_risk,
)


def _offer(**kw) -> Offer:
    base = dict(provider="vast", id="1", gpu_type="H100", gpu_name="H100", gpu_count=2, vram_gb=80, price_hr=6.0)
    return Offer(**(base | kw))


RUN = RunSpec(model="Qwen/Qwen3-8B", steps=1000)


@settings(max_examples=300, deadline=None)
@given(
    hours=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1e6)),
    steps=st.integers(-5, 10**9),
    interval=st.one_of(st.none(), st.integers(-5, 10**9)),
    size=st.floats(allow_nan=True, allow_infinity=True),
    rate=st.floats(allow_nan=True, allow_infinity=True),
    price=st.floats(0.01, 1e6),
    restart=st.floats(-1, 1e3),
    bandwidth=st.floats(-1, 1e12),
    egress=st.floats(-1, 10),
)
def test_expected_cost_is_finite_and_never_below_no_preemption(
    hours, steps, interval, size, rate, price, restart, bandwidth, egress
):
    risk = spot_risk(
        hours,
        steps=steps,
        ckpt_interval=interval,
        ckpt_bytes=size,
        rate=rate,
        assumptions=Assumptions(restart, bandwidth, egress),
    )
    cost, floor = risk.expected_cost(price), risk.base_hours * price
    assert math.isfinite(cost) and math.isfinite(risk.expected_hours) and math.isfinite(risk.preemptions)
    assert cost >= floor and risk.expected_hours >= risk.base_hours >= 0
    if math.isfinite(hours) and hours > 0:  # the no-preemption figure is the ranking's own estimate, capped
        assert risk.base_hours == min(hours, MAX_HOURS)


def test_a_garbage_run_length_cannot_overflow_the_cost():
    # found by the property above on CI: 4.3e303 hours × $41,464/hr overflowed to inf
    risk = spot_risk(4.3355516468799823e303, steps=0, ckpt_interval=None, ckpt_bytes=0.0, rate=0.0)
    assert risk.base_hours == MAX_HOURS and math.isfinite(risk.expected_cost(41464.0))
    huge = spot_risk(
        1e6, steps=10, ckpt_interval=2, ckpt_bytes=1e300, rate=60.0, assumptions=Assumptions(0.0, 1.0, 10.0)
    )
    assert math.isfinite(huge.expected_cost(1e6)) and huge.expected_hours >= huge.base_hours == 1e6


@settings(max_examples=100, deadline=None)
@given(
    price=st.floats(0.05, 100),
    hours_model=st.sampled_from(["Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"]),
    steps=st.integers(1, 100_000),
    interval=st.one_of(st.none(), st.integers(1, 100_000)),
    rate=st.floats(0, 60),
)
def test_ranked_spot_is_never_cheaper_than_its_no_preemption_figure(price, hours_model, steps, interval, rate):
    run = replace(RUN, model=hours_model, steps=steps, ckpt_interval=interval)
    (r,) = rank([_offer(spot=True, price_hr=price)], run, spot_rates={"vast": rate})
    assert math.isfinite(r.est_cost) and r.est_cost >= r.base_cost > 0 and r.est_hours >= r.base_hours


def test_the_formula_and_what_a_checkpoint_interval_does():
    h, steps = 10.0, 1000
    a = Assumptions(restart_hours=0.25, restore_bytes_per_s=100e6, egress_per_gb=0.09)
    risk = spot_risk(h, steps=steps, ckpt_interval=100, ckpt_bytes=48e9, rate=0.1, assumptions=a)
    lost = 50 * h / steps + 0.25 + 48e9 / 100e6 / 3600  # half an interval + restart + restore
    assert risk.preemptions == pytest.approx(1.0) and risk.hours_lost == pytest.approx(lost)
    assert risk.expected_hours == pytest.approx(h + lost)
    assert risk.expected_cost(2.0) == pytest.approx((h + lost) * 2.0 + 48 * 0.09)  # + restore traffic
    none = spot_risk(h, steps=steps, ckpt_interval=None, ckpt_bytes=48e9, rate=0.1, assumptions=a)
    assert none.hours_lost == pytest.approx(h / 2 + 0.25) and none.traffic_cost == 0  # starts over, nothing restored
    beyond = spot_risk(h, steps=steps, ckpt_interval=5000, ckpt_bytes=48e9, rate=0.1, assumptions=a)
    assert beyond.hours_lost == pytest.approx(none.hours_lost)  # an interval past the run = only the final one
    assert spot_risk(h, steps=steps, ckpt_interval=10, ckpt_bytes=48e9, rate=0.0).expected_hours == h


def test_spot_ranks_below_on_demand_with_a_long_interval_and_above_with_a_short_one():
    offers = [_offer(id="od", price_hr=6.0), _offer(id="spot", spot=True, price_hr=4.0)]
    short = rank(offers, replace(RUN, ckpt_interval=10))
    assert [r.offer.id for r in short] == ["spot", "od"]
    long = rank(offers, replace(RUN, ckpt_interval=1000))
    assert [r.offer.id for r in long] == ["od", "spot"]
    assert short[0].base_cost == long[1].base_cost  # the same offer, the same no-preemption price
    assert rank(offers, RUN, spot=True)[0].offer.id == "spot" and rank(offers, RUN, spot=False)[0].offer.id == "od"


def test_the_config_sets_the_interval():
    rl = {"max_steps": 100, "model": {"name": "Qwen/Qwen3-8B"}, "trainer": {}, "orchestrator": {}}
    assert run_spec_from_config(rl)[0].ckpt_interval is None  # prime-rl's default: no checkpoints
    assert run_spec_from_config({**rl, "ckpt": {}})[0].ckpt_interval is None  # only the final one
    assert run_spec_from_config({**rl, "ckpt": {"interval": 25}})[0].ckpt_interval == 25
    assert run_spec_from_config({**rl, "trainer": {"ckpt": {"interval": 7}}})[0].ckpt_interval == 7
    sft = {"max_steps": 100, "model": {"name": "Qwen/Qwen3-8B"}, "data": {}, "ckpt": {"interval": 40}}
    assert run_spec_from_config(sft)[0].ckpt_interval == 40
    assert run_spec_from_config({**rl, "ckpt": {"interval": "often"}})[0].ckpt_interval is None


def test_rates_defaults_settings_then_measured():
    assert interruption_rates() == DEFAULT_RATES
    rates = interruption_rates(
        {"vast": 0.3, "primeintellect": -1, "runpod": float("nan"), "lambda": True}, {"primeintellect": 0.02}
    )
    assert rates["vast"] == 0.3 and rates["primeintellect"] == 0.02  # measured wins; garbage is skipped
    assert rates["runpod"] == DEFAULT_RATES["runpod"] and rates["lambda"] == DEFAULT_RATES["lambda"]
    # the seam for the rentals ledger: (provider, spot hours, preemptions) per rental
    measured = observed_rates(
        [("vast", 20.0, 1), ("vast", 20.0, 3), ("primeintellect", 5.0, 0), ("vast", float("nan"), 9), ("vast", -3.0, 9)]
    )
    assert measured == {"vast": pytest.approx(4 / 40)}  # Prime: too few hours to trust yet
    assert MIN_OBSERVED_HOURS > 5.0
    r = rank([_offer(spot=True)], RUN, spot_rates=interruption_rates(None, measured))[0]
    assert r.risk.rate == pytest.approx(0.1)


def test_est_hours_and_unknown_providers():
    spot = _offer(spot=True, provider="elsewhere")
    (r,) = rank([spot], RUN)
    assert r.risk.rate == 0.1 and est_hours(spot, RUN) == pytest.approx(r.est_hours)
    assert est_hours(_offer(), RUN) == pytest.approx(r.base_hours)


def test_demo_offers_hold_both_kinds():
    from services.demo.offers import demo_offers

    both = demo_offers().offers
    assert any(o.spot for o in both) and not all(o.spot for o in both)
    assert all(o.spot for o in demo_offers(True).offers) and not any(o.spot for o in demo_offers(False).offers)
    assert len(demo_offers(True).offers) + len(demo_offers(False).offers) == len(both)
