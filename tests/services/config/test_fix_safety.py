"""Issue 16: fixes never damage a config, the entry point comes from the content, older renames say
where a setting went, and a secret in a comment is found.

The core test applies every offered fix to every prime-rl config in the fixtures and to planted
mistakes, and proves on the real text: it parses, no other value was lost, the finding is gone and no
new error appeared. The checks here are written independently of services/config/fixcheck.py.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from services.config.findings import ConfigError, Edit, Finding, Severity, dotted
from services.config.fixcheck import lost_values
from services.config.fixes import apply_edit, apply_fix
from services.config.validate import validate_file, validate_text
from tests.services.config.test_rules import FIXTURES, ORCH_BASE, RL_BASE, SFT_BASE, STALE_K8S_INFER, expected_kinds

ORCH_EVAL = ORCH_BASE + '[eval]\n\n[[eval.source]]\nname = "e"\n\n[eval.source.env.taskset]\nid = "e"\n'
DISAGG = '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n\n[deployment]\ntype = "disaggregated"\n'

# (name, file name given to validate (its kind is inferred), text): typos, old spellings and start-up
# mistakes, several of them the ones issue 16 measured
PLANTED: list[tuple[str, str, str]] = [
    ("lora-in-trainer", "rl.toml", RL_BASE.replace("[trainer]\n", "[trainer]\nlora_alpha = 16\n")),
    (
        "lora-in-trainer-set",
        "rl.toml",
        RL_BASE.replace("[trainer]\n", "[trainer]\nlora_alpha = 16\n[trainer.model.lora]\nalpha = 32\n"),
    ),
    ("typo-into-existing-key", "orch.toml", ORCH_BASE.replace("group_size = 8", "group_size = 8\nbatch_sise = 64")),
    ("typo-free-target", "orch.toml", ORCH_BASE.replace("batch_size = 16", "batch_sise = 16")),
    ("typo-trainer", "rl.toml", RL_BASE.replace("[trainer]\n", "[trainer.model]\nseqlen = 4096\n")),
    ("typo-then-conflict", "rl.toml", RL_BASE.replace("[trainer]\n", "[trainer]\nmax_step = 3\n")),
    (
        "micro-batch-in-orchestrator",
        "orch.toml",
        ORCH_BASE.replace("group_size = 8", "group_size = 8\nmicro_batch_size = 4"),
    ),
    ("enum-typo", "rl.toml", RL_BASE.replace("[trainer]\n", '[trainer.model]\nattn = "flash_attention2"\n')),
    ("vllm-passthrough-typo", "rl.toml", RL_BASE + "[inference.vllm]\ngpu_memory_utilisation = 0.8\n"),
    (
        "vllm-passthrough-typo-set",
        "rl.toml",
        RL_BASE + "[inference.vllm]\ngpu_memory_utilization = 0.7\ngpu_memory_utilisation = 0.8\n",
    ),
    ("batch-group", "rl.toml", RL_BASE.replace("batch_size = 16", "batch_size = 20")),
    ("inflight-group", "rl.toml", RL_BASE + "[orchestrator.concurrency]\nmax_inflight = 4\ninitial_inflight = 2\n"),
    (
        "seq-len",
        "rl.toml",
        RL_BASE.replace("[trainer]\n", "[trainer.model]\nseq_len = 1024\n").replace(
            "group_size = 8", "group_size = 8\nseq_len = 4096"
        ),
    ),
    ("shared-conflict", "rl.toml", RL_BASE.replace("[trainer]\n", "[trainer]\nmax_steps = 30\n")),
    (
        "lora-broadcast",
        "rl.toml",
        RL_BASE.replace("[trainer]\n", "[trainer.model.lora]\nrank = 8\n") + '[weight_broadcast]\ntype = "nccl"\n',
    ),
    (
        "offload",
        "sft.toml",
        SFT_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nfsdp_cpu_offload = true\n'),
    ),
    (
        "full-offload-optim",
        "sft.toml",
        SFT_BASE.replace(
            'name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nfull_offload = true\noptim_cpu_offload = false\n'
        )
        + '[optim]\ntype = "muon"\n',
    ),
    ("env-vars", "rl.toml", RL_BASE + '[env_vars]\nCUDA_VISIBLE_DEVICES = "0"\nVLLM_USE_V1 = "1"\nOTHER = "x"\n'),
    ("ckpt-keep", "rl.toml", RL_BASE + "[ckpt]\ninterval = 10\n"),
    ("single-gpu", "rl.toml", RL_BASE + "[deployment]\ngpus_per_node = 1\nnum_train_gpus = 1\nnum_infer_gpus = 0\n"),
    ("wandb-offline", "rl.toml", RL_BASE + '[monitors.wandb]\nproject = "p"\noffline = true\n'),
    (
        "context-overflow-fixable",
        "rl.toml",
        RL_BASE + "[orchestrator.train.sampling]\nmax_completion_tokens = 8192\n"
        "[inference.vllm]\nmax_model_len = 4096\n",
    ),
    (
        "context-overflow-small",
        "rl.toml",
        RL_BASE + "[orchestrator.train.sampling]\nmax_completion_tokens = 128\n"
        "[inference.vllm]\nmax_model_len = 2048\n",
    ),
    (
        "mig-experimental-lora",
        "rl.toml",
        RL_BASE.replace("[trainer]\n", "[trainer.model.experimental.lora]  # adapters\nrank = 8\n"),
    ),
    ("mig-ckpt-keep", "rl.toml", RL_BASE + "[ckpt]\ninterval = 10\nkeep = 2\n"),
    ("mig-resume-latest", "rl.toml", RL_BASE + "[ckpt]\nresume_step = -1\n"),
    ("mig-resume-into-existing", "rl.toml", RL_BASE + "[ckpt]\nresume_step = 5\n\n[resume]\nstep = 3\n"),
    (
        "mig-sampling-with-max-tokens",
        "rl.toml",
        RL_BASE + "[orchestrator.sampling]\nmax_tokens = 512\ntemperature = 0.7\n",
    ),
    (
        "mig-max-tokens-both-set",
        "rl.toml",
        RL_BASE + "[orchestrator.train.sampling]\nmax_tokens = 512\nmax_completion_tokens = 256\n",
    ),
    ("mig-async-level", "rl.toml", "async_level = 2\n" + RL_BASE),
    ("mig-wandb-section", "rl.toml", RL_BASE + '[wandb]\nproject = "p"  # mine\n'),
    ("mig-eval-rollouts-list", "orch.toml", ORCH_EVAL.replace("[eval]\n", "[eval]\nrollouts_per_example = [4, 8]\n")),
    ("mig-eval-rollouts-int", "orch.toml", ORCH_EVAL.replace("[eval]\n", "[eval]\nrollouts_per_example = 4\n")),
    ("mig-rollouts-per-prompt", "orch.toml", ORCH_BASE.replace("group_size = 8", "rollouts_per_prompt = 8")),
    (
        "mig-rollouts-per-prompt-both",
        "orch.toml",
        ORCH_BASE.replace("group_size = 8", "group_size = 8\nrollouts_per_prompt = 4"),
    ),
    ("mig-environment", "orch.toml", ORCH_BASE + '\n[environment]\nid = "reverse-text"\n'),
    ("mig-eval-environment-ids", "orch.toml", ORCH_EVAL.replace("[eval]\n", '[eval]\nenvironment_ids = ["gsm8k"]\n')),
    ("mig-eval-benchmarks", "orch.toml", ORCH_EVAL.replace("[eval]\n", '[eval]\nbenchmarks = ["math500"]\n')),
    (
        "mig-inference-flat",
        "infer.toml",
        "enable_eplb = true\nenable_expert_parallel = true  # EP\napi_server_count = 4\n\n"
        '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n',
    ),
    # EPLB as prime-rl accepts it: NCCL transfer, quantized, with the custom trainer model (issue 16, item 4)
    (
        "mig-inference-flat-in-rl",
        "rl.toml",
        RL_BASE.replace("[trainer]\n", '[trainer.model]\nimpl = "custom"\n')
        + "enable_eplb = true\nenable_expert_parallel = true\n"
        + '[weight_broadcast]\ntype = "nccl"\nquantize_in_weight_transfer = true\n',
    ),
    ("mig-flat-into-existing", "infer.toml", "api_server_count = 4\n\n[vllm]\napi_server_count = 2\n"),
    (
        "mig-prefill-nodes",
        "infer.toml",
        DISAGG + "num_prefill_nodes = 4\nnum_prefill_replicas = 2\nnum_decode_nodes = 3\nnum_decode_replicas = 2\n",
    ),
    ("mig-prefill-nodes-single", "infer.toml", DISAGG + "num_prefill_nodes = 2\nnum_decode_nodes = 2\n"),
    ("mig-prefill-nodes-wrong-variant", "infer.toml", "[deployment]\nnum_prefill_nodes = 2\n"),
    ("sft-micro-batch", "sft.toml", SFT_BASE + "micro_batch_size = 5\n"),
    # issue 32: fixes that changed what the config means
    ("ckpt-keep-in-trainer", "rl.toml", RL_BASE + "[ckpt]\ninterval = 10\n\n[trainer.ckpt]\nkeep_last = 3\n"),
    ("ckpt-keep-old-key", "rl.toml", RL_BASE + "[ckpt]\ninterval = 10\nkeep = 3\n"),
    (
        "ckpt-keep-orchestrator-set",
        "rl.toml",
        RL_BASE + "[ckpt]\ninterval = 10\n\n[orchestrator.ckpt]\nkeep_last = 5\n",
    ),
    (
        "shared-seq-len-conflict",
        "rl.toml",
        "seq_len = 4096\n" + RL_BASE.replace("[trainer]\n", "[trainer.model]\nseq_len = 16384\n"),
    ),
    ("shared-log-level-conflict", "rl.toml", RL_BASE + '[log]\nlevel = "debug"\n\n[trainer.log]\nlevel = "info"\n'),
    (
        "lora-rank-conflict",
        "rl.toml",
        RL_BASE.replace("[trainer]\n", "[trainer.model.lora]\nrank = 8\n") + "[orchestrator.model.lora]\nrank = 16\n",
    ),
    ("max-async-level", "rl.toml", RL_BASE.replace("group_size = 8", "group_size = 8\nmax_async_level = 2")),
    (
        "pre-batch-filters",
        "rl.toml",
        RL_BASE + '[[orchestrator.pre_batch_filters]]\ntype = "zero_advantage"\nenforce = true\n',
    ),
    ("difficulty-buffer", "rl.toml", RL_BASE + "[orchestrator.buffer]\neasy_threshold = 0.9\nhard_threshold = 0.1\n"),
    ("toml-files", "rl.toml", 'toml_files = ["base.toml"]\n\n[orchestrator]\nbatch_size = 64\n'),
    ("lax-number", "rl.toml", RL_BASE.replace("batch_size = 16", 'batch_size = "16"')),
    (
        "seed-style",
        "rl.toml",
        """\
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
""",
    ),
]


def corpus() -> list[Any]:
    out = [pytest.param(p.name, p.read_text(encoding="utf-8"), id=p.name) for p in sorted(FIXTURES.glob("*.toml"))]
    return out + [pytest.param(name, text, id=case) for case, name, text in PLANTED]


# ------------------------------------------------------------------ independent checks on the text


def leaves(data: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    if isinstance(data, dict):
        out: dict[tuple, Any] = {} if data or not prefix else {prefix: {}}
        for k, v in data.items():
            out.update(leaves(v, prefix + (k,)))
        return out
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        out = {}
        for i, v in enumerate(data):
            out.update(leaves(v, prefix + (i,)))
        return out
    return {prefix: data}


def at(data: Any, path: tuple) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return KeyError
    return data


def moved(path: str, edit: Edit) -> str:
    if edit.op == "rename" and edit.new_path is not None:
        old, new = dotted(edit.path), dotted(edit.new_path)
        if path == old or path.startswith((old + ".", old + "[")):
            return new + path[len(old) :]
    return path


def errors(findings: tuple[Finding, ...]) -> Counter:
    return Counter((f.id, f.path) for f in findings if f.severity is Severity.ERROR)


# what RLConfig fills from its shared tables (utils/validation.py propagate_shared_fields), enough of it
# for the fixes here: a shared value fills a sub-config key left out; both set and different is rejected
SHARED = {
    "max_steps": ("trainer.max_steps", "orchestrator.max_steps"),
    "seq_len": ("trainer.model.seq_len", "orchestrator.seq_len"),
    "model.name": ("trainer.model.name", "orchestrator.model.name", "inference.vllm.model"),
    "log.level": ("trainer.log.level", "orchestrator.log.level", "inference.log.level"),
    "ckpt.interval": ("trainer.ckpt.interval", "orchestrator.ckpt.interval"),
    "ckpt.keep_last": ("trainer.ckpt.keep_last", "orchestrator.ckpt.keep_last"),
    "ckpt.keep_interval": ("trainer.ckpt.keep_interval", "orchestrator.ckpt.keep_interval"),
    "monitors.wandb.project": ("trainer.monitors.wandb.project", "orchestrator.monitors.wandb.project"),
}
# settings prime-rl replaced by others (issue 32): deleting one silently drops what it asked for
REPLACED = {
    "filters",
    "pre_batch_filters",
    "post_batch_filters",
    "buffer",
    "toml_files",
    "async_level",
    "max_async_level",
    "strict_async_level",
}


def meaning(data: dict, kind: str) -> tuple[dict[tuple, Any], bool]:
    """Every value each process gets, as prime-rl resolves the shared tables (rl files), and whether
    prime-rl rejects the file for a shared value that differs from its sub-config's."""
    resolved = leaves(data)
    rejected = False
    if kind != "rl":
        return resolved, rejected
    for shared, subs in SHARED.items():
        value = at(data, tuple(shared.split(".")))
        if value is KeyError:
            continue
        for sub in subs:
            path = tuple(sub.split("."))
            mine = at(data, path)
            if mine is not KeyError:
                rejected |= mine != value
            elif isinstance(data.get(path[0]), dict):
                resolved[path] = value
    return resolved, rejected


