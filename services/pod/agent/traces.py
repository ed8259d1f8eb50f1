"""The probe's reading of prime-rl's episode traces (standard library only): per episode, its env and each
trace's timing, scanned for as the bytes of ``rollouts/step_N/train/*/traces.jsonl`` stream by.

Uploaded beside ``probe.py`` and ``rundir.py`` (which imports it), like them.
"""

from __future__ import annotations

import json
import math
import os
import re

if __package__:  # imported from the repo (services.pod.agent.traces)
    from .common import parse_step
else:  # beside probe.py on the pod
    from common import parse_step

# prime-rl's episode traces, <run>/rollouts/step_N/train/{all|effective}/traces.jsonl: one episode per line,
# often MBs (token ids, messages). Only each trace's timing and the episode's env are taken, scanned for as
# the bytes stream by: a line is never held whole.
TRACE_STEPS = 2  # the newest step_N dirs tailed
TRACE_READ_BYTES = 2 * 1024 * 1024  # read from one file per sample; the rest waits for the next sample
TRACE_LAG_BYTES = 32 * 1024 * 1024  # further behind than this: on from the newest TRACE_READ_BYTES (cut)
TRACE_HEAD_BYTES = 4096  # a line's start, where the episode names its env
TRACE_TIMING_BYTES = 4096  # one trace's timing object, at most
TRACE_TIMINGS_PER_LINE = 64  # traces (agents) of one episode
TRACE_RECORDS_PER_SAMPLE = 256  # per-trace records in one sample (the newest)


_TIMING_KEY = b'"timing":'
_ENV_AT_START = re.compile(rb'\s*\{\s*"id"\s*:\s*"[^"\\]*"\s*,\s*"env"\s*:')  # an episode: {"id":"..","env":{..}
_DECODER = json.JSONDecoder()


def _seconds(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 else None


def _span(timing, name):
    """Seconds of one of a trace's TimeSpans ({"start","end"}, verifiers' rule: 0 until it ended); None
    when it is not one."""
    span = timing.get(name)
    if not isinstance(span, dict):
        return None
    start, end = _seconds(span.get("start", 0.0)), _seconds(span.get("end", 0.0))
    if start is None or end is None:
        return None
    return max(0.0, end - start) if end else 0.0


def timing_record(timing):
    """{"tool","model","total"} seconds of one serialized verifiers Timing (``trace.timing``): tool =
    agent/harness (tools and environment), model = agent/model (generation), total = setup + agent +
    finalize + scoring (prime-rl's timing/total). None when ``timing`` is not one; a value that was
    not measured (the agent span never ended) is None."""
    if not isinstance(timing, dict):
        return None
    agent = timing.get("agent")
    if (
        not isinstance(agent, dict)
        or not isinstance(agent.get("model"), dict)
        or not isinstance(agent.get("harness"), dict)
    ):
        return None
    phases = [_span(timing, p) for p in ("setup", "agent", "finalize", "scoring")]
    ended = _seconds(agent.get("end", 0.0))
    if phases[1] is None or not ended:
        return {"tool": None, "model": None, "total": None}
    tool, model = _seconds(agent["harness"].get("duration")), _seconds(agent["model"].get("duration"))
    return {
        "tool": None if tool is None else round(tool, 3),
        "model": None if model is None else round(model, 3),
        "total": round(sum(p or 0.0 for p in phases), 3),
    }


def episode_env(head):
    """The env an episode record names at its start ({"id":..,"env":{"id","name"},...}): its name, else
    its id; None for anything else (a bare trace record of older prime-rl, garbage)."""
    m = _ENV_AT_START.match(head)
    if m is None:
        return None
    text = head[m.end() :].decode("utf-8", "replace")
    try:
        env, _end = _DECODER.raw_decode(text, len(text) - len(text.lstrip()))
    except (ValueError, RecursionError):
        return None
    if not isinstance(env, dict):
        return None
    name = env.get("name") or env.get("id")
    return name[:100] if isinstance(name, str) and name else None


def _trace_paths(root):
    """{path: step} of the traces.jsonl to tail: the newest TRACE_STEPS step_N dirs under ``root``."""
    if not os.path.isdir(root):
        return {}
    steps = sorted((s, n) for s, n in ((parse_step(n), n) for n in os.listdir(root)) if s is not None)
    found = {}
    for step, name in steps[-TRACE_STEPS:]:
        for subset in ("all", "effective"):
            path = os.path.join(root, name, "train", subset, "traces.jsonl")
            if os.path.isfile(path):
                found[path] = step
                break
    return found


class TraceTail:
    """One traces.jsonl read as a stream: per line, its first TRACE_HEAD_BYTES (the env) and every trace
    timing object found in it; at most TRACE_TIMING_BYTES are carried over between reads."""

    def __init__(self, step, ino, off, skip):
        self.step, self.ino, self.off = step, ino, off
        self.head, self.carry, self.found, self.skip = b"", b"", [], skip

    def jump(self, off, skip):
        self.off, self.head, self.carry, self.found, self.skip = off, b"", b"", [], skip

    def feed(self, data, out):
        """Scan ``data`` (the bytes after the last read); complete lines add one record per trace to
        ``out``: {"step","env","tool","model","total"}. Returns how many lines were dropped (their
        start was skipped)."""
        dropped = 0
        pieces = data.split(b"\n")
        for i, piece in enumerate(pieces):
            ended = i < len(pieces) - 1
            if not self.skip and len(self.head) < TRACE_HEAD_BYTES:
                self.head += piece[: TRACE_HEAD_BYTES - len(self.head)]
            self._scan(piece, ended)
            if not ended:
                break
            if self.skip:
                dropped += 1
            elif self.found:
                env = episode_env(self.head)
                for rec in self.found:
                    out.append(dict(step=self.step, env=env, **rec))
            self.head, self.carry, self.found, self.skip = b"", b"", [], False
        return dropped

    def _scan(self, piece, ended):
        text, self.carry, pos = self.carry + piece, b"", 0
        while True:
            at = text.find(_TIMING_KEY, pos)
            if at < 0:
                break
            start = at + len(_TIMING_KEY)
            chunk = text[start : start + TRACE_TIMING_BYTES]
            s = chunk.decode("utf-8", "replace")
            try:
                obj, _end = _DECODER.raw_decode(s, len(s) - len(s.lstrip()))
            except (ValueError, RecursionError):
                if not ended and len(chunk) < TRACE_TIMING_BYTES:  # may go on in the next read
                    self.carry = text[at:]
                    return
                pos = start
                continue
            rec = None if self.skip else timing_record(obj)
            if rec is not None and len(self.found) < TRACE_TIMINGS_PER_LINE:
                self.found.append(rec)
            pos = start
        if not ended:
            self.carry = text[max(pos, len(text) - len(_TIMING_KEY) + 1) :]
