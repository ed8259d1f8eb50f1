"""One config per rule that triggers exactly that rule, at the marked line (``# <-``); the fixtures
from prime-rl itself validate without errors (except STALE_K8S_INFER, an example prime-rl left on an old key)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.config.findings import Severity, rule_db
from services.config.fixes import apply_fix
from services.config.validate import validate_text
from tests.shared_data import CONFIG_FIXTURES

FIXTURES = CONFIG_FIXTURES
STALE_K8S_INFER = "k8s__prime-rl__examples__reverse-text__infer.toml"

RL_BASE = """\
max_steps = 20

[model]
name = "Qwen/Qwen3-0.6B"

[trainer]

[orchestrator]
batch_size = 16
group_size = 8

[[orchestrator.train.source]]
name = "reverse-text"

[orchestrator.train.source.env.taskset]
id = "reverse-text"

[inference]
"""

ORCH_BASE = """\
batch_size = 16
group_size = 8

[[train.source]]
name = "reverse-text"

[train.source.env.taskset]
id = "reverse-text"
"""

SFT_BASE = """\
[model]
name = "Qwen/Qwen3-0.6B"

[data]
batch_size = 32
"""

# a vision-language model trains only in bfloat16 (both dtypes default to float32)
BF16 = 'optimization_dtype = "bfloat16"\nreduce_dtype = "bfloat16"\n'
VLM_TABLE = '[model.vlm]\nvision_encoder_attr = "model.visual"\nlanguage_model_attr = "model.language_model"\n'

# rule id, kind, the config (a base plus a snippet); the finding must be on the line marked "# <-"
CASES: list[tuple[str, str, str]] = [
    ("toml-syntax", "rl", RL_BASE + "seq_len = = 3  # <-\n"),
    ("unknown-key", "rl", RL_BASE.replace("[trainer]\n", "[trainer]\nmax_step = 3  # <-\n")),
    ("wrong-type", "rl", RL_BASE.replace("group_size = 8", 'group_size = "eight"  # <-')),
    ("lax-type", "rl", RL_BASE.replace("group_size = 8", 'group_size = "8"  # <-')),
    ("out-of-range", "rl", RL_BASE + "[orchestrator.train.sampling]\ntemperature = 3.5  # <-\n"),
    ("not-nullable", "rl", RL_BASE.replace("[trainer]\n", '[trainer]\nenable_router_replay = "None"  # <-\n')),
    ("variant-key", "rl", RL_BASE.replace("[trainer]\n", '[trainer.optim]\ntype = "sgd"\nbetas1 = 0.9  # <-\n')),
    (
        "missing-required",
        "rl",
        RL_BASE.replace("[trainer]\n", '[trainer.model]\nimpl = "custom"\n' + BF16)  # a VLM trains with the custom impl
        + '[model.vlm]  # <-\nvision_encoder_attr = "model.visual"\n',
    ),
    (
        "missing-tag",
        "rl",
        RL_BASE + "[inference.kv_cache_offload]  # <-\n[inference.kv_cache_offload.cpu]\nnum_bytes = 1000\n",
    ),
    ("vllm-passthrough", "rl", RL_BASE + "[inference.vllm]\ngpu_memory_utilisation = 0.8  # <-\n"),
    # validator: utils/validation.py::(module).validate_shared_seq_len
    (
        "xc-seq-len",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer.model]\nseq_len = 1024  # <-\n").replace(
            "group_size = 8", "group_size = 8\nseq_len = 4096"
        ),
    ),
    # validator: utils/validation.py::(module).validate_shared_max_steps
    (
        "xc-max-steps",
        "rl",
        RL_BASE.replace("max_steps = 20\n", "")
        .replace("[trainer]\n", "[trainer]\nmax_steps = 5\n")
        .replace("group_size = 8", "group_size = 8\nmax_steps = 6  # <-"),
    ),
    # validator: utils/validation.py::(module).validate_shared_ckpt_config
    (
        "xc-ckpt-both",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer]\n\n[trainer.ckpt]  # <-\ninterval = 5\nkeep_last = 2\n"),
    ),
    (
        "xc-ckpt-interval",
        "rl",
        RL_BASE + "[trainer.ckpt]\ninterval = 5\nkeep_last = 1\n[orchestrator.ckpt]\ninterval = 10  # <-\n",
    ),
    # validator: utils/validation.py::(module).validate_shared_model_name
    (
        "xc-model-name",
        "rl",
        RL_BASE.replace('[model]\nname = "Qwen/Qwen3-0.6B"\n', "")
        + '[inference.vllm]\nmodel = "Qwen/Qwen3-1.7B"  # <-\n',
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_shared_configs
    # validator: utils/validation.py::(module).propagate_shared_fields
    ("xc-shared-conflict", "rl", RL_BASE.replace("[trainer]\n", "[trainer]\nmax_steps = 30  # <-\n")),
    ("xc-batch-group", "rl", RL_BASE.replace("batch_size = 16", "batch_size = 20  # <-")),
    # validator: configs/orchestrator.py::OrchestratorConfig.resolve_batching
    ("xc-batch-exclusive", "rl", RL_BASE.replace("group_size = 8", "group_size = 8\ntoken_batch_size = 4096  # <-")),
    ("xc-inflight-group", "rl", RL_BASE + "[orchestrator.concurrency]\nmax_inflight = 4  # <-\n"),
    # validator: configs/trainer.py::ModelConfig.cpu_offload_mutual_exclusion
    ("xc-offload", "rl", RL_BASE.replace("[trainer]\n", "[trainer.model]\nfull_offload = true  # <-\n")),
    # validator: configs/sft.py::SFTConfig.full_optimizer_offload_requires_supported_optimizer
    # validator: configs/trainer.py::TrainerConfig.full_optimizer_offload_requires_supported_optimizer
    (
        "xc-full-offload-optim",
        "rl",
        RL_BASE.replace(
            "[trainer]\n",
            '[trainer.model]\nfull_offload = true\noptim_cpu_offload = false\n[trainer.optim]\ntype = "muon"  # <-\n',
        ),
    ),
    # validator: configs/shared.py::(module).reject_protected_env_vars
    ("xc-env-vars", "rl", RL_BASE + '[env_vars]\nCUDA_VISIBLE_DEVICES = "0,1"  # <-\n'),
    # validator: configs/shared.py::ResumeConfig.validate_step_xor_dir
    ("xc-resume-exclusive", "rl", RL_BASE + '[resume]\nstep = 10\ndir = "outputs/x/checkpoints/step_10"  # <-\n'),
    # validator: configs/rl.py::RLConfig.auto_setup_weight_broadcast
    # validator: configs/trainer.py::TrainerConfig.validate_lora_broadcast
    (
        "xc-lora-broadcast",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer.model.lora]\nrank = 8\n")
        + '[weight_broadcast]\ntype = "nccl"  # <-\n',
    ),
    # validator: configs/rl.py::SingleNodeDeploymentConfig.validate_gpu_count
    (
        "xc-gpus-per-node",
        "rl",
        RL_BASE + "[deployment]  # <-\ngpus_per_node = 2\nnum_train_gpus = 2\nnum_infer_gpus = 1\n",
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_deployment
    (
        "xc-infer-tp",
        "rl",
        RL_BASE + "[deployment]\nnum_infer_gpus = 3\n[inference.vllm]\ntensor_parallel_size = 2  # <-\n",
    ),
    # validator: configs/orchestrator.py::EvalConfig.validate_non_empty_sources
    ("xc-eval-sources", "rl", RL_BASE + "[orchestrator.eval]  # <-\ninterval = 10\n"),
    # validator: configs/rl.py::SharedWandbConfig.validate_not_offline
    ("xc-wandb-offline", "rl", RL_BASE + '[monitors.wandb]\nproject = "p"\noffline = true  # <-\n'),
    ("xc-no-train-source", "orchestrator", "batch_size = 16\ngroup_size = 8\n[train]  # <-\n"),
    # validator: configs/sft.py::BaseDataConfig.validate_batch_size
    ("xc-sft-micro-batch", "sft", SFT_BASE.replace("batch_size = 32", "batch_size = 32  # <-\nmicro_batch_size = 3")),
    (
        "gotcha-lora-fsdp",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer.model.lora]  # <-\nrank = 8\n")
        + "[deployment]\nnum_train_gpus = 2\nnum_infer_gpus = 2\n",
    ),
    (
        "gotcha-vl-model",
        "rl",
        RL_BASE.replace('name = "Qwen/Qwen3-0.6B"', 'name = "Qwen/Qwen2.5-VL-7B-Instruct"  # <-'),
    ),
    (
        "gotcha-context-overflow",
        "rl",
        RL_BASE + "[orchestrator.train.sampling]\nmax_completion_tokens = 4000  # <-\n"
        "[inference.vllm]\nmax_model_len = 4096\n",
    ),
    (
        "gotcha-remote-executor",
        "rl",
        RL_BASE + '[orchestrator.train.source.env.agent.harness]\nid = "bash"\n'
        '[orchestrator.train.source.env.agent.runtime]\ntype = "prime"  # <-\n',
    ),
    (
        "gotcha-single-gpu",
        "rl",
        RL_BASE + "[deployment]\ngpus_per_node = 1\nnum_train_gpus = 1\nnum_infer_gpus = 0\n"
        "[inference.vllm]\ngpu_memory_utilization = 0.9  # <-\n",
    ),
    ("gotcha-ckpt-keep", "rl", RL_BASE + "[ckpt]\ninterval = 10  # <-\n"),
    ("gotcha-vllm-v1", "rl", RL_BASE + '[inference.env_vars]\nVLLM_USE_V1 = "0"  # <-\n'),
    ("gotcha-orch-keep", "rl", RL_BASE + "[ckpt]\n[orchestrator.ckpt]\nkeep_last = 2  # <-\n"),
    (
        "gotcha-known-model-issue",
        "rl",
        RL_BASE.replace('name = "Qwen/Qwen3-0.6B"', 'name = "openai/gpt-oss-20b"  # <-'),
    ),
    # issue 16 item 3: the environment block (verifiers' env, seats, harness and runtime)
    (
        "extra-key-typo",
        "rl",
        RL_BASE.replace('id = "reverse-text"\n', 'id = "reverse-text"\nsystem_promt = "x"  # <-\n', 1),
    ),
    ("plugin-typo", "rl", RL_BASE + '[orchestrator.train.source.env.agent.harness]\nid = "mini-swe-agnet"  # <-\n'),
    ("env-key-typo", "rl", RL_BASE + '[orchestrator.train.source.env.agnet.harness]  # <-\nid = "bash"\n'),
    ("env-harness", "rl", RL_BASE + '[orchestrator.train.source.env.harness]  # <-\nid = "bash"\n'),
    # issue 16 item 4: more of prime-rl's start-up checks
    # validator: configs/rl.py::RLConfig.auto_setup_lora
    (
        "xc-lora-mismatch",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer.model.lora]\nrank = 8\n")
        + "[orchestrator.model.lora]\nrank = 16  # <-\n",
    ),
    # validator: configs/trainer.py::ModelConfig.vlm_only_with_custom_impl
    (
        "xc-vlm-impl",
        "sft",
        SFT_BASE.replace(
            'name = "Qwen/Qwen3-0.6B"\n',
            'name = "Qwen/Qwen3-0.6B"\nimpl = "hf"  # <-\nattn = "flash_attention_2"\n' + BF16,
        )
        + '[model.vlm]\nvision_encoder_attr = "model.visual"\nlanguage_model_attr = "model.language_model"\n',
    ),
    (
        "xc-vlm-bf16",
        "sft",
        SFT_BASE.replace(
            'name = "Qwen/Qwen3-0.6B"\n',
            'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n'
            'optimization_dtype = "bfloat16"\nreduce_dtype = "float32"  # <-\n',
        )
        + VLM_TABLE,
    ),
    (
        "xc-vlm-micro-batch",
        "sft",
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nimpl = "custom"\n' + BF16).replace(
            "batch_size = 32\n", "batch_size = 32\nmicro_batch_size = 2  # <-\n"
        )
        + VLM_TABLE,
    ),
    (
        "xc-vlm-lora-freeze",
        "rl",
        RL_BASE.replace("[trainer]\n", '[trainer.model]\nimpl = "custom"\n' + BF16 + "[trainer.model.lora]\nrank = 8\n")
        + VLM_TABLE
        + "freeze_vision_encoder = false  # <-\n",
    ),
    ("xc-vlm-cp", "trainer", '[model]\nimpl = "custom"\ncp = 2  # <-\n' + BF16 + VLM_TABLE),
    (
        "xc-sub-mismatch",
        "rl",
        RL_BASE.replace("[trainer]\n", '[trainer.rollout_transport]\ntype = "filesystem"  # <-\n'),
    ),
    ("xc-wandb-one-side", "rl", RL_BASE.replace("[trainer]\n", '[trainer.monitors.wandb]  # <-\nproject = "p"\n')),
    # validator: configs/trainer.py::ModelConfig.trust_remote_code_only_with_hf
    (
        "xc-trust-remote-custom",
        "rl",
        RL_BASE.replace("[trainer]\n", '[trainer.model]\nimpl = "custom"\ntrust_remote_code = true  # <-\n'),
    ),
    # validator: configs/trainer.py::ModelConfig.flash_attention_4_only_with_custom_impl
    ("xc-attn-impl", "rl", RL_BASE.replace("[trainer]\n", '[trainer.model]\nimpl = "hf"  # <-\n')),
    # validator: configs/rl.py::RLConfig.validate_deployment
    # validator: configs/sft.py::SFTConfig.validate_deployment
    (
        "xc-multinode-slurm",
        "rl",
        RL_BASE + '[deployment]\ntype = "multi_node"  # <-\nnum_train_nodes = 2\nnum_infer_nodes = 1\n',
    ),
    # validator: configs/inference.py::InferenceConfig.validate_router_deployment
    # validator: configs/rl.py::RLConfig.validate_multi_node_requires_router
    (
        "xc-multinode-router",
        "rl",
        RL_BASE.replace("[inference]\n", '[inference]\nrouter = "None"  # <-\n')
        + '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\nnum_infer_nodes = 1\n[slurm]\njob_name = "j"\n',
    ),
    # validator: configs/inference.py::InferenceConfig.validate_multi_node_requires_slurm
    ("xc-inference-slurm", "rl", RL_BASE + '[inference.deployment]\ntype = "multi_node"  # <-\nnum_nodes = 2\n'),
    # validator: configs/sft.py::SFTConfig.auto_setup_deployment
    (
        "xc-fsdp-group",
        "rl",
        RL_BASE + '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\nnum_infer_nodes = 1\n'
        'nodes_per_fsdp_group = 3  # <-\n[slurm]\njob_name = "j"\n',
    ),
    # validator: configs/rl.py::RLConfig.validate_eplb_requires_quantized_weight_transfer
    ("xc-eplb-transfer", "rl", RL_BASE + "[inference.vllm]\nenable_eplb = true  # <-\n"),
    # validator: configs/rl.py::RLConfig.validate_quantize_in_weight_transfer
    (
        "xc-quantized-transfer",
        "rl",
        RL_BASE + "[deployment]\nnum_train_gpus = 1\nnum_infer_gpus = 1\n[weight_broadcast]\n"
        'type = "nccl"\nquantize_in_weight_transfer = true  # <-\n',
    ),
    # validator: configs/rl.py::RLConfig.validate_mooncake_offload_requires_slurm
    (
        "xc-mooncake-slurm",
        "rl",
        RL_BASE + '[inference.kv_cache_offload]\ntype = "mooncake"  # <-\ndevice_name = "mlx5_0"\n'
        "[inference.kv_cache_offload.cpu]\nnum_bytes = 1000000\n",
    ),
    # validator: configs/rl.py::RLConfig.validate_router_replay_without_kv_offload
    (
        "xc-router-replay-offload",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer]\nenable_router_replay = true  # <-\n")
        + '[inference.kv_cache_offload]\ntype = "native"\n[inference.kv_cache_offload.cpu]\nnum_bytes = 1000000\n',
    ),
    ("xc-max-steps-range", "rl", RL_BASE.replace("max_steps = 20", "max_steps = -5  # <-")),
    ("secret", "rl", RL_BASE + '[env_vars]\nHF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"  # <-\n'),
    ("secret", "rl", RL_BASE + '[orchestrator.model.client.headers]\nAuthorization = "Bearer abcdefgh12345"  # <-\n'),
    ("secret", "rl", RL_BASE + '[env_vars]\nWANDB_API_KEY = "0123456789abcdef0123456789abcdef01234567"  # <-\n'),
]

MEMORY_CASES = [
    (
        "memory-fit",
        dict(preset="rtx4090", gpus=2),
        RL_BASE.replace('name = "Qwen/Qwen3-0.6B"', 'name = "Qwen/Qwen3-8B"  # <-')
        + "[trainer.model]\noptim_cpu_offload = false\n",
    ),
    (
        "memory-ok",
        dict(preset="h100-80gb", gpus=2),
        RL_BASE.replace('name = "Qwen/Qwen3-0.6B"', 'name = "Qwen/Qwen3-0.6B"  # <-'),
    ),
    (
        "memory-unknown-model",
        dict(preset="h100-80gb", gpus=2),
        RL_BASE.replace('name = "Qwen/Qwen3-0.6B"', 'name = "someone/unknown-7B"  # <-'),
    ),
    ("preset-unknown", dict(preset="h100", gpus=2), "# <-\n" + RL_BASE),
]


def marked_line(text: str) -> int:
    for i, line in enumerate(text.splitlines(), start=1):
        if "# <-" in line:
            return i
    raise AssertionError("no marker")


def test_base_configs_are_clean() -> None:
    for kind, text in (("rl", RL_BASE), ("orchestrator", ORCH_BASE), ("sft", SFT_BASE)):
        report = validate_text(text, kind=kind)
        assert [(f.id, f.line) for f in report.findings] == [], kind


@pytest.mark.parametrize("rule_id,kind,text", CASES, ids=[c[0] for c in CASES])
def test_rule_triggers_exactly(rule_id: str, kind: str, text: str) -> None:
    report = validate_text(text, kind=kind)
    got = [(f.id, f.line) for f in report.findings]
    assert got == [(rule_id, marked_line(text))]
    finding = report.findings[0]
    assert finding.column >= 1 and finding.message and finding.source


@pytest.mark.parametrize("rule_id,kw,text", MEMORY_CASES, ids=[c[0] for c in MEMORY_CASES])
def test_memory_rules(rule_id: str, kw: dict, text: str) -> None:
    report = validate_text(text, kind="rl", **kw)
    assert [(f.id, f.line) for f in report.findings] == [(rule_id, marked_line(text))]


def test_every_rule_in_the_database_has_a_case() -> None:
    covered = {c[0] for c in CASES} | {c[0] for c in MEMORY_CASES} | {"kind-unknown"}
    from tests.services.config.test_rl_validators import CASES as RL_VALIDATOR_CASES  # its own pairs

    covered |= {c[3] for c in RL_VALIDATOR_CASES}
    covered |= {"override-file"}  # always with mig-toml-files: test_config_meaning.py
    from tests.services.config.test_trainer_validators import CASES as TRAINER_CASES  # (imports this module)

    covered |= {c[3] for c in TRAINER_CASES}  # each at its marked line, with its near miss
    from tests.services.config.test_prime_rl_agreement import MISTAKES  # (imports this module)

    covered |= {c[0] for c in MISTAKES}
    assert set(rule_db()["rules"]) - covered == set()
    for rid, spec in rule_db()["rules"].items():
        assert spec["severity"] in ("error", "warning", "info") and spec["source"], rid


def test_kind_unknown_is_info_and_detection_uses_the_file_name() -> None:
    report = validate_text('[model]\nname = "Qwen/Qwen3-0.6B"\n', filename="k8s/infer.toml")
    assert report.kind == "inference" and not report.kind_detected
    assert [f.id for f in report.findings] == ["kind-unknown", "mig-inference-model"]


def test_parse_error_reports_line_and_column() -> None:
    report = validate_text('[trainer]\nmax_steps = 10\nname = "unterminated\n', kind="rl")
    (f,) = report.findings
    assert (f.id, f.line, f.severity) == ("toml-syntax", 3, Severity.ERROR)
    assert f.column > 1 and report.data is None


def test_secret_found_even_when_the_file_does_not_parse_and_never_echoed() -> None:
    key = "AKIAABCDEFGHIJKLMNOP"
    report = validate_text(f'aws = "{key}"\n[[[broken\n', kind="rl")
    ids = sorted(f.id for f in report.findings)
    assert ids == ["secret", "toml-syntax"]
    secret = next(f for f in report.findings if f.id == "secret")
    assert key not in secret.message and secret.line == 1


def test_env_var_names_are_not_secrets() -> None:
    text = RL_BASE + '[orchestrator.model.client]\napi_key_var = "PRIME_API_KEY"\n'
    assert validate_text(text, kind="rl").findings == ()


def test_did_you_mean_and_its_fix() -> None:
    # issue 16: a fix is offered only when the result has no new error. Here the rename would conflict
    # with the shared max_steps = 20, so the fix is withheld and the conflict is named instead.
    text = RL_BASE.replace("[trainer]\n", "[trainer]\nmax_step = 3\n")
    (f,) = validate_text(text, kind="rl").findings
    assert "did you mean 'max_steps'" in f.message
    assert f.edit is None and "max_steps = 20 conflicts with trainer.max_steps = 3" in f.fix
    text = text.replace("max_steps = 20\n", "", 1)
    (f,) = validate_text(text, kind="rl").findings
    assert "did you mean 'max_steps'" in f.message
    fixed = apply_fix(text, f)
    assert "max_steps = 3" in fixed.split("[trainer]")[1]
    assert validate_text(fixed, kind="rl").findings == ()


def test_enum_typo_suggests_the_literal() -> None:
    text = RL_BASE.replace("[trainer]\n", '[trainer.model]\nattn = "flash_attention2"\n')
    (f,) = validate_text(text, kind="rl").findings
    assert f.id == "wrong-type" and "flash_attention_2" in f.message
    assert validate_text(apply_fix(text, f), kind="rl").findings == ()


def test_none_and_empty_table_conventions() -> None:
    text = (
        RL_BASE
        + '[ckpt]\n[orchestrator.eval]\n[[orchestrator.eval.source]]\nname = "e"\n'
        + '[orchestrator.eval.source.env.taskset]\nid = "e"\n'  # a source without an env is rejected
        + '[inference.vllm]\nmax_model_len = "None"\n'
    )
    assert validate_text(text, kind="rl").findings == ()


def test_union_default_variant_is_used_without_type() -> None:
    text = RL_BASE.replace("[trainer]\n", "[trainer.optim]\nlr = 1e-5\nbetas1 = 0.9\n")
    assert validate_text(text, kind="rl").findings == ()


def test_inference_vllm_passes_unknown_keys_through() -> None:
    text = RL_BASE + '[inference.vllm]\nsafetensors_load_strategy = "eager"\nenable-chunked-prefill = true\n'
    assert validate_text(text, kind="rl").findings == ()


# ------------------------------------------------------------------------------ the real fixtures


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.toml"))


def expected_kinds() -> dict[str, str]:
    text = (FIXTURES / "SOURCE.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^- (\S+\.toml) \(\d+ bytes\) \[uv run (\w+)", text, re.M)}


def test_fixtures_exist() -> None:
    assert len(fixture_files()) == 45


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_fixture_has_no_errors_except_the_stale_k8s_one(path: Path) -> None:
    report = validate_text(path.read_text(encoding="utf-8"), filename=path.name)
    assert report.kind == expected_kinds()[path.name]
    errors = [(f.id, f.line, f.message) for f in report.findings if f.severity is Severity.ERROR]
    if path.name == STALE_K8S_INFER:
        assert [(e[0], e[1]) for e in errors] == [("mig-inference-model", 1)]
    else:
        assert errors == []
