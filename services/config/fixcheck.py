"""Fixes never damage a config: the pieces that prove it.

A fix is offered only when applying it to a copy of the parsed document and validating that copy
shows the finding gone and no new error (``validate.py``); applying it to the text (``fixes.py``)
then checks that the result parses and that every other value is still there. The copy is edited on
the parsed data (path copying, no tomlkit), so offering stays as cheap as a validation pass.
"""

from __future__ import annotations

import functools
from typing import Any

from services.config.findings import Edit, dotted

_MISSING = object()


@functools.lru_cache(maxsize=1)
def _declared_keys() -> frozenset[str]:
    from services.config.schema import load_schema

    return frozenset(k for cls in load_schema().classes.values() for k in cls.keys)


def _descend(root: dict, path: tuple, *, create: bool) -> dict | None:
    """The table at ``path`` inside ``root``, copying every container on the way (the parsed data
    may be shared with the incremental parser's cache and must not change)."""
    node: Any = root
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return None
            child = node[part]
        else:
            if not isinstance(node, dict):
                return None
            if part not in node:
                if not create:
                    return None
                node[part] = {}
            child = node[part]
        if isinstance(child, dict):
            child = dict(child)
        elif isinstance(child, list):
            child = list(child)
        else:
            return None
        node[part] = child
        node = child
    return node if isinstance(node, dict) else None


def _prune(root: dict, path: tuple) -> None:
    """Drop tables a move left empty, as ``fixes._prune`` does for the implicit ones: a table under a
    name no config class declares (``experimental`` of ``experimental.lora``) was only a path; a
    declared one (``[ckpt]``, empty = enabled) stays."""
    while path and not isinstance(path[-1], int):
        parent = _descend(root, path[:-1], create=False)
        if parent is None or parent.get(path[-1]) != {} or path[-1] in _declared_keys():
            return
        del parent[path[-1]]
        path = path[:-1]


def simulate(data: dict[str, Any], edit: Edit) -> tuple[dict[str, Any] | None, str]:
    """``data`` with ``edit`` applied (a copy), or ``(None, why it cannot be applied)``."""
    root = dict(data)
    if edit.op == "set":
        parent = _descend(root, edit.path[:-1], create=True)
        if parent is None:
            return None, f"{dotted(edit.path[:-1])} is not a table"
        parent[edit.path[-1]] = edit.value
        return root, ""
    parent = _descend(root, edit.path[:-1], create=False)
    if parent is None or edit.path[-1] not in parent:
        return None, f"{dotted(edit.path)} is not in the file"
    if edit.op == "delete":
        del parent[edit.path[-1]]
        _prune(root, edit.path[:-1])
        return root, ""
    if edit.op != "rename" or edit.new_path is None:
        return None, f"unknown edit {edit.op!r}"
    if lookup(data, edit.new_path) is not _MISSING:
        return None, f"{dotted(edit.new_path)} is already set: keep one of the two"
    value = parent.pop(edit.path[-1])
    if edit.value is not None:
        value = edit.value
    _prune(root, edit.path[:-1])
    target = _descend(root, edit.new_path[:-1], create=True)
    if target is None:
        return None, f"{dotted(edit.new_path[:-1])} is not a table"
    target[edit.new_path[-1]] = value
    return root, ""


def lookup(data: Any, path: tuple) -> Any:
    node = data
    for part in path:
        if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            node = node[part]
        elif not isinstance(part, int) and isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _MISSING
    return node


def flatten(data: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    """Every value by its key path; an empty table is a value of its own, an array of tables is
    walked element by element."""
    out: dict[tuple, Any] = {}
    if isinstance(data, dict):
        if not data and prefix:
            out[prefix] = {}
        for k, v in data.items():
            out.update(flatten(v, prefix + (k,)))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            out.update(flatten(v, prefix + (i,)))
    else:
        out[prefix] = data
    return out


def _under(path: tuple, prefix: tuple) -> bool:
    return path[: len(prefix)] == prefix


def lost_values(before: dict[str, Any], after: dict[str, Any], edit: Edit) -> list[str]:
    """Key paths of ``before`` whose value ``after`` no longer has (the edited key aside; a renamed
    key's value must be at its new place)."""
    lost = []
    for path, value in flatten(before).items():
        target = path
        if _under(path, edit.path):
            if edit.op != "rename" or edit.value is not None:
                continue  # the value this fix sets or deletes on purpose
            target = edit.new_path + path[len(edit.path) :]  # type: ignore[operator]
        got = lookup(after, target)
        kept = isinstance(got, dict) if value == {} and isinstance(value, dict) else got == value
        if not kept or (isinstance(got, bool) != isinstance(value, bool)):
            lost.append(dotted(path))
    return lost


def moved(path: str, edit: Edit) -> str:
    """A finding's dotted path after ``edit`` (a rename moves everything under the old key)."""
    if edit.op != "rename" or edit.new_path is None:
        return path
    old, new = dotted(edit.path), dotted(edit.new_path)
    if path == old:
        return new
    if path.startswith((old + ".", old + "[")):
        return new + path[len(old) :]
    return path
