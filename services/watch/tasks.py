"""Stopping the watcher's per-pod tasks."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_all(tasks: dict) -> None:
    """Cancel every task of ``tasks`` (name -> task), wait until each has ended (whatever it raised), and empty it."""
    pending = list(tasks.values())
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    tasks.clear()
