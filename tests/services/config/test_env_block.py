"""Issue 16, item 3: the environment block of a train/eval source is checked as verifiers (the version
prime-rl pins) checks it: runtime and pool types with did-you-mean, the keys of each harness and
runtime variant, seats of the taskset's own env, and env_vars values that must be strings."""

from __future__ import annotations

import pytest

from services.config.findings import Severity
from services.config.fixes import apply_fix
from services.config.validate import validate_text
from tests.services.config.test_fix_safety import assert_fix_is_safe
from tests.services.config.test_rules import FIXTURES, RL_BASE

SRC = "[orchestrator.train.source.env"
ENV_RULES = {"plugin-typo", "env-key-typo", "env-harness", "extra-key-typo"}

# (name, failing snippet, the id it must give, the same snippet made right: no finding at all)
CASES = [
    (
        "runtime-type-typo",
        f'{SRC}.agent.runtime]\ntype = "subproces"\n',
        "wrong-type",
        f'{SRC}.agent.runtime]\ntype = "subprocess"\n',
    ),
    (
        "harness-table-typo",
        f'{SRC}.agent.harnes]\nid = "bash"\n',
        "unknown-key",
        f'{SRC}.agent.harness]\nid = "bash"\n',
    ),
    ("agent-key-typo", f"{SRC}.agent]\nmax_turn = 8\n", "unknown-key", f"{SRC}.agent]\nmax_turns = 8\n"),
    (
        "runtime-key-of-another-type",
        f'{SRC}.agent.runtime]\ntype = "subprocess"\nimage = "python:3.12"\n',
        "variant-key",
        f'{SRC}.agent.runtime]\ntype = "docker"\nimage = "python:3.12"\n',
    ),
    (
        "runtime-key-of-none",
        f'{SRC}.agent.runtime]\nlabelz = ["x"]\n',
        "unknown-key",
        f'{SRC}.agent.runtime]\nlabels = ["x"]\n',
    ),
    (
        "builtin-harness-unknown-key",
        f'{SRC}.agent.harness]\nid = "bash"\nsummarize_at_tokens = 4096\n',
        "variant-key",
        f'{SRC}.agent.harness]\nid = "rlm"\nsummarize_at_tokens = 4096\n',
    ),
    (
        "harness-id-typo",
        f'{SRC}.agent.harness]\nid = "mini-swe-agnet"\n',
        "plugin-typo",
        f'{SRC}.agent.harness]\nid = "mini-swe-agent"\n',
    ),
    (
        "harness-env-not-string",
        f"{SRC}.agent.harness.env]\nDEBUG = 1\n",
        "wrong-type",
        f'{SRC}.agent.harness.env]\nDEBUG = "1"\n',
    ),
    ("seat-typo", f'{SRC}.agnet.harness]\nid = "bash"\n', "env-key-typo", f'{SRC}.agent.harness]\nid = "bash"\n'),
    ("harness-on-the-env", f'{SRC}.harness]\nid = "bash"\n', "env-harness", f'{SRC}.agent.harness]\nid = "bash"\n'),
    (
        "seat-of-a-taskset-env-checked",
        f'{SRC}.player0.runtime]\ntype = "dockr"\n',
        "wrong-type",
        f'{SRC}.player0.runtime]\ntype = "docker"\n',
    ),
    (
        "serve-pool-type",
        '[orchestrator.train.source.serve.pool]\ntype = "statik"\n',
        "wrong-type",
        '[orchestrator.train.source.serve.pool]\ntype = "static"\nnum_workers = 2\n',
    ),
    (
        "serve-pool-key",
        '[orchestrator.train.source.serve.pool]\ntype = "static"\nmultiplex = 4\n',
        "variant-key",
        '[orchestrator.train.source.serve.pool]\ntype = "elastic"\nmultiplex = 4\n',
    ),
    ("env-range", f"{SRC}]\nmax_concurrent_agents = 0\n", "out-of-range", f'{SRC}]\nmax_concurrent_agents = "None"\n'),
    ("env-vars-int", "[env_vars]\nNCCL_DEBUG = 1\n", "wrong-type", '[env_vars]\nNCCL_DEBUG = "1"\n'),
    ("env-vars-bool", "[inference.env_vars]\nVLLM_X = true\n", "wrong-type", '[inference.env_vars]\nVLLM_X = "true"\n'),
    ("env-vars-table", '[trainer.env_vars.NESTED]\nA = "1"\n', "wrong-type", '[trainer.env_vars]\nNESTED_A = "1"\n'),
]


