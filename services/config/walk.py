"""The schema walk: every key of a prime-rl config checked against the schema (unknown keys, types,
ranges, union variants, plugins, renamed keys), reporting by rule id through the validator's context.

With a reuse cache on the context (the editor's, see ``reuse.py``) a table the last validation already
walked - the same dict object, at the same path, as the incremental parser keeps it - gives its findings
again without a walk.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from typing import Any

from services.config.findings import Edit, Finding, Severity, dotted, make, rule_db
from services.config.homes import home_of, homes_of, table_home
from services.config.schema import ConfigClass, Spec, load_schema
from services.config.suggest import did_you_mean

Context = Any  # validate.Context (not imported: validate imports this module)


def walk(ctx: Context, table: dict[str, Any], cls: ConfigClass, path: tuple, *, tagged: bool = False) -> None:
    """Check ``table`` against config class ``cls`` (findings into ``ctx``), reusing the last walk's findings
    for a table the reuse cache saw unchanged. ``tagged``: a union table that must name its variant (no
    default variant at this place)."""
    cache = ctx.cache
    if cache is None:
        _walk_table(ctx, table, cls, path, tagged)
        return
    key = (id(table), cls.name, path)
    hit = cache.walk_get(key, table)
    if hit is not None:
        ctx.findings.extend(hit)
        return
    start = len(ctx.findings)
    _walk_table(ctx, table, cls, path, tagged)
    cache.walk_put(key, table, ctx.findings[start:])


def _walk_table(ctx: Context, table: dict[str, Any], cls: ConfigClass, path: tuple, tagged: bool) -> None:
    variant = None
    plugin = False  # an open union's value names a plugin we do not know: its own keys pass
    if cls.union and tagged and cls.union not in table:
        _missing_tag(ctx, cls, table, path)  # its keys are still checked, against no variant in particular
    elif cls.union:
        variant = table.get(cls.union, cls.default_variant)
        if cls.open and isinstance(variant, str):
            variant = plugin_id(variant)
            if variant not in cls.variants:
                plugin = True
                _unknown_plugin(ctx, cls, variant, path + (cls.union,), table)
        if isinstance(variant, (list, dict)) or variant not in cls.variants:
            variant = None  # a wrong type value (an array or table too) is reported by the type check below
    only = cls.variant_only
    for key in (*cls.required, *cls.variant_required.get(variant or "", ())):
        if key not in table:
            ctx.add("missing-required", path + (key,), at=path, path=dotted(path + (key,)))
    for key, value in table.items():
        here = path + (key,)
        spec = cls.keys.get(key)
        if plugin and (spec is None or key in only):
            continue
        if spec is None:
            if cls.roles is not None:
                _role(ctx, cls, key, value, here, table)
            elif cls.extra == "allow":
                _passthrough(ctx, cls, key, here, table)
            else:
                _unknown(ctx, cls, key, value, here, table)
            continue
        if variant is not None and key in only and key not in cls.variants[variant]:
            owners = " or ".join(f'"{v}"' for v, ks in cls.variants.items() if key in ks)
            ctx.add(
                "variant-key",
                here,
                path=dotted(here),
                key=key,
                where=dotted(path) or "the file",
                variant=variant,
                owners=owners,
            )
            continue
        _check(ctx, value, spec, here)


def _missing_tag(ctx: Context, cls: ConfigClass, table: dict[str, Any], path: tuple) -> None:
    """A union table without its tag where prime-rl fills none: it cannot tell which variant is meant. The
    fix sets the tag only when the table's own keys fit one variant alone."""
    tag = cls.union or ""
    fits = [v for v, keys in cls.variants.items() if set(table) & cls.variant_only <= keys]
    edit = Edit("set", path + (tag,), value=fits[0]) if len(fits) == 1 else None
    values = " or ".join(f'"{v}"' for v in cls.variants)
    f = make("missing-tag", ctx.pos(path), path, edit=edit, path=dotted(path), tag=tag, values=values)
    if edit is not None:
        f = replace(f, fix=f'set {tag} = "{fits[0]}" (its settings are those of "{fits[0]}")')
    ctx.findings.append(f)


