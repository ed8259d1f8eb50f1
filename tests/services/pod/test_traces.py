"""The probe's traces.jsonl tail: per-trace timings extracted on the pod from prime-rl's episode records
(verifiers v1 ``Episode.to_record()``: one episode per line, each trace's ``timing`` near its end), never
the traces themselves; bounded, and garbage-proof."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from services.models import Sample
from services.pod.agent import rundir
from services.pod.agent.rundir import RunDir
from services.pod.agent.traces import TRACE_HEAD_BYTES, TRACE_TIMING_BYTES, TraceTail, episode_env, timing_record

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "services" / "pod" / "agent" / "probe.py"
SECRET = "the private prompt: never leaves the pod"


def timing(tool: float, model: float, t0: float = 1000.0, *, ended: bool = True) -> dict:
    """A serialized verifiers Timing: spans are {start, end}; the agent's model/harness split has durations."""
    agent = tool + model
    return {
        "start": t0,
        "boot": {"start": t0, "end": t0 + 0.5},
        "setup": {"start": t0, "end": t0 + 0.2},
        "agent": {
            "start": t0 + 0.2,
            "end": t0 + 0.2 + agent if ended else 0.0,
            "model": {"duration": model if ended else 0.0},
            "harness": {"duration": tool if ended else 0.0},
        },
        "finalize": {"start": t0 + 0.2 + agent, "end": t0 + 0.3 + agent},
        "scoring": {"start": t0 + 0.3 + agent, "end": t0 + 0.4 + agent},
    }


def trace(tool: float, model: float, filler: int = 200, **kw) -> dict:
    """One trace in its serialized field order: timing last, after the bulky messages and token ids."""
    return {
        "version": 1,
        "id": "t",
        "verifiers": {"version": "0.2"},
        "task": {"type": "Task", "data": {"q": SECRET}},
        "agent": {"config": {}, "name": "solver", "trainable": True},
        "tools": [],
        "nodes": [
            {
                "messages": [{"role": "user", "content": SECRET + ' "timing": {"agent": 1} ' * 3}],
                "completion_ids": list(range(filler)),
            }
        ],
        "calls": [],
        "rewards": {"r": {"score": 1.0, "weight": 1.0}},
        "metrics": {},
        # a user's own "timing" key, not a verifiers Timing: must not be taken for one
        "info": {"timing": {"agent": "fast"}},
        "extra_usage": [],
        "is_completed": True,
        "ok": True,
        "stop_condition": "done",
        "errors": [],
        "timing": timing(tool, model, **kw),
    }


def episode(env: str | None, *traces: dict, name: bool = True) -> dict:
    rec: dict = {
        "id": "e0a1",
        "env": {"id": f"{env}-id"} if env else {},
        "task": {"type": "Task", "data": {"q": SECRET}},
        "group": {"id": "g"},
        "run": {"type": "train", "id": "r", "work": {"type": "train", "step": 3}},
        "ok": True,
        "errors": [],
        "traces": list(traces),
    }
    if env and name:
        rec["env"]["name"] = env
    return rec


def line(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"  # compact, as orjson writes it


def expected(env: str | None, tool: float, model: float) -> dict:
    return {"env": env, "tool": round(tool, 3), "model": round(model, 3), "total": round(tool + model + 0.4, 3)}


def strip_step(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "step"} for r in recs]


# ------------------------------------------------------------------------------------------ the parts
def test_timing_record_reads_verifiers_spans() -> None:
    assert timing_record(timing(3.0, 1.5)) == {"tool": 3.0, "model": 1.5, "total": 4.9}
    # an agent span that never ended: verifiers never split it -> not measured, not 0
    assert timing_record(timing(3.0, 1.5, ended=False)) == {"tool": None, "model": None, "total": None}
    for junk in (None, 3, "x", [], {}, {"agent": "fast"}, {"agent": {"model": 1, "harness": {}}}):
        assert timing_record(junk) is None
    bad = timing(2.0, 1.0)
    bad["agent"]["harness"]["duration"] = float("nan")
    assert timing_record(bad)["tool"] is None


