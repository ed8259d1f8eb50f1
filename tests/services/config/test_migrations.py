"""Every migration in rules.toml: an old-schema config triggers exactly it, at its line, saying when
it changed; where an automatic fix exists, applying it removes the finding and keeps the comments."""

from __future__ import annotations

import pytest

from services.config.findings import rule_db
from services.config.fixes import apply_fix
from services.config.validate import validate_text
from tests.services.config.test_rules import ORCH_BASE, RL_BASE, SFT_BASE

# an eval source names its environment (prime-rl EnvConfig.validate_env)
EVAL_BASE = ORCH_BASE + '[[eval.source]]\nname = "e"\n[eval.source.env.taskset]\nid = "e"\n'

# where each config class lives: (kind, base text, table path of the class in that kind)
WHERE = {
    "RL": ("rl", RL_BASE, ""),
    "Trainer": ("rl", RL_BASE, "trainer"),
    "Orchestrator": ("rl", RL_BASE, "orchestrator"),
    "Inference": ("rl", RL_BASE, "inference"),
    "SFT": ("sft", SFT_BASE, ""),
    "TrainerModel": ("rl", RL_BASE, "trainer.model"),
    "SharedCheckpoint": ("rl", RL_BASE, "ckpt"),
    "TrainerCheckpoint": ("trainer", "", "ckpt"),
    "OrchestratorCheckpoint": ("orchestrator", ORCH_BASE, "ckpt"),
    "Wandb": ("rl", RL_BASE, "monitors.wandb"),
    "TrainSampling": ("rl", RL_BASE, "orchestrator.train.sampling"),
    "EvalSampling": ("orchestrator", EVAL_BASE, "eval.sampling"),
    "Eval": ("orchestrator", EVAL_BASE, "eval"),
    "Train": ("orchestrator", ORCH_BASE, "train"),
    "TrainSource": ("rl", RL_BASE, "orchestrator.train.source"),
    "EvalSource": ("orchestrator", EVAL_BASE, "eval.source"),
    "RLDeployment": ("rl", RL_BASE, "deployment"),
    # an offload table names its backend: prime-rl fills no default type there (the field defaults to None)
    "KvCacheOffload": (
        "inference",
        '[kv_cache_offload]\ntype = "native"\n[kv_cache_offload.cpu]\nnum_bytes = 1000\n',
        "kv_cache_offload",
    ),
    "Log": ("trainer", "", "log"),
    "Loss": ("trainer", "", "loss"),
    # a disaggregated deployment runs under [slurm] (prime-rl InferenceConfig.validate_multi_node_requires_slurm)
    "InferenceDeployment": (
        "inference",
        '[slurm]\njob_name = "j"\n\n[deployment]\ntype = "disaggregated"\n',
        "deployment",
    ),
    "*": ("rl", RL_BASE, ""),
}
TABLE_VALUED = {
    "mig-orchestrator-sampling",
    "mig-inference-model",
    "mig-wandb-section",
    "mig-file-monitor",
    "mig-prime-monitor",
    "mig-vllm-extra",
    "mig-ckpt-weights",
    "mig-teacher-inference",
    "mig-orchestrator-removed",
    "mig-algo",
    "mig-trainer-batch",
}
AOT_VALUED = {"mig-orchestrator-env", "mig-train-env", "mig-eval-env"}


def cases():
    out = []
    for mig in rule_db()["migrations"]:
        classes = mig["class"] if isinstance(mig["class"], list) else [mig["class"]]
        olds = mig["old"] if isinstance(mig["old"], list) else [mig["old"]]
        out.append(pytest.param(mig, classes[0], olds[0], id=f"{mig['id']}:{classes[0]}.{olds[0]}"))
    return out


