"""W&B run state and heartbeat lag, as information beside the pod's own evidence (never an alarm).

Only when ``WANDB_API_KEY`` is set; ``wandb`` is imported lazily, on the first fetch. W&B trails the
training loop by >= 15 s (filestream interval), heartbeats every 30 s, and marks a run crashed only
after ~5 min without one, so its lag is quoted in the no-progress alert as context and
shown beside the run, but no rule fires on it alone. Rate-limited: one request per ``min_interval``
seconds per run (default 60 s; W&B asks for >= 1 s between public-API calls), doubling after errors.

``fetch`` blocks (HTTP): call it from a thread worker, never on the event loop.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from services.models import WandbStatus

# "wandb: 🚀 View run NAME at: https://wandb.ai/ENTITY/PROJECT/runs/ID" (any W&B host; ANSI colours allowed)
_RUN_URL = re.compile(r"https?://[^\s/]+/([\w.-]+)/([\w.-]+)/runs/([\w-]+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run_path_in(line: str) -> str | None:
    """The "entity/project/run_id" a W&B log line names (the run URL wandb prints at init), else None."""
    if "/runs/" not in line or "wandb" not in line.lower():
        return None
    m = _RUN_URL.search(_ANSI.sub("", line))
    return "/".join(m.groups()) if m else None


def enabled(env: Mapping[str, str] | None = None) -> bool:
    return bool((os.environ if env is None else env).get("WANDB_API_KEY"))


def parse_time(value: Any) -> float | None:
    """W&B's ``heartbeatAt`` ("2026-11-22T10:00:00" UTC, with or without Z / fraction) -> epoch seconds."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def default_api() -> Any:
    import wandb  # heavy: only here, only when a key is set

    return wandb.Api(timeout=10)


class WandbPoller:
    """One W&B run, polled at most once per ``min_interval`` seconds (doubling after errors, ≤ 15 min)."""

    def __init__(
        self,
        run_path: str,
        *,
        min_interval: float = 60.0,
        clock: Callable[[], float] = time.time,
        api_factory: Callable[[], Any] = default_api,
    ) -> None:
        self.run_path, self.min_interval, self.clock = run_path, min_interval, clock
        self._api_factory = api_factory
        self._api: Any = None
        self._next = 0.0
        self._failures = 0
        self.last: WandbStatus | None = None

    def due(self) -> bool:
        return self.clock() >= self._next

    def fetch(self) -> WandbStatus:
        """Ask W&B now if due, else return the last answer. Never raises."""
        now = self.clock()
        if now < self._next and self.last is not None:
            return self.last
        try:
            if self._api is None:
                self._api = self._api_factory()
            run = self._api.run(self.run_path)
            status = WandbStatus(
                self.run_path,
                now,
                state=str(getattr(run, "state", "") or "") or None,
                heartbeat_at=parse_time(getattr(run, "heartbeatAt", None) or getattr(run, "heartbeat_at", None)),
            )
            self._failures = 0
        except Exception as exc:  # noqa: BLE001 - network, auth, 429, missing package: information only
            self._failures += 1
            status = WandbStatus(self.run_path, now, error=f"{type(exc).__name__}: {exc}"[:200])
        delay = self.min_interval * (2 ** min(self._failures, 4)) if self._failures else self.min_interval
        self._next = now + min(delay, 900.0)
        self.last = status
        return status
