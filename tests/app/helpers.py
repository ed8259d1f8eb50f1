"""What the Pilot tests share."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import Pilot


async def wait_for(pilot: Pilot, condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Let the app run until ``condition()`` holds; AssertionError naming it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {condition}")
        await pilot.pause(0.05)
