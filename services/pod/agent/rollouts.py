"""The pod side of the Rollouts view (standard library only, Python 3.8+): prime-rl's episode records read
where they are, ``<run>/rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl`` (one verifiers
``Episode.to_record()`` per line, appended as episodes complete), and only what was asked for sent back.

    rollouts.py list RUN_DIR [--step N] [--kind train|eval] [--subset all|effective] [--env E] [--errors]
                             [--truncated] [--limit N] [--grep REGEX] [--timeout S]
    rollouts.py episode RUN_DIR --id ID [--step N] [--kind K] [--subset S] [--offset B] [--max-text N]
                             [--max-bytes N]
    rollouts.py dump RUN_DIR [--step N] [--kind K] [--subset S] [--max-text N] [--max-bytes N] [--limit N]
    rollouts.py serve [--idle S]

Every answer is JSON lines on stdout. ``list`` prints one ``{"ep": summary}`` per episode (the newest
``--limit`` that pass the filters, never their text; with ``--grep`` a short snippet around the first match)
and then ``{"done": {...}}``; ``episode`` prints ``{"episode": view}``: its turns, tool calls, rewards,
timings and errors with each text cut at ``--max-text`` characters and the whole at ``--max-bytes``, each
cut marked; ``dump`` prints one ``{"episode": view}`` per episode of a step, within the same bounds.
Errors are ``{"error": "..."}`` and exit status 2. A file is read a line at a time (a line longer than
MAX_LINE is summarised from its start, never loaded) and a last line still being written is skipped.

``serve`` answers many requests from one process (no SSH exec, interpreter start and guard check per request):
it prints ``{"serving": 1}``, then reads one request per line on stdin (the JSON list of the arguments one of
the commands above takes) and answers each with ``{"answer": N, "rc": R}`` and the N bytes of JSON lines that
command would have printed. It keeps each file's summaries (by device, inode, size and mtime) so a step read
again, or grown by appended episodes, is parsed only where it is new. It ends at the end of its stdin (the
connection closed) or after ``--idle`` seconds without a request.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import math
import os
import re
import select
import sys
import time

if __package__:  # imported from the repo (services.pod.agent.rollouts)
    from .common import parse_step
else:  # beside the guard on the pod
    from common import parse_step

KINDS = ("train", "eval")
SUBSETS = ("all", "effective")
MAX_LINE = 16 * 1024 * 1024  # one episode's record parsed whole at most; longer ones are summarised from their start
HEAD_BYTES = 4096  # where an oversized record's id and env are looked for
MAX_LIMIT = 2000  # summaries in one answer
DEFAULT_LIMIT = 256
MAX_TEXT = 16 * 1024  # characters of one text in an episode's view
MAX_BYTES = 1024 * 1024  # characters of all texts of one answer
STEPS_LISTED = 64  # the newest steps named in a list answer
SNIPPET = 60  # characters on each side of a search match
TRUNCATING_STOPS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "context_length")

CACHE_ITEMS = 100000  # summaries a server keeps, all files together (a few hundred bytes each)
IDLE = 300.0  # a server with no request for this long ends (the pane asks every 10 s while it shows the newest step)

_ID_AT_START = re.compile(rb'\s*\{\s*"id"\s*:\s*"((?:[^"\\]|\\.){1,200})"')
_ENV_NAME = re.compile(rb'"env"\s*:\s*\{[^{}]{0,400}?"(?:name|id)"\s*:\s*"((?:[^"\\]|\\.){1,100})"')


class Refused(Exception):
    """A request this script answers with one line of error."""


OUT = [None]  # type: list  # where answers go: one request's buffer while serving, else stdout


def _out(obj):
    (OUT[0] or sys.stdout).write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _int(v):
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _dicts(v):
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


# ------------------------------------------------------------------ where the files are
def steps(run_dir):
    """{step: {kind: [subset, ...]}} of every step_N under <run>/rollouts that holds a traces.jsonl."""
    root = os.path.join(run_dir, "rollouts")
    try:
        names = os.listdir(root)
    except OSError:
        return {}
    found = {}
    for name in names:
        n = parse_step(name)
        if n is None:
            continue
        kinds = {}
        for kind in KINDS:
            subs = [s for s in SUBSETS if os.path.isfile(os.path.join(root, name, kind, s, "traces.jsonl"))]
            if subs:
                kinds[kind] = subs
        if kinds:
            found[n] = kinds
    return found


def pick(run_dir, step, kind, subset):
    """(step, subset, path) of the file asked for: ``step`` None = the newest with ``kind``; ``subset``
    None = all, else effective. Raises Refused."""
    found = steps(run_dir)
    with_kind = sorted(n for n, kinds in found.items() if kind in kinds)
    if not with_kind:
        raise Refused("no %s episodes under %s" % (kind, os.path.join(run_dir, "rollouts")))
    if step is None:
        step = with_kind[-1]
    elif step not in found or kind not in found[step]:
        raise Refused("no %s episodes of step %d (the steps with some: %s)" % (kind, step, _span_text(with_kind)))
    subs = found[step][kind]
    if subset is None:
        subset = subs[0]
    elif subset not in subs:
        raise Refused("step %d has no %s/%s episodes" % (step, kind, subset))
    return step, subset, os.path.join(run_dir, "rollouts", "step_%d" % step, kind, subset, "traces.jsonl")


def _span_text(ns):
    return "%d-%d" % (ns[0], ns[-1]) if len(ns) > 1 else str(ns[0])


def records(f, start=0):
    """(offset, line, size) per whole line of ``f`` from ``start``; a line longer than MAX_LINE comes as
    its first HEAD_BYTES and minus its size, never read whole. A last line without its newline (still
    being written) is not yielded: ``STATE["partial"]`` says so."""
    f.seek(start)
    off = start
    while True:
        chunk = f.readline(MAX_LINE + 1)
        if not chunk:
            return
        if chunk.endswith(b"\n"):
            yield off, chunk, len(chunk)
            off += len(chunk)
            continue
        if len(chunk) <= MAX_LINE:  # the end of the file, mid-line: still being written
            STATE["partial"] = True
            return
        head, size = chunk[:HEAD_BYTES], len(chunk)
        while not chunk.endswith(b"\n"):  # the rest of an oversized line, never held
            chunk = f.readline(1024 * 1024)
            if not chunk:
                STATE["partial"] = True
                return
            size += len(chunk)
        yield off, head, -size
        off += size


STATE = {"partial": False}  # the last read ended in a line still being written


def parse(raw):
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


# A key whose value is a long array of numbers or booleans (token ids, logprobs, masks): most of a record's
# bytes, and nothing a summary reads. The opening quote preceded by a backslash is inside a string.
_NUMERIC_ARRAY = re.compile(rb'"[A-Za-z0-9_]{1,64}"\s*:\s*\[(?=[-0-9tfn])')
_NUMERIC_CHARS = b"0123456789.,-+eE \t\r\ntruefalsn"


def lean(raw):
    """``raw`` with its long number arrays emptied (``[]``): the same record to a summary, parsed several times
    faster. Only an array whose bytes are all number/boolean characters up to its ``]`` is emptied, so no
    string and no nested value is touched."""
    out, pos = [], 0
    for m in _NUMERIC_ARRAY.finditer(raw):
        a = m.end()
        if a < pos or (m.start() and raw[m.start() - 1 : m.start()] == b"\\"):
            continue
        b = raw.find(b"]", a)
        if b - a < 64 or raw[a:b].translate(None, _NUMERIC_CHARS):
            continue
        out.append(raw[pos:a])
        pos = b
    if not out:
        return raw
    out.append(raw[pos:])
    return b"".join(out)


def head_of(raw):
    """(id, env) read from a record's first bytes (an oversized or garbled line)."""
    m = _ID_AT_START.match(raw)
    e = _ENV_NAME.search(raw[:HEAD_BYTES])

    def text(g):
        try:
            return json.loads(b'"' + g + b'"')
        except ValueError:
            return g.decode("utf-8", "replace")

    return (text(m.group(1)) if m else None), (text(e.group(1)) if e else None)


