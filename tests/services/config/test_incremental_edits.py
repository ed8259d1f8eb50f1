"""The editor's incremental validation gives exactly the findings of a full validation after any
sequence of edits: characters and lines typed and deleted, the TOML broken and repaired, tables
added and removed, over the real prime-rl configs of the fixtures."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from services.config.incremental import IncrementalParser
from services.config.validate import validate_text
from tests.shared_data import CONFIG_FIXTURES

TEXTS = {p.name: p.read_text() for p in sorted(CONFIG_FIXTURES.glob("*.toml"))}
TABLES = [
    '[[orchestrator.train.source]]\nname = "extra"\n[orchestrator.train.source.env.taskset]\nid = "t"\n',
    "[trainer.model]\nbogus_key = 1\n",
    "[inference]\n",
    '[model]\nname = "Qwen/Qwen3-0.6B"\n',
    "[trainer]\n[trainer.model.lora]\nrank = 8\n",
    's = """\n[x]\n"""\n',
    "[a]\nx = 1\n[a]\ny = 2\n",
    '[weight_broadcast]\ntype = "nccl"\nquantize_in_weight_transfer = true\n',
    "[deployment]\nnum_train_gpus = 7\nnum_infer_gpus = 4\n",
    "[ckpt]\ninterval = 5\n",
    "[monitors.wandb]\noffline = true\n",
    "[orchestrator.concurrency]\nmax_inflight = 1\n",
    '[trainer.env_vars]\nCUDA_VISIBLE_DEVICES = "0"\n',
    '# wandb key: 0123456789abcdef0123456789abcdef01234567\napi_key = "sk-abcdefghijklmnopqrstuvwx"\n',
]

edit = st.one_of(
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from(list('ab1 [=]."\n#{}'))),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 12)),
    st.tuples(st.just("delete line"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("table"), st.floats(0, 1), st.sampled_from(TABLES)),
    st.tuples(st.just("digit"), st.floats(0, 1), st.sampled_from("0137")),
    st.tuples(st.just("undo"), st.just(0.0), st.just(0)),
)


def apply(history: list[str], op: tuple) -> str:
    kind, where, arg = op
    text = history[-1]
    at = int(where * len(text))
    if kind == "insert":
        return text[:at] + arg + text[at:]
    if kind == "digit":  # a number changed: the cross-table rules read many of them
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        i = digits[int(where * len(digits)) % len(digits)] if digits else 0
        return text[:i] + arg + text[i + 1 :] if digits else text
    if kind == "delete":
        return text[:at] + text[at + arg :]
    lines = text.splitlines(keepends=True)
    n = min(int(where * len(lines)), max(len(lines) - 1, 0))
    if kind == "delete line":
        return "".join(lines[:n] + lines[n + 1 :])
    if kind == "table":
        return "".join(lines[:n] + [arg] + lines[n:])
    return history[-2] if len(history) > 1 else text  # undo: back to the text before (a break repaired)


def same(text: str, parser: IncrementalParser) -> None:
    ours, full = validate_text(text, parser=parser), validate_text(text)
    assert ours.kind == full.kind
    assert ours.findings == full.findings
    assert [f.edit for f in ours.findings] == [f.edit for f in full.findings]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(TEXTS)), ops=st.lists(edit, min_size=1, max_size=8))
def test_edits_validate_as_the_whole_file_does(name: str, ops: list[tuple]) -> None:
    parser = IncrementalParser()
    history = [TEXTS[name]]
    same(history[-1], parser)
    for op in ops:
        history.append(apply(history, op))
        same(history[-1], parser)


def test_a_keystroke_that_breaks_the_toml_keeps_the_rest_of_the_file() -> None:
    """A broken keystroke and its repair: the repair re-parses only the repaired table."""
    text = TEXTS["examples__advanced__glm-4.5-air__terminal.toml"]
    parser = IncrementalParser()
    same(text, parser)
    at = text.index("[orchestrator")
    broken = text[: at + 5] + "\n= x" + text[at + 5 :]
    same(broken, parser)
    assert not validate_text(broken, parser=parser).parsed
    full_parses = parser.full_parses
    same(text, parser)
    assert parser.full_parses == full_parses and parser.last_incremental


def test_secrets_keep_their_lines_when_lines_above_change() -> None:
    text = TEXTS["examples__advanced__glm-4.5-air__terminal.toml"]
    at = text.index("[orchestrator")
    text = text[:at] + "# wandb key: 0123456789abcdef0123456789abcdef01234567\n" + text[at:]
    parser = IncrementalParser()
    same(text, parser)
    for extra in ("# a comment\n", "# a comment\n\n\n", ""):
        edited = extra + text
        same(edited, parser)
        assert [f.line for f in validate_text(edited, parser=parser).findings if f.id == "secret"] == [
            text[:at].count("\n") + 1 + extra.count("\n")
        ]


@pytest.mark.parametrize("preset,gpus", [("h100-80gb", 2), ("rtx4090", 1), (None, 8)])
def test_memory_fit_and_gpu_rules_through_the_cache(preset: str | None, gpus: int) -> None:
    """The memory-fit findings (preset and GPU count given) are placed at the same lines, before and
    after an edit above them."""
    parser = IncrementalParser()
    for name in ("examples__advanced__glm-4.5-air__terminal.toml", sorted(TEXTS)[0]):
        for text in (TEXTS[name], "# moved down\n\n" + TEXTS[name]):
            ours = validate_text(text, parser=parser, preset=preset, gpus=gpus)
            full = validate_text(text, preset=preset, gpus=gpus)
            assert ours.findings == full.findings
    assert any(f.id.startswith("memory-") for f in full.findings) or preset is None
