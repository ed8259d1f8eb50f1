"""The run's progress from its own evidence: console lines, ``metrics.jsonl`` records, ``training.csv``.

Step, loss, reward, tokens/s, MFU, the step time (median of the recent steps' own wall time, so it does
not depend on how often we sample), steps/hr, ETA and dollars at the pod's price. Line formats are
prime-rl's (current and historic); the step and duration parsing is
:mod:`services.monitor.metrics`' own (same regexes, same ``format_time`` reader), this module only reads the
other fields of the same lines. Partial or garbled lines are skipped and counted, never fatal.

Incremental and O(new lines): feed lines as they arrive with the pod's clock, read :meth:`progress`.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from services.models import CheckpointInfo, RunProgress
from services.monitor.metrics import ANSI_RE, SAVE_RE, STEM_RE, STEP_NOW_RE, STEP_OLD_RE, component_of, parse_duration
from services.pod.agent import AGENT_DIR

_NUM = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_LOSS = re.compile(r"\bLoss:? " + _NUM)
_REWARD = re.compile(r"\bReward:? " + _NUM)
_THROUGHPUT = re.compile(r"\bThroughput:? " + _NUM + r" tokens/s")
_MFU = re.compile(r"\bMFU:? " + _NUM + r"\s*%")
_FINISHED = re.compile(r"(RL trainer finished!|SFT trainer finished|Training finished|trainer finished)")
_REWARD_KEY = re.compile(r"^train/agg/(all|effective)/(?:[^/]+/)*reward/mean$")
STEP_WINDOW = 20
LOSS_HISTORY = 24
CSV_COLUMNS = ("step", "loss", "lr", "toks_per_s")  # a training.csv without a header line
# loguru's console stamp: HH:mm:ss, then the level right-aligned to 7 characters
_STAMP = re.compile(r"^(\d{1,2}):(\d{2}):(\d{2})(?:[.,]\d+)?\s+(?:TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL)\b")
DAY = 86400.0


def _stamp(line: str) -> tuple[bool, float] | None:
    """A console line's own time: (True, epoch s) for a JSON-mode line with an absolute timestamp,
    (False, seconds of the day) for a loguru HH:mm:ss stamp, None without one."""
    raw = ANSI_RE.sub("", line).strip()
    stem, sep, rest = raw.partition(": ")
    if sep and STEM_RE.fullmatch(stem):
        raw = rest
    if raw.startswith("{"):
        try:
            obj = json.loads(raw)
        except ValueError:
            return None
        ts = obj.get("timestamp", obj.get("time")) if isinstance(obj, dict) else None
        if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts) and ts > 1e9:
            return True, float(ts)
        if isinstance(ts, str):
            try:
                when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
            except ValueError:
                return None
            if when.tzinfo is not None:
                return True, when.timestamp()
        return None
    m = _STAMP.match(raw)
    if m is None:
        return None
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    return (False, float(h * 3600 + mi * 60 + sec)) if h < 24 and mi < 60 and sec < 61 else None


def time_lines(lines: Sequence[str], mtime: float) -> list[float]:
    """When each line of one log's tail was written, on the pod's clock: by its own stamp, anchored to
    the file's mtime (the last stamped line was written at the mtime, each earlier one the difference
    of their HH:mm:ss before it, a step back over midnight when the clock went backwards by over 12 h, else
    the same moment as the next line: a clock that stepped back is no day between two lines); JSON-mode
    lines with an absolute timestamp by that. A line without a stamp (a traceback) shares the time of
    the stamped line before it; lines after the last stamp were written at the mtime. A file without
    any stamp falls back to its mtime, 1 ms per following line earlier. Never later than the mtime, and
    strictly increasing (0.1 ms apart within one second) so the file's order survives a merge."""
    n = len(lines)
    stamps = [_stamp(x) for x in lines]
    if not any(stamps):
        return [mtime - (n - 1 - i) * 1e-3 for i in range(n)]
    out: list[float | None] = [None] * n
    nxt_t: float | None = None
    nxt_day: float | None = None
    for i in range(n - 1, -1, -1):
        st = stamps[i]
        if st is None:
            continue
        absolute, value = st
        if absolute:
            t = min(value, mtime if nxt_t is None else nxt_t)
            nxt_day = None
        elif nxt_t is None:
            t = mtime
        elif nxt_day is None:  # the next stamped line was absolute: no day clock to compare with
            t = nxt_t
        else:
            back = (nxt_day - value) % DAY
            # a stamp later than the next line's by under 12 h is a clock that stepped back (a restarted run
            # writing older stamps after newer ones, an NTP step), not a day between them: same moment
            t = nxt_t - back if back <= DAY / 2 else nxt_t
        out[i], nxt_t = t, t
        if not absolute:
            nxt_day = value
    first = next(t for t in out if t is not None)
    prev: float | None = None
    last_stamped = max(i for i, t in enumerate(out) if t is not None)
    times: list[float] = []
    for i in range(n):
        known = out[i]
        if known is not None:
            prev = known
        else:
            known = out[i] = mtime if i > last_stamped else (prev if prev is not None else first)
        times.append(min(mtime, known))
    for i in range(n - 2, -1, -1):  # the stamps have whole seconds: lines keep their file order within one
        times[i] = min(times[i], times[i + 1] - 1e-4)
    return times