# ------------------------------------------------------------------ one episode summarised
def content_text(content):
    """A message's text: a string, or the text parts of a list of parts (images dropped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _span(timing, name):
    span = timing.get(name) if isinstance(timing, dict) else None
    if not isinstance(span, dict):
        return None
    start, end = _num(span.get("start", 0.0)), _num(span.get("end", 0.0))
    if start is None or end is None or not end:
        return None
    return max(0.0, end - start)


def trace_timing(t):
    """{"tool","model","total"} seconds of one trace (None where not measured)."""
    timing = t.get("timing")
    if not isinstance(timing, dict):
        return {"tool": None, "model": None, "total": None}
    agent = timing.get("agent")
    agent = agent if isinstance(agent, dict) else {}
    split = {}
    for k, key in (("tool", "harness"), ("model", "model")):
        part = agent.get(key)
        split[k] = _num(part.get("duration")) if isinstance(part, dict) else None
    phases = [_span(timing, p) for p in ("setup", "agent", "finalize", "scoring")]
    split["total"] = sum(p for p in phases if p is not None) if phases[1] is not None else None
    if phases[1] is None:
        split["tool"] = split["model"] = None
    return split


def rewards_of(t):
    """{name: score * weight} of one trace's rewards (a None reward skipped)."""
    out = {}
    rewards = t.get("rewards")
    if isinstance(rewards, dict):
        for name, r in rewards.items():
            if isinstance(r, dict):
                score, weight = _num(r.get("score")), _num(r.get("weight", 1.0))
                if score is not None:
                    out[str(name)[:60]] = score * (1.0 if weight is None else weight)
            elif _num(r) is not None:
                out[str(name)[:60]] = _num(r)
    return out


