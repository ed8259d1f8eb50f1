"""Who holds a pod's action lock, in words: the refusal another taker reads.

The pod's helper (pod/agent/podlock.py) reads the lock's record and sends what it found; that is outside
data here too (an older helper, a record written by anyone with root on the pod): anything unusable reads
"unknown holder", never a placeholder, and every part is one printable line.
"""

from __future__ import annotations

import time
from typing import Any


def holder_text(held: Any, pod: str) -> str:
    """The refusal's text: "kill is already running on p1: pid 4242 on the pod, from alice@laptop, since 14:02:10
    (3 min ago)"."""
    h = held if isinstance(held, dict) else {}
    pid = h.get("pid")
    if type(pid) is not int or not 0 < pid < 2**31 or h.get("known") is False:
        return (
            f"another action is already running on {pod} (unknown holder: the pod's lock record is missing "
            "or unreadable)"
        )
    parts = [f"pid {pid} on the pod"]
    owner = _clean(h.get("owner"))
    if owner:
        parts.append(f"from {owner}")
    since, age = h.get("since"), h.get("age")
    if (type(since) is int or type(since) is float) and 0 < since < 1e11:
        if not (type(age) is int or type(age) is float) or not 0 <= age < 1e11:  # the pod's own clock, else ours
            age = max(0.0, time.time() - since)
        parts.append(f"since {time.strftime('%H:%M:%S', time.localtime(since))} ({_ago(age)})")
    action = _clean(h.get("action")) or "another action"
    return f"{action} is already running on {pod}: {', '.join(parts)}"


def _clean(value: Any, limit: int = 80) -> str:
    """A string fit for a one-line message (printable, spaces collapsed, at most ``limit`` long), else ""."""
    if not isinstance(value, str):
        return ""
    return " ".join("".join(c if c.isprintable() else " " for c in value[: 4 * limit]).split())[:limit].strip()


def _ago(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min ago"
    return f"{s // 86400} day{'s' if s >= 2 * 86400 else ''} ago"