def test_episode_env_needs_the_episode_layout() -> None:
    assert episode_env(line(episode("math", trace(1, 1)))[:4096]) == "math"
    assert episode_env(line(episode("math", trace(1, 1), name=False))[:4096]) == "math-id"  # no name: its id
    assert episode_env(line(trace(1, 1))[:4096]) is None  # a bare trace record (prime-rl of mid-August 2026)
    assert episode_env(b'{"id":"x","env":{"name":"cut') is None
    assert episode_env(b'{"task":{"env":{"name":"inner"}}}') is None


def feed_in_chunks(data: bytes, cuts: list[int]) -> tuple[list[dict], int]:
    tail, out, dropped, at = TraceTail(7, 0, 0, False), [], 0, 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(data))) + [len(data)]:
        dropped += tail.feed(data[at:cut], out)
        at = cut
    return out, dropped


GARBAGE = [
    b"",
    b"not json",
    b'{"timing":',
    b'{"timing":{"agent":{"model":{},"harness":{}}',
    b"\xff\xfe\x00garbage",
    b'{"id":"x","env":{"name":"e"},"traces":[{"timing":{"agent":"oops"}}]}',
    b"[1,2,3]",
    b'"timing":' * 50,
    b'{"id":"x","env":{"name":"deep"},"traces":[{"timing":' + b"[" * 5000 + b"]" * 5000 + b"}]}",
]


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(["math", "code", None]),
                st.lists(st.tuples(st.floats(0, 500), st.floats(0, 100)), min_size=1, max_size=3),
            ),
            st.sampled_from(GARBAGE),
        ),
        max_size=12,
    ),
    st.lists(st.integers(0, 200_000), max_size=30),
)
@example(items=[("math", [(0.0, 0.0625)])], cuts=[])  # CI found it: a half-way total rounds either way
def test_extraction_survives_garbage_and_any_chunking(items, cuts) -> None:
    data, want = b"", []
    for item in items:
        if isinstance(item, bytes):
            data += item + b"\n"
            continue
        env, timings = item
        data += line(episode(env, *(trace(t, m) for t, m in timings)))
        want += [expected(env, t, m) for t, m in timings]
    got, dropped = feed_in_chunks(data, cuts)
    assert dropped == 0
    # the total is a sum of spans read as differences of epoch seconds (float noise ~1e-13): at a half-way value
    # (0.0625 + 0.4 = 0.4625) it may round either way, so it is compared to the millisecond; the rest exactly
    assert [{**r, "total": None} for r in strip_step(got)] == [{**w, "total": None} for w in want]
    assert all(abs(r["total"] - w["total"]) <= 0.0011 for r, w in zip(got, want))
    assert all(r["step"] == 7 for r in got)
    assert SECRET not in json.dumps(got)


def test_a_line_larger_than_a_read_is_never_held_whole() -> None:
    big = line(episode("long", trace(9.0, 2.0, filler=300_000), trace(1.0, 1.0, filler=300_000)))
    assert len(big) > 3 * rundir.TRACE_READ_BYTES / 4
    tail, out = TraceTail(1, 0, 0, False), []
    for at in range(0, len(big), 4096):
        tail.feed(big[at : at + 4096], out)
        assert len(tail.head) <= TRACE_HEAD_BYTES and len(tail.carry) <= TRACE_TIMING_BYTES + 16
    assert strip_step(out) == [expected("long", 9.0, 2.0), expected("long", 1.0, 1.0)]


