"""Issue 16, item 4: more of prime-rl's start-up checks, each checked against prime-rl's own condition
(configs/rl.py, configs/trainer.py, configs/inference.py at the pinned commit): the mistake gives its
finding, the config prime-rl accepts gives none, and an offered fix is safe and leaves a clean file."""

from __future__ import annotations

import pytest

from services.config.findings import Severity
from services.config.validate import validate_text
from tests.services.config.test_fix_safety import assert_fix_is_safe
from tests.services.config.test_rules import BF16, RL_BASE, SFT_BASE

TRAINER = "[trainer]\n"
VLM = '[model.vlm]\nvision_encoder_attr = "model.visual"\nlanguage_model_attr = "model.language_model"\n'
MULTI = '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\nnum_infer_nodes = 1\n'
SLURM = '[slurm]\njob_name = "j"\n'
# an offload table names its backend: prime-rl fills no default type there (the field defaults to None)
OFFLOAD = '[inference.kv_cache_offload]\ntype = "native"\n[inference.kv_cache_offload.cpu]\nnum_bytes = 1000000\n'
MOONCAKE = OFFLOAD.replace('"native"', '"mooncake"')
NCCL = '[deployment]\nnum_train_gpus = 1\nnum_infer_gpus = 1\n[weight_broadcast]\ntype = "nccl"\n'


def trainer(body: str) -> str:
    return RL_BASE.replace(TRAINER, body)


