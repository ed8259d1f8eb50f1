"""The watcher's state file, ``<data dir>/watch-state.json``, and what the TUI shows of it.

Written atomically (temp file, fsync, rename) on every change and every ``HEARTBEAT`` s::

    {"version": 1, "pid": 4242, "owner": "alice@box", "started": ..., "updated": ..., "stopped": null,
     "pods": {"p1": {"state": "online", "step": 812, "alerts": ["no-progress"]}},
     "threads": [{"tid": "#3fa2c1", "pod": "p1", "rule": "no-progress", "severity": "critical",
                  "opened": ..., "resolved": null, "notified": true, "held": "", "messages": 1, ...}],
     "actions": [{"t": ..., "what": "notified", "kind": "opened", "tid": "#3fa2c1", "target": "#1 ntfy://***",
                  "sent": 1, "failed": 0}],
     "outbox": {"pending": 1, "targets": [{"target": "#2 json://***", "pending": 1, "oldest": ..., "attempts": 3,
                                          "next_at": ..., "error": "no complete answer within 20 s"}]}}

No URL or key is ever in it (messages name their targets masked, and only counts are kept). The TUI
reads it at start (:func:`watch_notice`): whether a watcher is running, the alerts it opened since
the TUI was last opened, and the pushes still waiting for a target that fails (``outbox``) (``<data
dir>/watch-seen.json`` remembers when that was)."""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.atomic import atomic_write_text
from services.watch.lock import LOCK_NAME, holder_alive, owner_id, read_holder
from services.watch.threads import AlertBook, Thread

STATE_NAME = "watch-state.json"
SEEN_NAME = "watch-seen.json"
VERSION = 1
ACTIONS = 200  # actions kept
MAX_BYTES = 4 * 1024 * 1024


class WatchState:
    def __init__(self, data_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(data_dir) / STATE_NAME
        self.clock = clock
        self.started = clock()
        self.stopped: float | None = None
        self.pods: dict[str, dict[str, Any]] = {}
        self.actions: deque[dict[str, Any]] = deque(maxlen=ACTIONS)
        self.outbox: dict[str, Any] = {"pending": 0, "targets": []}  # services/watch/outbox.py's summary
        self.saved_at = 0.0

    def restore(self) -> list[Thread]:
        """The previous watcher's threads and actions (so its open alerts are not announced twice)."""
        data = read_state(self.path)
        if data is None:
            return []
        for a in data.get("actions") or []:
            if isinstance(a, dict):
                self.actions.append(a)
        return [th for th in (Thread.from_json(t) for t in data.get("threads") or []) if th is not None]

    def record(self, what: str, **detail: Any) -> dict[str, Any]:
        entry = {"t": round(self.clock(), 3), "what": what, **detail}
        self.actions.append(entry)
        return entry

    def save(self, book: AlertBook) -> None:
        now = self.clock()
        doc = {
            "version": VERSION,
            "pid": os.getpid(),
            "owner": owner_id(),
            "started": round(self.started, 3),
            "updated": round(now, 3),
            "stopped": self.stopped,
            "pods": self.pods,
            "threads": [th.to_json() for th in book.threads()],
            "actions": list(self.actions),
            "outbox": self.outbox,
        }
        atomic_write_text(self.path, json.dumps(doc, indent=1, default=str), mode=0o600)
        self.saved_at = now


def read_state(path: Path) -> dict[str, Any] | None:
    """The state file, or None when it is missing, too big or not ours (never raises)."""
    try:
        if Path(path).stat().st_size > MAX_BYTES:
            return None
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def _num(value: Any) -> float | None:
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < 1e11
        else None
    )