def build(mig: dict, cls: str, old: str) -> tuple[str, str]:
    kind, base, prefix = WHERE[cls]
    parts = old.split(".")
    if cls == "TrainSource":  # append to the existing array element
        return kind, base.replace('name = "reverse-text"\n', f'name = "reverse-text"\n{parts[0]} = 8  # <-\n', 1)
    if cls == "EvalSource":
        return kind, base.replace('name = "e"\n', f'name = "e"\n{parts[0]} = 8  # <-\n')
    if len(parts) > 1:
        table = ".".join(p for p in (prefix, *parts) if p)
        return kind, base + f"\n[{table}]  # <-\nrank = 8\n"
    key = parts[0]
    if mig["id"] in AOT_VALUED:
        table = ".".join(p for p in (prefix, key) if p)
        return kind, base + f'\n[[{table}]]  # <-\nid = "x"\n'
    if mig["id"] in TABLE_VALUED:
        table = ".".join(p for p in (prefix, key) if p)
        return kind, base + f"\n[{table}]  # <-\n"
    if prefix and f"[{prefix}]\n" in base:
        return kind, base.replace(f"[{prefix}]\n", f"[{prefix}]\n{key} = 8  # <-\n", 1)
    if prefix:
        return kind, base + f"\n[{prefix}]\n{key} = 8  # <-\n"
    return kind, f"{key} = 8  # <-\n" + base


def marked(text: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if "# <-" in line)


@pytest.mark.parametrize("mig,cls,old", cases())
def test_migration_triggers_exactly_and_fix_resolves(mig: dict, cls: str, old: str) -> None:
    kind, text = build(mig, cls, old)
    report = validate_text(text, kind=kind)
    # a file that names the files it builds on is also said to be checked as an override
    findings = [f for f in report.findings if f.id != "override-file" or old != "toml_files"]
    assert [(f.id, f.line) for f in findings] == [(mig["id"], marked(text))], text
    finding = findings[0]
    assert mig["changed"].split(" ")[0] in finding.message
    if finding.edit is not None:
        fixed = apply_fix(text, finding)
        assert mig["id"] not in {f.id for f in validate_text(fixed, kind=kind).findings}
        assert "# <-" in fixed or finding.edit.op == "delete"


def test_old_seed_style_config_migrates_with_comments_kept() -> None:
    old = """\
# my old run
[trainer.model.experimental.lora]  # adapters
rank = 8  # small

[orchestrator]
batch_size = 64   # rollouts per step
rollouts_per_example = 8  # per prompt
async_level = 2

[orchestrator.sampling]
max_tokens = 512  # per turn

[[orchestrator.train.source]]
name = "x"
[orchestrator.train.source.env.taskset]
id = "x"
"""
    text = old
    for _ in range(10):  # apply fixes until none is left
        fixable = [f for f in validate_text(text, kind="rl").findings if f.edit is not None]
        if not fixable:
            break
        text = apply_fix(text, fixable[0])
    report = validate_text(text, kind="rl")
    # the async level has no automatic fix: max_off_policy_steps bounds something else, the user decides
    assert [(f.id, f.edit) for f in report.findings if f.severity.value == "error"] == [("mig-async-level", None)]
    (left,) = [f for f in report.findings if f.id == "mig-async-level"]
    assert "max_off_policy_steps" in left.fix and "it is 2" in left.fix
    for comment in ("# my old run", "# adapters", "# small", "# rollouts per step", "# per prompt", "# per turn"):
        assert comment in text
    assert "[trainer.model.lora]" in text and "group_size = 8" in text
    assert "max_completion_tokens = 512" in text and "async_level = 2" in text
    assert report.data["orchestrator"]["train"]["sampling"]["max_completion_tokens"] == 512


def test_resume_step_minus_one_becomes_empty_resume_table() -> None:
    text = RL_BASE + "[ckpt]\nresume_step = -1\n"
    (f,) = validate_text(text, kind="rl").findings
    assert f.id == "mig-resume-step" and "[resume]" in f.fix
    fixed = apply_fix(text, f)
    report = validate_text(fixed, kind="rl")
    assert report.findings == () and report.data["resume"] == {}
