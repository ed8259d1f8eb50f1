"""Issue 32, item 8: prime-rl's trainer and SFT validators and the launchers' own checks
(services/config/trainer_validators.py), each checked against prime-rl's condition at the pinned commit.

Each case is the mistake prime-rl rejects, which gives exactly its finding at the marked line (``# <-``),
and the near miss prime-rl accepts, which gives none: the default that makes the difference, the
neighbouring value, the case prime-rl exempts. None offers a fix (each is a choice between the user's
own settings)."""

from __future__ import annotations

import pytest

from services.config.findings import Severity
from services.config.validate import validate_text
from tests.services.config.test_rules import RL_BASE, SFT_BASE, marked_line

HF = 'impl = "hf"  # <-\nattn = "flash_attention_2"\n'  # FA2: hf's default attention ("auto") is its own error
EVAL = '[eval]\n[[eval.source]]\nname = "e"\n[eval.source.env.taskset]\nid = "e"\n'
MULTI = '[deployment]\ntype = "multi_node"\nnum_train_nodes = 2\n'
SLURM = '[slurm]\njob_name = "j"\n'
LORA = "[model.lora]\nrank = 8\n"
MUON = "[trainer.model]\nfsdp_cpu_offload = true\noptim_cpu_offload = false\n[trainer.optim]\n"


def trainer(body: str) -> str:
    return RL_BASE.replace("[trainer]\n", body)


def sft_model(extra: str) -> str:
    return SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\n' + extra)