def time_records(lines: Sequence[str], mtime: float) -> list[float]:
    """When each metrics.jsonl record was written: its own ``time`` (or ``_timestamp``) field relative to
    the last record's (which was written at the file's mtime), so the clock the run used (epoch or a
    run-relative one) does not matter; records without one fall back like :func:`time_lines`."""
    n = len(lines)
    own: list[float | None] = []
    for line in lines:
        value = None
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            v = obj.get("time", obj.get("_timestamp"))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                value = float(v)
        own.append(value)
    known = [v for v in own if v is not None]
    if not known:
        return [mtime - (n - 1 - i) * 1e-3 for i in range(n)]
    last = known[-1]
    out, prev = [], None
    for i, v in enumerate(own):
        if v is not None:
            prev = mtime - max(0.0, last - v)
        out.append(prev if prev is not None else mtime - (n - 1 - i) * 1e-3)
    return [min(mtime, t) for t in out]


# One look at a run dir, run on the pod with its python3 and the run dir as argv[1] (stdlib only): the last
# 300 lines and the mtime of every log, metrics.jsonl and training.csv, max_steps from the resolved configs,
# the pod's clock and uptime. `status` judges it; the monitor fills a pod's history with it at connect (a run dir
# on this machine: the same module's function, imported).
TAIL_SCRIPT = (AGENT_DIR / "tails.py").read_text()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def split_line(line: str | bytes) -> tuple[str | None, str]:
    """``"<stem>: <line>"`` (the probe's form) -> (component, text without ANSI colours; JSON-mode
    lines give their message). Component is "trainer", "orchestrator" or None."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    text = ANSI_RE.sub("", line).strip()
    component = None
    stem, sep, rest = text.partition(": ")
    if sep and STEM_RE.fullmatch(stem):
        component, text = component_of(stem) or stem.lower(), rest
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            return component, text
        if isinstance(obj, dict):
            text = str(obj.get("message", ""))
    return component, text


class RunTracker:
    """One run's progress, fed incrementally. ``at`` is the pod's clock when a line was seen."""

    def __init__(self, *, max_steps: int | None = None, price_per_hr: float | None = None) -> None:
        self.max_steps = max_steps
        self.price_per_hr = price_per_hr
        self.step: int | None = None
        self.trainer_step: int | None = None
        self.last_step_at: float | None = None  # when the latest NEW step was seen (the trainer's, once known)
        self.step_line_at: float | None = None  # when any step line was seen (either component)
        self.step_lines: dict[str, float] = {}  # component -> when its latest step line was seen
        self.billed_since: float | None = None  # the pod's billing start (rental or pod start), pod clock
        self.billed_basis: str | None = None  # what it is: "since rented", "since the pod started"
        self.now: float | None = None  # the pod's clock at the latest sample (the bill grows with it)
        self.loss: float | None = None
        self.reward: float | None = None
        self.tokens_per_s: float | None = None
        self.mfu: float | None = None
        self.finished = False
        self.saving_step: int | None = None  # "Saving checkpoint at step N" seen, step N+1 not yet
        self.ckpt_writing = False
        self.source = "none"
        self.skipped = 0
        self.step_times: deque[float] = deque(maxlen=STEP_WINDOW)
        self.orch_step_times: deque[float] = deque(maxlen=STEP_WINDOW)
        self.losses: deque[float] = deque(maxlen=LOSS_HISTORY)
        self._timed: set[tuple[str, int]] = set()
        self._csv_cols: tuple[str, ...] = CSV_COLUMNS
        self._view: RunProgress | None = None

    # ------------------------------------------------------------------ feeding
    def _advance(self, step: int, at: float, component: str | None) -> bool:
        """Record step ``step``; True when it is new progress. Once the trainer's steps are known they are
        the run's progress: the orchestrator prepares batches ahead of it, and keeps logging while the
        trainer hangs, so its steps alone say nothing about training."""
        self.step_line_at = at if self.step_line_at is None else max(self.step_line_at, at)
        who = component or "trainer"
        self.step_lines[who] = max(self.step_lines.get(who, at), at)
        if component == "trainer":
            new = self.trainer_step is None or step > self.trainer_step
            self.trainer_step = max(self.trainer_step or 0, step)
        else:
            new = self.trainer_step is None and (self.step is None or step > self.step)
        self.step = step if self.step is None else max(self.step, step)
        if new:
            self.last_step_at = at
            self.finished = False
            if self.saving_step is not None and step > self.saving_step:
                self.saving_step = None
        return new

    def _time(self, component: str, step: int, seconds: float | None) -> None:
        """Count each (component, step) once: the same line may come from two log files."""
        if (component, step) in self._timed:
            return
        self._timed.add((component, step))
        if len(self._timed) > 4 * STEP_WINDOW:
            self._timed = {k for k in self._timed if k[1] > step - STEP_WINDOW}
        if seconds is None or seconds <= 0 or not math.isfinite(seconds):
            return
        # the trainer's step is the run's step; the orchestrator's (which overlaps it) is the fallback
        (self.step_times if component == "trainer" else self.orch_step_times).append(seconds)

    def feed_log(self, line: str | bytes, at: float) -> str | None:
        """One console line. Returns what it was: "step" (new progress), "save", "finished" or None."""
        self._view = None
        component, text = split_line(line)
        if not text:
            return None
        m = STEP_OLD_RE.search(text)
        seconds = float(m.group(2)) if m else None
        if m is None and (m := STEP_NOW_RE.search(text)) is not None:
            seconds = parse_duration(m.group(2))
            if seconds is None:
                self.skipped += 1
                return None
        if m is not None:
            step = int(m.group(1))
            who = (
                component
                if component in ("trainer", "orchestrator")
                else ("orchestrator" if "Reward" in text else "trainer")
            )
            if self.source == "none":
                self.source = "console"
            first = (who, step) not in self._timed
            self._time(who, step, seconds)
            if first:
                for regex, attr in ((_LOSS, "loss"), (_REWARD, "reward"), (_THROUGHPUT, "tokens_per_s"), (_MFU, "mfu")):
                    if (v := regex.search(text)) is not None:
                        setattr(self, attr, float(v.group(1)))
                        if attr == "loss" and who == "trainer":
                            self.losses.append(self.loss)  # type: ignore[arg-type]
            return "step" if self._advance(step, at, who) else None
        if (m := SAVE_RE.search(text)) is not None:
            self.saving_step = int(m.group(1))
            return "save"
        if "Writing final checkpoint" in text:
            self.saving_step = self.step or 0
            return "save"
        if _FINISHED.search(text):
            self.finished = True
            self.saving_step = None
            return "finished"
        return None

    def feed_metrics(self, line: str | bytes, at: float) -> bool:
        """One metrics.jsonl record; True when it carried a new step."""
        self._view = None
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not line.strip():
            return False
        try:
            obj = json.loads(line)
        except ValueError:
            self.skipped += 1
            return False
        if isinstance(obj, dict) and obj.get("source") == "training.csv":  # the probe's training.csv rows
            return self.feed_csv_record(obj, at)
        step = obj.get("step") if isinstance(obj, dict) else None
        if isinstance(step, bool) or not isinstance(step, (int, float)):
            if not isinstance(obj, dict):
                self.skipped += 1
            return False  # periodic records (no step) carry no progress

        def num(key: str) -> float | None:
            v = obj.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

        self.source = "metrics.jsonl"
        trainer = any(k.startswith(("perf/", "loss/", "optim/")) for k in obj)
        if (loss := num("loss/mean")) is not None:
            self.loss = loss
            self.losses.append(loss)
        for key, attr in (("perf/throughput", "tokens_per_s"), ("perf/mfu", "mfu")):
            if (v := num(key)) is not None:
                setattr(self, attr, v)
        for key in obj:
            if _REWARD_KEY.match(key) and (v := num(key)) is not None:
                self.reward = v
                break
        if trainer:
            self._time("trainer", int(step), num("time/step"))
        return self._advance(int(step), at, "trainer" if trainer else "orchestrator")

    def feed_csv(self, line: str, at: float) -> bool:
        """One line of a runbook-style ``training.csv`` (``step,loss,lr,toks_per_s``). A header line names
        the columns (any order); without one that order is assumed. Garbled lines are skipped."""
        self._view = None
        parts = [p.strip() for p in line.strip().split(",")]
        if not parts or parts == [""]:
            return False
        if "step" in parts and not any(_is_number(p) for p in parts):
            self._csv_cols = tuple(parts)
            return False
        cols = self._csv_cols
        if len(parts) > len(cols) or len(parts) < 2:  # a short row (trailing fields left out) is fine
            self.skipped += 1
            return False
        record: dict[str, object] = dict(zip(cols, parts))
        return self.feed_csv_record(record, at)

    def feed_csv_record(self, record: dict, at: float) -> bool:
        """One training.csv row as a mapping (the probe sends them so, keyed by the file's header)."""
        self._view = None

        def num(*keys: str) -> float | None:
            for key in keys:
                v = record.get(key)
                try:
                    f = float(v) if v is not None and not isinstance(v, bool) else None
                except (TypeError, ValueError):
                    f = None
                if f is not None and math.isfinite(f):
                    return f
            return None

        step = num("step")
        if step is None or step < 0 or step != int(step):
            self.skipped += 1
            return False
        self.source = "training.csv"
        if (loss := num("loss", "train_loss", "loss/mean")) is not None:
            self.loss = loss
            self.losses.append(loss)
        if (toks := num("toks_per_s", "tokens_per_s", "throughput", "perf/throughput")) is not None:
            self.tokens_per_s = toks
        istep = int(step)
        if self.step is not None and self.last_step_at is not None and istep > self.step:
            gap = (at - self.last_step_at) / (istep - self.step)
            if gap > 0:
                self.step_times.append(gap)
        return self._advance(istep, at, "trainer")

    def feed_ckpts(self, ckpts: Iterable[CheckpointInfo], at: float, stale_after: float) -> None:
        """A checkpoint dir without its completion markers, touched within ``stale_after`` s, is being
        written (an abandoned half-written one is not)."""
        before = self.checkpointing
        writing = False
        for c in ckpts:
            if not c.complete and (c.mtime is None or at - c.mtime <= stale_after):
                writing = True
            if self.saving_step is not None and c.complete and c.step >= self.saving_step:
                self.saving_step = None
        self.ckpt_writing = writing
        if self.checkpointing != before:
            self._view = None

    # ------------------------------------------------------------------ reading
    @property
    def checkpointing(self) -> bool:
        return self.ckpt_writing or self.saving_step is not None

    @property
    def step_time(self) -> float | None:
        times = self.step_times or self.orch_step_times
        return statistics.median(times) if times else None

    def billed(self) -> float | None:
        """$ the pod has cost since its billing start (rental / pod start), None when not known."""
        if self.price_per_hr is None or self.billed_since is None or self.now is None:
            return None
        return self.price_per_hr * max(0.0, self.now - self.billed_since) / 3600.0

    def progress(self) -> RunProgress:
        """An immutable view, rebuilt only after new data (and when the bill moved by a cent)."""
        billed = self.billed()
        if self._view is not None:
            if billed is not None and round(billed, 2) != round(self._view.cost_so_far or 0.0, 2):
                self._view = replace(self._view, cost_so_far=billed)
            return self._view
        step = self.trainer_step if self.trainer_step is not None else self.step
        step_time = self.step_time
        per_hr = 3600.0 / step_time if step_time else None
        eta = cost_so_far = cost_left = basis = None
        if billed is not None:
            cost_so_far, basis = billed, self.billed_basis
        if step_time and step is not None:
            if self.max_steps:
                eta = max(0, self.max_steps - step) * step_time
            if self.price_per_hr is not None:
                if cost_so_far is None:  # no billing start known: the run's own elapsed time, estimated
                    cost_so_far, basis = self.price_per_hr * step * step_time / 3600.0, "est. from the run's steps"
                if eta is not None:
                    cost_left = self.price_per_hr * eta / 3600.0
        self._view = RunProgress(
            step=step,
            max_steps=self.max_steps,
            loss=self.loss,
            reward=self.reward,
            tokens_per_s=self.tokens_per_s,
            mfu=self.mfu,
            step_time_s=step_time,
            steps_per_hr=per_hr,
            eta_s=eta,
            cost_so_far=cost_so_far,
            cost_to_finish=cost_left,
            last_step_at=self.last_step_at,
            finished=self.finished,
            checkpointing=self.checkpointing,
            loss_history=tuple(self.losses),
            source=self.source,
            cost_basis=basis,
        )
        return self._view