def assert_meaning_kept(before: dict, after: dict, finding: Finding, kind: str) -> None:
    """No value the user wrote is lost or changed unless the finding says so: what each process gets is the
    same after the fix, the fixed key aside; a deleted value is gone, never replaced by another the user
    wrote; a removed setting that prime-rl replaced is never just deleted; a changed value is named."""
    edit = finding.edit
    assert edit is not None
    (was, was_rejected), (now, now_rejected) = meaning(before, kind), meaning(after, kind)
    assert was_rejected or not now_rejected, (finding.id, "the fix makes prime-rl reject the file")
    assert not (edit.op == "delete" and edit.path[-1] in REPLACED), (finding.id, "deletes what prime-rl replaced")
    n = len(edit.path)
    for path, value in was.items():
        if path[:n] == edit.path:
            if edit.op == "delete":  # a deleted value is gone, not replaced by another the user wrote
                assert path not in now, (finding.id, "chooses silently which of two values stays", path)
            elif edit.op == "set" and at(before, path) is not KeyError and now.get(path) != value:
                shown = str(edit.value).lower() if isinstance(edit.value, bool) else str(edit.value)
                assert shown in finding.fix or shown in finding.message or lax_equal(value, edit.value), (
                    finding.id,
                    "changes the user's value without saying to what",
                    path,
                )
            continue
        target = tuple(dotted_tuple(moved(dotted(path), edit))) if edit.op == "rename" else path
        if value == {} and isinstance(at(after, target), dict):
            continue  # an empty table the fix wrote into
        assert now.get(target, KeyError) == value, (finding.id, "changes what prime-rl does", path)
    assert not (edit.op == "delete" and "replaces it" in finding.message), (finding.id, "deletes what was replaced")


