"""The App's screens besides the main one, each imported when first shown."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.screens.fleet import FleetScreen


def fleet_shown(screen: object) -> FleetScreen | None:
    """``screen`` when it is the fleet view. The fleet module (its alert log pulls in rich.pretty, ~10 ms of
    every start) is imported when the view is first opened: until then no screen can be one."""
    fleet = sys.modules.get("app.screens.fleet")
    return screen if fleet is not None and isinstance(screen, fleet.FleetScreen) else None
