"""Offers priced with prime-rl's GPU split ([deployment]: num_train_gpus + num_infer_gpus) and fine-tunes
sized by their registry base model (issue 4 review, items 2 and 3)."""

from __future__ import annotations

import math

import pytest
import tomllib

from services.offers.models import Offer
from services.offers.ranking import RunSpec, best, constants, rank, run_spec_from_config
from services.offers.sizing import size_note, sizing_model
from tests.shared_data import CONFIG_FIXTURES

CONFIGS = CONFIG_FIXTURES


def _offer(**kw) -> Offer:
    base = dict(provider="x", id="1", gpu_type="H100", gpu_name="H100", gpu_count=1, vram_gb=80, price_hr=2.0)
    return Offer(**(base | kw))


def _config(name: str) -> dict:
    return tomllib.loads((CONFIGS / name).read_text(encoding="utf-8"))


def test_the_default_rl_run_needs_two_gpus_and_a_one_gpu_offer_is_a_misfit_with_the_reason():
    one, two = _offer(id="one", price_hr=1.0), _offer(id="two", gpu_count=2, price_hr=4.0)
    ranked = rank([one, two], RunSpec(), include_misfits=True)
    assert [(r.offer.id, r.fits) for r in ranked] == [("two", True), ("one", False)]
    assert ranked[1].reason == "needs 2 GPUs (1 train + 1 inference), has 1"
    assert best(ranked).offer.id == "two"
    assert [r.offer.id for r in rank([one, two], RunSpec())] == ["two"]  # misfits hidden by default


def test_the_split_comes_from_the_configs_deployment():
    spec, _ = run_spec_from_config(_config("configs__ci__nightly-fft__wordle.toml"))
    assert (spec.train_gpus, spec.infer_gpus) == (2, 6)
    spec, _ = run_spec_from_config(_config("configs__basic__wordle__sft.toml"))  # sft: no inference server
    assert (spec.train_gpus, spec.infer_gpus, spec.gen_tokens_per_step) == (2, 0, 0)
    spec, _ = run_spec_from_config(_config("configs__ci__integration__alphabet_sort.toml"))  # no [deployment]
    assert (spec.train_gpus, spec.infer_gpus) == (1, 1)
    spec, notes = run_spec_from_config(_config("examples__advanced__qwen3-30b-a3b__math.toml"))  # multi_node 2 + 2
    assert (spec.train_gpus, spec.infer_gpus) == (16, 16) and any("multi-node" in n for n in notes)
    spec, _ = run_spec_from_config(
        {"trainer": {}, "orchestrator": {}, "deployment": {"num_train_gpus": 3, "num_infer_gpus": 0}}
    )
    assert spec.gpus_needed == 3 and spec.gpu_need() == "3 GPUs (3 train)"
    too_few = rank([_offer(gpu_count=2)], spec, include_misfits=True)[0]
    assert not too_few.fits and too_few.reason == "needs 3 GPUs (3 train), has 2"


def test_memory_is_sized_on_the_training_gpus_only():
    """Qwen3-8B trained on one 24 GB GPU does not fit, even on a box of eight (the other seven only
    generate); sharded over eight training GPUs it does."""
    box = _offer(gpu_type="RTX4090", vram_gb=24, gpu_count=8, price_hr=3.0)
    one_trainer = rank([box], RunSpec(model="Qwen/Qwen3-8B", train_gpus=1, infer_gpus=7), include_misfits=True)[0]
    assert not one_trainer.fits and "on 1 training GPU" in one_trainer.reason and "24 GB" in one_trainer.reason
    eight = rank([box], RunSpec(model="Qwen/Qwen3-8B", train_gpus=8, infer_gpus=0), include_misfits=True)[0]
    assert eight.fits, eight.reason