def lax_equal(a: Any, b: Any) -> bool:
    try:
        return type(b)(str(a).strip()) == b or float(str(a)) == b
    except (TypeError, ValueError):
        return False


def dotted_tuple(path: str) -> list:
    out: list = []
    for part in path.replace("[", ".[").split("."):
        if part.startswith("["):
            out.append(int(part[1:-1]))
        elif part:
            out.append(part.strip('"'))
    return out


def assert_fix_is_safe(text: str, finding: Finding, kind: str) -> str:
    edit = finding.edit
    assert edit is not None
    fixed = apply_fix(text, finding)
    before, after = tomllib.loads(text), tomllib.loads(fixed)  # the result parses
    assert_meaning_kept(before, after, finding, kind)
    n = len(edit.path)
    for path, value in leaves(before).items():  # no value lost
        if path[:n] == edit.path:
            if edit.op == "rename" and edit.value is None:
                assert at(after, edit.new_path + path[n:]) == value, (finding.id, path)
            continue
        got = at(after, path)
        assert isinstance(got, dict) if value == {} else got == value and type(got) is type(value), (finding.id, path)
    for path, value in leaves(after).items():  # nothing appeared but the fixed key
        targets = [edit.path] + ([edit.new_path] if edit.new_path else [])
        if any(path[: len(t)] == t for t in targets) or value == {}:
            continue
        assert at(before, path) == value, (finding.id, "added", path)
    again = validate_text(fixed, kind=kind)
    here = {finding.path, moved(finding.path, edit)}
    assert not [g for g in again.findings if g.id == finding.id and g.path in here], finding  # gone
    was = Counter({(i, moved(p, edit)): c for (i, p), c in errors(validate_text(text, kind=kind).findings).items()})
    was -= Counter([(finding.id, moved(finding.path, edit))])
    assert not errors(again.findings) - was, (finding.id, errors(again.findings) - was)  # no new error
    return fixed


