"""Apply a finding's :class:`Edit` to TOML text through tomlkit, keeping comments and formatting.

Only the touched key changes: a rename inside one table keeps the key's place and its comment; a move
to another table takes the value (and a moved table its comments) along; empty tables left behind by
a move are removed.

A fix never damages the file: a rename into a key that is already set is refused (no overwritten value,
no duplicate key), and the result must parse and still hold every other value of the original, or
nothing is changed (:func:`apply_edit` raises :class:`ConfigError` with the reason).
"""

from __future__ import annotations

from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.config.findings import ConfigError, Edit, Finding, dotted


def apply_fix(text: str, finding: Finding) -> str:
    if finding.edit is None:
        raise ConfigError(f"{finding.id} has no automatic fix", hint=finding.fix or "edit the file by hand")
    return apply_edit(text, finding.edit)


def apply_edit(text: str, edit: Edit) -> str:
    """``text`` with ``edit`` applied; raises ConfigError (and changes nothing) when the result would
    not parse, would lose a value, or a rename would overwrite a key that is already set."""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot apply a fix while the file does not parse: {exc}") from None
    new = _apply(text, edit)
    try:
        after = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"this fix would leave the file unreadable ({exc}); nothing was changed", hint="make the change by hand"
        ) from None
    from services.config.fixcheck import lost_values

    lost = lost_values(before, after, edit)
    if lost:
        raise ConfigError(
            f"this fix would lose {', '.join(lost[:3])}; nothing was changed", hint="make the change by hand"
        )
    return new


def _apply(text: str, edit: Edit) -> str:
    from tomlkit.exceptions import TOMLKitError

    try:
        return _apply_tomlkit(text, edit)
    except ConfigError:
        raise
    except TOMLKitError:
        # tomlkit cannot edit some valid layouts (a sub-table of an array of tables written after other
        # tables): say so instead of failing somewhere deeper
        raise ConfigError(
            "this file's table order is beyond what an automatic fix can edit; nothing was changed",
            hint=f"change {dotted(edit.path)} by hand",
        ) from None


def _apply_tomlkit(text: str, edit: Edit) -> str:
    import tomlkit
    from tomlkit.exceptions import ParseError

    try:
        doc = tomlkit.parse(text)
    except ParseError as exc:
        raise ConfigError(f"cannot apply a fix while the file does not parse: {exc}") from None
    if edit.op == "delete":
        parent = _container(doc, edit.path[:-1], create=False)
        if parent is not None and edit.path[-1] in parent:
            del parent[edit.path[-1]]
            _prune(doc, edit.path[:-1])
    elif edit.op == "set":
        parent = _container(doc, edit.path[:-1], create=True)
        parent[edit.path[-1]] = edit.value
    elif edit.op == "rename":
        assert edit.new_path is not None
        old_parent = _container(doc, edit.path[:-1], create=False)
        if old_parent is None or edit.path[-1] not in old_parent:
            raise ConfigError(f"{dotted(edit.path)} is no longer in the file")
        target = _container(doc, edit.new_path[:-1], create=False)
        if target is not None and edit.new_path[-1] in target:
            raise ConfigError(
                f"{dotted(edit.new_path)} is already set: moving {dotted(edit.path)} there would overwrite it",
                hint="keep one of the two by hand",
            )
        if edit.path[:-1] == edit.new_path[:-1] and edit.value is None:
            _rename_in_place(old_parent, edit.path[-1], edit.new_path[-1])
        else:
            value: Any = old_parent[edit.path[-1]] if edit.value is None else edit.value
            del old_parent[edit.path[-1]]
            _prune(doc, edit.path[:-1])
            new_parent = _container(doc, edit.new_path[:-1], create=True)
            new_parent[edit.new_path[-1]] = value
    else:
        raise ConfigError(f"unknown edit {edit.op!r}")
    return tomlkit.dumps(doc)


def _container(doc: Any, path: tuple, *, create: bool) -> Any:
    import tomlkit

    node = doc
    for part in path:
        if not hasattr(node, "keys") and not isinstance(part, int):
            raise ConfigError(f"{dotted(path)} cannot be reached: a value stands where a table should be")
        if isinstance(part, int):
            try:
                node = node[part]
            except (IndexError, KeyError):
                return None
            continue
        if part not in node:
            if not create:
                return None
            node[part] = tomlkit.table()
        node = node[part]
    if not hasattr(node, "keys"):
        raise ConfigError(f"{dotted(path)} cannot be reached: a value stands where a table should be")
    return node


def _rename_in_place(container: Any, old: str, new: str) -> None:
    """Rename a key where it stands (its value, comment and position kept)."""
    from tomlkit.items import AoT, SingleKey, Table

    inner = getattr(container, "value", container)  # Table → its Container
    replace = getattr(inner, "_replace", None)
    if replace is not None and not isinstance(container[old], (Table, AoT)):
        value = inner[old]
        replace(old, SingleKey(new), value)
        return
    value = container[old]
    del container[old]
    container[new] = value


def _prune(doc: Any, path: tuple) -> None:
    """Drop implicit tables (``experimental`` of ``[a.experimental.lora]``) that a move left empty."""
    while path and not isinstance(path[-1], int):
        parent = _container(doc, path[:-1], create=False)
        node = _container(doc, path, create=False)
        if parent is None or node is None or not hasattr(node, "keys") or len(node) or _has_comments(node):
            return
        if not getattr(node, "is_super_table", lambda: False)():
            return  # a table the user wrote ([inference] empty = enabled) stays
        del parent[path[-1]]
        path = path[:-1]


def _has_comments(node: Any) -> bool:
    from tomlkit.items import Comment

    inner = getattr(node, "value", node)
    return any(isinstance(item, Comment) for _, item in getattr(inner, "body", []))