def _check(ctx: Context, value: Any, spec: Spec, path: tuple, *, in_map: bool = False) -> None:
    if value == "None":
        if spec.nullable or any(a.kind in ("str", "path", "any") for a in spec.alts):
            return
        ctx.add("not-nullable", path, path=dotted(path))
        return
    schema = load_schema()
    range_miss = None
    for alt in spec.alts:
        k = alt.kind
        if k == "any":
            return
        if k == "class" and isinstance(value, dict) and alt.cls is not None:
            walk(ctx, value, schema.classes[alt.cls], path, tagged=alt.tagged)
            return
        if k == "aot" and isinstance(value, list) and all(isinstance(v, dict) for v in value) and alt.cls is not None:
            for i, item in enumerate(value):
                walk(ctx, item, schema.classes[alt.cls], path + (i,))
            return
        if k == "literal" and value == alt.literal:
            return
        if k in ("str", "path") and isinstance(value, str):
            return
        if k == "bool" and isinstance(value, bool):
            return
        if k == "list" and isinstance(value, list):
            return
        if k == "dict" and isinstance(value, dict):
            return
        if k == "map" and isinstance(value, dict) and alt.item is not None:
            for name, item in value.items():
                _check(ctx, item, alt.item, path + (name,), in_map=True)
            return
        if k in ("int", "float") and isinstance(value, (int, float)) and not isinstance(value, bool):
            if k == "int" and not isinstance(value, int):
                continue
            if alt.in_range(value):
                return
            range_miss = alt
    if range_miss is not None:
        ctx.add("out-of-range", path, path=dotted(path), value=value, bound=range_miss.bound())
        return
    for alt in spec.alts:  # what pydantic's lax mode reads as this type is accepted by prime-rl
        coerced = lax(value, alt.kind)
        if coerced is _NO:
            continue
        if alt.kind in ("int", "float") and not alt.in_range(coerced):
            ctx.add("out-of-range", path, path=dotted(path), value=value, bound=alt.bound())
        else:
            ctx.add(
                "lax-type",
                path,
                path=dotted(path),
                got=_show(value),
                value=_show(coerced),
                expected=alt.describe(),
                edit=Edit("set", path, value=coerced),
            )
        return
    literals = [a.literal for a in spec.alts if a.kind == "literal" and a.literal is not None]
    edit = None
    suggestion = ""
    if literals and isinstance(value, str):
        close = difflib.get_close_matches(value, literals, n=1, cutoff=0.6)
        if close:
            edit = Edit("set", path, value=close[0])
            suggestion = f' (did you mean "{close[0]}"?)'
    expected = spec.describe()
    if in_map and edit is None and isinstance(value, (int, float)) and any(a.kind == "str" for a in spec.alts):
        # an environment variable is text: 1 means "1" (the launcher exports strings only)
        edit = Edit("set", path, value=_show(value))
    f = make("wrong-type", ctx.pos(path), path, edit=edit, path=dotted(path), expected=expected, got=_show(value))
    if edit is not None and not suggestion:
        f = replace(f, fix=f'write it as a string: {dotted(path)} = "{edit.value}"')
    if suggestion:
        f = Finding(
            f.id,
            f.severity,
            f.line,
            f.column,
            f.message + suggestion,
            f'set {dotted(path)} = "{close[0]}"',
            f.source,
            f.path,
            edit,
        )
    ctx.findings.append(f)