# (name, kind, the mistake with its line marked, its rule, the near miss prime-rl accepts)
CASES: list[tuple[str, str, str, str, str]] = [
    # validator: configs/trainer.py::ModelConfig.validate_cp
    ("cp-hf", "trainer", "[model]\n" + HF + "cp = 2\n", "xc-impl-custom", '[model]\nimpl = "custom"\ncp = 2\n'),
    # validator: configs/trainer.py::ModelConfig.selective_ac_only_with_custom_impl
    (
        "selective-ac-hf",
        "trainer",
        "[model]\n" + HF + '[model.ac]\nmode = "selective"\n',
        "xc-impl-custom",
        "[model]\n" + HF.replace("  # <-", "") + '[model.ac]\nmode = "full"\n',
    ),
    # validator: configs/trainer.py::ModelConfig.quantization_only_with_custom_impl
    (
        "quantization-hf",
        "trainer",
        "[model]\n" + HF + '[model.quantization]\ntype = "fp8"\n',
        "xc-impl-custom",
        '[model]\nimpl = "auto"\n[model.quantization]\ntype = "fp8"\n',
    ),
    # validator: configs/trainer.py::TrainerConfig.ep_only_with_custom_impl
    (
        "ep-hf-rl",
        "rl",
        trainer("[trainer.model]\n" + HF + "ep = 2\n"),
        "xc-impl-custom",
        trainer("[trainer.model]\n" + HF.replace("  # <-", "") + "ep = 1\n"),
    ),
    # validator: configs/sft.py::SFTConfig.ep_only_with_custom_impl
    (
        "ep-hf-sft",
        "sft",
        sft_model(HF + "ep = 4\n"),
        "xc-impl-custom",
        sft_model(HF.replace("  # <-", "") + 'ep = "auto"\n'),
    ),
    # validator: configs/trainer.py::TrainerConfig.router_replay_only_with_custom_impl
    (
        "router-replay-hf",
        "trainer",
        'enable_router_replay = true  # <-\n[model]\nimpl = "hf"\nattn = "flash_attention_2"\n',
        "xc-impl-custom",
        'enable_router_replay = true\n[model]\nimpl = "custom"\n',
    ),
    # validator: configs/trainer.py::ActivationCheckpointConfig.validate_selective_targets
    (
        "selective-ac-no-target",
        "trainer",
        '[model.ac]\nmode = "selective"\ntargets = []  # <-\n',
        "xc-ac-targets",
        '[model.ac]\nmode = "full"\ntargets = []\n',  # prime-rl reads targets only in selective mode
    ),
    # validator: configs/trainer.py::ModelConfig.validate_ep_comm_backend
    (
        "deepep-no-ep",
        "trainer",
        '[model]\nep = 1\nep_comm_backend = "deepep"  # <-\n',
        "xc-ep-backend",
        '[model]\nep_comm_backend = "deepep"\n',  # ep left out is "auto": prime-rl accepts it
    ),
    # validator: configs/trainer.py::ModelConfig.mxfp8_only_with_torch_ep_backend
    (
        "mxfp8-deepep",
        "trainer",
        '[model]\nep = 8\nep_comm_backend = "deepep"  # <-\n[model.quantization]\ntype = "mxfp8"\n',
        "xc-mxfp8-backend",
        '[model]\nep = 8\nep_comm_backend = "deepep"\n[model.quantization]\ntype = "fp8"\n',
    ),
    # validator: configs/trainer.py::TrainerConfig.validate_opt_and_fsdp_offload
    (
        "muon-fsdp-offload",
        "rl",
        trainer(MUON + 'type = "muon"  # <-\n'),
        "xc-muon-fsdp-offload",
        trainer(MUON + 'type = "adamw"\n'),
    ),
    # validator: configs/sft.py::SFTConfig.validate_opt_and_fsdp_offload
    (
        "muon-fsdp-offload-sft",
        "sft",
        sft_model("fsdp_cpu_offload = true\noptim_cpu_offload = false\n") + '[optim]\ntype = "muon"  # <-\n',
        "xc-muon-fsdp-offload",
        sft_model("optim_cpu_offload = false\n") + '[optim]\ntype = "muon"\n',
    ),
    # validator: configs/trainer.py::TrainerConfig.dont_do_massive_traces (the shared max_steps = 20 reaches it)
    (
        "trace-rl-shared-steps",
        "rl",
        trainer('[trainer]\ntrace_path = "trace"  # <-\n'),
        "xc-trace-steps",
        trainer('[trainer]\ntrace_path = "trace"\n').replace("max_steps = 20", "max_steps = 9"),
    ),
    # validator: configs/sft.py::SFTConfig.dont_do_massive_traces
    (
        "trace-sft-no-steps",
        "sft",
        'trace_path = "t"  # <-\n' + SFT_BASE,
        "xc-trace-steps",
        'trace_path = "t"\nmax_steps = 9\n' + SFT_BASE,
    ),
    # validator: configs/trainer.py::(module).validate_scheduler
    # validator: configs/trainer.py::TrainerConfig.validate_scheduler_steps
    (
        "linear-past-max-steps",
        "trainer",
        'max_steps = 15\n[scheduler]\ntype = "linear"\nwarmup_steps = 10  # <-\n',
        "xc-scheduler-steps",
        'max_steps = 20\n[scheduler]\ntype = "linear"\nwarmup_steps = 10\n',  # 10 + the default decay 10 fit
    ),
    (
        "linear-no-phase",
        "trainer",
        '[scheduler]\ntype = "linear"\nwarmup_steps = 0  # <-\ndecay_steps = 0\n',
        "xc-scheduler-steps",
        '[scheduler]\ntype = "linear"\nwarmup_steps = 5\ndecay_steps = 0\n',  # no decay: no max_steps needed
    ),
    # validator: configs/sft.py::SFTConfig.validate_scheduler_steps
    (
        "cosine-no-max-steps",
        "sft",
        SFT_BASE + '[scheduler]\ntype = "cosine"  # <-\n',
        "xc-scheduler-steps",
        "max_steps = 11\n" + SFT_BASE + '[scheduler]\ntype = "cosine"\n',
    ),
    (
        "cosine-warmup-reaches-max-steps",
        "rl",
        trainer('[trainer.scheduler]\ntype = "cosine"\nwarmup_steps = 20  # <-\n'),
        "xc-scheduler-steps",
        trainer('[trainer.scheduler]\ntype = "cosine"\nwarmup_steps = 19\n'),
    ),
    # validator: configs/shared.py::ResumeConfig.validate_step_xor_dir
    (
        "resume-dir-not-a-step",
        "sft",
        SFT_BASE + '[resume]\ndir = "runs/a/checkpoints"  # <-\n',
        "xc-resume-dir",
        SFT_BASE + '[resume]\ndir = "runs/a/checkpoints/step_50/"\n',
    ),
    # validator: configs/sft.py::SFTConfig.validate_cp_seq_len (the default seq_len 128 is not a multiple of 3)
    ("cp-seq-len-default", "sft", sft_model("cp = 3  # <-\n"), "xc-cp-seq-len", sft_model("cp = 2\n")),
    (
        "cp-val-seq-len",
        "sft",
        sft_model("cp = 2\n") + '[val.data]\nname = "v"\nseq_len = 1025  # <-\n',
        "xc-cp-seq-len",
        sft_model("cp = 2\n") + '[val.data]\nname = "v"\nseq_len = 1024\n',
    ),
    # validator: configs/sft.py::SFTConfig.validate_cp_micro_batch_size
    (
        "cp-micro-batch",
        "sft",
        sft_model("cp = 2\n").replace("batch_size = 32\n", "batch_size = 32\nmicro_batch_size = 2  # <-\n"),
        "xc-cp-micro-batch",
        sft_model("cp = 1\n").replace("batch_size = 32\n", "batch_size = 32\nmicro_batch_size = 2\n"),
    ),
    # validator: configs/sft.py::SFTDataConfig.validate_subsets_and_splits
    (
        "subsets-splits",
        "sft",
        SFT_BASE + 'subsets = ["a", "b"]\nsplits = ["train"]  # <-\n',
        "xc-sft-lists",
        SFT_BASE + 'subsets = ["a", "b"]\nsplits = ["train", "test"]\nprobabilities = [0.5, 0.5]\n',
    ),
    # validator: configs/sft.py::SingleNodeDeploymentConfig.validate_gpu_count
    (
        "sft-train-gpus",
        "sft",
        SFT_BASE + "[deployment]\nnum_train_gpus = 16  # <-\n",
        "xc-sft-train-gpus",
        SFT_BASE + "[deployment]\nnum_train_gpus = 16\ngpus_per_node = 16\n",
    ),
    # validator: configs/sft.py::SFTConfig.auto_setup_online_eval
    (
        "inference-without-eval",
        "sft",
        SFT_BASE + "[inference]  # <-\n",
        "xc-sft-inference-no-eval",
        SFT_BASE + EVAL + "[inference]\n",
    ),
    (
        "eval-lora-nccl",
        "sft",
        SFT_BASE + LORA + EVAL + '[inference]\n[weight_broadcast]\ntype = "nccl"  # <-\n',
        "xc-sft-eval-broadcast",
        SFT_BASE + LORA + EVAL + "[inference]\n",  # left out, LoRA picks the filesystem
    ),
    (
        "eval-retrigger-default-nccl",
        "sft",
        SFT_BASE + EVAL.replace("[eval]\n", "[eval]\nretrigger_on_resume = true  # <-\n") + "[inference]\n",
        "xc-sft-eval-broadcast",
        SFT_BASE
        + EVAL.replace("[eval]\n", "[eval]\nretrigger_on_resume = true\n")
        + '[inference]\n[weight_broadcast]\ntype = "filesystem"\n',
    ),
    (
        "eval-multi-node-no-infer-nodes",
        "sft",
        SFT_BASE + EVAL + "[inference]\n" + MULTI.replace('"multi_node"', '"multi_node"  # <-') + SLURM,
        "xc-sft-eval-multinode",
        SFT_BASE + EVAL + "[inference]\n" + MULTI + "num_infer_nodes = 1\n" + SLURM,
    ),
    (
        "eval-gpus",
        "sft",
        SFT_BASE + EVAL + "[inference]\n[deployment]  # <-\nnum_train_gpus = 4\nnum_infer_gpus = 5\n",
        "xc-sft-eval-gpus",
        SFT_BASE + EVAL + "[inference]\n[deployment]\nnum_train_gpus = 4\nnum_infer_gpus = 4\n",
    ),
    (
        "eval-model",
        "sft",
        SFT_BASE + EVAL + '[inference.vllm]\nmodel = "Qwen/Qwen3-1.7B"  # <-\n',
        "xc-sft-eval-model",
        SFT_BASE + EVAL + '[inference.vllm]\nmodel = "Qwen/Qwen3-0.6B"\n',
    ),
    (
        "eval-tp",
        "sft",
        SFT_BASE + EVAL + "[deployment]\nnum_infer_gpus = 3\n[inference.vllm]\ntensor_parallel_size = 2  # <-\n",
        "xc-sft-eval-tp",
        SFT_BASE + EVAL + "[deployment]\nnum_infer_gpus = 4\n[inference.vllm]\ntensor_parallel_size = 2\n",
    ),
    (
        "eval-client-port",
        "sft",
        SFT_BASE + EVAL + '[eval.client]\nbase_url = "http://localhost:9000/v1"  # <-\n[inference]\n',
        "xc-client-port",
        SFT_BASE + EVAL + '[eval.client]\nbase_url = "http://localhost:9000/v1"\n[inference.server]\nport = 9000\n',
    ),
    # validator: configs/sft.py::SFTConfig.validate_typed_renderer (renderer.name = "default"; fake data is exempt)
    (
        "renderer-default",
        "sft",
        SFT_BASE + '[renderer]\nname = "default"  # <-\n',
        "xc-sft-renderer-default",
        SFT_BASE.replace("[data]\n", '[data]\ntype = "fake"\n') + '[renderer]\nname = "default"\n',
    ),
    # validator: entrypoints/sft.py::(module).sft
    (
        "sft-nccl-no-inference",
        "sft",
        SFT_BASE + '[weight_broadcast]\ntype = "nccl"  # <-\n',
        "xc-sft-nccl-no-inference",
        SFT_BASE + '[weight_broadcast]\ntype = "filesystem"\n',
    ),
    # validator: entrypoints/rl.py::(module).rl_local
    (
        "rl-client-port",
        "rl",
        RL_BASE.replace(
            "[inference]\n", '[orchestrator.model.client]\nbase_url = "http://localhost:8001/v1"  # <-\n[inference]\n'
        ),
        "xc-client-port",
        RL_BASE.replace(
            "[inference]\n", '[orchestrator.model.client]\nbase_url = "http://localhost:8001/v1"\n[inference]\n'
        )
        + "[inference.server]\nport = 8001\n",
    ),
]