def truncated(t):
    if t.get("stop_condition") in TRUNCATING_STOPS:
        return True
    last = next((c for c in reversed(_dicts(t.get("calls"))) if not c.get("error")), None)
    return bool(last and last.get("finish_reason") == "length")


def _error_text(e):
    if not isinstance(e, dict):
        return str(e)[:200]
    kind, msg = e.get("type"), e.get("message")
    text = ("%s: %s" % (kind, msg)) if kind and msg else str(msg or kind or "error")
    return text[:200]


def summary(obj, step, kind, subset, off, size):
    """One episode's line in the list: numbers and names, never its text."""
    traces = _dicts(obj.get("traces"))
    env = obj.get("env") if isinstance(obj.get("env"), dict) else {}
    env_name = env.get("name") or env.get("id")
    parts, totals, turns, tin, tout, calls = {}, [], 0, 0, 0, 0
    names = collections.Counter()  # type: collections.Counter
    tool = model = total = None
    errors = [_error_text(e) for e in obj.get("errors") or [] if e]
    for t in traces:
        r = rewards_of(t)
        totals.append(sum(r.values()))
        prefix = "" if len(traces) == 1 else "%s:" % (str((t.get("agent") or {}).get("name") or "agent")[:30],)
        for k, v in r.items():
            parts[prefix + k] = round(v, 6)
        for n in _dicts(t.get("nodes")):
            msg = n.get("message") if isinstance(n.get("message"), dict) else {}
            if n.get("sampled"):
                turns += 1
            for tc in _dicts(msg.get("tool_calls")):
                calls += 1
                names[str(tc.get("name") or (tc.get("function") or {}).get("name") or "?")[:40]] += 1
        for c in _dicts(t.get("calls")):
            u = c.get("usage") if isinstance(c.get("usage"), dict) else {}
            tin += _int(u.get("prompt_tokens")) + _int(u.get("cached_input_tokens"))
            tout += _int(u.get("completion_tokens"))
            if c.get("error"):
                errors.append(_error_text(c["error"]))
        errors += [_error_text(e) for e in t.get("errors") or [] if e]
        split = trace_timing(t)
        if split["tool"] is not None:
            tool = (tool or 0.0) + split["tool"]
        if split["model"] is not None:
            model = (model or 0.0) + split["model"]
        if split["total"] is not None:
            total = (total or 0.0) + split["total"]
    ok = obj.get("ok")
    errors = list(collections.OrderedDict.fromkeys(errors))  # the episode repeats its traces' last error
    return {
        "id": str(obj.get("id") or "")[:200],
        "step": step,
        "kind": kind,
        "subset": subset,
        "env": str(env_name)[:100] if env_name else None,
        "reward": round(sum(totals) / len(totals), 6) if totals else None,
        "rewards": parts,
        "turns": turns,
        "tokens_in": tin,
        "tokens_out": tout,
        "truncated": any(truncated(t) for t in traces),
        "ok": bool(ok) if ok is not None else not errors,
        "error": errors[0] if errors else None,
        "errors": len(errors),
        "tool_calls": calls,
        "tools": dict(names.most_common(8)),
        "tool_s": None if tool is None else round(tool, 3),
        "model_s": None if model is None else round(model, 3),
        "total_s": None if total is None else round(total, 3),
        "stop": str(traces[-1].get("stop_condition"))[:40] if traces and traces[-1].get("stop_condition") else None,
        "offset": off,
        "bytes": size,
    }