_NO: Any = object()
# pydantic's lax parsing of a string as a number: surrounding whitespace, a sign, '_' between digits;
# an integer may end in ".0" (a zero fraction)
_LAX_INT = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0+)?")
_LAX_FLOAT = re.compile(
    r"[+-]?(?:(?:[0-9](?:_?[0-9])*)?\.?[0-9](?:_?[0-9])*|[0-9](?:_?[0-9])*\.)"
    r"(?:[eE][+-]?[0-9](?:_?[0-9])*)?|[+-]?(?:inf|infinity|nan)",
    re.I,
)
_LAX_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_LAX_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def lax(value: Any, kind: str) -> Any:
    """``value`` as pydantic's lax mode (prime-rl's configs use it) reads it for a field of ``kind``
    ("int", "float", "bool"), or ``_NO`` when it refuses it. Only values of another type than ``kind``
    get here: "128" and 128.0 for an int, "3e-6" for a float, "true" or 1 for a bool."""
    if kind == "int":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, float):
            return int(value) if value.is_integer() and -(2**63) <= value < 2**63 else _NO
        if isinstance(value, str):
            text = value.strip()
            if _LAX_INT.fullmatch(text):
                return int(text.split(".")[0].replace("_", ""))
        return _NO
    if kind == "float":
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            text = value.strip()
            if _LAX_FLOAT.fullmatch(text):
                return float(text.replace("_", ""))
        return _NO
    if kind == "bool":
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            return bool(value)
        if isinstance(value, float) and value in (0.0, 1.0):
            return bool(value)
        if isinstance(value, str):
            low = value.lower()  # unlike a number's, a bool's text is not stripped: " true" is refused
            if low in _LAX_TRUE or low in _LAX_FALSE:
                return low in _LAX_TRUE
        return _NO
    return _NO


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if len(value) < 40 else f'"{value[:37]}..."'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def _passthrough(ctx: Context, cls: ConfigClass, key: str, path: tuple, table: dict[str, Any]) -> None:
    """[inference.vllm] passes unknown keys to vLLM; only a near miss of a typed field is reported."""
    norm = key.replace("-", "_")
    if norm in cls.keys:
        return
    close = did_you_mean(norm, cls.keys, table)
    if close and cls.name != "Vllm":  # a taskset's own settings: named, not vLLM's
        ctx.add(
            "extra-key-typo",
            path,
            key=key,
            close=close,
            where=dotted(path[:-1]),
            edit=Edit("rename", path, path[:-1] + (close,)),
        )
    elif close:
        f = make("vllm-passthrough", ctx.pos(path), path, key=key, edit=Edit("rename", path, path[:-1] + (close,)))
        ctx.findings.append(
            Finding(
                f.id,
                Severity.WARNING,
                f.line,
                f.column,
                f"{f.message} — did you mean '{close}'?",
                f"rename it to {close}",
                f.source,
                f.path,
                f.edit,
            )
        )


def plugin_id(value: str) -> str:
    """A plugin id as verifiers imports it: a hub id's owner and version dropped, '-' as '_'."""
    return value.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def _unknown_plugin(ctx: Context, cls: ConfigClass, value: str, path: tuple, table: dict[str, Any]) -> None:
    """An id outside the built-ins is a package the pod must have installed; a near miss of a built-in
    is almost surely a typo."""
    close = did_you_mean(value, cls.variants, {})
    if close is None:
        return
    union = cls.union or ""  # (set: a plugin union has its discriminator key)
    shown = close.replace("_", "-") if "-" in str(table.get(union, "")) else close
    ctx.add(
        "plugin-typo", path, path=dotted(path), value=table.get(union), close=shown, edit=Edit("set", path, value=shown)
    )