@pytest.mark.parametrize("name,text", corpus())
def test_every_offered_fix_is_safe(name: str, text: str) -> None:
    report = validate_text(text, filename=name)
    for f in report.findings:
        if f.edit is not None:
            assert_fix_is_safe(text, f, report.kind)


def test_the_corpus_offers_fixes_to_check() -> None:
    """The parametrized test above proves something only if fixes are offered: count them again."""
    offered = 0
    for param in corpus():
        name, text = param.values
        offered += sum(f.edit is not None for f in validate_text(text, filename=name).findings)
    assert offered >= 35


def test_fixes_applied_one_after_another_converge_without_damage() -> None:
    for case, name, text in PLANTED:
        kind = validate_text(text, filename=name).kind
        for _ in range(12):
            fixable = [f for f in validate_text(text, kind=kind).findings if f.edit is not None]
            if not fixable:
                break
            text = assert_fix_is_safe(text, fixable[0], kind)
        else:
            pytest.fail(f"{case}: fixes never run out")


# ------------------------------------------------------------------ the refusals issue 16 names


def findings_of(text: str, name: str) -> dict[str, Finding]:
    return {f.path: f for f in validate_text(text, filename=name).findings}


def case(name: str) -> tuple[str, str]:
    return next((n, t) for c, n, t in PLANTED if c == name)