def texts(obj):
    """Every text of an episode a search looks in: messages, tool calls' arguments, errors, the task."""
    for e in obj.get("errors") or []:
        yield _error_text(e)
    task = obj.get("task")
    if isinstance(task, dict) and task.get("data") is not None:
        yield json.dumps(task.get("data"), ensure_ascii=False)[:MAX_TEXT]
    for t in _dicts(obj.get("traces")):
        for n in _dicts(t.get("nodes")):
            msg = n.get("message") if isinstance(n.get("message"), dict) else {}
            yield content_text(msg.get("content"))
            if isinstance(msg.get("reasoning_content"), str):
                yield msg["reasoning_content"]
            for tc in _dicts(msg.get("tool_calls")):
                args = tc.get("arguments")
                yield "%s(%s)" % (tc.get("name") or "", args if isinstance(args, str) else "")
        for e in t.get("errors") or []:
            yield _error_text(e)


def search(obj, pattern):
    """(matches, snippet around the first) of ``pattern`` in the episode's texts; (0, None) when none."""
    count, snippet = 0, None
    for text in texts(obj):
        if not text:
            continue
        for m in pattern.finditer(text):
            count += 1
            if snippet is None:
                a, b = max(0, m.start() - SNIPPET), min(len(text), m.end() + SNIPPET)
                snippet = ("…" if a else "") + text[a:b] + ("…" if b < len(text) else "")
            if count >= 1000:
                return count, snippet
    return count, snippet


CACHE = collections.OrderedDict()  # type: collections.OrderedDict  # path -> Scanned, the least recent first


class Scanned:
    """One file's summaries as far as it was read: every whole record up to ``end``."""

    def __init__(self, ident):
        self.ident = ident  # (device, inode)
        self.end = self.size = self.mtime = 0
        self.tail = b""  # the bytes just before ``end``: an append keeps them, a rewrite does not
        self.items = []  # summaries in file order
        self.seen = self.garbled = 0


