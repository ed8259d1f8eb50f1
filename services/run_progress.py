"""The run's progress from its own evidence: console lines, ``metrics.jsonl`` records, ``training.csv``.

Step, loss, reward, tokens/s, MFU, the step time (median of the recent steps' own wall time, so it does
not depend on how often we sample), steps/hr, ETA and dollars at the pod's price. Line formats are
prime-rl's (../shared/research/prime-rl.md §7.3, current and historic); the step and duration parsing is
:mod:`services.metrics`' own (same regexes, same ``format_time`` reader), this module only reads the
other fields of the same lines. Partial or garbled lines are skipped and counted, never fatal.

Incremental and O(new lines): feed lines as they arrive with the pod's clock, read :meth:`progress`.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import deque
from typing import Iterable

from services.metrics import ANSI_RE, SAVE_RE, STEP_NOW_RE, STEP_OLD_RE, STEM_RE, component_of, parse_duration
from services.models import CheckpointInfo, RunProgress

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
        self.last_step_at: float | None = None  # when the latest NEW step was seen
        self.step_line_at: float | None = None  # when any step line was seen (either component)
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
        """Record step ``step``; True when it is new progress."""
        self.step_line_at = at if self.step_line_at is None else max(self.step_line_at, at)
        if component == "trainer":
            self.trainer_step = max(self.trainer_step or 0, step)
        new = self.step is None or step > self.step
        if new:
            self.step = step
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
            who = component if component in ("trainer", "orchestrator") else (
                "orchestrator" if "Reward" in text else "trainer")
            if self.source == "none":
                self.source = "console"
            first = (who, step) not in self._timed
            self._time(who, step, seconds)
            if first:
                for regex, attr in ((_LOSS, "loss"), (_REWARD, "reward"), (_THROUGHPUT, "tokens_per_s"),
                                    (_MFU, "mfu")):
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

    def progress(self) -> RunProgress:
        """An immutable view, rebuilt only after new data."""
        if self._view is not None:
            return self._view
        step = self.trainer_step if self.trainer_step is not None else self.step
        step_time = self.step_time
        per_hr = 3600.0 / step_time if step_time else None
        eta = cost_so_far = cost_left = None
        if step_time and step is not None:
            if self.max_steps:
                eta = max(0, self.max_steps - step) * step_time
            if self.price_per_hr is not None:
                cost_so_far = self.price_per_hr * step * step_time / 3600.0
                if eta is not None:
                    cost_left = self.price_per_hr * eta / 3600.0
        self._view = RunProgress(
            step=step, max_steps=self.max_steps, loss=self.loss, reward=self.reward,
            tokens_per_s=self.tokens_per_s, mfu=self.mfu, step_time_s=step_time, steps_per_hr=per_hr,
            eta_s=eta, cost_so_far=cost_so_far, cost_to_finish=cost_left, last_step_at=self.last_step_at,
            finished=self.finished, checkpointing=self.checkpointing, loss_history=tuple(self.losses),
            source=self.source,
        )
        return self._view