def test_a_typo_is_never_renamed_into_a_key_that_is_set() -> None:
    name, text = case("typo-into-existing-key")
    f = findings_of(text, name)["batch_sise"]
    assert f.id == "unknown-key" and "batch_size" not in f.message and f.edit is None
    name, text = case("typo-free-target")
    f = findings_of(text, name)["batch_sise"]
    assert "did you mean 'batch_size'" in f.message and f.edit is not None


def test_apply_edit_refuses_to_overwrite_or_duplicate() -> None:
    text = ORCH_BASE.replace("group_size = 8", "group_size = 8\nbatch_sise = 64")
    with pytest.raises(ConfigError, match="batch_size is already set"):
        apply_edit(text, Edit("rename", ("batch_sise",), ("batch_size",)))
    text = RL_BASE + "[ckpt]\nresume_step = 5\n\n[resume]\nstep = 3\n"
    with pytest.raises(ConfigError, match="resume.step is already set"):
        apply_edit(text, Edit("rename", ("ckpt", "resume_step"), ("resume", "step")))


def test_apply_edit_refuses_a_set_through_a_value() -> None:
    text = RL_BASE + "[ckpt]\ninterval = 10\n"
    with pytest.raises(ConfigError, match="cannot be reached"):  # a set through a value, not a table
        apply_edit(text, Edit("set", ("ckpt", "interval", "x"), value=1))


