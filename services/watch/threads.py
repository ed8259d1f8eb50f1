"""Alerts → threads of messages: de-duplicated, rate-limited, resolved only after they stayed clear (pure).

The monitor re-evaluates every pod's alerts on every sample; a push service must not hear about each
evaluation. Per pod and rule there is at most one open :class:`Thread`: it *opens* when the rule first
fires, *escalates* when its severity rises, and *resolves* once the rule has stayed clear for
``resolve_after_s``; a rule that clears and comes back within that time stays the same thread (a flap,
counted, nothing sent). At most one "opened" message goes out per pod and rule per ``min_interval_s``:
a thread opened sooner is held (recorded, not pushed) and, if it resolves while held, nothing is pushed
at all — a "resolved" is only ever sent for a thread whose "opened" was. So a flapping rule sends at most
two messages (plus at most two escalations) per ``min_interval_s``, never fifty.

Below ``min_severity`` nothing is pushed; in ``quiet_hours`` only critical threads open out loud (their
"resolved" follows them). Times are this machine's clock (seconds since the epoch), passed in.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from services.models import Alert, Severity
from services.text import plain
from services.units import whole_duration

KINDS = {"opened": "OPENED", "escalated": "ESCALATED", "resolved": "RESOLVED"}
HISTORY = 200  # resolved threads kept (in memory and in the state file)


@dataclass(frozen=True)
class QuietHours:
    """A daily window of local time, ``"22:00-07:00"`` (may wrap past midnight)."""

    start: int  # minutes after midnight
    end: int

    @classmethod
    def parse(cls, text: str) -> QuietHours:
        m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*", text or "")
        if m is None:
            raise ValueError(f'quiet_hours must look like "22:00-07:00", not {text!r}')
        h1, m1, h2, m2 = map(int, m.groups())
        if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
            raise ValueError(f"quiet_hours has a time that does not exist: {text!r}")
        return cls(h1 * 60 + m1, h2 * 60 + m2)

    def contains(self, now: float) -> bool:
        t = time.localtime(now)
        minute = t.tm_hour * 60 + t.tm_min
        if self.start <= self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def __str__(self) -> str:
        return f"{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d}"


@dataclass(frozen=True)
class Policy:
    min_severity: Severity = Severity.WARNING
    min_interval_s: float = 1800.0  # at most one "opened" per pod and rule per this long
    resolve_after_s: float = 120.0  # clear this long before "resolved"
    quiet: QuietHours | None = None

    def why_not(self, severity: Severity, now: float) -> str:
        """Why a thread of this severity is not pushed now ("" when it is)."""
        if severity.rank < self.min_severity.rank:
            return f"below min_severity {self.min_severity.value}"
        if self.quiet is not None and severity is not Severity.CRITICAL and self.quiet.contains(now):
            return f"quiet hours {self.quiet}"
        return ""


@dataclass
class Thread:
    """One alert of one pod, from its first firing to its resolution."""

    tid: str
    pod: str
    rule: str
    title: str
    severity: str
    opened: float
    message: str
    step: int | None = None  # the run's step when it opened
    run_dir: str | None = None
    clear_since: float | None = None
    resolved: float | None = None  # when it cleared for good
    notified: bool = False  # its "opened" was pushed
    held: str = ""  # why its "opened" was not pushed (yet)
    messages: int = 0  # messages pushed for it
    flaps: int = 0  # times it cleared and came back before resolving

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Thread | None:
        """A thread from the state file; anything malformed is None (the state file is only our memory)."""
        if not isinstance(data, dict):
            return None

        def number(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e11

        try:
            th = cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
            Severity(th.severity)
        except (TypeError, ValueError, KeyError):
            return None
        texts = (th.tid, th.pod, th.rule, th.title, th.message, th.held)
        if (
            not all(isinstance(t, str) for t in texts)
            or not number(th.opened)
            or not all(v is None or number(v) for v in (th.clear_since, th.resolved))
        ):
            return None
        if not (th.step is None or (isinstance(th.step, int) and not isinstance(th.step, bool))):
            th.step = None
        if not (th.run_dir is None or isinstance(th.run_dir, str)):
            th.run_dir = None
        th.notified = th.notified is True
        th.messages = th.messages if isinstance(th.messages, int) and not isinstance(th.messages, bool) else 0
        th.flaps = th.flaps if isinstance(th.flaps, int) and not isinstance(th.flaps, bool) else 0
        return th


@dataclass(frozen=True)
class Message:
    kind: str  # opened | escalated | resolved | deadline | test
    title: str
    body: str
    severity: Severity
    tid: str = ""
    pod: str = ""
    rule: str = ""


@dataclass(frozen=True)
class Event:
    """What happened to a thread; ``message`` is set when it is to be pushed."""

    kind: str
    thread: Thread  # a copy, as it was then
    message: Message | None
    held: str = ""


def split_fix(message: str) -> tuple[str, str]:
    """An alert's message → (evidence, the one-line fix). Log alerts read "... in the logs: LINE — ADVICE";
    the rules' messages end with what to do (a trailing "(W&B ...)" note is context, not the fix)."""
    text = " ".join(message.split())
    note = ""
    m = re.search(r"(?<=\.)\s*(\([^()]*\))$", text)
    if m:
        text, note = text[: m.start()].rstrip(), m.group(1)
    if " — " in text:
        evidence, fix = text.rsplit(" — ", 1)
    else:
        parts = re.split(r"(?<=[.!?])\s+(?=[A-Z`])", text)
        evidence, fix = (" ".join(parts[:-1]), parts[-1]) if len(parts) > 1 else (text, "")
    return (f"{evidence} {note}".strip(), fix.strip() or "open the pod in the TUI for the details")


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def compose(kind: str, th: Thread, now: float) -> Message:
    """The text of one message of a thread: pod, run, step, the evidence and the fix; the thread id ties
    its messages together in any chat or inbox."""
    sev = Severity(th.severity)
    title = f"[{KINDS[kind]}] {th.pod}: {th.title}"
    step = "none yet" if th.step is None else str(th.step)
    where = f"pod {th.pod} · run {th.run_dir or 'unknown'} · step {step}"
    if kind == "resolved":
        cleared = th.resolved if th.resolved is not None else now
        body = [
            f"Resolved: {th.title} ({th.rule}) on {th.pod} — clear since {_clock(cleared)}, "
            f"{whole_duration(cleared - th.opened)} after it opened.",
            where,
        ]
        sev = Severity.INFO
    else:
        evidence, fix = split_fix(th.message)
        head = f"{th.severity.upper()} ({th.rule}) · {where}"
        body = [head, evidence, f"Fix: {fix}"]
        if kind == "escalated":
            body.insert(0, f"Now {th.severity}.")
        if th.flaps:
            body.append(f"It cleared and came back {th.flaps} time(s).")
    body.append(f"thread {th.tid} · opened {_clock(th.opened)}")
    # the alert's title and message carry log lines and pod names: no escape sequence reaches a chat or a mail
    return Message(kind, plain(title, oneline=True), plain("\n".join(body)), sev, th.tid, th.pod, th.rule)