def _clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def watch_notice(data_dir: Path, now: float | None = None, *, mark: bool = True) -> str | None:
    """One notice for the TUI's start: is a watcher running, and what it saw since the TUI was last opened.
    None when no watcher ever ran here. ``mark``: remember now as the TUI's last opening. Never raises."""
    data_dir = Path(data_dir)
    now = time.time() if now is None else now
    state = read_state(data_dir / STATE_NAME)
    holder = read_holder(data_dir / LOCK_NAME)
    running = holder_alive(holder)
    try:
        seen = _num(json.loads((data_dir / SEEN_NAME).read_text()).get("t"))
    except (OSError, ValueError, AttributeError):
        seen = None
    if mark and (state is not None or running):
        try:
            atomic_write_text(data_dir / SEEN_NAME, json.dumps({"t": round(now, 3)}))
        except OSError:
            pass
    if state is None and not running:
        return None
    if running and holder is not None:
        since = holder.get("since")
        head = f"A watcher is running (pid {holder['pid']}" + (f", since {_clock(since)})" if since else ")")
    else:
        stopped = _num((state or {}).get("stopped")) or _num((state or {}).get("updated"))
        head = (
            "No watcher is running"
            + (f" (the last one stopped at {_clock(stopped)})" if stopped else "")
            + ": alerts are pushed only while one runs (a watcher keeps watching with this app closed: docs/watch.md)"
        )
    did = _did(state, seen) + _waiting(state)
    threads = [th for th in (Thread.from_json(t) for t in (state or {}).get("threads") or []) if th is not None]
    new = [th for th in threads if seen is None or th.opened > seen]
    if not new:
        return head + ("; no alerts since the TUI was last open." if seen is not None else ".") + did
    shown = []
    for th in sorted(new, key=lambda t: t.opened)[-3:]:
        end = f"resolved {_clock(resolved)}" if (resolved := _num(th.resolved)) else "still open"
        shown.append(f"{th.rule} on {th.pod} at {_clock(th.opened)} ({end})")
    more = f" and {len(new) - 3} more" if len(new) > 3 else ""
    when = "since the TUI was last open" if seen is not None else "so far"
    return f"{head}; {len(new)} alert(s) {when}: " + "; ".join(shown) + more + "." + did


# the actions the TUI's notice names (not "notified")
NAMED = ("deadline ", "budget ", "backup ", "preempted", "auto-resume ", "cleanup ")


def _did(state: dict[str, Any] | None, seen: float | None) -> str:
    """ " While the TUI was closed it did: 21:40 p1 terminated over its budget; ..." (the last 4), or ""."""
    if seen is None:
        return ""
    done = [
        a
        for a in (state or {}).get("actions") or []
        if isinstance(a, dict)
        and isinstance(a.get("what"), str)
        and a["what"].startswith(NAMED)
        and (_num(a.get("t")) or 0) > seen
    ]
    if not done:
        return ""
    said = [
        f"{_clock(_num(a['t']) or 0)} " + str(a.get("message") or f"{a['what']} {a.get('pod') or ''}")[:160]
        for a in done[-4:]
    ]
    more = f" (and {len(done) - 4} more)" if len(done) > 4 else ""
    return " While the TUI was closed it did: " + "; ".join(said) + more + "."


def _waiting(state: dict[str, Any] | None) -> str:
    """ " 3 push(es) not delivered yet: #2 json://*** fails (no complete answer within 20 s)." or ""."""
    box = (state or {}).get("outbox")
    targets = box.get("targets") if isinstance(box, dict) else None
    if not isinstance(targets, list):
        return ""
    failing = [
        t
        for t in targets
        if isinstance(t, dict)
        and isinstance(t.get("pending"), int)
        and t["pending"] > 0
        and isinstance(t.get("attempts"), int)
        and t["attempts"] > 0
    ]
    if not failing:
        return ""
    total = sum(t["pending"] for t in failing)
    said = [
        f"{str(t.get('target'))[:40]} fails" + (f" ({str(t['error'])[:80]})" if t.get("error") else "")
        for t in failing[:3]
    ]
    return f" {total} push(es) not delivered yet, retried while a watcher runs: " + "; ".join(said) + "."


def watcher_status(data_dir: Path) -> str:
    """One line for the Spend view: is a watcher enforcing budgets and deadlines now. Never raises."""
    holder = read_holder(Path(data_dir) / LOCK_NAME)
    if holder_alive(holder):
        since = _num(holder.get("since"))
        return (
            f"A watcher is running (pid {holder['pid']}"
            + (f", since {_clock(since)}" if since else "")
            + "): it warns at 80 % of a budget and enforces deadlines with the TUI closed."
        )
    return (
        "No watcher is running: budgets are not enforced, and deadlines only while this app is open (a "
        "watcher keeps them with the app closed: docs/watch.md)."
    )