def test_the_lost_value_guard_sees_a_dropped_or_changed_value() -> None:
    """apply_edit's last guard (fixcheck.lost_values), fed a damaged result directly."""
    before = {"a": {"x": 1, "y": 2, "on": {}}, "b": [{"n": 1}, {"n": 2}]}
    edit = Edit("set", ("a", "z"), value=3)
    assert lost_values(before, {"a": {"x": 1, "y": 2, "z": 3, "on": {}}, "b": [{"n": 1}, {"n": 2}]}, edit) == []
    assert lost_values(before, {"a": {"x": 1, "z": 3, "on": {}}, "b": [{"n": 1}]}, edit) == ["a.y", "b[1].n"]
    assert lost_values(before, {"a": {"x": True, "y": 2, "on": {}}, "b": [{"n": 1}, {"n": 2}]}, edit) == ["a.x"]
    rename = Edit("rename", ("a", "y"), ("a", "w"))
    assert lost_values(before, {"a": {"x": 1, "w": 2, "on": {}}, "b": [{"n": 1}, {"n": 2}]}, rename) == []
    assert lost_values(before, {"a": {"x": 1, "on": {}}, "b": [{"n": 1}, {"n": 2}]}, rename) == ["a.y"]


@pytest.mark.parametrize(
    "planted,path,wrong",
    [
        ("micro-batch-in-orchestrator", "micro_batch_size", "batch_size"),
        ("mig-inference-flat", "enable_eplb", "enable_fp32_lm_head"),
        ("mig-prefill-nodes-single", "deployment.num_prefill_nodes", "num_prefill_replicas"),
    ],
)
def test_wrong_suggestions_are_not_offered(planted: str, path: str, wrong: str) -> None:
    name, text = case(planted)
    f = findings_of(text, name)[path]
    key = path.split(".")[-1]
    assert f"did you mean '{wrong}'" not in f.message and f"rename '{key}' to '{wrong}'" not in f.fix
    assert f.edit is None or f.edit.new_path[-1] != wrong


def test_a_rename_that_keeps_a_wrongly_typed_value_is_not_offered() -> None:
    name, text = case("mig-eval-rollouts-list")
    f = findings_of(text, name)["eval.rollouts_per_example"]
    assert f.id == "mig-rollouts-per-example" and f.edit is None
    assert "by hand" in f.fix and "eval.group_size must be" in f.fix
    name, text = case("mig-eval-rollouts-int")
    assert findings_of(text, name)["eval.rollouts_per_example"].edit is not None