@pytest.mark.parametrize("name,kind,bad,rule,good", CASES, ids=[c[0] for c in CASES])
def test_the_mistake_prime_rl_rejects_and_the_near_miss_it_accepts(
    name: str, kind: str, bad: str, rule: str, good: str
) -> None:
    findings = validate_text(bad, kind=kind).findings
    assert [(f.id, f.line) for f in findings] == [(rule, marked_line(bad))], name
    (f,) = findings
    assert f.severity is Severity.ERROR and f.source.startswith("prime-rl") and f.message and f.edit is None
    assert validate_text(good, kind=kind).findings == (), name


def test_values_are_read_as_prime_rl_reads_them() -> None:
    """pydantic's lax mode reads "2" as 2 and "true" as true: the check fires on what prime-rl reads (the
    value itself gets only its style warning)."""
    text = '[model]\nimpl = "hf"\nattn = "flash_attention_2"\ncp = "2"\n'
    assert sorted(f.id for f in validate_text(text, kind="trainer").findings) == ["lax-type", "xc-impl-custom"]
    text = 'max_steps = "15"\n[scheduler]\ntype = "linear"\nwarmup_steps = "10"\n'
    ids = [f.id for f in validate_text(text, kind="trainer").findings]
    assert ids.count("xc-scheduler-steps") == 1 and ids.count("lax-type") == 2