def _role(ctx: Context, cls: ConfigClass, key: str, value: Any, path: tuple, table: dict[str, Any]) -> None:
    """An unknown key of an environment is a seat only the taskset's own env knows of: checked as a seat
    when it holds one's keys; a misspelt known key is named (a seat could bear that name, so a warning)."""
    roles = load_schema().classes[cls.roles or ""]
    if key == "harness":  # verifiers refuses it (EnvConfig._refuse_env_level_harness): it is a seat's
        seat = path[:-1] + ("agent", "harness")
        ctx.add("env-harness", path, where=dotted(path[:-1]), edit=Edit("rename", path, seat))
        return
    if isinstance(value, dict) and set(value) & set(roles.keys):
        walk(ctx, value, roles, path)
    close = did_you_mean(key, cls.keys, table)
    if close is not None:
        ctx.add(
            "env-key-typo",
            path,
            key=key,
            close=close,
            where=dotted(path[:-1]),
            edit=Edit("rename", path, path[:-1] + (close,)),
        )


# ------------------------------------------------------------------------------------------ migrations


def load_migrations() -> dict[tuple[str, str], dict[str, Any]]:
    cached = getattr(load_migrations, "_cache", None)
    if cached is None:
        cached = {}
        for entry in rule_db().get("migrations", []):
            classes = entry["class"] if isinstance(entry["class"], list) else [entry["class"]]
            olds = entry["old"] if isinstance(entry["old"], list) else [entry["old"]]
            for c in classes:
                for old in olds:
                    cached[(c, old.split(".")[0])] = {**entry, "old": old}
        load_migrations._cache = cached  # type: ignore[attr-defined]
    return cached


def _unknown(ctx: Context, cls: ConfigClass, key: str, value: Any, path: tuple, table: dict[str, Any]) -> None:
    migrations = load_migrations()
    mig = migrations.get((cls.name, key)) or migrations.get(("*", key))
    if mig is not None and _migration(ctx, mig, value, path):
        return
    close = did_you_mean(key, cls.keys, table)
    suggestion = f" — did you mean '{close}'?" if close else ""
    edit = Edit("rename", path, path[:-1] + (close,)) if close else None
    where = f"[{dotted(path[:-1])}]" if path[:-1] else "the top level"
    fix = f"rename '{key}' to '{close}'" if close else f"remove '{key}'; valid keys here: {', '.join(sorted(cls.keys))}"
    if close is None and (home := _home(ctx, key, value, path)) is not None:
        target, subs = home
        if subs:  # a whole table whose settings go elsewhere: said, moved by hand
            places = ", ".join(f"[{dotted(target + (sub,))}]" for sub in subs)
            suggestion = f" — its settings belong in {places}"
            fix = f"move them to {places} by hand"
        else:
            shown = f"[{dotted(target[:-1])}] as '{target[-1]}'" if target[:-1] else f"the top level as '{target[-1]}'"
            suggestion = f" — it belongs in {shown}"
            if _free(ctx.data, target):  # nothing there yet: moving it changes no other value
                edit = Edit("rename", path, target)
                fix = f"move it to {shown}"
            else:
                fix = f"move it to {shown} by hand ({dotted(target)} is set there already: keep one of them)"
    elif close is None and len(others := homes_of(ctx.kind, key, path)) > 1:
        places = " or ".join(f"[{dotted(p[:-1])}]" for p in others)
        suggestion = f" — it belongs in {places} as '{others[0][-1]}'"
        fix = f"move it to {places} as '{others[0][-1]}' by hand (where depends on which side it is for)"
    f = make("unknown-key", ctx.pos(path), path, edit=edit, key=key, where=where, suggestion=suggestion)
    f = Finding(f.id, f.severity, f.line, f.column, f.message, fix, f.source, f.path, edit)
    ctx.findings.append(f)