def scan(path, step, kind, subset, deadline):
    """(Scanned, partial, cut) of ``path``: read from where the kept summaries end when the file only grew
    since (same file, same bytes before that point), else from its start."""
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino)
    got = CACHE.pop(path, None)
    cut = None
    with open(path, "rb") as f:
        if got is not None and got.ident == ident and st.st_size >= got.end:
            if (st.st_size, st.st_mtime_ns) != (got.size, got.mtime) and got.end:
                f.seek(max(0, got.end - len(got.tail)))
                if f.read(len(got.tail)) != got.tail:
                    got = None
        else:
            got = None
        if got is None:
            got = Scanned(ident)
        if (st.st_size, st.st_mtime_ns) != (got.size, got.mtime):
            STATE["partial"] = False
            for off, raw, size in records(f, got.end):
                got.seen += 1
                if size < 0:  # oversized: its id and env only
                    eid, env = head_of(raw)
                    got.items.append(
                        {
                            "id": eid or "",
                            "step": step,
                            "kind": kind,
                            "subset": subset,
                            "env": env,
                            "too_large": True,
                            "offset": off,
                            "bytes": -size,
                        }
                    )
                else:
                    obj = parse(lean(raw))
                    if obj is None:
                        got.garbled += 1
                    else:
                        got.items.append(summary(obj, step, kind, subset, off, size))
                got.end = off + abs(size)
                if time.monotonic() > deadline:
                    cut = "time"
                    break
            f.seek(max(0, got.end - 64))
            got.tail = f.read(got.end - f.tell())
            if cut is None:  # else the rest is read next time
                got.size, got.mtime = st.st_size, st.st_mtime_ns
    partial = st.st_size > got.end and cut is None
    CACHE[path] = got
    total = sum(len(c.items) for c in CACHE.values())
    while CACHE and total > CACHE_ITEMS:
        total -= len(CACHE.popitem(last=False)[1].items)
    return got, partial, cut


def _passes(a, s):
    return not (
        (a.env and s.get("env") != a.env)
        or (a.errors and not (s.get("error") or s.get("ok") is False))
        or (a.truncated and not s.get("truncated"))
    )


def list_episodes(a):
    step, subset, path = pick(a.run_dir, a.step, a.kind, a.subset)
    pattern = None
    if a.grep:
        try:
            pattern = re.compile(a.grep, re.IGNORECASE if a.ignore_case else 0)
        except (re.error, RecursionError) as exc:
            raise Refused("not a regular expression: %s" % exc) from None
    limit = max(1, min(a.limit, MAX_LIMIT))
    kept = collections.deque(maxlen=limit)  # type: collections.deque
    seen = matched = garbled = 0
    cut = None
    deadline = time.monotonic() + a.timeout
    STATE["partial"] = False
    if pattern is None:  # summaries only: kept per file, parsed lean
        got, partial, cut = scan(path, step, a.kind, subset, deadline)
        seen, garbled = got.seen, got.garbled
        for s in got.items:
            if _passes(a, s):
                matched += 1
                kept.append(s)
        STATE["partial"] = partial
    else:
        with open(path, "rb") as f:
            for off, raw, size in records(f):
                seen += 1
                if size < 0:
                    continue
                obj = parse(raw)
                if obj is None:
                    garbled += 1
                    continue
                s = summary(obj, step, a.kind, subset, off, size)
                if not _passes(a, s):
                    continue
                n, snip = search(obj, pattern)
                if not n:
                    continue
                s["matches"], s["snippet"] = n, snip
                matched += 1
                kept.append(s)
                if time.monotonic() > deadline:
                    cut = "time"
                    break
    for s in kept:
        _out({"ep": s})
    found = steps(a.run_dir)
    listed = sorted(found)[-STEPS_LISTED:]
    _out(
        {
            "done": {
                "step": step,
                "kind": a.kind,
                "subset": subset,
                "path": path,
                "episodes": seen,
                "matched": matched,
                "shown": len(kept),
                "garbled": garbled,
                "partial": STATE["partial"],
                "cut": cut,
                "steps": [{"step": n, "kinds": found[n]} for n in listed],
            }
        }
    )


# ------------------------------------------------------------------ one episode's text, bounded
class Budget:
    """Characters left for the texts of one answer; every cut is marked."""

    def __init__(self, max_text, max_bytes):
        self.max_text, self.left, self.cuts = max_text, max_bytes, 0

    def text(self, s):
        if not isinstance(s, str):
            return s
        keep = min(len(s), self.max_text, max(0, self.left))
        self.left -= keep
        if keep >= len(s):
            return s
        self.cuts += 1
        return s[:keep] + "\n[… cut: %d more characters]" % (len(s) - keep)

    def json(self, v):
        if v is None or v == {} or v == []:
            return None
        return self.text(json.dumps(v, ensure_ascii=False, indent=1, default=str))