def place(snippet: str) -> str:
    """RL_BASE with ``snippet`` where people write it: a source's tables right after the source (tomlkit,
    which applies fixes, cannot edit an array of tables' sub-table written after other tables)."""
    if snippet.startswith("[inference"):
        return RL_BASE + snippet
    return RL_BASE.replace("\n[inference]\n", "\n" + snippet + "\n[inference]\n")


@pytest.mark.parametrize("name,bad,rule,good", CASES, ids=[c[0] for c in CASES])
def test_each_env_block_check_fails_the_mistake_and_passes_the_right_config(
    name: str, bad: str, rule: str, good: str
) -> None:
    text = place(bad)
    findings = validate_text(text, kind="rl").findings
    assert [f.id for f in findings] == [rule], name
    first = text.index(bad.splitlines()[0])
    assert findings[0].line > text[:first].count("\n")  # on the planted lines, not somewhere above
    for f in findings:
        if f.edit is not None:  # an offered fix is safe and leaves a clean config
            fixed = assert_fix_is_safe(text, f, "rl")
            assert validate_text(fixed, kind="rl").findings == ()
    assert validate_text(place(good), kind="rl").findings == (), name


def test_typos_that_did_not_matter_before_are_named_with_the_fix() -> None:
    text = place(f'{SRC}.agent.runtime]\ntype = "subproces"\n')
    (f,) = validate_text(text, kind="rl").findings
    assert f.severity is Severity.ERROR and 'did you mean "subprocess"' in f.message
    assert 'type = "subprocess"' in apply_fix(text, f)
    text = place("[env_vars]\nNCCL_DEBUG = 1\n")
    (f,) = validate_text(text, kind="rl").findings
    assert "must be a string" in f.message and 'NCCL_DEBUG = "1"' in apply_fix(text, f)


def test_a_harness_package_that_is_not_built_in_keeps_its_own_keys() -> None:
    """Any installed package can be a harness (verifiers imports it by id): its keys are its own."""
    for hid in ("my-org/swe-harness@0.3", "swe_harness", "bsh"):
        text = RL_BASE + f'{SRC}.agent.harness]\nid = "{hid}"\nsummarize_at_tokens = 4096\nanything = "x"\n'
        assert validate_text(text, kind="rl").findings == (), hid
    # a hub id of a built-in is the built-in: its keys are checked
    text = RL_BASE + f'{SRC}.agent.harness]\nid = "someone/mini-swe-agent@2"\nedit = true\n'
    assert [f.id for f in validate_text(text, kind="rl").findings] == ["variant-key"]


def test_a_taskset_keeps_its_own_settings_and_a_seat_without_seat_keys_passes() -> None:
    text = (
        RL_BASE + f'{SRC}.taskset]\nid = "my-taskset"\ndataset_name = "x"\nmax_turns = 3\n'
        "[orchestrator.train.source.env.taskset.task]\npower_per_turn = 2\n"
        "[orchestrator.train.source.env.board]\nsize = 3\n"
    )
    assert (
        validate_text(
            text.replace('[orchestrator.train.source.env.taskset]\nid = "reverse-text"\n', ""), kind="rl"
        ).findings
        == ()
    )


def test_a_fix_tomlkit_cannot_apply_is_refused_with_the_reason() -> None:
    from services.config.findings import ConfigError

    text = RL_BASE + f'{SRC}.agent.runtime]\ntype = "subproces"\n'  # the source's table after [inference]
    (f,) = validate_text(text, kind="rl").findings
    with pytest.raises(ConfigError, match="by hand|nothing was changed"):
        apply_fix(text, f)


def test_eval_sources_are_checked_too() -> None:
    text = RL_BASE + (
        '[orchestrator.eval]\n[[orchestrator.eval.source]]\nname = "e"\n'
        '[orchestrator.eval.source.env.taskset]\nid = "e"\n'
        '[orchestrator.eval.source.env.agent.runtime]\ntype = "modl"\n'
    )
    (f,) = validate_text(text, kind="rl").findings
    assert f.id == "wrong-type" and f.path == "orchestrator.eval.source[0].env.agent.runtime.type"


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.toml")), ids=lambda p: p.name)
def test_prime_rls_own_env_blocks_raise_nothing_new(path) -> None:
    report = validate_text(path.read_text(encoding="utf-8"), filename=path.name)
    assert [f for f in report.findings if f.id in ENV_RULES or "env." in f.path and f.severity is Severity.ERROR] == []