def test_context_overflow_fix_never_sets_an_absurd_value() -> None:
    path = "orchestrator.train.sampling.max_completion_tokens"
    ci = FIXTURES / "configs__ci__integration__reverse-text-moe__start.toml"
    f = next(f for f in validate_file(ci).findings if f.id == "gotcha-context-overflow")
    assert f.edit is None and "max_model_len to at least 2128" in f.fix and "48" not in f.fix
    name, text = case("context-overflow-small")
    assert findings_of(text, name)[path].edit is None
    name, text = case("context-overflow-fixable")
    f = findings_of(text, name)[path]
    assert f.edit is not None and 512 <= f.edit.value < 8192


def test_a_refused_fix_says_why() -> None:
    name, text = case("mig-max-tokens-both-set")
    f = findings_of(text, name)["orchestrator.train.sampling.max_tokens"]
    assert f.edit is None and "max_completion_tokens is already set" in f.fix
    name, text = case("mig-prefill-nodes-wrong-variant")
    f = findings_of(text, name)["deployment.num_prefill_nodes"]
    assert f.edit is None and "new error" in f.fix and "disaggregated" in f.fix


# ------------------------------------------------------------------ the kind comes from the content

FAKE_RL = """\
max_steps = 5

[data.fake]
batch_size = 2

[model]
seq_len = 1024
compile = "None"
"""  # prime-rl's configs/debug/fake/rl.toml, run by its README as `uv run trainer @ ...`


def test_a_trainer_config_named_rl_toml_validates_as_trainer(tmp_path: Path) -> None:
    path = tmp_path / "configs" / "debug" / "fake" / "rl.toml"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_RL, encoding="utf-8")
    report = validate_file(path)
    assert (report.kind, report.kind_detected, report.errors) == ("trainer", True, 0)
    assert report.findings == ()


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.toml")), ids=lambda p: p.name)
def test_fixtures_validate_clean_without_kind_whatever_their_name(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    named = validate_text(text, filename=path.name)
    neutral = validate_text(text, filename="config.toml")
    if path.name == STALE_K8S_INFER:  # prime-rl's own InferenceConfig rejects its [model] table
        assert named.kind == "inference" and [f.id for f in named.findings if f.severity is Severity.ERROR] == [
            "mig-inference-model"
        ]
        return
    assert named.kind == expected_kinds()[path.name] and named.errors == 0
    assert neutral.errors == 0
    if neutral.kind_detected:  # the content alone decided: it must agree with the name
        assert neutral.kind == named.kind


def test_content_beats_the_file_name_both_ways() -> None:
    sft = (FIXTURES / "configs__debug__fake__sft.toml").read_text(encoding="utf-8")
    assert validate_text(sft, filename="rl.toml").kind == "sft"
    rl = (FIXTURES / "examples__basic__reverse-text__rl.toml").read_text(encoding="utf-8")
    assert validate_text(rl, filename="infer.toml").kind == "rl"
    assert validate_text(ORCH_BASE, filename="train.toml").kind == "orchestrator"


# ------------------------------------------------------------------ older renames


@pytest.mark.parametrize(
    "planted,path,target,value",
    [
        ("mig-inference-flat", "enable_eplb", "vllm.enable_eplb", True),
        ("mig-inference-flat", "enable_expert_parallel", "vllm.enable_expert_parallel", True),
        ("mig-inference-flat", "api_server_count", "vllm.api_server_count", 4),
        ("mig-inference-flat-in-rl", "inference.enable_eplb", "inference.vllm.enable_eplb", True),
        ("mig-rollouts-per-prompt", "rollouts_per_prompt", "group_size", 8),
        ("mig-prefill-nodes", "deployment.num_prefill_nodes", "deployment.prefill_nodes_per_replica", 2),
        ("mig-prefill-nodes-single", "deployment.num_decode_nodes", "deployment.decode_nodes_per_replica", 2),
    ],
)
def test_renamed_settings_say_where_they_went_and_the_fix_moves_the_value(
    planted: str, path: str, target: str, value: Any
) -> None:
    name, text = case(planted)
    f = findings_of(text, name)[path]
    assert f.severity is Severity.ERROR and "renamed" in f.message and f"now '{target}'" in f.message
    assert "remove" not in f.fix and f.edit is not None
    fixed = tomllib.loads(apply_fix(text, f))
    assert at(fixed, tuple(target.split("."))) == value and at(fixed, tuple(path.split("."))) is KeyError


@pytest.mark.parametrize(
    "planted,path,target",
    [
        ("mig-environment", "environment", "train.source"),
        ("mig-eval-environment-ids", "eval.environment_ids", "eval.source"),
        ("mig-eval-benchmarks", "eval.benchmarks", "eval.source"),
        ("mig-prefill-nodes", "deployment.num_decode_nodes", "deployment.decode_nodes_per_replica"),
    ],
)
def test_renames_whose_shape_changed_say_where_to_move_by_hand(planted: str, path: str, target: str) -> None:
    name, text = case(planted)
    f = findings_of(text, name)[path]
    assert "renamed" in f.message and f"now '{target}'" in f.message and f.edit is None
    assert "by hand" in f.fix and not f.fix.startswith(("remove", "delete"))


def test_a_setting_without_replacement_says_so() -> None:
    f = findings_of(RL_BASE + "[ckpt]\nweights_only = true\n", "rl.toml")["ckpt.weights_only"]
    assert "removed in prime-rl, no replacement" in f.message
    f = findings_of("async_level = 2\n" + RL_BASE, "rl.toml")["async_level"]
    assert "max_off_policy_steps" in f.message and "no replacement" not in f.message


# ------------------------------------------------------------------ secrets in comments

HEX = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    "comment,what",
    [
        (f"# wandb key: {HEX}", "W&B"),
        (f'# WANDB_API_KEY = "{HEX}"', "W&B"),
        ("# openai sk-proj-abcdefghijklmnopqrstuvwx", "API key"),
        ("# api_key: Zx81kQ2mPq7rTt5vWw3yA", "secret"),
    ],
)
def test_a_secret_in_a_comment_is_found_and_not_echoed(comment: str, what: str) -> None:
    text = RL_BASE.replace("[trainer]\n", f"[trainer]\n{comment}\n")
    secrets = [f for f in validate_text(text, kind="rl").findings if f.id == "secret"]
    assert [(f.line, f.severity) for f in secrets] == [(7, Severity.ERROR)] and what in secrets[0].message
    value = comment.split()[-1].strip('"')
    assert value not in secrets[0].message and value not in secrets[0].fix


