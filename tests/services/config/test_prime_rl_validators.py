"""Issue 32, item 8: prime-rl's own validators are the reference for our checks.

services/config/validators.toml maps each of prime-rl's validators to the rules that port it, a todo or a
reason it needs no port; scripts/prime_rl_validators.py lists prime-rl's validators from a checkout and says
which are new or still todo. These tests need no network and no prime-rl checkout: the table alone, and the
script run on a small package written here.

Convention: a test that covers a ported validator carries the line ``validator: FILE::CLASS.FUNCTION``
(a comment or docstring in a test_*.py file of this directory, next to the case that triggers its rule).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from services.config.findings import rule_db

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "prime_rl_validators.py"
CITE = re.compile(r"validator: (\S+?)::(\S+?)\.(\w+)")


def _script():
    spec = importlib.util.spec_from_file_location("prime_rl_validators", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


pv = _script()
TABLE = pv.load_table()


def _citations() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        if path.name == Path(__file__).name:
            continue
        found |= {m.groups() for m in CITE.finditer(path.read_text(encoding="utf-8"))}
    return found


def _known_ids() -> set[str]:
    db = rule_db()
    return set(db["rules"]) | {m["id"] for m in db.get("migrations", [])}


def test_every_entry_is_ported_todo_or_needs_no_port() -> None:
    assert len(TABLE) >= 120
    for key, entry in TABLE.items():
        assert set(entry) <= {"rules", "todo", "na"} and entry, key
        assert ("na" in entry) != bool({"rules", "todo"} & set(entry)), key  # n/a excludes the others
        for text in (entry.get("todo"), entry.get("na")):
            assert text is None or (isinstance(text, str) and text.strip()), key


def test_every_rule_named_exists() -> None:
    known = _known_ids()
    missing = {(key, rid) for key, entry in TABLE.items() for rid in entry.get("rules", []) if rid not in known}
    assert missing == set()


def test_every_ported_validator_has_a_test_that_cites_it() -> None:
    cited = _citations()
    uncited = sorted(
        "::".join((f, f"{c}.{fn}")) for (f, c, fn), e in TABLE.items() if "rules" in e and (f, c, fn) not in cited
    )
    assert uncited == []
    # and no test cites a validator the table does not know (a typo or one prime-rl removed)
    assert sorted(k for k in cited if k not in TABLE) == []


PACKAGE = """
from pydantic import model_validator, field_validator

class ModelConfig(BaseConfig):
    @model_validator(mode="after")
    def vlm_only_with_custom_impl(self):
        if self.vlm is not None and self.impl != "custom":
            raise ValueError("VLM training requires model.impl='custom'")
        return self

    @field_validator("name")
    @classmethod
    def name_not_empty(cls, v):
        assert v, f"name must not be empty, got {v!r}"
        return v

    def helper(self):
        raise ValueError("not a validator")


def propagate(data):
    raise ValueError("conflict: " + "shared")
"""

ENTRY = """
def rl_local(config):
    assert config.slurm is None
    if config.port != 8000:
        raise ValueError(f"port ({config.port}) does not match")
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    pkg = tmp_path / "packages/prime-rl-configs/src/prime_rl/configs"
    pkg.mkdir(parents=True)
    (pkg / "trainer.py").write_text(PACKAGE, encoding="utf-8")
    ent = tmp_path / "src/prime_rl/entrypoints"
    ent.mkdir(parents=True)
    (ent / "rl.py").write_text(ENTRY, encoding="utf-8")
    return tmp_path


def test_the_script_finds_validators_helpers_and_pre_start_checks_with_their_messages(checkout: Path) -> None:
    found = {v.cite: (v.kind, v.messages) for v in pv.scan_checkout(checkout)}
    assert found == {
        "configs/trainer.py::ModelConfig.vlm_only_with_custom_impl": (
            "model_validator",
            ["VLM training requires model.impl='custom'"],
        ),
        "configs/trainer.py::ModelConfig.name_not_empty": ("field_validator", ["name must not be empty, got {v}"]),
        "configs/trainer.py::(module).propagate": ("raises", ["conflict: shared"]),
        "entrypoints/rl.py::(module).rl_local": ("pre-start", ["port ({config.port}) does not match"]),
    }


def test_the_script_exits_non_zero_on_a_validator_missing_from_the_table(checkout: Path, tmp_path: Path) -> None:
    table = tmp_path / "validators.toml"
    table.write_text(
        '[validators."configs/trainer.py".ModelConfig]\n'
        'vlm_only_with_custom_impl = { rules = ["xc-vlm-impl"] }\n'
        'name_not_empty = { todo = "port it" }\n'
        '[validators."configs/trainer.py"."(module)"]\npropagate = { na = "fills" }\n'
        '[validators."entrypoints/rl.py"."(module)"]\nrl_local = { na = "the pod" }\n',
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(checkout), "--table", str(table)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "4 validators: 1 ported, 0 partly ported (rules and todo), 1 todo, 2 need no port, 0 new" in run.stdout
    assert "configs/trainer.py::ModelConfig.name_not_empty: port it" in run.stdout

    table.write_text(table.read_text(encoding="utf-8").replace('rl_local = { na = "the pod" }\n', ""), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(checkout), "--table", str(table)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1
    assert "new in prime-rl" in run.stdout and "entrypoints/rl.py::(module).rl_local" in run.stdout