def _home(ctx: Context, key: str, value: Any, path: tuple) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Where an unknown key belongs in this entry point's schema: (its path, ()), or for a whole table
    (the table its settings go to, their names); None when nowhere or not one place."""
    at = tuple(p for p in path[:-1] if isinstance(p, str))
    if len(at) != len(path) - 1:
        return None  # inside an array of tables: no single place to move to
    if isinstance(value, dict):
        parent = table_home(ctx.kind, key, tuple(value), at)
        return (parent, tuple(value)) if parent is not None and parent != at + (key,) else None
    home = home_of(ctx.kind, key, at)
    return (home, ()) if home is not None else None


def _free(data: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = data
    for part in path:
        if not isinstance(node, dict):
            return False
        if part not in node:
            return True
        node = node[part]
    return False


def _migration(ctx: Context, mig: dict[str, Any], value: Any, path: tuple) -> bool:
    old_parts = mig["old"].split(".")
    rest = old_parts[1:]
    node = value
    for part in rest:  # a dotted old key matches only when the nested table is really there
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    old_path = path + tuple(rest)
    base = path[:-1]
    new = mig["new"].format(key=old_parts[-1])
    changed = mig["changed"]
    source = f"prime-rl config history; changed {changed}"
    if new:
        up = 0
        while new.startswith("../"):
            new, up = new[3:], up + 1
        target_base = base[: len(base) - up] if up else base
        new_path = target_base + tuple(new.split("."))
        override: Any = None
        manual = mig.get("manual", False)
        note = ""
        if mig["id"] == "mig-resume-step" and node == -1:
            new_path, override = target_base + ("resume",), {}
        divisor = mig.get("divide_by")
        if divisor and not manual:  # a total became a count per replica: total ÷ replicas
            replicas = ctx.get(old_path[:-1] + (divisor,), 1)
            if isinstance(node, int) and isinstance(replicas, int) and replicas > 0 and node % replicas == 0:
                override = node // replicas if replicas != 1 else None
                note = f" = {node // replicas} ({node} ÷ {divisor} = {replicas})" if replicas != 1 else ""
            else:
                manual = True
        edit = None if manual else Edit("rename", old_path, new_path, override)
        message = f"'{dotted(old_path)}' was renamed: it is now '{dotted(new_path)}' (changed {changed})"
        if divisor and manual:
            fix = f"set {dotted(new_path)} = {dotted(old_path)} ÷ {divisor} by hand"
        elif manual:
            fix = f"move it to [{dotted(new_path)}] by hand (the shape changed)"
        else:
            fix = f"rename to {dotted(new_path)}{note}" + (" (an empty [resume] = latest)" if override == {} else "")
    elif (
        mig.get("replaced_by")
        and "kept_when" in mig
        and node == mig["kept_when"]
        and type(node) is type(mig["kept_when"])
    ):
        # the value asks for what prime-rl now always does: deleting it changes nothing
        edit = Edit("delete", old_path)
        message = (
            f"'{dotted(old_path)}' was removed from prime-rl: {_show(node)} is what it always does now, "
            f"through {mig['replaced_by']} (changed {changed})"
        )
        fix = f"delete {dotted(old_path)}: nothing changes"
    elif mig.get("replaced_by"):
        # deleting it would drop what it asked for: the user carries it over to its replacement
        edit = None
        message = (
            f"'{dotted(old_path)}' was removed from prime-rl; {mig['replaced_by']} replaces it (changed {changed})"
        )
        had = f" (it is {_show(node)})" if not isinstance(node, (dict, list)) else ""
        carry = f"carry it over to {mig['replaced_by']}{had}, then delete {dotted(old_path)}"
        fix = "by hand: " + mig.get("by_hand", carry)
    else:
        edit = None if mig.get("manual") else Edit("delete", old_path)
        message = f"'{dotted(old_path)}' was removed in prime-rl, no replacement (changed {changed})"
        fix = f"delete {dotted(old_path)}: it has no replacement"
    pos = ctx.pos(old_path)
    ctx.findings.append(
        Finding(mig["id"], Severity.ERROR, pos[0], pos[1], message, fix, source, dotted(old_path), edit)
    )
    as_class = mig.get("as_class")
    if as_class and isinstance(node, dict):
        walk(ctx, node, load_schema().classes[as_class], old_path)
    return True