def test_the_inference_gpus_must_hold_the_weights_split_by_tensor_parallel():
    """A 72B model trains sharded over 4 × 80 GB, but vLLM on one GPU cannot hold its 135 GiB of bf16
    weights: a misfit that says so; tensor_parallel_size = 2 (or fp8) fits, as the Config pane judges."""
    box = _offer(gpu_count=8, price_hr=20.0)
    base = {
        "model": {"name": "Qwen/Qwen2.5-72B-Instruct"},
        "trainer": {},
        "orchestrator": {},
        "deployment": {"num_train_gpus": 4, "num_infer_gpus": 4},
    }
    spec, _ = run_spec_from_config(base)
    assert (spec.infer_tp, spec.infer_bytes_per_param, spec.infer_memory_share) == (1, 2.0, 0.9)
    ranked = rank([box], spec, include_misfits=True)[0]
    assert not ranked.fits and ranked.reason.startswith("inference: weights 135.4 GiB/GPU at tensor_parallel_size=1")
    split = base | {"inference": {"vllm": {"tensor_parallel_size": 2}}}
    assert rank([box], run_spec_from_config(split)[0], include_misfits=True)[0].fits
    fp8 = base | {"inference": {"vllm": {"quantization": "fp8"}}}
    assert rank([box], run_spec_from_config(fp8)[0], include_misfits=True)[0].fits
    stingy = split | {"inference": {"vllm": {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.5}}}
    assert not rank([box], run_spec_from_config(stingy)[0], include_misfits=True)[0].fits
    lonely = base | {
        "deployment": {"num_train_gpus": 7, "num_infer_gpus": 1},
        "inference": {"vllm": {"tensor_parallel_size": 4}},
    }  # tp 4 cannot start on 1 GPU
    misfit = rank([box], run_spec_from_config(lonely)[0], include_misfits=True)[0]
    assert not misfit.fits and "tensor_parallel_size=4 needs a multiple of 4 inference GPUs" in misfit.reason
    sft = run_spec_from_config({"model": {"name": "Qwen/Qwen2.5-72B-Instruct"}, "deployment": {"num_train_gpus": 8}})[0]
    assert sft.infer_gpus == 0 and rank([box], sft, include_misfits=True)[0].fits  # no inference server


def test_hours_put_training_on_the_training_gpus_and_generation_on_the_inference_gpus():
    c = constants()
    per_gpu = c["h100_peak_flops"] * c["mfu"]

    def thr(n: int) -> float:
        return per_gpu * n * c["parallel_efficiency"] ** math.log2(n)

    run = RunSpec(model="Qwen/Qwen3-0.6B", steps=10, train_gpus=2, infer_gpus=4)
    p = 0.6e9
    train = 10 * run.train_tokens_per_step * 6 * p
    gen = 10 * run.gen_tokens_per_step * 2 * p * c["decode_penalty"]
    got = rank([_offer(gpu_count=8, price_hr=10.0)], run)[0]
    assert got.est_hours == pytest.approx((train / thr(2) + gen / thr(4)) / 3600)
    assert got.est_cost == pytest.approx(got.est_hours * 10.0)
    # the same box priced as if every GPU trained would be far quicker: the old, wrong answer
    assert got.est_hours > (train + gen) / thr(8) / 3600 * 1.5


def test_fine_tunes_are_sized_by_their_registry_base():
    cases = {
        "Qwen/Qwen3-4B-Instruct-2507": "Qwen/Qwen3-4B",
        "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT": "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-30B-A3B-Thinking-2507": "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-8B-Base": "Qwen/Qwen3-8B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": "Qwen/Qwen2.5-1.5B-Instruct",
        "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    }
    assert {name: sizing_model(name).name for name in cases} == cases
    for unknown in ("Qwen/Qwen3.6-35B-A3B", "samsja/mini-glm-moe", "zai-org/GLM-5.1", "someone/Unknown-7B-Custom"):
        assert sizing_model(unknown) is None, unknown
    assert size_note("Qwen/Qwen3-4B-Instruct-2507") == "Qwen/Qwen3-4B-Instruct-2507 sized as Qwen/Qwen3-4B"
    assert size_note("Qwen/Qwen3-8B") == "" and size_note("qwen3-8b") == ""
    assert RunSpec(model="Qwen/Qwen3-4B-Instruct-2507").flops() == RunSpec(model="Qwen/Qwen3-4B").flops()
