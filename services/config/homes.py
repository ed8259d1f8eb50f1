"""Where a key that is unknown in its table belongs instead: the places prime-rl's schema has a field of that name
for the same entry point (``lora_alpha`` in ``[trainer]`` -> ``alpha`` in ``[trainer.model.lora]``; an rl-style
``[trainer.optim]`` in an SFT file -> ``[optim]``). Pure: the schema alone, memoized per (kind, key)."""

from __future__ import annotations

import functools

from services.config.schema import ConfigClass, load_schema

MAX_DEPTH = 6


@functools.lru_cache(maxsize=1024)
def _paths(kind: str) -> dict[str, tuple[tuple[str, ...], ...]]:
    """leaf name -> every dotted path (as a tuple) of a field of that name under the entry point ``kind``."""
    schema = load_schema()
    found: dict[str, list[tuple[str, ...]]] = {}

    def visit(cls: ConfigClass, path: tuple[str, ...], seen: frozenset[str]) -> None:
        if len(path) > MAX_DEPTH or cls.name in seen:
            return
        for key, spec in cls.keys.items():
            found.setdefault(key, []).append(path + (key,))
            for name in spec.classes():
                if name in schema.classes:
                    visit(schema.classes[name], path + (key,), seen | {cls.name})

    try:
        visit(schema.root(kind), (), frozenset())
    except KeyError:
        return {}
    return {k: tuple(v) for k, v in found.items()}


def home_of(kind: str, key: str, at: tuple[str, ...]) -> tuple[str, ...] | None:
    """The one other place ``key`` (found in the table ``at``) belongs, as a path, or None when there is none or
    more than one (then nothing is said: a guess between two tables would be a wrong fix half the time). A key
    named after its table (``lora_alpha``) belongs as ``alpha`` in a table named ``lora``; a table (``trainer``
    in an SFT file) belongs where a table of the same name is, and a lone one at the top level else."""
    paths = _paths(kind)
    exact = _one([p for p in paths.get(key, ()) if p[:-1] != at], at)
    if exact is not None:
        return exact
    head, sep, leaf = key.partition("_")
    if sep and leaf:
        return _one([p for p in paths.get(leaf, ()) if len(p) >= 2 and p[-2] == head and p[:-1] != at], at)
    return None


def _one(candidates: list[tuple[str, ...]], at: tuple[str, ...]) -> tuple[str, ...] | None:
    """The only candidate, or the only one inside the table the key was found in ([trainer]'s lora_alpha is the
    trainer's LoRA, not the orchestrator's)."""
    if len(candidates) == 1:
        return candidates[0]
    inside = [p for p in candidates if p[: len(at)] == at] if at else []
    return inside[0] if len(inside) == 1 else None


def table_home(kind: str, key: str, subkeys: tuple[str, ...], at: tuple[str, ...]) -> tuple[str, ...] | None:
    """A whole unknown table (``[trainer]`` in an SFT file, holding ``optim``): where its sub-tables go when every
    one of them has exactly one home with the same parent -- that parent (the top level: ())."""
    homes = {home_of(kind, sub, at + (key,)) for sub in subkeys}
    if not subkeys or None in homes:
        return None
    parents = {h[:-1] for h in homes if h is not None}
    return parents.pop() if len(parents) == 1 else None


def homes_of(kind: str, key: str, path: tuple) -> tuple[tuple[str, ...], ...]:
    """Every place (at most 3) ``key`` could belong when :func:`home_of` finds no single one: said, never moved."""
    at = tuple(p for p in path[:-1] if isinstance(p, str))
    if len(at) != len(path) - 1:
        return ()
    paths = _paths(kind)
    found = [p for p in paths.get(key, ()) if p[:-1] != at]
    head, sep, leaf = key.partition("_")
    if not found and sep and leaf:
        found = [p for p in paths.get(leaf, ()) if len(p) >= 2 and p[-2] == head and p[:-1] != at]
    return tuple(found) if 1 < len(found) <= 3 else ()
