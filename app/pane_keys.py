"""The panes' keys: a pane's own keys work while it shows, whatever has the focus, and the App's keys never
shadow them. A mixin of PrimeTrainApp (app/tui.py): it uses the App's ``tabs``, ``pod_list``,
``screen_stack``, ``focused`` and ``BINDINGS``.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

from textual import events
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Input

if TYPE_CHECKING:
    from app.panes.bottleneck import BottleneckPane
    from app.panes.checkpoints import CheckpointsPane
    from app.panes.config import ConfigPane
    from app.panes.offers import OffersPane
    from widgets.monitor_pane import MonitorPane

PANES = ("config", "offers", "monitor", "bottleneck", "checkpoints")
# What gets the focus when a pane is shown (1-5, a tab click): its main widget, so arrows and Enter act
# there; None: the pod list (the Monitor pane follows the selected pod and has no keys of its own). Never a
# text field: there the number keys would type digits (Config opens on its findings; e edits, escape leaves).
PANE_FOCUS = {"config": "#config-findings", "offers": "#of-table", "monitor": None,
              "bottleneck": "#bottleneck-pane", "checkpoints": "#checkpoints-pane"}
PANE_IDS = {"config": "#config-pane", "offers": "#offers-pane", "monitor": "#monitor-pane",
            "bottleneck": "#bottleneck-pane", "checkpoints": "#checkpoints-pane"}


def _keys(binding: Binding) -> list[str]:
    return [k.strip() for k in binding.key.split(",")]


@functools.cache
def _shown_keys(pane_type: type[Widget]) -> dict[str, Binding]:
    """A pane class's shown keys: key -> binding (hidden ones, escape, stay with the focus)."""
    keys: dict[str, Binding] = {}
    for binding in pane_type.BINDINGS:
        if isinstance(binding, Binding) and binding.show:
            for key in _keys(binding):
                keys.setdefault(key, binding)
    return keys


@functools.cache
def app_action_keys(app_type: type[Widget] | type[PaneKeys]) -> dict[str, list[str]]:
    """action -> the keys the App binds to it (a pane binding the same key takes it while it is on screen)."""
    keys: dict[str, list[str]] = {}
    for binding in app_type.BINDINGS:
        if isinstance(binding, Binding):
            keys.setdefault(binding.action.split("(")[0], []).extend(_keys(binding))
    return keys


class PaneKeys:
    BINDINGS: ClassVar[list[BindingType]]
    tabs: Any
    pod_list: Any
    screen_stack: Any
    focused: Any
    _main_widgets_ready: Any
    _on_main_screen: Any
    run_action: Any

    def active_pane(self) -> Widget | None:
        """The pane widget on screen (None under a modal or while the App starts or stops)."""
        if not self._main_widgets_ready() or not self._on_main_screen():
            return None
        return self.mounted_pane(self.tabs.active or "")

    @overload
    def mounted_pane(self, pane: Literal["config"]) -> ConfigPane | None: ...
    @overload
    def mounted_pane(self, pane: Literal["offers"]) -> OffersPane | None: ...
    @overload
    def mounted_pane(self, pane: Literal["monitor"]) -> MonitorPane | None: ...
    @overload
    def mounted_pane(self, pane: Literal["bottleneck"]) -> BottleneckPane | None: ...
    @overload
    def mounted_pane(self, pane: Literal["checkpoints"]) -> CheckpointsPane | None: ...
    @overload
    def mounted_pane(self, pane: str) -> Widget | None: ...

    def mounted_pane(self, pane: str) -> Widget | None:
        """The widget of pane ``pane`` (config, offers, ...) on the main screen; None before it is mounted (all but
        the Monitor pane mount just after the first screen: App._mount_other_panes) or for no such pane."""
        selector = PANE_IDS.get(pane)
        if not selector or not self.screen_stack:
            return None
        cache: dict[str, Widget] = self.__dict__.setdefault("_pane_widgets", {})
        widget = cache.get(selector)  # footer and help ask on every refresh: one DOM query per pane, not per frame
        if widget is None or not widget.is_attached:
            found = self.screen_stack[0].query(selector)
            if not found:
                return None
            widget = cache[selector] = found.first()
        return widget

    def pane_bindings(self) -> dict[str, Binding]:
        """The visible pane's own keys: key -> binding."""
        pane = self.active_pane()
        return {} if pane is None else _shown_keys(type(pane))

    def _focus_pane(self) -> None:
        if not self._main_widgets_ready() or not self._on_main_screen():
            return
        selector = PANE_FOCUS.get(self.tabs.active or "")
        found = self.screen_stack[0].query(selector) if selector else None
        if selector and not found:
            return  # the pane mounts just after the first screen (App._mount_other_panes), and focuses then
        target = found.first() if found else self.pod_list
        if target.focusable:
            target.focus()

    async def on_key(self, event: events.Key) -> None:
        """A key no binding took (the focus is outside the visible pane, e.g. in the pod list): the
        pane's own binding for it runs. Text fields keep their keys."""
        if _types_text(self.focused) or event.key in ("tab", "shift+tab"):
            return
        pane = self.active_pane()
        binding = self.pane_bindings().get(event.key)
        if pane is None or binding is None:
            return
        if self.focused is not None and pane in self.focused.ancestors_with_self:
            return  # the focus is in the pane: its bindings had the key already
        event.stop()
        await self.run_action(binding.action, pane)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        keys = app_action_keys(type(self))  # type: ignore[arg-type]  # mypy: a class object is hashable
        if action in keys and set(keys[action]) & set(self.pane_bindings()):
            return False  # the visible pane uses this key: it is the pane's (hidden here, run in on_key)
        # None: shown dimmed (footer, help), not runnable
        if action in ("remove_pod", "reconnect", "launch", "kill", "resume", "cleanup", "terminate_pod"):
            return True if self._main_widgets_ready() and self.pod_list.selected else None
        return True

    def action_show_pane(self, pane: str) -> None:
        if self.tabs.active == pane:
            self._focus_pane()
        self.tabs.active = pane

    async def _run_pane_action(self, pane: str, action: str) -> None:
        self.action_show_pane(pane)
        if (widget := self.mounted_pane(pane)) is not None:  # (none in the App's first instant: nothing to run it on)
            await self.run_action(action, widget)


def _types_text(widget: Widget | None) -> bool:
    """An Input or a TextArea (imported only by the panes that use one: TextArea brings tree-sitter, ~4 ms of
    start-up the first screen does not need)."""
    if isinstance(widget, Input):
        return True
    text_area = sys.modules.get("textual.widgets._text_area")
    return text_area is not None and isinstance(widget, text_area.TextArea)