def view(obj, step, kind, subset, off, size, budget):
    """An episode as the viewer shows it: its summary, then per trace its turns in order."""
    out = summary(obj, step, kind, subset, off, size)
    task = obj.get("task") if isinstance(obj.get("task"), dict) else {}
    out["task"] = budget.json(task.get("data"))
    out["error_list"] = [budget.text(_error_text(e)) for e in obj.get("errors") or [] if e]
    traces = []
    for t in _dicts(obj.get("traces")):
        turns = []
        nodes = _dicts(t.get("nodes"))
        for n in nodes:
            msg = n.get("message") if isinstance(n.get("message"), dict) else {}
            turn = {
                "role": str(msg.get("role") or "?")[:20],
                "sampled": bool(n.get("sampled")),
                "content": budget.text(content_text(msg.get("content"))),
            }
            if isinstance(msg.get("reasoning_content"), str) and msg["reasoning_content"]:
                turn["reasoning"] = budget.text(msg["reasoning_content"])
            tcs = _dicts(msg.get("tool_calls"))
            if tcs:
                turn["tool_calls"] = [
                    {
                        "id": str(tc.get("id") or "")[:80],
                        "name": str(tc.get("name") or "?")[:80],
                        "arguments": budget.text(
                            tc.get("arguments")
                            if isinstance(tc.get("arguments"), str)
                            else json.dumps(tc.get("arguments"))
                        ),
                    }
                    for tc in tcs
                ]
            if msg.get("tool_call_id"):
                turn["tool_call_id"] = str(msg["tool_call_id"])[:80]
            if msg.get("name"):
                turn["name"] = str(msg["name"])[:80]
            turns.append(turn)
        rewards = t.get("rewards") if isinstance(t.get("rewards"), dict) else {}
        parts = [
            {"name": str(k)[:60], "score": _num(r.get("score")), "weight": _num(r.get("weight", 1.0))}
            for k, r in rewards.items()
            if isinstance(r, dict)
        ]
        metrics = t.get("metrics") if isinstance(t.get("metrics"), dict) else {}
        traces.append(
            {
                "agent": str((t.get("agent") or {}).get("name") or "agent")[:60]
                if isinstance(t.get("agent"), dict)
                else "agent",
                "turns": turns,
                "rewards": parts,
                "metrics": {str(k)[:60]: _num(v) for k, v in list(metrics.items())[:50]},
                "timing": trace_timing(t),
                "stop": t.get("stop_condition") if isinstance(t.get("stop_condition"), str) else None,
                "truncated": truncated(t),
                "errors": [budget.text(_error_text(e)) for e in t.get("errors") or [] if e]
                + [budget.text(_error_text(c["error"])) for c in _dicts(t.get("calls")) if c.get("error")],
                "info": budget.json(t.get("info")),
            }
        )
    out["traces"] = traces
    out["cuts"] = budget.cuts
    return out


def _find(f, eid, offset):
    """(offset, raw, size) of the episode ``eid``: at ``offset`` when it is there, else scanned for."""
    want = eid.encode("utf-8")
    if offset is not None and offset >= 0:
        for off, raw, size in records(f, offset):
            if head_of(raw[:HEAD_BYTES])[0] == eid:
                return off, raw, size
            break
    for off, raw, size in records(f):
        if want in raw[:HEAD_BYTES] and head_of(raw[:HEAD_BYTES])[0] == eid:
            return off, raw, size
    return None