# (name, kind, the mistake, its rule, whether a fix is offered, the config prime-rl accepts)
CASES = [
    (
        "lora-rank",
        "rl",
        trainer("[trainer.model.lora]\nrank = 8\n") + "[orchestrator.model.lora]\nrank = 16\n",
        "xc-lora-mismatch",
        False,
        trainer("[trainer.model.lora]\nrank = 8\n") + "[orchestrator.model.lora]\nrank = 8\n",
    ),
    (
        "lora-alpha-default",
        "rl",
        trainer("[trainer.model.lora]\nrank = 8\n") + "[orchestrator.model.lora]\nalpha = 16.0\n",
        "xc-lora-mismatch",
        False,
        trainer("[trainer.model.lora]\nrank = 8\n") + '[orchestrator.model.lora]\nname = "a"\n',
    ),
    (
        "vlm-rl-default-impl",
        "rl",
        trainer("[trainer.model]\n" + BF16) + VLM,
        "xc-vlm-impl",
        True,
        trainer('[trainer.model]\nimpl = "custom"\n' + BF16) + VLM,
    ),
    (
        "vlm-sft-hf",
        "sft",
        SFT_BASE.replace(
            'name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "hf"\nattn = "flash_attention_2"\n' + BF16
        )
        + VLM,
        "xc-vlm-impl",
        True,
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16) + VLM,
    ),
    (
        "trust-remote-custom",
        "rl",
        trainer('[trainer.model]\nimpl = "custom"\ntrust_remote_code = true\n'),
        "xc-trust-remote-custom",
        True,
        trainer('[trainer.model]\nimpl = "auto"\ntrust_remote_code = true\n'),
    ),
    (
        "hf-auto-attn",
        "rl",
        trainer('[trainer.model]\nimpl = "hf"\n'),
        "xc-attn-impl",
        True,
        trainer('[trainer.model]\nimpl = "hf"\nattn = "flash_attention_3"\n'),
    ),
    (
        "hf-fa4",
        "rl",
        trainer('[trainer.model]\nimpl = "hf"\nattn = "flash_attention_4"\n'),
        "xc-attn-impl",
        False,
        trainer('[trainer.model]\nimpl = "custom"\nattn = "flash_attention_4"\n'),
    ),
    ("multi-node-no-slurm", "rl", RL_BASE + MULTI, "xc-multinode-slurm", False, RL_BASE + MULTI + SLURM),
    (
        "multi-node-sft-no-slurm",
        "sft",
        SFT_BASE + '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\n',
        "xc-multinode-slurm",
        False,
        SFT_BASE + '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\n' + SLURM,
    ),
    (
        "multi-node-no-router",
        "rl",
        RL_BASE.replace("[inference]\n", '[inference]\nrouter = "None"\n') + MULTI + SLURM,
        "xc-multinode-router",
        True,
        RL_BASE + MULTI + SLURM,
    ),
    (
        "disaggregated-no-router",
        "inference",
        'router = "None"\n[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n[deployment]\ntype = "disaggregated"\n' + SLURM,
        "xc-multinode-router",
        True,
        '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n[deployment]\ntype = "disaggregated"\n' + SLURM,
    ),
    (
        "inference-multi-node-no-slurm",
        "inference",
        '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n[deployment]\ntype = "multi_node"\nnum_nodes = 2\n',
        "xc-inference-slurm",
        False,
        '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n[deployment]\ntype = "multi_node"\nnum_nodes = 2\n' + SLURM,
    ),
    (
        "rl-inference-disaggregated-no-slurm",
        "rl",
        RL_BASE + '[inference.deployment]\ntype = "disaggregated"\n',
        "xc-inference-slurm",
        False,
        RL_BASE + '[inference.deployment]\ntype = "disaggregated"\n' + SLURM,
    ),
    (
        "rl-inference-multi-node-no-router",
        "rl",
        RL_BASE.replace("[inference]\n", '[inference]\nrouter = "None"\n')
        + '[inference.deployment]\ntype = "multi_node"\nnum_nodes = 2\n'
        + SLURM,
        "xc-multinode-router",
        True,
        RL_BASE + '[inference.deployment]\ntype = "multi_node"\nnum_nodes = 2\n' + SLURM,
    ),
    (
        "fsdp-group",
        "rl",
        RL_BASE + MULTI + "nodes_per_fsdp_group = 3\n" + SLURM,
        "xc-fsdp-group",
        False,
        RL_BASE + MULTI + "nodes_per_fsdp_group = 2\n" + SLURM,
    ),
    (
        "eplb-broadcast-left-out",
        "rl",
        RL_BASE + "[inference.vllm]\nenable_eplb = true\n",
        "xc-eplb-transfer",
        False,
        trainer('[trainer.model]\nimpl = "custom"\n')
        + "[inference.vllm]\nenable_eplb = true\n"
        + NCCL
        + "quantize_in_weight_transfer = true\n",
    ),
    (
        "eplb-filesystem",
        "rl",
        RL_BASE + '[inference.vllm]\nenable_eplb = true\n[weight_broadcast]\ntype = "filesystem"\n',
        "xc-eplb-transfer",
        False,
        trainer('[trainer.model]\nimpl = "custom"\n')
        + "[inference.vllm]\nenable_eplb = true\n"
        + NCCL
        + "quantize_in_weight_transfer = true\n",
    ),
    (
        "eplb-default-broadcast",
        "rl",
        trainer('[trainer.model]\nimpl = "custom"\n')
        + "[inference.vllm]\nenable_eplb = true\n"
        + '[trainer.weight_broadcast]\ntype = "nccl"\nquantize_in_weight_transfer = true\n',
        "xc-eplb-transfer",
        False,
        trainer('[trainer.model]\nimpl = "custom"\n')
        + "[inference.vllm]\nenable_eplb = true\n"
        + NCCL
        + "quantize_in_weight_transfer = true\n",
    ),
    (
        "eplb-nccl-unquantized",
        "rl",
        RL_BASE + "[inference.vllm]\nenable_eplb = true\n" + NCCL,
        "xc-eplb-transfer",
        False,
        trainer('[trainer.model]\nimpl = "custom"\n')
        + "[inference.vllm]\nenable_eplb = true\n"
        + NCCL
        + "quantize_in_weight_transfer = true\n",
    ),
    (
        "quantized-transfer-impl",
        "rl",
        RL_BASE + NCCL + "quantize_in_weight_transfer = true\n",
        "xc-quantized-transfer",
        True,
        trainer('[trainer.model]\nimpl = "custom"\n') + NCCL + "quantize_in_weight_transfer = true\n",
    ),
    (
        "quantized-transfer-no-inference",
        "rl",
        trainer('[trainer.model]\nimpl = "custom"\n').replace("[inference]\n", "")
        + NCCL
        + "quantize_in_weight_transfer = true\n",
        "xc-quantized-transfer",
        False,
        trainer('[trainer.model]\nimpl = "custom"\n') + NCCL + "quantize_in_weight_transfer = true\n",
    ),
    (
        "mooncake-no-slurm",
        "rl",
        RL_BASE + MOONCAKE,
        "xc-mooncake-slurm",
        False,
        RL_BASE + OFFLOAD,
    ),
    (
        "router-replay-offload",
        "rl",
        trainer("[trainer]\nenable_router_replay = true\n") + OFFLOAD,
        "xc-router-replay-offload",
        False,
        trainer("[trainer]\nenable_router_replay = true\n"),
    ),
    # validator: configs/trainer.py::TrainerConfig.vlms_require_bfloat16 (float32 is the default: left out is rejected)
    (
        "vlm-rl-dtype-default",
        "rl",
        trainer('[trainer.model]\nimpl = "custom"\noptimization_dtype = "bfloat16"\n') + VLM,
        "xc-vlm-bf16",
        True,
        trainer('[trainer.model]\nimpl = "custom"\n' + BF16) + VLM,
    ),
    # validator: configs/sft.py::SFTConfig.validate_vlm_constraints
    (
        "vlm-sft-dtype",
        "sft",
        SFT_BASE.replace(
            'name = "Qwen/Qwen3-0.6B"\n',
            'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\nreduce_dtype = "bfloat16"\noptimization_dtype = "float32"\n',
        )
        + VLM,
        "xc-vlm-bf16",
        True,
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16) + VLM,
    ),
    # validator: configs/sft.py::SFTConfig.validate_vlm_constraints
    (
        "vlm-sft-micro-batch",
        "sft",
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16).replace(
            "batch_size = 32\n", "batch_size = 32\nmicro_batch_size = 4\n"
        )
        + VLM,
        "xc-vlm-micro-batch",
        False,
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16) + VLM,
    ),
    # validator: configs/trainer.py::TrainerConfig.vlm_freeze_incompatible_with_lora
    (
        "vlm-lora-freeze",
        "rl",
        trainer('[trainer.model]\nimpl = "custom"\n' + BF16 + "[trainer.model.lora]\nrank = 8\n")
        + VLM
        + "freeze_vision_encoder = false\n",
        "xc-vlm-lora-freeze",
        False,
        trainer('[trainer.model]\nimpl = "custom"\n' + BF16 + "[trainer.model.lora]\nrank = 8\n") + VLM,
    ),
    # validator: configs/sft.py::SFTConfig.vlm_freeze_incompatible_with_lora
    (
        "vlm-lora-freeze-sft",
        "sft",
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16)
        + "[model.lora]\nrank = 8\n"
        + VLM
        + "freeze_vision_encoder = false\n",
        "xc-vlm-lora-freeze",
        False,
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16)
        + VLM
        + "freeze_vision_encoder = false\n",
    ),
    # validator: configs/trainer.py::ModelConfig.vlm_cp_requires_ulysses
    (
        "vlm-cp-ring",
        "trainer",
        '[model]\nimpl = "custom"\ncp = 2\n' + BF16 + VLM,
        "xc-vlm-cp",
        True,
        '[model]\nimpl = "custom"\ncp = 2\ncp_style = "ulysses"\n' + BF16 + VLM,
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_rollout_transport
    (
        "rollout-transport-one-side",
        "rl",
        trainer('[trainer.rollout_transport]\ntype = "filesystem"\n'),
        "xc-sub-mismatch",
        False,
        trainer('[trainer.rollout_transport]\ntype = "filesystem"\n')
        + '[orchestrator.rollout_transport]\ntype = "filesystem"\n',
    ),
    # validator: utils/validation.py::(module).validate_shared_tokenizer
    (
        "chat-template-inference",
        "rl",
        RL_BASE.replace("[inference]\n", '[inference]\n[inference.vllm]\nchat_template = "t"\n'),
        "xc-sub-mismatch",
        False,
        RL_BASE + '[tokenizer]\nchat_template = "t"\n',
    ),
    # validator: utils/validation.py::(module).validate_shared_wandb_config
    # validator: configs/rl.py::RLConfig.validate_shared_configs
    (
        "wandb-trainer-only",
        "rl",
        trainer('[trainer.monitors.wandb]\nproject = "p"\n'),
        "xc-wandb-one-side",
        False,
        RL_BASE + '[monitors.wandb]\nproject = "p"\n',
    ),
    # validator: utils/validation.py::(module).validate_shared_wandb_config
    (
        "wandb-projects-differ",
        "rl",
        trainer('[trainer.monitors.wandb]\nproject = "p"\n') + '[orchestrator.monitors.wandb]\nproject = "q"\n',
        "xc-sub-mismatch",
        False,
        trainer('[trainer.monitors.wandb]\nproject = "p"\n') + '[orchestrator.monitors.wandb]\nproject = "p"\n',
    ),
]  # max_steps < 1: prime-rl accepts it, a warning (test_prime_rl_agreement.py)