def test_the_trainer_s_own_max_steps_beats_the_shared_one() -> None:
    """In an rl file the trainer reads trainer.max_steps when set, else the shared max_steps."""
    text = RL_BASE.replace("max_steps = 20\n", "").replace(
        "[trainer]\n", '[trainer]\nmax_steps = 5\ntrace_path = "t"\n'
    )
    assert validate_text(text, kind="rl").findings == ()
    (f,) = validate_text(text.replace("max_steps = 5", "max_steps = 12"), kind="rl").findings
    assert f.id == "xc-trace-steps" and "trainer.max_steps = 12" in f.message


FROZEN = '[orchestrator.algo]\ntype = "sft"\n[orchestrator.algo.sampling.source]\nname = "t"\nbase_url = "http://t:8001/v1"\n'


def test_a_left_out_client_url_is_the_default_when_an_env_samples_from_the_policy() -> None:
    """Left out, base_url is the client's default (port 8000) while a train env samples from the policy
    (every algorithm does by default), and the server's own URL when none does."""
    moved = RL_BASE + "[inference.server]\nport = 8001  # <-\n"
    (f,) = validate_text(moved, kind="rl").findings
    assert (f.id, f.line) == ("xc-client-port", marked_line(moved)) and "the default" in f.message
    frozen = RL_BASE.replace("[inference]\n", FROZEN + "[inference]\n") + "[inference.server]\nport = 8001\n"
    assert validate_text(frozen, kind="rl").findings == ()
    # an env's own algorithm beats [orchestrator.algo]
    own = frozen.replace(
        "[orchestrator.train.source.env.taskset]",
        '[orchestrator.train.source.algo]\ntype = "grpo"\n[orchestrator.train.source.env.taskset]',
    )
    assert [f.id for f in validate_text(own, kind="rl").findings] == ["xc-client-port"]


