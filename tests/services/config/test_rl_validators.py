"""Issue 32, item 8: prime-rl's algorithm, orchestrator, evals and inference validators and the rl deployment
checks (services/config/rl_validators.py), each against prime-rl's own condition at the pinned commit: the
mistake gives exactly its error at the marked line (``# <-``), and the near miss prime-rl accepts gives no
finding at all. Values are read as pydantic's lax mode reads them ("true" is true, "600" is 600)."""

from __future__ import annotations

import pytest

from services.config.findings import Severity
from services.config.validate import validate_text
from tests.services.config.test_rules import ORCH_BASE, RL_BASE, SFT_BASE, marked_line

EVALS_BASE = '[[eval.source]]\nname = "reverse-text"\n\n[eval.source.env.taskset]\nid = "reverse-text"\n'
INFER_BASE = '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n'
SLURM = '[slurm]\njob_name = "j"\n'
MULTI = '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\n'
LLMD = '[inference.router]\ntype = "llm-d"\n'
SECOND_SOURCE = '[[orchestrator.train.source]]\n{name}\n[orchestrator.train.source.env.taskset]\nid = "{id}"\n'
TEACHER = 'name = "Qwen/Qwen3-8B"\nbase_url = "http://localhost:8001/v1"\n'
# an offload table names its backend: prime-rl's union has no default variant (the field defaults to None)
NATIVE_OFFLOAD = '[kv_cache_offload]\ntype = "native"\n[kv_cache_offload.cpu]\nnum_bytes = 1000\n'
CURRICULUM = '[orchestrator.train.source.curriculum.sampler]\ntype = "difficulty_pool"\n'


def orch(snippet: str) -> str:
    """RL_BASE with ``snippet`` inside [orchestrator] (before its train sources)."""
    return RL_BASE.replace("group_size = 8\n", "group_size = 8\n" + snippet)