def episode(a):
    step, subset, path = pick(a.run_dir, a.step, a.kind, a.subset)
    STATE["partial"] = False
    with open(path, "rb") as f:
        found = _find(f, a.id, a.offset)
    if found is None:
        raise Refused("no episode %s in step %d (%s/%s)" % (a.id[:80], step, a.kind, subset))
    off, raw, size = found
    if size < 0:
        raise Refused(
            "episode %s is %d MB, more than this viewer reads (%d MB)" % (a.id[:80], -size // 2**20, MAX_LINE // 2**20)
        )
    obj = parse(raw)
    if obj is None:
        raise Refused("episode %s is not a whole JSON record" % a.id[:80])
    _out({"episode": view(obj, step, a.kind, subset, off, size, Budget(a.max_text, a.max_bytes))})


def dump(a):
    step, subset, path = pick(a.run_dir, a.step, a.kind, a.subset)
    budget = Budget(a.max_text, a.max_bytes)
    n = 0
    STATE["partial"] = False
    with open(path, "rb") as f:
        for off, raw, size in records(f):
            obj = parse(raw) if size > 0 else None
            if obj is None:
                continue
            _out({"episode": view(obj, step, a.kind, subset, off, size, budget)})
            n += 1
            if n >= a.limit or budget.left <= 0:
                break
    _out(
        {
            "done": {
                "step": step,
                "kind": a.kind,
                "subset": subset,
                "episodes": n,
                "cuts": budget.cuts,
                "partial": STATE["partial"],
            }
        }
    )


def parser(cls=argparse.ArgumentParser):
    ap = cls(prog="rollouts.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("list", "episode", "dump"):
        p = sub.add_parser(name)
        p.add_argument("run_dir")
        p.add_argument("--step", type=int, default=None)
        p.add_argument("--kind", choices=KINDS, default="train")
        p.add_argument("--subset", choices=SUBSETS, default=None)
        p.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
        if name == "list":
            p.add_argument("--env", default=None)
            p.add_argument("--errors", action="store_true")
            p.add_argument("--truncated", action="store_true")
            p.add_argument("--grep", default=None)
            p.add_argument("--ignore-case", action="store_true")
            p.add_argument("--timeout", type=float, default=20.0)
        else:
            p.add_argument("--max-text", type=int, default=MAX_TEXT)
            p.add_argument("--max-bytes", type=int, default=MAX_BYTES)
        if name == "episode":
            p.add_argument("--id", required=True)
            p.add_argument("--offset", type=int, default=None)
    p = sub.add_parser("serve")
    p.add_argument("--idle", type=float, default=IDLE)
    return ap


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """A bad request is answered, never the end of the server."""

    def error(self, message):
        raise _Usage(message)


def answer(a):
    """Run one parsed request: its exit status (its lines went to ``OUT``)."""
    try:
        {"list": list_episodes, "episode": episode, "dump": dump}[a.cmd](a)
    except Refused as exc:
        _out({"error": str(exc)})
        return 2
    except OSError as exc:
        _out({"error": "%s: %s" % (getattr(exc, "filename", None) or a.run_dir, exc.strerror or exc)})
        return 2
    return 0


def _request(buf, idle):
    """(one request line, the bytes after it), or None at the end of stdin or after ``idle`` s without one."""
    while b"\n" not in buf:
        ready, _, _ = select.select([0], [], [], idle)
        if not ready:
            return None
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > 1024 * 1024 and b"\n" not in buf:
            return None  # not a request of ours
    line, _, rest = buf.partition(b"\n")
    return line, rest


def serve(idle):
    ap = parser(_Parser)
    out = sys.stdout.buffer
    out.write(b'{"serving":1}\n')
    out.flush()
    buf = b""
    while True:
        got = _request(buf, idle)
        if got is None:
            return 0
        line, buf = got
        answered = OUT[0] = io.StringIO()
        try:
            argv = json.loads(line)
            if (
                not isinstance(argv, list)
                or not argv
                or argv[0] not in ("list", "episode", "dump")
                or not all(isinstance(x, str) for x in argv)
            ):
                raise _Usage("not a request")
            rc = answer(ap.parse_args(argv))
        except (_Usage, ValueError) as exc:
            _out({"error": "a request the episode reader does not know: %s" % str(exc)[:200]})
            rc = 2
        body = answered.getvalue().encode("utf-8")
        OUT[0] = None
        out.write(b'{"answer":%d,"rc":%d}\n' % (len(body), rc))
        out.write(body)
        out.flush()


def main(argv=None):
    a = parser().parse_args(argv)
    if a.cmd == "serve":
        return serve(max(1.0, a.idle))
    rc = answer(a)
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
