"""Issue 32, items 5 and 8: what prime-rl accepts is never an error, what it rejects is caught at the same key.

Two disagreements with prime-rl's loader (pydantic_config's cli at the commit prime_rl_fields.json follows):

1. A union table (discriminated on ``type``) that leaves out its tag. The loader fills the tag only for a field
   whose default is a model carrying one (``BaseConfig._default_discriminator_types``); a field that defaults
   to None (``[inference.kv_cache_offload]``, ``[inference.router]``, ``[trainer.model.quantization]``, rl's /
   sft's / evals' ``[weight_broadcast]``, a train source's ``algo``) or to a factory (a source's
   ``serve.pool``, the curriculum's ``sampler``) gets none, and pydantic refuses the table ("Unable to extract
   tag using discriminator 'type'"). We accepted all of them, checking the table as the default variant.
2. echo's ``roles`` / ``filter`` and the curriculum (``sampler``, its ``pools``, ``gates``) were untyped: a
   string or an array there got no finding at all while prime-rl refuses it.

Each case was run through prime-rl's own loader (``cli(RLConfig, args=["@", file])``): the mistake is
rejected, the near miss accepted. The rl trainer/orchestrator rollout transport default (zmq, not filesystem)
was wrong in the sub-config mismatch check and is covered in test_crosschecks.py / test_rules.py.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from services.config.findings import Severity
from services.config.schema import load_schema
from services.config.validate import validate_text
from tests.services.config.test_fix_safety import assert_fix_is_safe
from tests.services.config.test_rules import ORCH_BASE, RL_BASE, SFT_BASE, marked_line

INFER = '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\n'
EVALS = '[[eval.source]]\nname = "reverse-text"\n\n[eval.source.env.taskset]\nid = "reverse-text"\n'
RL = RL_BASE.replace("[inference]\n", "")  # ends inside the train source: its sub-tables follow
CPU = "[{t}.cpu]\nnum_bytes = 1000\n"
POOLS = '[orchestrator.train.source.curriculum.sampler]\ntype = "difficulty_pool"\n'


def echo(body: str) -> str:
    return RL_BASE.replace("group_size = 8\n", 'group_size = 8\n[orchestrator.algo]\ntype = "echo"\n' + body)


# (name, kind, the mistake with its line marked, its rule, the config prime-rl accepts)
CASES = [
    # --- a union table without its tag, where prime-rl's loader fills none
    (
        "kv-cache-offload",
        "rl",
        RL_BASE + "[inference.kv_cache_offload]  # <-\n" + CPU.format(t="inference.kv_cache_offload"),
        "missing-tag",
        RL_BASE + '[inference.kv_cache_offload]\ntype = "native"\n' + CPU.format(t="inference.kv_cache_offload"),
    ),
    (
        "kv-cache-offload-inference",
        "inference",
        INFER + "[kv_cache_offload]  # <-\n" + CPU.format(t="kv_cache_offload"),
        "missing-tag",
        INFER + '[kv_cache_offload]\ntype = "native"\n' + CPU.format(t="kv_cache_offload"),
    ),
    ("router", "inference", INFER + "[router]  # <-\n", "missing-tag", INFER + '[router]\ntype = "vllm-router"\n'),
    (
        "quantization",
        "rl",
        RL_BASE + "[trainer.model.quantization]  # <-\n",
        "missing-tag",
        RL_BASE + '[trainer.model.quantization]\ntype = "fp8"\n',
    ),
    (
        "quantization-sft",
        "sft",
        SFT_BASE + "[model.quantization]  # <-\n",
        "missing-tag",
        SFT_BASE + '[model.quantization]\ntype = "fp8"\n',
    ),
    (
        "rl-weight-broadcast",
        "rl",
        RL_BASE + "[weight_broadcast]  # <-\n",
        "missing-tag",
        RL_BASE + '[weight_broadcast]\ntype = "filesystem"\n',
    ),
    (
        "sft-weight-broadcast",
        "sft",
        SFT_BASE + "[weight_broadcast]  # <-\n",
        "missing-tag",
        SFT_BASE + '[weight_broadcast]\ntype = "filesystem"\n',
    ),
    (
        "evals-weight-broadcast",
        "evals",
        EVALS + "[weight_broadcast]  # <-\n",
        "missing-tag",
        EVALS + '[weight_broadcast]\ntype = "filesystem"\n',
    ),
    (
        "source-algo",
        "rl",
        RL + "[orchestrator.train.source.algo]  # <-\n",
        "missing-tag",
        RL + '[orchestrator.train.source.algo]\ntype = "grpo"\n',
    ),
    (
        "source-algo-orchestrator",
        "orchestrator",
        ORCH_BASE + "[train.source.algo]  # <-\n",
        "missing-tag",
        ORCH_BASE + '[train.source.algo]\ntype = "grpo"\n',
    ),
    (
        "serve-pool",
        "rl",
        RL + "[orchestrator.train.source.serve.pool]  # <-\n",
        "missing-tag",
        RL + '[orchestrator.train.source.serve.pool]\ntype = "elastic"\n',
    ),
    (
        "curriculum-sampler",
        "rl",
        RL + "[orchestrator.train.source.curriculum.sampler]  # <-\n",
        "missing-tag",
        RL + '[orchestrator.train.source.curriculum.sampler]\ntype = "standard"\n',
    ),
    # --- malformed values in echo's and the curriculum's tables
    (
        "echo-roles-string",
        "rl",
        echo('roles = "x"  # <-\n'),
        "wrong-type",
        echo("[orchestrator.algo.roles.user]\nalpha = 0.1\n"),
    ),
    (
        "echo-role-string",
        "rl",
        echo('[orchestrator.algo.roles]\nuser = "x"  # <-\n'),
        "wrong-type",
        echo("[orchestrator.algo.roles]\nuser = { alpha = 0.1 }\n"),
    ),
    (
        "echo-role-alpha",
        "rl",
        echo("[orchestrator.algo.roles.user]\nalpha = 0  # <-\n"),
        "out-of-range",
        echo("[orchestrator.algo.roles.user]\nalpha = 0.01\n"),
    ),
    (
        "echo-filter-string",
        "rl",
        echo('filter = "x"  # <-\n'),
        "wrong-type",
        echo('[orchestrator.algo.filter]\nimport_path = "m.f"\n'),
    ),
    (
        "echo-filter-no-import",
        "rl",
        echo("[orchestrator.algo.filter]  # <-\nkwargs = {}\n"),
        "missing-required",
        echo('[orchestrator.algo.filter]\nimport_path = "m.f"\nkwargs = {}\n'),
    ),
    (
        "pools-array",
        "rl",
        RL + POOLS + "pools = [1, 2]  # <-\n",
        "wrong-type",
        RL + POOLS + "pools = { hard = { threshold = 0.3, weight = 1.0 } }\n",
    ),
    (
        "pool-no-weight",
        "rl",
        RL + POOLS + "[orchestrator.train.source.curriculum.sampler.pools.hard]  # <-\n" + "threshold = 0.3\n",
        "missing-required",
        RL + POOLS + "[orchestrator.train.source.curriculum.sampler.pools.hard]\nthreshold = 0.3\nweight = 1.0\n",
    ),
    (
        "pool-string",
        "rl",
        RL + POOLS + "[orchestrator.train.source.curriculum.sampler.pools]\nhard = 1  # <-\n",
        "wrong-type",
        RL + POOLS + "[orchestrator.train.source.curriculum.sampler.pools]\nhard = { threshold = 0.3, weight = 1 }\n",
    ),
    (
        "pools-on-standard",
        "rl",
        RL + '[orchestrator.train.source.curriculum.sampler]\ntype = "standard"\n' + "pools = {}  # <-\n",
        "variant-key",
        RL + POOLS + "pools = { hard = { threshold = 0.3, weight = 1 } }\n",
    ),
    (
        "gates-string",
        "rl",
        RL + '[orchestrator.train.source.curriculum]\ngates = "x"  # <-\n',
        "wrong-type",
        RL + "[orchestrator.train.source.curriculum.gates.zero]\nreject_min = 0.0\nreject_max = 0.0\n",
    ),
    (
        "gate-type",
        "rl",
        RL + '[orchestrator.train.source.curriculum.gates.zero]\ntype = "range"  # <-\n',
        "wrong-type",
        RL + '[orchestrator.train.source.curriculum.gates.zero]\ntype = "advantage_range"\n',
    ),
    (
        "gate-key",
        "rl",
        RL + "[orchestrator.train.source.curriculum.gates.zero]\nmin = 0.1  # <-\n",
        "unknown-key",
        RL + "[orchestrator.train.source.curriculum.gates.zero]\nreject_min = -0.1\n",
    ),
    (
        "sampler-string",
        "rl",
        RL + '[orchestrator.train.source.curriculum]\nsampler = "standard"  # <-\n',
        "wrong-type",
        RL + '[orchestrator.train.source.curriculum]\nsampler = { type = "standard" }\n',
    ),
]


@pytest.mark.parametrize("name,kind,bad,rule,good", CASES, ids=[c[0] for c in CASES])
def test_the_mistake_is_caught_at_its_key_and_the_near_miss_is_clean(
    name: str, kind: str, bad: str, rule: str, good: str
) -> None:
    findings = validate_text(bad, kind=kind).findings
    assert [(f.id, f.line) for f in findings] == [(rule, marked_line(bad))], name
    (f,) = findings
    assert f.severity is Severity.ERROR and "?" not in f.message, f.message
    if f.edit is not None:  # a fix offered leaves a config prime-rl reads as the user meant
        fixed = assert_fix_is_safe(bad, f, kind)
        assert validate_text(fixed, kind=kind).findings == (), name
    assert validate_text(good, kind=kind).findings == (), name


# where prime-rl's loader fills the default tag (the field's default names one): a table without it is fine
FILLED = [
    ("rl", RL_BASE + "[trainer.optim]\nlr = 1e-5\n"),
    ("rl", RL_BASE + "[trainer.scheduler]\n[trainer.loss]\n[trainer.weight_broadcast]\n[trainer.rollout_transport]\n"),
    ("rl", RL_BASE + "[orchestrator.algo]\n[orchestrator.weight_broadcast]\n[orchestrator.rollout_transport]\n"),
    ("rl", RL_BASE + "[deployment]\n[inference.deployment]\n[rollout_transport]\nhwm = 5\n"),
    ("rl", RL + "[orchestrator.train.source.env.agent.runtime]\n[orchestrator.train.source.env.agent.harness]\n"),
    ("trainer", "[optim]\n[scheduler]\n[loss]\n[weight_broadcast]\n[rollout_transport]\n"),
    ("orchestrator", ORCH_BASE.replace("[[train.source]]", "[algo]\n[weight_broadcast]\n\n[[train.source]]")),
    ("sft", SFT_BASE.replace("[data]\n", '[data]\nname = "d"\n') + "[deployment]\n[optim]\n[scheduler]\n"),
    ("inference", INFER + "[deployment]\n"),
]


@pytest.mark.parametrize("kind,text", FILLED)
def test_a_union_whose_default_names_its_tag_may_leave_it_out(kind: str, text: str) -> None:
    assert validate_text(text, kind=kind).findings == ()


def test_the_message_names_the_values_and_the_fix_picks_only_an_unambiguous_one() -> None:
    text = RL_BASE + "[inference.kv_cache_offload]\n" + CPU.format(t="inference.kv_cache_offload")
    (f,) = validate_text(text, kind="rl").findings
    assert '"native"' in f.message and '"mooncake"' in f.message and "type" in f.message
    assert f.path == "inference.kv_cache_offload" and f.edit is None  # either backend fits: the user picks
    # a key only the elastic pool has: that is the one meant
    pool = RL + "[orchestrator.train.source.serve.pool]\nmultiplex = 4\n"
    (f,) = validate_text(pool, kind="rl").findings
    assert f.id == "missing-tag" and f.edit is not None and f.edit.value == "elastic" and '"elastic"' in f.fix
    fixed = assert_fix_is_safe(pool, f, "rl")
    assert validate_text(fixed, kind="rl").findings == ()


def test_every_union_defaulting_to_none_must_name_its_tag() -> None:
    """prime-rl's loader fills no tag for a union field whose default is None (prime_rl_fields.json records
    that default): every such field of ours is marked "@Class!" in schema.toml, so a new one is not missed."""
    # rl's [rollout_transport] defaults to None but is copied into the trainer's and the orchestrator's
    # tables (utils/validation.py propagate_shared_fields), whose defaults name the tag
    filled_elsewhere = {"rl.rollout_transport"}
    fields = json.loads(resources.files("services.config").joinpath("prime_rl_fields.json").read_text())["fields"]
    schema = load_schema()
    unmarked = []
    for path, entry in fields.items():
        if "union" not in entry or entry.get("default", 0) is not None or path in filled_elsewhere:
            continue
        kind, *keys = path.split(".")
        cls = schema.root(kind)
        for key in keys[:-1]:
            cls = schema.classes[next(a.cls for a in cls.keys[key].alts if a.cls)]
        alts = [a for a in cls.keys[keys[-1]].alts if a.kind == "class"]
        if not all(a.tagged for a in alts):
            unmarked.append(path)
    assert unmarked == []