# (name, kind, the mistake with its line marked, its rule, the config prime-rl accepts)
CASES = [
    # validator: configs/algorithm.py::FrozenModelConfig.require_explicit_endpoint
    (
        "frozen-source-no-base-url",
        "rl",
        RL_BASE
        + '[orchestrator.algo]\ntype = "sft"\n[orchestrator.algo.sampling.source]  # <-\nname = "Qwen/Qwen3-8B"\n',
        "missing-required",
        RL_BASE + '[orchestrator.algo]\ntype = "sft"\n[orchestrator.algo.sampling.source]\n' + TEACHER,
    ),
    # validator: configs/algorithm.py::FrozenModelConfig.require_explicit_endpoint
    (
        "opd-teacher-no-base-url",
        "orchestrator",
        ORCH_BASE + '[algo]\ntype = "opd"\n[algo.teacher]  # <-\nname = "Qwen/Qwen3-8B"\n',
        "missing-required",
        ORCH_BASE + '[algo]\ntype = "opd"\n[algo.teacher]\n' + TEACHER,
    ),
    # validator: configs/algorithm.py::EchoRolesConfig.require_a_role
    (
        "echo-no-role",
        "rl",
        RL_BASE + '[orchestrator.algo]\ntype = "echo"\n[orchestrator.algo.roles]  # <-\n',
        "xc-echo-roles",
        RL_BASE + '[orchestrator.algo]\ntype = "echo"\n[orchestrator.algo.roles.user]\nalpha = 0.1\n',
    ),
    # validator: configs/algorithm.py::BaseAlgoConfig.validate_sampling_source
    (
        "grpo-frozen-source",
        "rl",
        RL_BASE + "[orchestrator.algo.sampling.source]  # <-\n" + TEACHER,
        "xc-algo-frozen-source",
        RL_BASE + '[orchestrator.algo]\ntype = "grpo"\n[orchestrator.algo.sampling]\nsource = "policy"\n',
    ),
    # validator: configs/algorithm.py::BaseAlgoConfig.validate_sampling_source (a source's own algorithm)
    (
        "source-opd-frozen-source",
        "rl",
        RL_BASE
        + '[orchestrator.train.source.algo]\ntype = "opd"\n[orchestrator.train.source.algo.teacher]\n'
        + TEACHER
        + "[orchestrator.train.source.algo.sampling.source]  # <-\n"
        + TEACHER,
        "xc-algo-frozen-source",
        RL_BASE
        + '[orchestrator.train.source.algo]\ntype = "opd"\n[orchestrator.train.source.algo.teacher]\n'
        + TEACHER,
    ),
    # validator: configs/algorithm.py::SFTAlgoConfig.require_frozen_source
    (
        "sft-algo-policy",
        "rl",
        RL_BASE + '[orchestrator.algo]\ntype = "sft"  # <-\n',
        "xc-sft-algo-source",
        RL_BASE + '[orchestrator.algo]\ntype = "sft"\n[orchestrator.algo.sampling.source]\n' + TEACHER,
    ),
    # validator: configs/evals.py::EvalsConfig.validate_skip_first_step_is_online_only
    (
        "skip-first-step-standalone",
        "evals",
        EVALS_BASE.replace("[[eval.source]]", "[eval]\nskip_first_step = true  # <-\n\n[[eval.source]]"),
        "xc-skip-first-step",
        EVALS_BASE.replace("[[eval.source]]", "[eval]\nskip_first_step = true\n\n[[eval.source]]")
        + "[online]\nmax_steps = 10\n",
    ),
    # validator: configs/inference.py::VllmConfig.auto_setup_max_lora_rank
    (
        "max-lora-rank",
        "inference",
        INFER_BASE + "max_lora_rank = 600  # <-\n",
        "out-of-range",
        INFER_BASE + "max_lora_rank = 500\n",  # rounded up to 512
    ),
    # validator: configs/inference.py::BaseKVCacheOffloadConfig.valid_tiers
    (
        "kv-offload-disk-only",
        "rl",
        RL_BASE
        + '[inference.kv_cache_offload]  # <-\ntype = "native"\n[inference.kv_cache_offload.disk]\npath = "/d"\n',
        "missing-required",
        RL_BASE + '[inference.kv_cache_offload]\ntype = "native"\n[inference.kv_cache_offload.cpu]\nnum_bytes = 1000\n'
        '[inference.kv_cache_offload.disk]\npath = "/d"\n',
    ),
    # validator: configs/inference.py::InferenceConfig.auto_setup_kv_cache_offload
    (
        "kv-offload-no-prefix-caching",
        "inference",
        INFER_BASE + "enable_prefix_caching = false  # <-\n" + NATIVE_OFFLOAD,
        "xc-kv-offload-prefix-caching",
        INFER_BASE + NATIVE_OFFLOAD,
    ),
    # validator: configs/inference.py::LlmdRouterConfig.validate_scorers
    (
        "llmd-unknown-scorer",
        "inference",
        INFER_BASE
        + '[router]\ntype = "llm-d"\n[router.decode_scorer_overrides]\nqueue-scorrer = 1.0  # <-\n'
        + '[deployment]\ntype = "disaggregated"\n'
        + SLURM,
        "xc-llmd-scorers",
        INFER_BASE
        + '[router]\ntype = "llm-d"\n[router.decode_scorer_overrides]\nqueue-scorer = 1.0\n'
        + '[deployment]\ntype = "disaggregated"\n'
        + SLURM,
    ),
    # validator: configs/inference.py::InferenceConfig.validate_router_deployment (llm-d on one node)
    (
        "llmd-single-node",
        "inference",
        INFER_BASE + '[router]\ntype = "llm-d"  # <-\n',
        "xc-llmd-single-node",
        INFER_BASE + '[router]\ntype = "vllm-router"\n',
    ),
    # validator: configs/inference.py::InferenceConfig.validate_llmd_no_routed_experts
    (
        "llmd-routed-experts",
        "inference",
        INFER_BASE
        + "enable_return_routed_experts = true  # <-\n"
        + '[router]\ntype = "llm-d"\n[deployment]\ntype = "multi_node"\n'
        + SLURM,
        "xc-llmd-routed-experts",
        INFER_BASE + 'enable_return_routed_experts = true\n[deployment]\ntype = "multi_node"\n' + SLURM,
    ),
    # validator: configs/rl.py::RLConfig.validate_llmd_no_routed_experts (router replay turns routed experts on)
    (
        "llmd-router-replay",
        "rl",
        RL_BASE.replace("[trainer]\n", "[trainer]\nenable_router_replay = true  # <-\n")
        + LLMD
        + '[inference.deployment]\ntype = "multi_node"\nnum_nodes = 1\n'
        + MULTI
        + SLURM,
        "xc-llmd-routed-experts",
        RL_BASE.replace("[trainer]\n", "[trainer]\nenable_router_replay = true\n")
        + '[inference.deployment]\ntype = "multi_node"\nnum_nodes = 1\n'
        + MULTI
        + SLURM,
    ),
    # validator: configs/orchestrator.py::DifficultyPoolSamplerConfig.validate_pools
    (
        "pools-same-threshold",
        "rl",
        RL_BASE
        + CURRICULUM
        + "[orchestrator.train.source.curriculum.sampler.pools]  # <-\n"
        + "hard = { threshold = 0.5, weight = 1 }\neasy = { threshold = 0.5, weight = 1 }\n",
        "xc-difficulty-pools",
        RL_BASE
        + CURRICULUM
        + "[orchestrator.train.source.curriculum.sampler.pools]\n"
        + "hard = { threshold = 0.5, weight = 1 }\neasy = { threshold = 1.0, weight = 0 }\n",
    ),
    # validator: configs/orchestrator.py::DifficultyPoolSamplerConfig.validate_pools
    (
        "pools-no-weight",
        "rl",
        RL_BASE
        + CURRICULUM
        + "[orchestrator.train.source.curriculum.sampler.pools]  # <-\n"
        + "hard = { threshold = 0.5, weight = 0 }\n",
        "xc-difficulty-pools",
        RL_BASE + CURRICULUM,  # left out: prime-rl's three pools
    ),
    # validator: configs/orchestrator.py::DifficultyPoolSamplerConfig.validate_pools
    (
        "pools-empty",
        "orchestrator",
        ORCH_BASE + '[train.source.curriculum.sampler]\ntype = "difficulty_pool"\npools = {}  # <-\n',
        "xc-difficulty-pools",
        ORCH_BASE
        + '[train.source.curriculum.sampler]\ntype = "difficulty_pool"\n'
        + "pools = { a = { threshold = 1, weight = 1 } }\n",
    ),
    # validator: configs/orchestrator.py::AdvRangeGateConfig.validate_range
    (
        "gate-range",
        "rl",
        RL_BASE + "[orchestrator.train.source.curriculum.gates.zero]\nreject_min = 0.1  # <-\n",
        "xc-gate-range",
        RL_BASE + "[orchestrator.train.source.curriculum.gates.zero]\nreject_min = -0.1\n",
    ),
    # validator: configs/orchestrator.py::TrainConfig.validate_unique_env_names
    (
        "train-names-taskset",
        "rl",
        RL_BASE + SECOND_SOURCE.format(name="", id="reverse-text").replace("]]\n", "]]  # <-\n"),
        "xc-env-names-unique",
        RL_BASE + SECOND_SOURCE.format(name="", id="gsm8k"),
    ),
    # validator: configs/orchestrator.py::TrainConfig.validate_unique_env_names
    (
        "train-names-given",
        "rl",
        RL_BASE + SECOND_SOURCE.format(name='name = "reverse-text"  # <-', id="wordle"),
        "xc-env-names-unique",
        RL_BASE + SECOND_SOURCE.format(name='name = "reverse-text-2"', id="reverse-text"),
    ),
    # validator: configs/orchestrator.py::EvalConfig.validate_unique_env_names
    (
        "eval-names",
        "evals",
        EVALS_BASE + EVALS_BASE.replace('name = "reverse-text"', 'name = "reverse-text"  # <-'),
        "xc-env-names-unique",
        EVALS_BASE + EVALS_BASE.replace('name = "reverse-text"', 'name = "reverse-text-hard"'),
    ),
    # validator: configs/orchestrator.py::EnvConfig.validate_env
    (
        "train-source-no-env",
        "rl",
        RL_BASE + '[[orchestrator.train.source]]  # <-\nname = "b"\n',
        "xc-env-none",
        RL_BASE
        + '[[orchestrator.train.source]]\nname = "b"\n[orchestrator.train.source.env.taskset]\nid = "reverse-text"\n',
    ),
    # validator: configs/orchestrator.py::EnvConfig.validate_env
    (
        "eval-source-agg",
        "evals",
        EVALS_BASE.replace('name = "reverse-text"', 'name = "agg"  # <-'),
        "xc-env-agg",
        EVALS_BASE.replace('name = "reverse-text"', 'name = "aggregate"'),
    ),
    # validator: configs/orchestrator.py::EnvConfig.validate_env (the taskset id names the source)
    (
        "train-source-agg-taskset",
        "orchestrator",
        ORCH_BASE.replace('name = "reverse-text"\n', "")
        .replace("]]\n", "]]  # <-\n")
        .replace('"reverse-text"', '"agg"'),
        "xc-env-agg",
        ORCH_BASE.replace('"reverse-text"\n\n', '"agg-2"\n\n').replace('id = "reverse-text"', 'id = "agg"'),
    ),
    # validator: configs/orchestrator.py::ConcurrencyConfig.validate_bounds
    (
        "concurrency-min-above-max",
        "rl",
        orch("[orchestrator.concurrency]\nmin_inflight = 64  # <-\nmax_inflight = 32\n"),
        "xc-concurrency-bounds",
        orch("[orchestrator.concurrency]\nmin_inflight = 64\nmax_inflight = 64\n"),
    ),
    # validator: configs/orchestrator.py::ConcurrencyConfig.validate_bounds (max_inflight defaults to 1024)
    (
        "concurrency-initial-above-default",
        "orchestrator",
        ORCH_BASE.replace("group_size = 8\n", "group_size = 8\n[concurrency]\ninitial_inflight = 2048  # <-\n"),
        "xc-concurrency-bounds",
        ORCH_BASE.replace("group_size = 8\n", '[concurrency]\ninitial_inflight = 2048\nmax_inflight = "None"\n'),
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_infer_nodes
    (
        "infer-nodes-multi-node",
        "rl",
        RL_BASE + '[inference.deployment]\ntype = "multi_node"\n' + MULTI + "num_infer_nodes = 1  # <-\n" + SLURM,
        "xc-infer-nodes",
        RL_BASE + '[inference.deployment]\ntype = "multi_node"\n' + MULTI + "num_infer_nodes = 2\n" + SLURM,
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_disaggregated_inference
    (
        "infer-nodes-disaggregated",
        "rl",
        RL_BASE
        + '[inference.deployment]\ntype = "disaggregated"\nnum_decode_replicas = 2\n'
        + MULTI
        + "num_infer_nodes = 2  # <-\n"
        + SLURM,
        "xc-infer-nodes",
        RL_BASE
        + '[inference.deployment]\ntype = "disaggregated"\nnum_decode_replicas = 2\n'
        + MULTI
        + "num_infer_nodes = 3\n"
        + SLURM,
    ),
    # validator: configs/rl.py::RLConfig.validate_deployment
    (
        "deployment-zero-infer-with-inference",
        "rl",
        RL_BASE + MULTI + "num_infer_nodes = 0  # <-\n" + SLURM + "[trainer.data.fake]\n",
        "xc-deployment-inference",
        RL_BASE.replace("[inference]\n", "") + MULTI + "num_infer_nodes = 0\n" + SLURM + "[trainer.data.fake]\n",
    ),
    # validator: configs/rl.py::RLConfig.validate_deployment
    (
        "deployment-infer-nodes-no-inference",
        "rl",
        RL_BASE.replace("[inference]\n", "") + MULTI + "num_infer_nodes = 1  # <-\n" + SLURM,
        "xc-deployment-inference",
        RL_BASE + MULTI + "num_infer_nodes = 1\n" + SLURM,
    ),
    # validator: configs/rl.py::RLConfig.validate_deployment (no inference: the trainer needs fake data)
    (
        "deployment-no-inference-no-fake-data",
        "rl",
        RL_BASE.replace("[inference]\n", "") + MULTI.replace('"multi_node"', '"multi_node"  # <-') + SLURM,
        "xc-deployment-inference",
        RL_BASE.replace("[inference]\n", "") + MULTI + SLURM + "[trainer.data.fake]\n",
    ),
    # validator: configs/rl.py::RLConfig.validate_enough_devices_for_nccl
    (
        "nccl-one-gpu",
        "rl",
        RL_BASE.replace("[trainer]\n", '[trainer.weight_broadcast]\ntype = "nccl"  # <-\n')
        + "[deployment]\nnum_train_gpus = 1\nnum_infer_gpus = 0\n",
        "xc-nccl-devices",
        RL_BASE.replace("[trainer]\n", '[trainer.weight_broadcast]\ntype = "nccl"\n'),
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_run_dir
    (
        "run-dir-sub-output",
        "rl",
        RL_BASE.replace("[trainer]\n", '[trainer]\noutput_dir = "outputs/my-run"  # <-\n'),
        "xc-run-dir",
        RL_BASE.replace("[trainer]\n", '[trainer]\noutput_dir = "./outputs/my-run/"\n') + '[run]\nname = "my-run"\n',
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_deployment (multi-node expert parallel)
    (
        "ep-dp-size",
        "rl",
        RL_BASE
        + "[inference.vllm]\nenable_expert_parallel = true\ntensor_parallel_size = 2\ndata_parallel_size = 2  # <-\n"
        + MULTI
        + "num_infer_nodes = 1\n"
        + SLURM,
        "xc-ep-sizes",
        RL_BASE
        + "[inference.vllm]\nenable_expert_parallel = true\ntensor_parallel_size = 2\ndata_parallel_size = 4\n"
        + MULTI
        + "num_infer_nodes = 1\n"
        + SLURM,
    ),
    # validator: configs/rl.py::RLConfig.auto_setup_deployment (multi-node expert parallel)
    (
        "ep-dp-local",
        "rl",
        RL_BASE
        + "[inference.vllm]\nenable_expert_parallel = true\ntensor_parallel_size = 4\ndata_parallel_size = 4\n"
        + "data_parallel_size_local = 4  # <-\n"
        + MULTI
        + "num_infer_nodes = 2\n"
        + SLURM,
        "xc-ep-sizes",
        RL_BASE
        + "[inference.vllm]\nenable_expert_parallel = true\ntensor_parallel_size = 4\ndata_parallel_size = 4\n"
        + "data_parallel_size_local = 2\n"
        + MULTI
        + "num_infer_nodes = 2\n"
        + SLURM,
    ),
    (
        "ep-gpus-per-node",
        "rl",
        RL_BASE
        + "[inference.vllm]\nenable_expert_parallel = true\ntensor_parallel_size = 3  # <-\n"
        + MULTI
        + "num_infer_nodes = 1\n"
        + SLURM,
        "xc-ep-sizes",
        RL_BASE
        + "[inference.vllm]\nenable_expert_parallel = false\ntensor_parallel_size = 4\n"
        + MULTI
        + "num_infer_nodes = 1\n"
        + SLURM,
    ),
    # validator: configs/inference.py::InferenceConfig.auto_setup_kv_cache_offload (sft's [inference])
    (
        "sft-inference-prefix-caching",
        "sft",
        SFT_BASE
        + "[inference.vllm]\nenable_prefix_caching = false  # <-\n"
        + NATIVE_OFFLOAD.replace("[kv", "[inference.kv")
        + EVALS_BASE,
        "xc-kv-offload-prefix-caching",
        SFT_BASE
        + "[inference.vllm]\nenable_prefix_caching = true\n"
        + NATIVE_OFFLOAD.replace("[kv", "[inference.kv")
        + EVALS_BASE,  # sft starts an inference server only for online evals
    ),
]


@pytest.mark.parametrize("name,kind,bad,rule,good", CASES, ids=[c[0] for c in CASES])
def test_each_validator_rejects_the_mistake_and_accepts_the_near_miss(
    name: str, kind: str, bad: str, rule: str, good: str
) -> None:
    findings = validate_text(bad, kind=kind).findings
    assert [(f.id, f.line) for f in findings] == [(rule, marked_line(bad))], name
    (f,) = findings
    assert f.severity is Severity.ERROR and f.source.startswith("prime-rl") and f.message and f.fix
    assert "?" not in f.message and "{" not in f.message, f.message  # every template field filled in
    if rule.startswith("xc-"):
        assert f.edit is None  # each asks the user to choose: no automatic fix
    assert validate_text(good, kind=kind).findings == (), name


def test_the_messages_say_what_prime_rl_would_read() -> None:
    """The finding names the values prime-rl compares, defaults included."""
    (f,) = validate_text(
        CASES[[c[0] for c in CASES].index("concurrency-initial-above-default")][2], kind="orchestrator"
    ).findings
    assert "2048" in f.message and "1024" in f.message
    text = RL_BASE + SECOND_SOURCE.format(name="", id="reverse-text")
    (f,) = validate_text(text, kind="rl").findings
    assert '"reverse-text"' in f.message and "0 and 1" in f.message
    (f,) = validate_text(RL_BASE.replace("[trainer]\n", '[trainer]\noutput_dir = "o"\n'), kind="rl").findings
    assert "generated run name" in f.message


def test_a_paired_env_id_is_part_of_the_name() -> None:
    """verifiers names a source by "env+taskset" when both ids are given: the same taskset under two envs
    is two names."""
    env = '[orchestrator.train.source.env]\nid = "best-of-n"\n'
    second = SECOND_SOURCE.format(name="", id="reverse-text")
    text = RL_BASE + second.replace(
        "[orchestrator.train.source.env.taskset]", env + "[orchestrator.train.source.env.taskset]"
    )
    assert validate_text(text, kind="rl").findings == ()


def test_values_are_read_as_prime_rl_reads_them() -> None:
    """pydantic's lax mode: "true" is true and "600" is 600, so the check still fires beside the style
    warning; a value pydantic refuses is the schema's finding alone."""
    text = EVALS_BASE.replace("[[eval.source]]", '[eval]\nskip_first_step = "true"\n\n[[eval.source]]')
    assert sorted(f.id for f in validate_text(text, kind="evals").findings) == ["lax-type", "xc-skip-first-step"]
    text = orch('[orchestrator.concurrency]\nmin_inflight = "64"\nmax_inflight = 32.0\n')
    assert "xc-concurrency-bounds" in [f.id for f in validate_text(text, kind="rl").findings]
    text = orch('[orchestrator.concurrency]\nmin_inflight = "many"\nmax_inflight = 32\n')
    assert "xc-concurrency-bounds" not in [f.id for f in validate_text(text, kind="rl").findings]
    pools = "[orchestrator.train.source.curriculum.sampler.pools]\nhard = { threshold = 0.5, weight = 1 }\n"
    text = RL_BASE + CURRICULUM + pools + 'easy = { threshold = "0.5", weight = 1 }\n'
    assert sorted(f.id for f in validate_text(text, kind="rl").findings) == ["lax-type", "xc-difficulty-pools"]
