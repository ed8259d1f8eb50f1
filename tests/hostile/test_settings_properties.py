"""Property tests of the settings loaders (issue 13, "make it a habit"): whatever a settings file holds —
arbitrary text, bytes that are not UTF-8, or well-formed TOML with any tables, keys and values — each loader
returns settings or raises SettingsError, never another exception (RecursionError, TypeError, ValueError,
OverflowError from ``int(inf)`` ... included)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import tomlkit
from hypothesis import HealthCheck, given, settings, strategies as st

from app.settings import SETTINGS_TABLES, load_health_settings, load_lifecycle_settings, load_offer_settings, load_pods
from services.backup.s3 import BackupSettings, load_backup_settings
from services.errors import SettingsError
from services.lifecycle.preflight import LifecycleSettings
from services.monitor.health import HealthSettings
from services.pod.specs import POD_KEYS
from services.tomlfile import MAX_DEPTH, too_deep

LOADERS = (
    load_pods,
    load_lifecycle_settings,
    load_offer_settings,
    load_health_settings,
    lambda path: load_backup_settings(path, env={}),
)
KEYS = sorted(
    {
        *LifecycleSettings.__dataclass_fields__,
        *HealthSettings.__dataclass_fields__,
        *BackupSettings.__dataclass_fields__,
        *POD_KEYS,
        "cache_ttl",
        "keys",
        "env",
        "checks",
        "name",
        "run",
        "timeout",
        "lambda",
        "vast",
        "cache_tll",
        "bukcet",
    }
)
TABLES = [*SETTINGS_TABLES, "backup", "pods", "bakup", "ofers"]
CHECKS = HealthCheck.too_slow, HealthCheck.function_scoped_fixture

CHARS = st.characters(exclude_categories=("Cs",))  # any character a file can hold


def text(**kw):
    return st.text(CHARS, **kw)


scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.booleans(),
    text(max_size=20),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.dates(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS) | text(min_size=1, max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)
tables = st.dictionaries(st.sampled_from(KEYS) | text(min_size=1, max_size=8), values, max_size=6)
documents = st.dictionaries(
    st.sampled_from(TABLES) | text(min_size=1, max_size=8),
    tables | st.dictionaries(text(min_size=1, max_size=8), tables, max_size=3) | values,
    max_size=4,
)


def check_all(path: Path) -> None:
    for load in LOADERS:
        try:
            load(path)
        except SettingsError as exc:
            assert str(exc) and "\n" not in str(exc), exc


@settings(max_examples=150, deadline=None, suppress_health_check=CHECKS)
@given(text=st.text(alphabet=st.sampled_from("[]{}\"'=.#\n \\abcdlo,1ef") | CHARS, max_size=400))
def test_any_text(tmp_path, text):
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    check_all(path)


@settings(max_examples=40, deadline=None, suppress_health_check=CHECKS)
@given(data=st.binary(max_size=200), depth=st.integers(min_value=MAX_DEPTH - 2, max_value=3 * MAX_DEPTH))
def test_any_bytes_and_deep_nesting(tmp_path, data, depth):
    path = tmp_path / "settings.toml"
    path.write_bytes(data)
    check_all(path)
    for opening, closing in (("[", "]"), ("{a=", "}")):
        path.write_text("[offers]\nx = " + opening * depth + "1" * (opening == "{a=") + closing * depth + "\n")
        check_all(path)


@settings(max_examples=300, deadline=None, suppress_health_check=CHECKS)
@given(doc=documents)
def test_any_well_formed_toml(tmp_path, doc):
    try:
        text = tomlkit.dumps(doc)
    except Exception:  # noqa: BLE001 - a document tomlkit cannot write is no test case
        return
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    check_all(path)


@settings(max_examples=200, deadline=None)
@given(depth=st.integers(min_value=0, max_value=200), junk=st.text(alphabet="\"'#[]{}\n ab\\", max_size=30))
def test_the_depth_scan_counts_brackets_outside_strings_and_comments(depth, junk):
    """too_deep sees real nesting and ignores brackets inside strings and comments."""
    quoted = tomlkit.string(junk).as_string()  # every kind of bracket and quote, inside a string
    text = f"a = {quoted} # {junk.splitlines()[0] if junk.splitlines() else ''}[[[[\nb = " + "[" * depth + "]" * depth
    found = too_deep(text)
    assert (found is not None) == (depth > MAX_DEPTH)
    if found is not None:
        assert found == 2


KNOWN = {  # loader index → (table, its keys)
    1: ("lifecycle", sorted(set(LifecycleSettings.__dataclass_fields__) - {"runs_dir"})),
    2: ("offers", ["prime_url", "cache_ttl", "keys", "cap_margin", "disk_gb", "warn_minutes", "image"]),
    3: ("health", sorted(HealthSettings.__dataclass_fields__)),
    4: ("backup", sorted(BackupSettings.__dataclass_fields__)),
}
check_tables = st.lists(
    st.fixed_dictionaries({"name": scalars, "run": scalars}, optional={"fix": scalars, "timeout": scalars}), max_size=3
)


@st.composite
def known_documents(draw):
    which = draw(st.sampled_from([0, 1, 2, 3, 4]))
    if which == 0:
        pod = draw(st.dictionaries(st.sampled_from(POD_KEYS), scalars | values, max_size=5))
        return which, {"pods": {draw(text(min_size=1, max_size=6)): pod}}
    table, keys = KNOWN[which]
    body = draw(st.dictionaries(st.sampled_from(keys), scalars | values | st.lists(scalars, max_size=3), max_size=6))
    if which == 1 and draw(st.booleans()):
        body["checks"] = draw(check_tables)
        body["env"] = draw(st.dictionaries(text(min_size=1, max_size=5), scalars | values, max_size=3))
    if which == 2 and draw(st.booleans()):
        body["keys"] = draw(st.dictionaries(st.sampled_from(["vast", "lambda", "nope"]), scalars, max_size=2))
    return which, {table: body}


@settings(max_examples=400, deadline=None, suppress_health_check=CHECKS)
@given(case=known_documents())
def test_any_values_under_the_known_keys(tmp_path, case):
    which, doc = case
    try:
        text = tomlkit.dumps(doc)
    except Exception:  # noqa: BLE001 - a document tomlkit cannot write is no test case
        return
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    try:
        LOADERS[which](path)
    except SettingsError as exc:
        assert str(exc) and "\n" not in str(exc), exc