def thread_id(pod: str, rule: str, opened: float) -> str:
    return "#" + hashlib.sha1(f"{pod}\0{rule}\0{opened!r}".encode()).hexdigest()[:6]


class AlertBook:
    """The open threads of every pod, the recently resolved ones, and what was pushed when."""

    def __init__(self, policy: Policy = Policy()) -> None:
        self.policy = policy
        self.open: dict[tuple[str, str], Thread] = {}
        self.history: deque[Thread] = deque(maxlen=HISTORY)
        self.last_open_push: dict[tuple[str, str], float] = {}
        self.opened_total: Counter[tuple[str, str]] = Counter()

    def restore(self, threads: Iterable[Thread]) -> None:
        """Carry on from the state file: open threads stay open (a restart sends no second "opened"),
        and the rate limit remembers the last pushes."""
        for th in threads:
            key = (th.pod, th.rule)
            if th.notified:
                self.last_open_push[key] = max(self.last_open_push.get(key, 0.0), th.opened)
            if th.resolved is None:
                self.open[key] = th
            else:
                self.history.append(th)

    def update(
        self,
        pod: str,
        alerts: Sequence[Alert],
        now: float,
        *,
        step: int | None = None,
        run_dir: str | None = None,
        keep_absent: bool = False,
    ) -> list[Event]:
        """One evaluation of ``pod``: ``alerts`` are its alerts now. ``keep_absent``: the pod's state is not
        known (unreachable), so a rule missing from ``alerts`` is not taken as clear."""
        events: list[Event] = []
        seen: set[tuple[str, str]] = set()
        for a in alerts:
            key = (pod, a.id)
            if key in seen:
                continue
            seen.add(key)
            th = self.open.get(key)
            if th is None:
                th = Thread(
                    thread_id(pod, a.id, now),
                    pod,
                    a.id,
                    a.title,
                    a.severity.value,
                    now,
                    a.message,
                    step=step,
                    run_dir=run_dir,
                )
                self.open[key] = th
                self.opened_total[key] += 1
                events.append(self._open(th, now, "opened", first=True))
                continue
            if th.clear_since is not None:
                th.flaps += 1
                th.clear_since = None
            th.message, th.title = a.message, a.title
            if a.severity.rank > Severity(th.severity).rank:
                th.severity = a.severity.value
                if th.notified:
                    why = self.policy.why_not(a.severity, now)
                    events.append(self._event("escalated", th, now, push=not why, held=why))
                else:
                    events.append(self._open(th, now, "escalated", first=True))
            elif not th.notified:
                ev = self._open(th, now, "opened", first=False)
                if ev.message is not None:
                    events.append(ev)
        if keep_absent:
            return events
        for key, th in list(self.open.items()):
            if key[0] != pod or key in seen:
                continue
            if th.clear_since is None:
                th.clear_since = now
            if now - th.clear_since >= self.policy.resolve_after_s:
                del self.open[key]
                th.resolved = th.clear_since
                self.history.append(th)
                events.append(
                    self._event(
                        "resolved", th, now, push=th.notified, held="" if th.notified else "its opening was never sent"
                    )
                )
        return events

    def _open(self, th: Thread, now: float, kind: str, *, first: bool) -> Event:
        """Push the thread's opening now if the policy and the rate limit allow it, else hold it."""
        key = (th.pod, th.rule)
        why = self.policy.why_not(Severity(th.severity), now)
        last = self.last_open_push.get(key)
        if not why and last is not None and now - last < self.policy.min_interval_s:
            why = f"rate limit: one opening per {whole_duration(self.policy.min_interval_s)} for {th.rule} on {th.pod}"
        if why:
            th.held = why
            return self._event(kind, th, now, push=False, held=why) if first else Event(kind, replace(th), None, why)
        th.notified, th.held = True, ""
        self.last_open_push[key] = now
        return self._event("opened", th, now, push=True)  # the first message the user sees of it

    def _event(self, kind: str, th: Thread, now: float, *, push: bool, held: str = "") -> Event:
        if push:
            th.messages += 1
        return Event(kind, replace(th), compose(kind, th, now) if push else None, held)

    def drop_pod(self, pod: str, now: float) -> None:
        """The pod is gone on purpose (terminated): its open threads end without a message."""
        for key in [k for k in self.open if k[0] == pod]:
            th = self.open.pop(key)
            th.resolved = now
            self.history.append(th)

    def threads(self) -> list[Thread]:
        """Every thread known, open ones last (for the state file)."""
        return [*self.history, *self.open.values()]

    def open_counts(self) -> Counter[tuple[str, str, str]]:
        """(pod, rule, severity) → 1 for each open thread."""
        return Counter((th.pod, th.rule, th.severity) for th in self.open.values())