def test_only_a_local_rl_run_checks_the_client_port() -> None:
    """rl_local checks the port; under SLURM the sbatch script wires the client instead."""
    text = RL_BASE.replace("[inference]\n", '[orchestrator.model.client]\nbase_url = "http://host:9/v1"\n[inference]\n')
    assert [f.id for f in validate_text(text, kind="rl").findings] == ["xc-client-port"]
    assert validate_text(text + '[slurm]\njob_name = "j"\n', kind="rl").findings == ()


def test_a_resume_dir_names_one_step() -> None:
    for good in ("step_5", "./ckpt/step_12/", "/abs/step_0"):
        assert validate_text(SFT_BASE + f'[resume]\ndir = "{good}"\n', kind="sft").findings == (), good
    for bad in ("step_", "step_5x", "ckpt/step_5/weights", ""):
        found = [f.id for f in validate_text(SFT_BASE + f'[resume]\ndir = "{bad}"\n', kind="sft").findings]
        assert found == ["xc-resume-dir"], bad


@pytest.mark.parametrize("value", ["[]", '["fp8"]', "{ a = 1 }"])
def test_a_union_tag_given_an_array_or_table_is_a_type_error_not_a_crash(value: str) -> None:
    """validate raised TypeError (unhashable) on `type = []` in a tagged table such as [model.quantization]:
    an array or table where the tag's name belongs is the user's mistake to be told about."""
    for text in (f"[model.quantization]\ntype = {value}\n", f"[scheduler]\ntype = {value}\n"):
        findings = validate_text(text, kind="trainer").findings
        assert [f.id for f in findings] == ["wrong-type"], text


def test_a_bool_s_text_is_read_unstripped_as_pydantic_does() -> None:
    """lax() read "0 " as false while pydantic refuses it (a bool's text is not stripped, a number's is);
    test_lax_types' property test found it only when its random draw hit such a value."""
    from services.config.walk import _NO, lax

    for text in ("0 ", " true", "\tyes", "off\n"):
        assert lax(text, "bool") is _NO, text
    assert lax("TRUE", "bool") is True and lax("Off", "bool") is False and lax(" 12 ", "int") == 12
