"""Issue 32, item 5: values prime-rl accepts were errors. prime-rl's configs are pydantic models in lax
mode: ``batch_size = "128"``, ``lr = "3e-6"``, ``batch_size = 128.0`` and ``max_steps = "20"`` load
fine there, and ``validate`` exited 1 on them. What pydantic reads as the field's type is now a style
warning whose fix writes the value it reads; what pydantic refuses stays an error.

pydantic itself is the reference where it is installed (prime-rl's own validation library).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from services.config.fixes import apply_fix
from services.config.validate import validate_text
from services.config.walk import _NO, lax
from tests.services.config.test_rules import RL_BASE

pydantic = pytest.importorskip("pydantic")

ISSUE_CASES = [  # (replace in RL_BASE, the key's path, what prime-rl reads)
    (("batch_size = 16", 'batch_size = "128"'), "orchestrator.batch_size", 128),
    (("batch_size = 16", "batch_size = 128.0"), "orchestrator.batch_size", 128),
    (("max_steps = 20", 'max_steps = "20"'), "max_steps", 20),
    (("[trainer]\n", '[trainer.optim]\nlr = "3e-6"\n'), "trainer.optim.lr", 3e-6),
]


@pytest.mark.parametrize("change,path,read", ISSUE_CASES)
def test_what_prime_rl_accepts_is_no_error(change: tuple[str, str], path: str, read: object) -> None:
    text = RL_BASE.replace(*change)
    assert text != RL_BASE
    report = validate_text(text, filename="rl.toml")
    assert report.errors == 0, [f.message for f in report.findings]
    [f] = [f for f in report.findings if f.path == path]
    assert f.id == "lax-type" and f.severity.value == "warning"
    fixed = validate_text(apply_fix(text, f), filename="rl.toml")
    assert not [g for g in fixed.findings if g.path == path]
    assert fixed.data is not None
    node = fixed.data
    for part in path.split("."):
        node = node[part]
    assert node == read and type(node) is type(read)


def test_what_pydantic_refuses_is_still_an_error() -> None:
    for bad in ('"lots"', "128.5", '"3e-6"', '"0x10"'):
        report = validate_text(RL_BASE.replace("batch_size = 16", f"batch_size = {bad}"), filename="rl.toml")
        assert [f for f in report.findings if f.path == "orchestrator.batch_size" and f.severity.value == "error"], bad


def test_a_coerced_value_is_range_checked() -> None:
    report = validate_text(RL_BASE.replace("[trainer]\n", '[trainer.optim]\nlr = "-1"\n'), filename="rl.toml")
    assert [f.id for f in report.findings if f.path == "trainer.optim.lr"] == ["out-of-range"]


NUMBERISH = st.text(alphabet=st.sampled_from(list("0123456789+-._eE \tinfatyo") + ["١", "\u00a0", "\n"]), max_size=8)
VALUES = st.one_of(
    NUMBERISH,
    st.floats(allow_nan=False),
    st.integers(-3, 3),
    st.booleans(),
    st.sampled_from(["true", "Yes", "off", "nan", "Infinity", "1_0", "1__0", "_1", "1.", ".5"]),
)


@settings(deadline=None)  # pydantic builds a validator per call: slow on a loaded machine
@given(VALUES, st.sampled_from(["int", "float", "bool"]))
def test_lax_agrees_with_pydantic(value: object, kind: str) -> None:
    python_type = {"int": int, "float": float, "bool": bool}[kind]
    if type(value) is python_type or (kind == "float" and type(value) is int):
        return  # a value of the field's own type never reaches lax()
    try:
        theirs = pydantic.TypeAdapter(python_type).validate_python(value)
    except pydantic.ValidationError:
        theirs = _NO
    ours = lax(value, kind)
    if theirs is _NO or ours is _NO:
        assert ours is theirs, (value, kind, theirs)
    else:
        assert ours == theirs or (ours != ours and theirs != theirs), (value, kind, ours, theirs)
