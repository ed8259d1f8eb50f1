"""The probe line's fast path (services/models.py: ``_gpus_fast``, ``_host_fast``) against the careful one.

The fast path reads the well-formed GPU columns (a column at a time) or host entry without a call per field;
anything it is not sure of it hands to the careful path. What must hold: wherever the fast path answers, the
careful path answers the same (equal values, equal types: 50 and 50.0 are equal but an int is not a float), and
it never accepts what the careful one refuses; a whole line parses to the same Sample, or to the same refusal,
with the fast path on and off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from services import models
from services.errors import ProbeFormatError
from services.models import Sample

FAST = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# the edges where a type check or a range check could be off by one
EDGES = [
    None, True, False, 0, 1, -1, 100, 101, -0.0, 0.0, 99.99, 100.0, 100.0000001, -1e-9, 2**53, 2**53 + 1,
    -(2**53), -(2**53) - 1, 10**400, -(10**400), 1e308, 1.5e10, 0.5, float("inf"), float("-inf"), float("nan"),
    "", "7", "x", [], [1], {}, {"a": 1},
]  # fmt: skip
figures = st.one_of(
    st.sampled_from(EDGES),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**60), max_value=2**60),
)
names = st.one_of(
    st.sampled_from(["NVIDIA H100 80GB HBM3", "", "\x1b[31mred\x1b[0m", "a\nb", None, 0, 1, []]), st.text()
)
GPU_KEYS = ("index", "util", "mem_used", "mem_total", "power_w", "temp_c")
HOST_KEYS = ("cpu_pct", "mem_used", "mem_total", "disk_used", "disk_total", "nofile_soft")


def entries(keys, with_name):
    fields = {k: figures for k in keys}
    if with_name:
        fields["name"] = names
    return st.fixed_dictionaries({}, optional=fields)


def same(a, b) -> bool:
    """Equal field by field, with equal types (NaN is never kept: the careful path makes it None)."""
    for field in type(a).__slots__:
        x, y = getattr(a, field), getattr(b, field)
        if type(x) is not type(y) or x != y:
            return False
    return True


def careful(parse, *args):
    try:
        return parse(*args)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        return exc


GPU_COLUMNS = ("index", "name", *GPU_KEYS[1:])


@st.composite
def gpu_columns(draw):
    n = draw(st.integers(min_value=0, max_value=4))
    cols = {}
    for k in GPU_COLUMNS:
        how = draw(st.sampled_from(["full"] * 8 + ["short", "long", "absent", "null", "not a list"]))
        size = {"short": max(0, n - 1), "long": n + 1}.get(how, n)
        if how == "absent":
            continue
        if how in ("null", "not a list"):
            cols[k] = None if how == "null" else draw(st.sampled_from(["x", 1, {}]))
            continue
        cells = names if k == "name" else figures
        cols[k] = draw(st.lists(cells, min_size=size, max_size=size))
    return cols


def _careful_gpus(cols):
    try:
        return models._gpus_careful({"gpus": cols}, [])
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError, ProbeFormatError) as exc:
        return exc


def gpus(n=1, **over):
    """n well-formed GPUs as the probe writes them, some fields replaced."""
    cols = {"index": list(range(n)), "name": ["H100"] * n, "util": [1.0] * n, "mem_used": [1] * n}
    return {**cols, "mem_total": [2] * n, "power_w": [None] * n, "temp_c": [None] * n, **over}


@FAST
@given(gpu_columns())
@example(gpus(util=[100.5]))
@example(gpus(util=[101]))
@example(gpus(util=[-1e-9]))
@example(gpus(index=[2**53 + 1]))
@example(gpus(index=[True]))
@example(gpus(index=[None]))
@example(gpus(util=[float("nan")]))
@example(gpus(mem_used=[1.5e10]))
@example(gpus(mem_used=[2**53 + 1]))
@example(gpus(mem_total=[-(2**53) - 1]))
@example(gpus(power_w=[2**60]))
@example(gpus(power_w=[float("inf")]))
@example(gpus(temp_c=[10**400]))
@example(gpus(2, power_w=[1e308, 1e308]))  # each finite, their sum not: the careful path decides
@example(gpus(2, mem_total=[2]))
@example(gpus(util=[True], mem_used=[False]))
@example(gpus(name=[["H100"]]))
def test_gpu_columns_read_fast_are_the_careful_ones(cols):
    for raw in cols["name"] if isinstance(cols.get("name"), list) else []:
        models._gpu_name(raw)  # as a pod's earlier sample would: the fast path knows the names
    want = _careful_gpus(cols)
    got = models._gpus_fast(cols)
    if got is not None:
        assert not isinstance(want, Exception), f"the fast path accepted what the careful one refuses: {want!r}"
        assert len(got) == len(want) and all(same(a, b) for a, b in zip(got, want)), (got, want)


@FAST
@given(entries(HOST_KEYS, with_name=False))
@example({"cpu_pct": float("nan")})
@example({"disk_total": 2**53 + 1})
@example({"cpu_pct": 10**400})
@example({"nofile_soft": 1.5})
def test_a_host_entry_read_fast_is_the_careful_one(entry):
    want = careful(models._host_careful, entry)
    got = models._host_fast(entry)
    if got is not None:
        assert not isinstance(want, Exception), f"the fast path accepted what the careful one refuses: {want!r}"
        assert same(got, want), (got, want)


def _parse_both(line, monkeypatch):
    def parse():
        try:
            return Sample.from_line(line)
        except ProbeFormatError as exc:
            return f"refused: {exc}"

    fast = parse()
    with monkeypatch.context() as m:
        m.setattr(models, "_gpus_fast", lambda g: None)
        m.setattr(models, "_host_fast", lambda h: None)
        slow = parse()
    return fast, slow


lines = st.builds(
    lambda gpus, host, t: json.dumps({"v": 1, "t": t, "gpus": gpus, "host": host}),
    st.one_of(gpu_columns(), st.lists(entries(GPU_KEYS, with_name=True), max_size=4)),
    st.one_of(entries(HOST_KEYS, with_name=False), st.sampled_from([None, [], "x", 1])),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none()),
)


@FAST
@given(lines)
def test_a_whole_line_parses_the_same_with_and_without_the_fast_path(line):
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = _parse_both(line, mp)
    assert fast == slow
    if isinstance(fast, Sample):
        assert all(same(a, b) for a, b in zip(fast.gpus, slow.gpus, strict=True)) and same(fast.host, slow.host)


def test_the_probes_real_lines_parse_the_same_and_go_the_fast_way(monkeypatch):
    """Lines the real probe writes (8 fake GPUs through the nvidia-smi path, this machine's host figures) and the
    fixture line: the same Sample either way, and every GPU and the host read by the fast path."""
    from tests.conftest import FAKE_BIN, REPO
    from tests.services.test_models import GOOD

    env = {**os.environ, "PATH": f"{FAKE_BIN}:{os.environ['PATH']}", "PTT_FAKE_GPUS": "8"}
    probe = REPO / "services" / "pod" / "agent" / "probe.py"
    out = subprocess.run(
        [sys.executable, str(probe), "--once"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found = [json.dumps(GOOD)] + out.splitlines()
    assert len(found) == 2 and len(json.loads(found[1])["gpus"]["name"]) == 8
    for line in found:
        fast, slow = _parse_both(line, monkeypatch)
        assert isinstance(fast, Sample) and fast == slow
        assert models._gpus_fast(json.loads(line)["gpus"]) is not None
        assert models._host_fast(json.loads(line)["host"]) is not None


def _loaded(fn, line: bytes):
    try:
        return ("ok", fn(line))
    except (ValueError, RecursionError) as exc:
        return ("error", type(exc).__name__)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@FAST
@given(
    obj=st.dictionaries(st.text(max_size=5), _JSON, min_size=1, max_size=4),
    head=st.sampled_from([b"", b" ", b"\xef\xbb\xbf", b"\n"]),
    tail=st.sampled_from([b"\n", b"", b" \n", b"\n\n", b"x\n", b"}\n", b",1\n", b"\r\n"]),
    cut=st.integers(0, 3),
    junk=st.sampled_from([b"", b"\xff", b"\xed\xa0\x80", b'"\\ud800"']),
)
@example(obj={"v": 1}, head=b"", tail=b"\n", cut=0, junk=b"")
def test_a_line_loads_as_json_loads_reads_it(obj, head, tail, cut, junk):
    body = json.dumps(obj, separators=(",", ":")).encode()
    if junk:  # bytes a pod could send inside the object: not UTF-8, an encoded surrogate, an escaped one
        body = body[:-1] + (b',"j":' + junk if junk.startswith(b'"') else b',"j":"' + junk + b'"') + b"}"
    line = head + body[: len(body) - cut] + tail
    assert _loaded(models.loads_line, line) == _loaded(json.loads, line)
    utf16 = line.decode("utf-8", "replace").encode("utf-16-le")
    assert _loaded(models.loads_line, utf16) == _loaded(json.loads, utf16)
