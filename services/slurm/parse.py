"""Parsers for what Slurm's commands print, pure and tolerant: a malformed line or record is skipped, never
fatal, and a document that cannot be read at all raises :class:`SlurmOutputError` (never anything else).

Two generations of JSON are read: Slurm 21.08-22.05 (``"job_state": "RUNNING"``, ``"time_limit": 60``) and
23.02+ (``"job_state": ["RUNNING"]``, ``"time_limit": {"set": true, "infinite": false, "number": 60}``).
Text output is asked for with ``TZ=UTC SLURM_TIME_FORMAT=standard`` so its times read the same everywhere.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

from services.slurm.models import JOB_STATES, UNKNOWN, SlurmJob, SlurmNode, SlurmOutputError

# squeue's text fallback: the name last, because it alone may hold the separator
SQUEUE_FORMAT = "%i|%T|%r|%M|%l|%V|%S|%N|%u|%j"
# sacct's text fallback (``--parsable2`` separates with "|"), the name last for the same reason
SACCT_FIELDS = "JobID,State,Reason,NodeList,ElapsedRaw,TimelimitRaw,Submit,Start,End,User,JobName"

_MAX_EPOCH = 253402300799.0  # 9999-12-31: anything later is garbage, not a time
_MAX_SECONDS = 10**10
_STATE_WORD = re.compile(r"[A-Z][A-Z_]*")
# every number read from text is bounded in digits: Python's int() refuses a string of more than 4,300, and
# no real figure needs more than these; a longer one reads as unknown
_DURATION = re.compile(r"(?:([0-9]{1,12})-)?(?:([0-9]{1,12}):)?([0-9]{1,12}):([0-9]{1,12})(?:\.[0-9]{1,9})?")
_MAX_NUMBER_CHARS = 40


# ------------------------------------------------------------------------------------------- values


def number(value: Any) -> float | None:
    """A number from JSON: plain, a digit string, or Slurm 23.02+'s ``{"set", "infinite", "number"}``;
    ``None`` when unset, infinite or not a finite number."""
    if isinstance(value, dict):
        if value.get("infinite") is True or value.get("set") is False:
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, str) and len(value) > _MAX_NUMBER_CHARS:
        return None
    try:
        value = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def epoch(value: Any) -> float | None:
    """A time from JSON in epoch seconds; 0 and absurd values mean "not known"."""
    t = number(value)
    return t if t is not None and 0 < t <= _MAX_EPOCH else None


def seconds(value: Any, scale: int = 1) -> int | None:
    """A non-negative duration from JSON (``scale`` 60 for minutes)."""
    n = number(value)
    if n is None or n < 0 or n * scale > _MAX_SECONDS:
        return None
    return int(n * scale)


def duration(text: str) -> int | None:
    """Seconds in Slurm's ``[days-][hours:]minutes:seconds``; ``None`` for UNLIMITED, N/A, INVALID..."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        return None
    days, hours, minutes, secs = (int(g) if g else 0 for g in m.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    return total if total <= _MAX_SECONDS else None


def timestamp(text: str) -> float | None:
    """Epoch seconds of a ``YYYY-MM-DDTHH:MM:SS`` time printed in UTC; ``None`` for N/A, Unknown, None..."""
    try:
        t = datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    return t if 0 < t <= _MAX_EPOCH else None


def state(value: Any) -> str:
    """The job's state as one upper-case word: from a string (``"CANCELLED by 1000"``), a list
    (``["RUNNING", "COMPLETING"]``: a job still completing shows as COMPLETING) or garbage (UNKNOWN)."""
    words: list[str] = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            words += _STATE_WORD.findall(item.upper().split(" BY ", 1)[0])[:1]
    if "COMPLETING" in words:
        return "COMPLETING"
    known = [w for w in words if w in JOB_STATES]
    return known[0] if known else (words[0] if words else UNKNOWN)


def text(value: Any, limit: int = 1000) -> str:
    """A string field: ``None``/"None"/"(null)" → "", anything else as text, cut to ``limit``."""
    if value is None or isinstance(value, (dict, list)):
        return ""
    s = str(value).strip()
    return "" if s in ("None", "(null)", "N/A") else s[:limit]


def job_id(value: Any) -> str:
    """A job id as text ("123", "123_4" for an array task, "123+1" for a het component); "" if none."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    s = text(value, 64)
    return s if s and re.fullmatch(r"[0-9][0-9_+\[\]\-%,]*", s) else ""


def nodelist_parts(nodelist: str) -> list[str]:
    """Slurm's compressed node list split at the commas outside brackets, in order (``gpu[01-02],cpu7`` →
    ``["gpu[01-02]", "cpu7"]``); a part with ``[`` needs ``scontrol show hostnames``."""
    parts: list[str] = []
    depth, start = 0, 0
    nodelist = nodelist.strip()
    for i, ch in enumerate(nodelist + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            part = nodelist[start:i].strip()
            start = i + 1
            if part and not part.startswith("(") and not any(c.isspace() for c in part):  # "(null)"
                parts.append(part)
    return parts


def hostnames(out: str) -> tuple[str, ...]:
    """``scontrol show hostnames``: one host name per line."""
    return tuple(line.strip() for line in out.splitlines() if line.strip() and " " not in line.strip())


def _elapsed(job_state: str, start: float | None, end: float | None, now: float | None) -> int | None:
    if start is None or job_state == "PENDING":
        return None
    stop = end if end is not None and job_state not in ("RUNNING", "COMPLETING", "SUSPENDED") else now
    if stop is None or not math.isfinite(stop - start):
        return None
    return max(0, min(int(stop - start), _MAX_SECONDS))


def _load(out: str, what: str) -> dict:
    try:
        doc = json.loads(out)
    except (ValueError, RecursionError):
        raise SlurmOutputError(f"{what} printed something that is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmOutputError(f"{what} printed JSON without a list of jobs")
    errors = doc.get("errors")
    if isinstance(errors, list) and errors and not doc["jobs"]:
        first = errors[0]
        reason = text(first.get("error") or first.get("description")) if isinstance(first, dict) else text(first)
        raise SlurmOutputError(f"{what} reported an error: {reason or 'no reason given'}")
    return doc


# ------------------------------------------------------------------------------------------- squeue


def squeue_json(out: str, now: float | None = None) -> list[SlurmJob]:
    """``squeue --json``. ``now`` (the login node's clock) gives a running job's elapsed time."""
    jobs = []
    for raw in _load(out, "squeue --json")["jobs"]:
        if not isinstance(raw, dict) or not (jid := job_id(raw.get("job_id"))):
            continue
        array_task = number(raw.get("array_task_id"))
        array_job = job_id(number(raw.get("array_job_id")))  # 23.02+ wraps it in {"set", "number"}
        if array_task is not None and array_job and array_job != "0":
            jid = f"{array_job}_{int(array_task)}"
        st = state(raw.get("job_state"))
        start, end = epoch(raw.get("start_time")), epoch(raw.get("end_time"))
        jobs.append(
            SlurmJob(
                id=jid,
                name=text(raw.get("name")),
                state=st,
                reason=text(raw.get("state_reason")),
                nodelist=text(raw.get("nodes")),
                elapsed_s=_elapsed(st, start, end, now),
                time_limit_s=seconds(raw.get("time_limit"), 60),
                submit_time=epoch(raw.get("submit_time")),
                start_time=start if st != "PENDING" else None,
                end_time=end if st not in ("PENDING", "RUNNING") else None,
                user=text(raw.get("user_name"), 64),
            )
        )
    return jobs


def squeue_format(out: str) -> list[SlurmJob]:
    """``squeue --noheader --format`` with :data:`SQUEUE_FORMAT`; lines that do not fit are skipped."""
    jobs = []
    for line in out.splitlines():
        parts = line.split("|", 9)
        if len(parts) != 10 or not (jid := job_id(parts[0])):
            continue
        _, st, reason, used, limit, submit, start, nodes, user, name = parts
        st = state(st)
        jobs.append(
            SlurmJob(
                id=jid,
                name=text(name),
                state=st,
                reason=text(reason),
                nodelist=text(nodes),
                elapsed_s=duration(used) if st != "PENDING" else None,
                time_limit_s=duration(limit),
                submit_time=timestamp(submit),
                start_time=timestamp(start) if st != "PENDING" else None,
                user=text(user, 64),
            )
        )
    return jobs


# ------------------------------------------------------------------------------------------- sacct


def sacct_json(out: str) -> list[SlurmJob]:
    """``sacct --json``: jobs from the accounting database (finished ones too)."""
    jobs = []
    for raw in _load(out, "sacct --json")["jobs"]:
        if not isinstance(raw, dict) or not (jid := job_id(raw.get("job_id"))):
            continue
        st_raw = raw_st_raw if isinstance(raw_st_raw := raw.get("state"), dict) else {}
        times = raw_times if isinstance(raw_times := raw.get("time"), dict) else {}
        array = raw_array if isinstance(raw_array := raw.get("array"), dict) else {}
        array_task = number(array.get("task_id"))
        if array_task is not None and job_id(array.get("job_id")) not in ("", "0"):
            jid = f"{job_id(array.get('job_id'))}_{int(array_task)}"
        nodes = raw.get("nodes")
        user = raw.get("user")
        jobs.append(
            SlurmJob(
                id=jid,
                name=text(raw.get("name")),
                state=state(st_raw.get("current")),
                reason=text(st_raw.get("reason")),
                nodelist=text(nodes if isinstance(nodes, str) else ""),
                elapsed_s=seconds(times.get("elapsed")),
                time_limit_s=seconds(times.get("limit"), 60),
                submit_time=epoch(times.get("submission")),
                start_time=epoch(times.get("start")),
                end_time=epoch(times.get("end")),
                user=text(user if isinstance(user, str) else "", 64),
            )
        )
    return jobs


def sacct_parsable(out: str) -> list[SlurmJob]:
    """``sacct --parsable2 --noheader --format`` with :data:`SACCT_FIELDS`; job steps (``123.batch``) and
    lines that do not fit are skipped."""
    jobs = []
    for line in out.splitlines():
        parts = line.split("|", 10)
        if len(parts) != 11 or not (jid := job_id(parts[0])):
            continue
        _, st, reason, nodes, elapsed, limit, submit, start, end, user, name = parts
        jobs.append(
            SlurmJob(
                id=jid,
                name=text(name),
                state=state(st),
                reason=text(reason),
                nodelist=text(nodes),
                elapsed_s=seconds(elapsed),
                time_limit_s=seconds(limit, 60),
                submit_time=timestamp(submit),
                start_time=timestamp(start),
                end_time=timestamp(end),
                user=text(user, 64),
            )
        )
    return jobs


# ------------------------------------------------------------------------------------------- scontrol

_KEY = re.compile(r"([A-Za-z][A-Za-z0-9_/:]*)=(.*)")


def scontrol_records(
    out: str, first_key: str, name_key: str | None = None, name_ends: str = "", head_keys: tuple[str, ...] = ()
) -> list[dict[str, str]]:
    """``scontrol show job|node`` (``-o`` or not) as one dict per record; a record starts at a line whose
    first word is ``first_key=``. A value with spaces (a reason) runs until the next ``Key=``.

    The record's owner writes some of it, and ``-o`` prints every record on one line, so text that looks like
    ``Key=`` must not become a field: the record's ``first_key`` is its first word's, never a later one's;
    ``name_key``'s value (the job's name, which may hold spaces and ``Key=``) runs to the word
    ``name_ends=...`` or the line's end, all of it text; ``head_keys`` (the ids printed before the name)
    count only there."""
    records: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in out.splitlines():
        words = line.split()
        if words and words[0].startswith(first_key + "="):
            current = {}
            records.append(current)
            past_name = name_key is None
        if current is None:
            continue
        key, in_name = None, False
        for word in words:
            m = _KEY.fullmatch(word)
            if in_name and not (m and m.group(1) == name_ends):
                m = None
            elif m and ((m.group(1) == first_key and first_key in current) or (past_name and m.group(1) in head_keys)):
                m = None
            if m:
                key = m.group(1)
                current[key] = m.group(2)
                in_name = key == name_key
                past_name = past_name or in_name
            elif key is not None and len(current[key]) < 4000:
                current[key] += " " + word
    return records


def scontrol_jobs(out: str) -> list[SlurmJob]:
    """``scontrol show job -o`` (times printed in UTC): what the controller still remembers of recent jobs,
    when there is no accounting database."""
    jobs = []
    for rec in scontrol_records(
        out, "JobId", "JobName", "UserId", ("ArrayJobId", "ArrayTaskId", "HetJobId", "HetJobOffset")
    ):
        if not (jid := job_id(rec.get("JobId"))):
            continue
        array_job, array_task = job_id(rec.get("ArrayJobId")), job_id(rec.get("ArrayTaskId"))
        if array_job and array_task:
            jid = f"{array_job}_{array_task}"
        st = state(rec.get("JobState"))
        user = text(rec.get("UserId")).split("(", 1)[0]
        jobs.append(
            SlurmJob(
                id=jid,
                name=text(rec.get("JobName")),
                state=st,
                reason=text(rec.get("Reason")),
                nodelist=text(rec.get("NodeList")),
                elapsed_s=duration(rec.get("RunTime", "")) if st != "PENDING" else None,
                time_limit_s=duration(rec.get("TimeLimit", "")),
                submit_time=timestamp(rec.get("SubmitTime", "")),
                start_time=timestamp(rec.get("StartTime", "")) if st != "PENDING" else None,
                end_time=timestamp(rec.get("EndTime", "")) if st not in ("PENDING", "RUNNING") else None,
                user=user[:64],
            )
        )
    return jobs


def scontrol_nodes(out: str) -> list[SlurmNode]:
    """``scontrol show node -o``."""
    nodes = []
    for rec in scontrol_records(out, "NodeName"):
        name = text(rec.get("NodeName"), 256)
        if not name or any(ch.isspace() for ch in name):
            continue
        st = "+".join(_STATE_WORD.findall(text(rec.get("State")).upper())) or UNKNOWN
        nodes.append(SlurmNode(name=name, state=st, reason=text(rec.get("Reason"))))
    return nodes