@pytest.mark.parametrize(
    "line",
    [
        f"# prime-rl commit {HEX}",
        "# the token budget: see max_completion_tokens",
        "# auth: uses PRIME_API_KEY from the environment",
        f'name = "run #1 wandb key: {HEX[:20]}"',
    ],
)
def test_comments_without_a_secret_are_quiet(line: str) -> None:
    text = (
        RL_BASE.replace("[trainer]\n", f"[trainer]\n{line}\n") if line.startswith("#") else RL_BASE + f"[run]\n{line}\n"
    )
    assert [f for f in validate_text(text, kind="rl").findings if f.id == "secret"] == []


def test_no_fixture_has_a_secret() -> None:
    for path in FIXTURES.glob("*.toml"):
        assert not [f for f in validate_file(path).findings if f.id == "secret"], path.name


@pytest.mark.parametrize(
    "typed,meant", [("seq_lne", "seq_len"), ("max_setps", "max_steps"), ("seq_lem", None), ("top_q", None)]
)
def test_short_keys_get_a_did_you_mean_for_swapped_letters_only(typed: str, meant: str | None) -> None:
    """seq_lne got "remove 'seq_lne'" (dropping the setting): a short word with two letters swapped is a typo
    too. A letter changed in a short word is another setting (top_k / top_p): never suggested."""
    from services.config.suggest import did_you_mean

    assert did_you_mean(typed, ("seq_len", "max_steps", "top_k", "top_p", "max_tokens"), {}) == meant