def test_a_line_whose_start_was_skipped_is_dropped_and_counted() -> None:
    data = line(episode("a", trace(5, 1)))
    tail, out = TraceTail(1, 0, 0, True), []
    assert tail.feed(data[len(data) // 2 :] + line(episode("b", trace(2, 1))), out) == 1
    assert strip_step(out) == [expected("b", 2, 1)]


# ------------------------------------------------------------------------------------------ the run dir
def write_step(run: Path, step: int, episodes: list[dict], subset: str = "all", kind: str = "train") -> Path:
    d = run / "rollouts" / f"step_{step}" / kind / subset
    d.mkdir(parents=True, exist_ok=True)
    path = d / "traces.jsonl"
    with open(path, "ab") as f:
        for e in episodes:
            f.write(line(e))
    return path


def test_rundir_tails_the_newest_two_step_dirs_train_all_first(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        write_step(tmp_path, step, [episode("old" if step == 1 else "math", trace(step, 1.0))])
    write_step(tmp_path, 3, [episode("dup", trace(99, 1.0))], subset="effective")  # the same episodes again
    write_step(tmp_path, 3, [episode("evals", trace(50, 1.0))], kind="eval")
    (tmp_path / "rollouts" / "step_9x").mkdir()  # not a step dir
    run = RunDir(str(tmp_path), 10.0)
    errors: list[str] = []
    got = run.new_traces(errors)
    assert errors == []
    assert [(r["step"], r["env"], r["tool"]) for r in got] == [(2, "math", 2.0), (3, "math", 3.0)]
    assert run.new_traces(errors) == []  # nothing new
    write_step(tmp_path, 3, [episode("math", trace(4.5, 1.0))])
    write_step(tmp_path, 4, [episode("math", trace(6.0, 1.0))], subset="effective")  # no all/: effective
    got = run.new_traces(errors)
    assert [(r["step"], r["tool"]) for r in got] == [(3, 4.5), (4, 6.0)]  # step_4 read from its start
    assert set(run.trace_files) == {
        str(tmp_path / "rollouts/step_3/train/all/traces.jsonl"),
        str(tmp_path / "rollouts/step_4/train/effective/traces.jsonl"),
    }


def test_rundir_bounds_records_and_lag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunDir(str(tmp_path), 10.0)
    assert run.new_traces([]) == []  # no rollouts dir yet: nothing, no error
    path = write_step(tmp_path, 1, [episode("math", trace(float(i), 1.0)) for i in range(300)])
    got = run.new_traces([])  # appeared after start: from its start, the newest 256 records kept
    assert len(got) == rundir.TRACE_RECORDS_PER_SAMPLE and got[-1]["tool"] == 299.0
    cut = run.take_cut()
    assert cut["trace_records"] == 300 - rundir.TRACE_RECORDS_PER_SAMPLE and cut["trace_bytes"] > 0
    monkeypatch.setattr(rundir, "TRACE_LAG_BYTES", 4096)
    monkeypatch.setattr(rundir, "TRACE_READ_BYTES", 2048)
    with open(path, "ab") as f:
        for i in range(40):
            f.write(line(episode("math", trace(1000.0 + i, 1.0, filler=10))))
    got = run.new_traces([])  # far behind: on from the newest bytes, the first (partial) line dropped
    assert got and got[-1]["tool"] <= 1039.0 and all(r["tool"] >= 1000.0 for r in got)
    assert run.take_cut()["trace_bytes"] > 0
    while more := run.new_traces([]):
        got += more
    assert got[-1]["tool"] == 1039.0


# ------------------------------------------------------------------------------------------ the real probe
def test_the_probe_sends_only_timings_and_stays_a_valid_sample(tmp_path: Path) -> None:
    write_step(tmp_path, 5, [episode("math", trace(2.0, 1.0), trace(30.0, 1.0)), episode("code", trace(0.5, 4.0))])
    out = subprocess.run(
        [sys.executable, "-u", str(PROBE), "--once", "--backend", "none", "--run-dir", str(tmp_path)],
        capture_output=True,
        timeout=15,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode()
    obj = json.loads(text)
    assert obj["traces"] == [
        {"step": 5, **expected("math", 2.0, 1.0)},
        {"step": 5, **expected("math", 30.0, 1.0)},
        {"step": 5, **expected("code", 0.5, 4.0)},
    ]
    assert SECRET not in text and "completion_ids" not in text
    assert obj["cut"]["trace_bytes"] == 0 and obj["cut"]["trace_records"] == 0
    Sample.from_line(text)  # the key is optional: the v1 parser takes the line as it did
