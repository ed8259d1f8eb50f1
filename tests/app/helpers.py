"""What the Pilot tests share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.css.query import NoMatches
from textual.pilot import Pilot

from services.pod.connection import Connection

if TYPE_CHECKING:
    from app.tui import PrimeTrainApp


async def wait_for(pilot: Pilot, condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Let the app run until ``condition()`` holds; AssertionError naming it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {condition}")
        await pilot.pause(0.05)


async def shown(pilot: Pilot) -> None:
    """Let the app show every snapshot fed to it so far: they reach the screen once per frame (app/tui.py
    FRAME_S; the fleet view once a second), not one by one."""
    await wait_for(pilot, lambda: not pilot.app.frame_pending)
    await pilot.pause()


async def laid_out(pilot: Pilot, selector: str, timeout: float = 20.0) -> None:
    """Wait until the current screen has a widget matching ``selector`` with a region Pilot can click.

    A freshly pushed modal is the current screen before its children are composed and laid out, so the
    query may find nothing yet: that is waited through, not an error."""

    def ready() -> bool:
        try:
            return pilot.app.screen.query_one(selector).region.width > 0
        except NoMatches:
            return False

    await wait_for(pilot, ready, timeout)
    await pilot.pause()


class Parked(Connection):
    """Never connects: the pod stays CONNECTING and the monitor says nothing more about it (tests feed
    snapshots themselves)."""

    async def connect(self) -> None:
        await asyncio.Event().wait()

    async def start_probe(self, args):  # pragma: no cover - never reached
        raise AssertionError

    async def close(self) -> None:
        return None


def rentals_app(pods: list, tmp_path, audit, api, *, parked: bool = True, **rentals_kw):
    """The App with rentals driven by ``api`` (tests.services.offers.test_launch.Api) and ``audit``; the pods
    never connect (``parked``) unless a test wants the real monitor."""
    from app.rentals import Rentals
    from app.tui import PrimeTrainApp
    from services.monitor.service import MonitorService

    kw = {"monitor_factory": lambda cb: MonitorService(cb, connector=lambda p: Parked(p))} if parked else {}
    return PrimeTrainApp(
        pods,
        pods_path=tmp_path / "pods.toml",
        rentals=lambda a: Rentals(a, audit, providers=api.providers, **rentals_kw),
        **kw,
    )


async def panes_mounted(pilot: Pilot) -> None:
    """Wait for every pane: only the Monitor pane is on the first screen, the others mount just after it is painted
    (app/tui.py, ``_mount_other_panes``)."""
    from app.pane_registry import PANE_IDS

    app = pilot.app
    await wait_for(
        pilot,
        lambda: (
            bool(app.screen_stack)
            and all(
                app.screen_stack[0].query(selector) and app.screen_stack[0].query_one(selector).is_mounted
                for selector in PANE_IDS.values()
            )
        ),
    )


def parked_app(pods: list, now: float, **kw: object) -> PrimeTrainApp:
    """The App over ``pods`` whose connections never answer (Parked), its clock and the monitor's stopped at
    ``now``, no animation: a screen that changes only as the test feeds it."""
    from app.tui import PrimeTrainApp
    from services.monitor.service import MonitorService

    app = PrimeTrainApp(
        pods,
        clock=lambda: now,
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p), clock=lambda: now),
        **kw,  # type: ignore[arg-type]
    )
    app.animation_level = "none"
    return app