@pytest.mark.parametrize("name,kind,bad,rule,fixable,good", CASES, ids=[c[0] for c in CASES])
def test_each_startup_check_fails_the_mistake_and_passes_what_prime_rl_accepts(
    name: str, kind: str, bad: str, rule: str, fixable: bool, good: str
) -> None:
    findings = validate_text(bad, kind=kind).findings
    assert [f.id for f in findings] == [rule], name
    (f,) = findings
    assert f.severity is Severity.ERROR and f.source.startswith("prime-rl") and f.message
    assert (f.edit is not None) == fixable, (name, f.fix)
    if fixable:
        fixed = assert_fix_is_safe(bad, f, kind)
        assert validate_text(fixed, kind=kind).findings == (), name
    assert validate_text(good, kind=kind).findings == (), name


def test_eplb_names_the_weight_transfer_prime_rl_would_pick() -> None:
    """Left out, [weight_broadcast] is NCCL unquantized, or the filesystem with LoRA; [trainer.weight_broadcast]
    does not count (prime-rl overwrites it from the shared table)."""
    eplb = "[inference.vllm]\nenable_eplb = true\n"
    (f,) = validate_text(RL_BASE + eplb, kind="rl").findings
    assert "NCCL unquantized by default" in f.message
    lora = trainer("[trainer.model.lora]\nrank = 8\n") + eplb
    assert [g.message for g in validate_text(lora, kind="rl").findings if g.id == "xc-eplb-transfer"] == [
        f.message.replace("sent by NCCL unquantized", "sent through the filesystem")
    ]


