"""Which registry model sizes a model name: the model itself, else the registry base a fine-tune or variant is
named after (its size token and family), and how to price one the registry cannot size."""

from __future__ import annotations

import functools
import math
import re

from services.config.memory import ModelShape, lookup_model, registry

SIZE_HINT = (
    "size it as a registry model of about its size, e.g. add --model {example} "
    "(the registry: services/config/models.toml)"
)


def size_hint(name: str) -> str:
    """How to price a model the registry cannot size, with the registry model nearest its size token."""
    parts = _name_parts(name)
    example = "Qwen/Qwen3-8B"
    if parts is not None:
        want = (parts[2] or parts[1]) * 1e9
        example = min(registry().values(), key=lambda m: abs(math.log((m.active_params or m.params) / want))).name
    return SIZE_HINT.format(example=example)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)b")
_ACTIVE = re.compile(r"a(\d+(?:\.\d+)?)b")


def _name_parts(name: str) -> tuple[str, float, float | None] | None:
    """``Qwen3-30B-A3B-Thinking-2507`` → ("qwen3", 30.0, 3.0): the family (the words before the size),
    the size in billions and the active size of an MoE; None without a size token."""
    tokens = [t for t in re.split(r"[-_\s]+", name.split("/")[-1].lower()) if t]
    for i, tok in enumerate(tokens):
        m = _SIZE.fullmatch(tok)
        if m and i:
            active = next((float(a.group(1)) for t in tokens[i + 1 :] if (a := _ACTIVE.fullmatch(t))), None)
            return "-".join(tokens[:i]), float(m.group(1)), active
    return None


def _letters(word: str) -> str:
    """The letters ``word`` starts with ("qwen" of "qwen3")."""
    return word[: len(word) - len(word.lstrip("abcdefghijklmnopqrstuvwxyz"))]


@functools.lru_cache(maxsize=256)
def sizing_model(name: str) -> ModelShape | None:
    """The registry model that sizes ``name``: the model itself (``lookup_model``), else the registry
    base a fine-tune or variant is named after — same size token (4B, 0.6B, 30B-A3B) and the same
    family (``Qwen/Qwen3-4B-Instruct-2507``, ``PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT`` → Qwen3-4B,
    Qwen3-0.6B), or failing that a family word in the name (``DeepSeek-R1-Distill-Qwen-1.5B`` →
    Qwen2.5-1.5B). None when nothing matches."""
    shape = lookup_model(name)
    if shape is not None:
        return shape
    want = _name_parts(name)
    if want is None:
        return None
    family, size, active = want
    words = {_letters(w) for w in family.split("-")} - {""}
    loose = None
    for key, shape in registry().items():
        have = _name_parts(key)
        if have is None or have[1] != size or have[2] != active:
            continue
        if have[0] == family:
            return shape
        head = _letters(have[0])
        if loose is None and head and head in words:
            loose = shape
    return loose


def size_note(model: str) -> str:
    """ "sized as Qwen/Qwen3-4B" when a fine-tune is sized by its registry base, else ""."""
    shape = sizing_model(model)
    if (
        shape is None
        or shape.name.lower() == model.lower()
        or shape.name.split("/")[-1].lower() == model.split("/")[-1].lower()
    ):
        return ""
    return f"{model} sized as {shape.name}"
