"""The memory estimator against the ZeRO paper, the KV-cache formula, LoRA and the registry."""

from __future__ import annotations

import json

import httpx
import pytest

from services.config.findings import ConfigError
from services.config.memory import (
    GB,
    estimate,
    lookup_model,
    lookup_online,
    model_states,
    presets,
    registry,
)

# Rajbhandari et al. 2020, Figure 1: 7.5B parameters, Adam mixed precision (K = 12), 64 devices
ZERO_FIGURE_1 = {"none": 120.0, "os": 31.4, "os+g": 16.6, "full": 1.9}


@pytest.mark.parametrize("sharding,expected_gb", ZERO_FIGURE_1.items())
def test_zero_paper_figure_1(sharding: str, expected_gb: float) -> None:
    est = estimate(params=7.5e9, gpus=64, sharding=sharding)
    states = est.weights + est.gradients + est.optimizer
    assert abs(states / GB - expected_gb) / expected_gb < 0.02
    assert est.activations == 0 and est.kv_cache == 0  # no shape given: model states only


def test_kv_cache_formula() -> None:
    shape = lookup_model("Qwen/Qwen3-8B")
    assert shape is not None
    # layers × kv_heads × head_dim × 2 (K, V) × 2 bytes (bf16) per token
    assert shape.kv_bytes_per_token == 36 * 8 * 128 * 2 * 2
    est = estimate(shape=shape, kv_tokens=10_000)
    assert est.kv_cache == 36 * 8 * 128 * 2 * 2 * 10_000


def test_lora_trains_only_adapters() -> None:
    full = estimate(model="Qwen/Qwen3-8B", gpus=1, sharding="none")
    lora = estimate(model="Qwen/Qwen3-8B", gpus=1, sharding="none", lora=True, lora_rank=16)
    assert lora.trainable_params < 0.01 * full.params
    assert lora.optimizer == round(12 * lora.trainable_params)
    assert lora.total < full.total / 4


def test_activation_checkpointing_saves_memory() -> None:
    with_ac = estimate(model="Qwen/Qwen3-8B", seq_len=8192, checkpointing=True)
    without = estimate(model="Qwen/Qwen3-8B", seq_len=8192, checkpointing=False)
    assert without.activations > 5 * with_ac.activations > 0


def test_optimizer_offload_moves_states_to_cpu() -> None:
    est = estimate(params=8e9, gpus=2, sharding="full", optim_cpu_offload=True)
    assert est.optimizer == 0 and est.cpu_optimizer == round(12 * 8e9 / 2)


def test_registry_and_presets() -> None:
    assert {"h100-80gb", "h200-141gb", "a100-80gb", "a100-40gb", "l40s-48gb", "rtx4090", "rtx5090"} == set(presets())
    reg = registry()
    assert len(reg) >= 25
    families = (
        "Qwen/Qwen2.5",
        "Qwen/Qwen3",
        "meta-llama/Llama-3",
        "mistralai/",
        "openai/gpt-oss",
        "google/gemma",
        "zai-org/GLM",
    )
    for fam in families:
        assert any(name.startswith(fam) for name in reg), fam
    assert reg["Qwen/Qwen3-30B-A3B"].experts == 128 and reg["Qwen/Qwen2.5-VL-7B-Instruct"].vl
    assert lookup_model("qwen3-8b") is reg["Qwen/Qwen3-8B"]


def test_unknown_model_is_a_clear_error_not_a_guess() -> None:
    with pytest.raises(ConfigError, match="not in the model registry"):
        estimate(model="someone/mystery-model")


def test_online_lookup_uses_the_hub_config_and_caches(tmp_path) -> None:
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "intermediate_size": 512,
        "tie_word_embeddings": True,
    }
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(200, json=cfg)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        shape = lookup_online("org/tiny", tmp_path, client=client)
        again = lookup_online("org/tiny", tmp_path, client=client)
    assert calls == ["https://huggingface.co/org/tiny/resolve/main/config.json"]
    assert shape == again and shape.kv_heads == 2 and shape.head_dim == 64
    assert json.loads((tmp_path / "hf-configs" / "org__tiny.json").read_text()) == cfg


def test_online_lookup_offline_is_a_clear_error(tmp_path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no network")

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(ConfigError, match="cannot reach the Hugging Face hub"):
            lookup_online("org/tiny", tmp_path, client=client)


def test_model_states_reject_unknown_sharding() -> None:
    with pytest.raises(ConfigError):
        model_states(1e9, 2, "zero4")
