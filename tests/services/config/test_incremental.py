"""The editor's incremental parse and position cache give exactly what tomllib and the full scan
give: over every fixture and over one-character edits of a big config (valid and broken ones)."""

from __future__ import annotations

import random

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest

from services.config.incremental import IncrementalParser
from services.config.positions import key_positions
from services.config.validate import validate_text
from tests.services.config.test_rules import FIXTURES


def big_config() -> str:
    text = (FIXTURES / "examples__advanced__glm-4.5-air__terminal.toml").read_text()
    for i in range(30):
        text += (
            f'\n[[orchestrator.train.source]]\nname = "e{i}"\n[orchestrator.train.source.env.taskset]\n'
            f'id = "t{i}"\n[orchestrator.train.source.env.agent.harness]\nid = "bash"\n'
            "summarize_at_tokens = [\n  1024,\n  2048,\n]\n"
        )
    return text


def outcome(fn, text):
    try:
        return fn(text), None
    except tomllib.TOMLDecodeError as exc:
        return None, str(exc)


def assert_lazy_positions(parser: IncrementalParser, text: str) -> None:
    """The validator's lookups (LazyPositions, key by key) give what the whole-text scan gives."""
    full = key_positions(text)
    lazy = parser.lazy_positions(text)
    for key, at in full.items():
        assert key in lazy and lazy[key] == at, key
    assert ("no", "such", "key") not in lazy


def test_fixtures_parse_identically() -> None:
    parser = IncrementalParser()
    for path in sorted(FIXTURES.glob("*.toml")):
        text = path.read_text()
        assert parser.loads(text) == tomllib.loads(text), path.name
        assert parser.positions(text) == key_positions(text), path.name
        assert_lazy_positions(parser, text)


def test_one_character_edits_match_tomllib_and_the_full_scan() -> None:
    base = big_config()
    parser = IncrementalParser()
    parser.loads(base)
    rng = random.Random(3)
    incremental = 0
    for _ in range(300):
        pos = rng.randrange(len(base))
        text = base[:pos] + rng.choice('a1 [="\n#') + base[pos:]
        assert outcome(parser.loads, text) == outcome(tomllib.loads, text)
        if parser.last_incremental:
            incremental += 1
            assert parser.positions(text) == key_positions(text)
            assert_lazy_positions(parser, text)
    assert incremental > 50  # most valid edits did not need a full parse


@pytest.mark.parametrize(
    "text",
    [
        "[a]\nx = 1\n[a]\ny = 2\n",  # a table defined twice
        "[a]\nx = 1\n[b]\n[a.x]\n",  # a key turned into a table
        "a = [\n[1, 2],\n]\n[b]\nc = 1\n",  # a cut inside an array
        's = """\n[x]\n"""\n[y]\nz = 1\n',  # a cut inside a multi-line string
        "[[a]]\nx = 1\n[a.b]\ny = 1\n[[a]]\nx = 2\n[a.b]\ny = 2\n",  # sub-tables per element
    ],
)
def test_tricky_documents(text: str) -> None:
    assert outcome(IncrementalParser().loads, text) == outcome(tomllib.loads, text)


def test_validation_with_the_parser_equals_without() -> None:
    base = big_config().replace("max_steps = 1000", "max_step = 1000")
    parser = IncrementalParser()
    assert validate_text(base, parser=parser).findings == validate_text(base).findings
    edited = base.replace('id = "t3"', 'id = "t3"\nbogus = 1')
    with_parser = validate_text(edited, parser=parser)
    assert with_parser.findings == validate_text(edited).findings
    assert "unknown-key" in {f.id for f in with_parser.findings}
