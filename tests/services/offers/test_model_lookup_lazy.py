"""The first offers ranking of a fresh process looks up one model: ``lookup_model`` reads that model's table
alone (services/config/memory.py ``_one_model``) instead of parsing the whole registry. What must hold: the
table it reads is, field for field, the registry's entry for every model in models.toml, and names the fast
path cannot answer (other spellings, unknown models) still get the registry's answer."""

from __future__ import annotations

import pytest

from services.config import memory


@pytest.fixture
def fresh():
    memory.registry.cache_clear()
    memory._one_model.cache_clear()
    yield
    memory.registry.cache_clear()
    memory._one_model.cache_clear()


def test_every_model_alone_equals_the_registry_entry(fresh) -> None:
    reg = memory.registry()
    assert len(reg) > 10
    for name, shape in reg.items():
        assert memory._one_model(name) == shape, name


def test_first_lookup_does_not_read_the_whole_registry(fresh) -> None:
    shape = memory.lookup_model("Qwen/Qwen3-8B")
    assert memory.registry.cache_info().currsize == 0
    assert shape == memory.registry()["Qwen/Qwen3-8B"]


@pytest.mark.parametrize("name", ["qwen/qwen3-8b", "Qwen3-8B", "QWEN3-8B", "nobody/NoSuchModel-3B", 'a"b', "x\\y", ""])
def test_other_names_get_the_registrys_answer(fresh, name: str) -> None:
    fast = memory.lookup_model(name)
    memory._one_model.cache_clear()
    reg = memory.registry()
    low = name.lower()
    want = reg.get(name) or next(
        (s for k, s in reg.items() if k.lower() == low or k.split("/")[-1].lower() == low.split("/")[-1]), None
    )
    assert fast == want
