"""Pushes that have not reached their target yet: ``<data dir>/watch-outbox.json`` and the per-target senders.

Every message the watcher pushes becomes one entry per target, written to the outbox before it is sent and
removed once that target took it. Each target has its own sender task, in order, one push at a time, each
bounded by the target's ``timeout_s`` of total time (:class:`services.watch.notify.Target`): a target that
hangs or trickles delays its own messages only. A push that failed (refused, unreachable, over its time)
stays at the head of its target's queue and is retried after a backoff (``retry_base_s``, doubling, at most
``RETRY_MAX_S``) until it is delivered or ``retry_for_s`` after it was queued (then it expires, said in the
log). The outbox survives a restart: the next watcher delivers what this one could not, trying at once. So delivery is
at
least once: a push cut by the deadline may have arrived anyway, and is sent again.

The file never holds a URL: an entry names its target by :func:`services.watch.notify.target_key` (a hash)
and, to show, by its masked form. Entries whose target is no longer configured are dropped at load. It is
bounded: at most ``MAX_ENTRIES`` entries (the oldest dropped first, said in the log) and ``MAX_BODY``
characters per message. Written atomically, mode 600.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from services.atomic import atomic_write_text
from services.models import Severity
from services.watch.notify import Notifier, Target
from services.watch.threads import Message

OUTBOX_NAME = "watch-outbox.json"
VERSION = 1
MAX_ENTRIES = 200
MAX_BODY = 8000
MAX_BYTES = 8 * 1024 * 1024  # a bigger file is not ours: ignored
RETRY_BASE_S = 10.0
RETRY_MAX_S = 600.0
DRAIN_S = 3.0  # at a stop: how long the due pushes may still take (the rest waits in the outbox)

# (what, level, fields): "notification sent" / "notification failed" / "notification expired" / "... dropped"
Report = Callable[[str, int, dict[str, Any]], None]


@dataclass
class Entry:
    id: str
    target: str  # Target.key
    shown: str  # the target, masked: "#2 json://***"
    message: Message
    created: float
    attempts: int = 0
    next_at: float = 0.0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        m = self.message
        return {
            "id": self.id,
            "target": self.target,
            "shown": self.shown,
            "created": round(self.created, 3),
            "attempts": self.attempts,
            "next_at": round(self.next_at, 3),
            "error": self.error,
            "message": {
                "kind": m.kind,
                "title": m.title,
                "body": m.body,
                "severity": m.severity.value,
                "tid": m.tid,
                "pod": m.pod,
                "rule": m.rule,
            },
        }

    @classmethod
    def from_json(cls, d: Any) -> Entry | None:
        try:
            m = d["message"]
            msg = Message(
                str(m["kind"]),
                str(m["title"]),
                str(m["body"])[:MAX_BODY],
                Severity(m["severity"]),
                str(m.get("tid") or ""),
                str(m.get("pod") or ""),
                str(m.get("rule") or ""),
            )
            return cls(
                str(d["id"]),
                str(d["target"]),
                str(d["shown"]),
                msg,
                _num(d["created"]),
                int(d.get("attempts") or 0),
                _num(d.get("next_at") or 0),
                str(d.get("error") or "")[:300],
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def fields(self) -> dict[str, Any]:
        m = self.message
        return {"kind": m.kind, "tid": m.tid, "pod": m.pod, "rule": m.rule, "target": self.shown}


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) > 1e11:
        raise ValueError("not a time")
    return float(value)


class Outbox:
    """The entries, in the order they were queued; saved on every change."""

    def __init__(self, data_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(data_dir) / OUTBOX_NAME
        self.clock = clock
        self.entries: list[Entry] = []
        self._n = 0

    def load(self, keys: set[str]) -> tuple[list[Entry], int]:
        """The previous watcher's entries for these targets (kept), and how many were dropped (targets no
        longer configured, unreadable entries). Never raises: an unreadable file is an empty outbox."""
        try:
            if self.path.stat().st_size > MAX_BYTES:
                return [], 0
            data = json.loads(self.path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError, RecursionError):
            return [], 0
        raw = data.get("entries") if isinstance(data, dict) and data.get("version") == VERSION else None
        if not isinstance(raw, list):
            return [], 0
        kept = [e for e in (Entry.from_json(d) for d in raw) if e is not None and e.target in keys]
        self.entries = kept[-MAX_ENTRIES:]
        return list(self.entries), len(raw) - len(self.entries)

    def add(self, target: Target, message: Message) -> tuple[Entry, list[Entry]]:
        """Queue ``message`` for ``target``: (the entry, the oldest entries dropped to make room)."""
        if len(message.body) > MAX_BODY:
            message = replace(message, body=message.body[: MAX_BODY - 1] + "…")
        self._n += 1
        now = self.clock()
        entry = Entry(
            f"{int(now * 1000):x}-{os.getpid():x}-{self._n}", target.key, target.name, message, now, next_at=now
        )
        self.entries.append(entry)
        dropped = self.entries[:-MAX_ENTRIES] if len(self.entries) > MAX_ENTRIES else []
        del self.entries[: len(dropped)]
        return entry, dropped

    def head(self, key: str) -> Entry | None:
        return next((e for e in self.entries if e.target == key), None)

    def remove(self, entry: Entry) -> None:
        with contextlib.suppress(ValueError):
            self.entries.remove(entry)

    def summary(self) -> dict[str, Any]:
        """For the state file: what waits, per target (masked)."""
        per: dict[str, dict[str, Any]] = {}
        for e in self.entries:
            t = per.setdefault(
                e.target,
                {
                    "target": e.shown,
                    "pending": 0,
                    "oldest": round(e.created, 3),
                    "attempts": e.attempts,
                    "next_at": round(e.next_at, 3),
                    "error": e.error,
                },
            )
            t["pending"] += 1
        return {"pending": len(self.entries), "targets": list(per.values())}

    def save(self) -> None:
        doc = {"version": VERSION, "entries": [e.to_json() for e in self.entries]}
        atomic_write_text(self.path, json.dumps(doc, indent=1, ensure_ascii=False), mode=0o600)


class Dispatcher:
    """One sender task per target over the outbox (see the module's docstring). Runs in the watcher's loop."""

    def __init__(
        self,
        notifier: Notifier,
        outbox: Outbox,
        report: Report,
        *,
        retry_for_s: float,
        retry_base_s: float = RETRY_BASE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.notifier, self.outbox, self.report, self.clock = notifier, outbox, report, clock
        self.retry_for_s, self.retry_base_s = retry_for_s, retry_base_s
        self._wake: dict[str, asyncio.Event] = {}
        self._busy: set[str] = set()  # targets with a push in flight now
        self._tasks: list[asyncio.Task] = []

    def start(self) -> int:
        """Load the previous watcher's outbox and start the senders: how many pushes were waiting."""
        kept, dropped = self.outbox.load({t.key for t in self.notifier.targets})
        now = self.clock()
        for entry in kept:  # a new watcher tries at once (a restart is rare: systemd spaces them)
            entry.next_at = min(entry.next_at, now)
        if dropped:
            self.report(
                "notification dropped",
                logging.WARNING,
                {"dropped": dropped, "why": "their target is no longer in the notification URLs"},
            )
            self._save()
        for target in self.notifier.targets:
            self._wake[target.key] = asyncio.Event()
            self._tasks.append(asyncio.ensure_future(self._sender(target)))
        return len(kept)

    def push(self, message: Message) -> None:
        for target in self.notifier.targets:
            _, dropped = self.outbox.add(target, message)
            for old in dropped:
                self.report(
                    "notification dropped",
                    logging.WARNING,
                    {**old.fields(), "why": f"more than {MAX_ENTRIES} pushes were waiting"},
                )
            self._wake[target.key].set()
        self._save()

    def pending(self) -> int:
        return len(self.outbox.entries)

    async def aclose(self, drain_s: float = DRAIN_S) -> None:
        """Let the pushes that are due now go out for at most ``drain_s``, then stop; what is left waits in
        the outbox for the next watcher. Never waits on a stuck target longer than that."""
        end = time.monotonic() + drain_s
        while time.monotonic() < end and (self._busy or any(self._due(t) for t in self.notifier.targets)):
            await asyncio.sleep(0.05)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._save()

    def _due(self, target: Target) -> bool:
        head = self.outbox.head(target.key)
        return head is not None and head.next_at <= self.clock()

    async def _sender(self, target: Target) -> None:
        wake = self._wake[target.key]
        while True:
            entry = self.outbox.head(target.key)
            now = self.clock()
            if entry is None:
                wake.clear()
                await wake.wait()
                continue
            if now - entry.created > self.retry_for_s:
                self.outbox.remove(entry)
                self._save()
                self.report(
                    "notification expired",
                    logging.ERROR,
                    {
                        **entry.fields(),
                        "attempts": entry.attempts,
                        "error": entry.error,
                        "why": f"not delivered within {self.retry_for_s:g} s",
                    },
                )
                continue
            if entry.next_at > now:
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), min(entry.next_at - now, 60.0))
                continue
            self._busy.add(target.key)
            try:
                ok, why = await self._attempt(target, entry.message)
            finally:
                self._busy.discard(target.key)
            entry.attempts += 1
            if ok:
                self.outbox.remove(entry)
                self._save()
                self.report("notification sent", logging.INFO, {**entry.fields(), "attempts": entry.attempts})
                continue
            delay = min(RETRY_MAX_S, self.retry_base_s * 2 ** (entry.attempts - 1))
            entry.next_at, entry.error = self.clock() + delay, why
            self._save()
            expires = entry.created + self.retry_for_s
            self.report(
                "notification failed",
                logging.WARNING,
                {
                    **entry.fields(),
                    "attempts": entry.attempts,
                    "error": why,
                    **(
                        {"retry_in_s": round(delay, 1)}
                        if entry.next_at <= expires
                        else {"retry_in_s": None, "why": "it expires before another try"}
                    ),
                },
            )

    async def _attempt(self, target: Target, message: Message) -> tuple[bool, str]:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[tuple[bool, str]] = loop.create_future()

        def done(ok: bool, why: str) -> None:
            def settle() -> None:
                if not result.done():
                    result.set_result((ok, why))

            loop.call_soon_threadsafe(settle)

        if not target.start(message, done):
            return False, "its earlier pushes are still hanging"
        try:
            return await asyncio.wait_for(asyncio.shield(result), self.notifier.timeout_s)
        except asyncio.TimeoutError:
            return False, f"no complete answer within {self.notifier.timeout_s:g} s"

    def _save(self) -> None:
        try:
            self.outbox.save()
        except OSError as exc:
            self.report(
                "cannot write the notification outbox",
                logging.ERROR,
                {"path": str(self.outbox.path), "error": exc.strerror or str(exc)},
            )
