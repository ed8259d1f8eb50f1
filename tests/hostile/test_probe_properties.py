"""Property tests of the parsers of what a pod sends: a probe line (bytes from a pod we do not control) is a
Sample or a ProbeFormatError, nothing else; a metrics.jsonl line never raises at all."""

from __future__ import annotations

import json
import os
import tempfile

# hypothesis keeps caches in ./.hypothesis unless told otherwise: not in the shared working tree
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import HealthCheck, example, given, settings, strategies as st

from services.errors import ProbeFormatError
from services.models import Sample
from services.monitor.metrics import MetricsParser

FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**310),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=5)),
    max_leaves=30,
)
GOOD = {
    "v": 1,
    "t": 1.0,
    "gpus": [{"index": 0, "name": "H100", "util": 50, "mem_used": 1, "mem_total": 2}],
    "host": {"cpu_pct": 1.0},
    "procs": [{"pid": 1, "gpu": 0, "mem": 1, "cmd": "x"}],
    "log": ["a"],
    "ckpts": [{"step": 1, "path": "/p", "bytes": 1, "mtime": 1.0, "complete": True}],
    "errors": [],
    "metrics": [],
    "run": {"max_steps": 10},
    "cut": {"log_bytes": 3, "lines": 1},
}
FIELDS = st.sampled_from(sorted(GOOD) + ["source"])
# a probe line's own keys, each given any JSON value: where the parser's assumptions live
mutated = st.builds(lambda changes: {**GOOD, **changes}, st.dictionaries(FIELDS, json_values, max_size=4))
nested = st.builds(
    lambda field, inner: {**GOOD, field: [inner] if field in ("gpus", "procs", "ckpts") else inner},
    FIELDS,
    st.dictionaries(
        st.sampled_from(
            [
                "index",
                "name",
                "util",
                "mem_used",
                "pid",
                "gpu",
                "step",
                "path",
                "complete",
                "log_bytes",
                "lines",
                "max_steps",
                "mtime",
                "bytes",
                "cmd",
                "model",
            ]
        ),
        json_values,
        max_size=6,
    ),
)


def parse(line):
    try:
        return Sample.from_line(line)
    except ProbeFormatError:
        return None


def dumps(obj) -> str:
    return json.dumps(obj, allow_nan=True)


@FAST
@given(st.binary(max_size=300))
@example(b"[" * 100_000)  # nested past the recursion limit
@example(b'{"v":1,"t":"soon"}')
@example(b'{"v":1,"t":1,"ckpts":[{"step":1e400}]}')
@example(b'{"v":1,"t":1,"procs":[{"pid":NaN}]}')
@example(b'{"v":1,"t":1,"log":[' + b"[" * 5000 + b"]" * 5000 + b"]}")
@example(b"\xff\xfe{\x00")
def test_any_bytes_are_a_sample_or_a_probe_format_error(line):
    parse(line)


@FAST
@given(st.one_of(json_values, mutated, nested))
def test_any_json_is_a_sample_or_a_probe_format_error(obj):
    sample = parse(dumps(obj))
    if sample is not None:  # what a Sample holds is what the UI can show
        assert sample.cut_bytes >= 0 and sample.cut_lines >= 0
        assert all(isinstance(x, str) for x in sample.log + sample.errors + sample.metrics)


def test_the_cut_counts_are_parsed_and_an_old_probe_has_none():
    sample = Sample.from_line(
        dumps(
            dict(
                GOOD,
                cut={"log_bytes": 3_000_000, "lines": 4, "metrics_bytes": 5, "metrics_lines": 1, "later": "ignored"},
            )
        )
    )
    assert (sample.cut_bytes, sample.cut_lines) == (3_000_005, 5)
    old = dict(GOOD)
    del old["cut"]
    assert (Sample.from_line(dumps(old)).cut_bytes, Sample.from_line(dumps(old)).cut_lines) == (0, 0)


@settings(FAST, report_multiple_bugs=False)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300),
        json_values.map(dumps),
        st.dictionaries(
            st.sampled_from(
                [
                    "step",
                    "time/step",
                    "time/wait_for_batch",
                    "perf/mfu",
                    "time/wait_for_policy",
                    "progress/x",
                    "source",
                    "_timestamp",
                    "train/agg/all/timing/generate/mean",
                ]
            ),
            json_values,
            max_size=5,
        ).map(dumps),
    )
)
@example('{"step": 1e400, "time/wait_for_batch": 1.0}')
@example('{"step": NaN, "time/wait_for_batch": 1.0}')
@example("[" * 100_000)
def test_any_metrics_line_never_raises(line):
    parser = MetricsParser()
    parser.feed_metrics(line)
    parser.feed_console(line)