def test_a_fix_that_would_break_another_check_is_not_offered() -> None:
    """Setting impl = "custom" for a VLM would reject trust_remote_code: the fix becomes advice."""
    text = trainer("[trainer.model]\ntrust_remote_code = true\n" + BF16) + VLM
    (f,) = validate_text(text, kind="rl").findings
    assert f.id == "xc-vlm-impl" and f.edit is None and "by hand" in f.fix and "trust_remote_code" in f.fix


def test_field_bounds_follow_prime_rl() -> None:
    """Ranges come from prime-rl's Field(ge/gt/le/lt): what it rejects we reject, what it accepts we accept."""
    rejected = [
        "[trainer.optim]\nlr = -1e-5\n",
        '[orchestrator.algo]\ntype = "rae"\ndecay = 1.0\n',
        "[orchestrator.algo.length_penalty]\nnum_turns_weight = -0.5\n",
    ]
    for snippet in rejected:
        body = snippet if snippet.startswith("[trainer") else ""
        text = trainer(body or TRAINER) + ("" if body else snippet)
        assert [f.id for f in validate_text(text, kind="rl").findings] == ["out-of-range"], snippet
    accepted = ["[trainer.optim]\nbetas2 = 1.5\n", '[trainer.optim]\ntype = "sgd"\nmomentum = 1.2\n']
    for snippet in accepted:  # prime-rl sets no upper bound on these
        assert validate_text(trainer(snippet), kind="rl").findings == (), snippet
