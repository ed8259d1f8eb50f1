"""The App's panes, one entry each: its name (and key, by position: 1-6), title, widget id, what gets the focus
when it shows, whether it draws the selected pod's snapshots, and how it is made. Everything the App keys by
pane (the tabs, the number keys, the palette, the focus, the live panes) comes from :data:`PANE_REGISTRY`:
a new pane is one entry here (and its module)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from textual.widget import Widget

if TYPE_CHECKING:  # the panes not on the first screen are imported when they mount
    from app.panes.bottleneck import BottleneckPane
    from app.panes.checkpoints import CheckpointsPane
    from app.panes.config import ConfigPane
    from app.panes.offers import OffersPane
    from app.panes.rollouts import RolloutsPane
    from widgets.monitor_pane import MonitorPane

W = TypeVar("W", bound=Widget)


@dataclass(frozen=True)
class PaneInputs:
    """What the App gives its panes when they are made."""

    config_path: Path | None  # the Config pane's file (--config, the last one)
    demo: bool  # a simulated pod is listed: the Offers pane shows simulated offers
    observed_path: Callable[[], Path]  # the measured steps/hr log (opened on first use)
    cache_ttl: Callable[[], float]  # seconds the offers cache is fresh (settings.toml, read on first use)


@dataclass(frozen=True)
class Pane(Generic[W]):
    name: str
    title: str
    widget_id: str
    # what gets the focus when the pane shows (a key, a tab click): its main widget, so arrows and Enter act
    # there; None: the pod list. Never a text field, where the number keys would type digits.
    focus: str | None
    live: bool  # draws the selected pod's snapshots (App: SnapshotFrames)
    factory: Callable[[PaneInputs], W]

    @property
    def selector(self) -> str:
        return f"#{self.widget_id}"


def _config(inputs: PaneInputs) -> ConfigPane:
    from app.panes.config import ConfigPane

    return ConfigPane(inputs.config_path, id=CONFIG.widget_id)


def _offers(inputs: PaneInputs) -> OffersPane:
    from app.panes.offers import OffersPane, default_fetcher, demo_fetcher
    from app.settings import cache_dir

    return OffersPane(
        id=OFFERS.widget_id,
        cache_dir=cache_dir(),
        observed_path=inputs.observed_path(),
        fetcher=demo_fetcher if inputs.demo else default_fetcher,
        cache_ttl=inputs.cache_ttl(),
    )


def _monitor(_inputs: PaneInputs) -> MonitorPane:
    from widgets.monitor_pane import MonitorPane

    return MonitorPane(id=MONITOR.widget_id)


def _bottleneck(_inputs: PaneInputs) -> BottleneckPane:
    from app.panes.bottleneck import BottleneckPane

    return BottleneckPane(id=BOTTLENECK.widget_id)


def _checkpoints(_inputs: PaneInputs) -> CheckpointsPane:
    from app.panes.checkpoints import CheckpointsPane

    return CheckpointsPane(id=CHECKPOINTS.widget_id)


def _rollouts(_inputs: PaneInputs) -> RolloutsPane:
    from app.panes.rollouts import RolloutsPane

    return RolloutsPane(id=ROLLOUTS.widget_id)


# Config opens on its findings (e edits, escape leaves); the Monitor pane follows the selected pod and has no
# keys of its own: the pod list keeps the focus.
CONFIG = Pane("config", "Config", "config-pane", "#config-findings", False, _config)
OFFERS = Pane("offers", "Offers", "offers-pane", "#of-table", False, _offers)
MONITOR = Pane("monitor", "Monitor", "monitor-pane", None, True, _monitor)
BOTTLENECK = Pane("bottleneck", "Bottleneck", "bottleneck-pane", "#bottleneck-pane", True, _bottleneck)
CHECKPOINTS = Pane("checkpoints", "Checkpoints", "checkpoints-pane", "#checkpoints-pane", True, _checkpoints)
ROLLOUTS = Pane("rollouts", "Rollouts", "rollouts-pane", "#ro-table", True, _rollouts)

PANE_REGISTRY: tuple[Pane[Any], ...] = (CONFIG, OFFERS, MONITOR, BOTTLENECK, CHECKPOINTS, ROLLOUTS)  # keys 1-6
FIRST_PANE = MONITOR  # the pane on the first screen; the others mount once it is painted

PANES = tuple(p.name for p in PANE_REGISTRY)
PANE_BY_NAME = {p.name: p for p in PANE_REGISTRY}
PANE_FOCUS = {p.name: p.focus for p in PANE_REGISTRY}
PANE_IDS = {p.name: p.selector for p in PANE_REGISTRY}
