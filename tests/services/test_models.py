"""Parsing probe lines into Samples: units kept, N/A kept as None, garbage refused with a reason."""

from __future__ import annotations

import json

import pytest

from services.errors import ProbeFormatError
from services.models import Sample

GOOD = {
    "v": 1,
    "t": 1700000000.5,
    "source": "nvidia-smi",
    "gpus": {  # the probe's wire: one list per field, GPU by GPU
        "index": [0, 1],
        "name": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
        "util": [87.0, None],
        "mem_used": [64209190912, None],
        "mem_total": [85520809984, 85520809984],
        "power_w": [612.34, None],
        "temp_c": [64.0, None],
    },
    "host": {"cpu_pct": 12.5, "mem_used": 10, "mem_total": 40, "disk_used": 1, "disk_total": 4, "nofile_soft": 1024},
    "procs": [{"pid": 42, "gpu": 0, "mem": 1024, "cmd": "python train.py"}],
    "log": ["trainer: Step 3"],
    "ckpts": [{"step": 10, "path": "/r/checkpoints/step_10", "bytes": 5, "mtime": 1.0, "complete": True}],
}


def test_good_line_keeps_units_and_na():
    s = Sample.from_line(json.dumps(GOOD))
    assert s.t == 1700000000.5 and s.source == "nvidia-smi"
    g0, g1 = s.gpus
    assert g0.mem_used == 64209190912 and g0.power_w == pytest.approx(612.34)
    assert g0.mem_pct == pytest.approx(100 * 64209190912 / 85520809984)
    assert (g1.util, g1.mem_used, g1.power_w, g1.temp_c, g1.mem_pct) == (None, None, None, None, None)
    assert s.host.mem_pct == 25.0 and s.host.disk_pct == 25.0 and s.host.nofile_soft == 1024
    assert s.procs[0].pid == 42 and s.log == ("trainer: Step 3",)
    assert s.ckpts[0].step == 10 and s.ckpts[0].complete is True


def test_unknown_fields_are_ignored_for_forward_compatibility():
    line = dict(GOOD, new_field={"x": 1})
    assert Sample.from_dict(line).gpus[0].index == 0


@pytest.mark.parametrize(
    "line, why",
    [
        ("not json at all", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps(dict(GOOD, v=2)), "unsupported probe version"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "t"}), "no time"),
        (json.dumps(dict(GOOD, gpus="many")), "expected a list"),
        (json.dumps(dict(GOOD, gpus=[{"index": 0, "util": "hot"}])), "not a number"),
        (json.dumps(dict(GOOD, gpus=[{"index": 0, "util": 250}])), "out of range"),
        (json.dumps(dict(GOOD, gpus={"name": ["H100"], "util": [250.0]})), "out of range"),
        (json.dumps(dict(GOOD, gpus={"name": ["H100"], "util": ["hot"]})), "not a number"),
        (json.dumps(dict(GOOD, gpus={"name": ["H100", "H100"], "util": [1.0]})), "different lengths"),
        (json.dumps(dict(GOOD, gpus={"name": "H100"})), "expected a list"),
        (json.dumps(dict(GOOD, procs=[{"gpu": 0}])), "malformed"),
        ('{"v": 1, "t": 1', "not JSON"),
    ],
)
def test_malformed_lines_raise_a_clear_error(line, why):
    with pytest.raises(ProbeFormatError, match=why):
        Sample.from_line(line)


def test_run_field_carries_max_steps_and_ignores_nonsense():
    assert Sample.from_dict(dict(GOOD, run={"max_steps": 200})).max_steps == 200
    assert Sample.from_dict(dict(GOOD, run={})).max_steps is None
    assert Sample.from_dict(dict(GOOD, run={"max_steps": 0})).max_steps is None
    assert Sample.from_dict(GOOD).max_steps is None
    with pytest.raises(ProbeFormatError):
        Sample.from_dict(dict(GOOD, run={"max_steps": "lots"}))
