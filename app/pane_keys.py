"""The panes' keys: a pane's own keys work while it shows, whatever has the focus, and the App's keys never
shadow them. :class:`PaneKeys` is the App's part that routes them (the App's ``on_key`` and ``check_action``
ask it) and finds the panes' widgets on the main screen (:data:`app.pane_registry.PANE_REGISTRY`)."""

from __future__ import annotations

import functools
import sys
from typing import Any, Protocol, TypeVar

from textual import events
from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input

from app.frames import MainWidgets
from app.pane_registry import PANE_BY_NAME, Pane

W = TypeVar("W", bound=Widget)

# the App's actions on the selected pod: shown dimmed (footer, help) and not runnable while no pod is selected
POD_ACTIONS = frozenset({"remove_pod", "reconnect", "launch", "kill", "resume", "cleanup", "terminate_pod"})


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


def app_action_keys(bindings: list[BindingType]) -> dict[str, list[str]]:
    """action -> the keys the App binds to it (a pane binding the same key takes it while it is on screen)."""
    keys: dict[str, list[str]] = {}
    for binding in bindings:
        if isinstance(binding, Binding):
            keys.setdefault(binding.action.split("(")[0], []).extend(_keys(binding))
    return keys


class KeysView(Protocol):
    """What PaneKeys asks of the App."""

    @property
    def screen_stack(self) -> list[Screen[Any]]: ...
    @property
    def focused(self) -> Widget | None: ...

    def main(self) -> MainWidgets | None: ...
    def on_main_screen(self) -> bool: ...
    async def run_action(self, action: str, default_namespace: DOMNode | None = None) -> bool: ...


class PaneKeys:
    def __init__(self, view: KeysView, app_keys: dict[str, list[str]]) -> None:
        self.view, self.app_keys = view, app_keys
        self._found: dict[str, Widget] = {}  # footer and help ask on every refresh: one DOM query per pane

    def mounted(self, pane: Pane[W]) -> W | None:
        """The pane's widget on the main screen; None before it is mounted (all but the Monitor pane mount just
        after the first screen: App._mount_other_panes)."""
        stack = self.view.screen_stack
        if not stack:
            return None
        widget = self._found.get(pane.name)
        if widget is None or not widget.is_attached:
            found = stack[0].query(pane.selector)
            if not found:
                return None
            widget = self._found[pane.name] = found.first()
        return widget  # type: ignore[return-value]  # the registry made it with the pane's factory

    def active_pane(self) -> Widget | None:
        """The pane widget on screen (None under a modal or while the App starts or stops)."""
        main = self.view.main()
        if main is None or not self.view.on_main_screen():
            return None
        pane = PANE_BY_NAME.get(main.tabs.active or "")
        return None if pane is None else self.mounted(pane)

    def pane_bindings(self) -> dict[str, Binding]:
        """The visible pane's own keys: key -> binding."""
        pane = self.active_pane()
        return {} if pane is None else _shown_keys(type(pane))

    def focus_pane(self) -> None:
        main = self.view.main()
        if main is None or not self.view.on_main_screen():
            return
        pane = PANE_BY_NAME.get(main.tabs.active or "")
        selector = pane.focus if pane is not None else None
        found = self.view.screen_stack[0].query(selector) if selector else None
        if selector and not found:
            return  # the pane mounts just after the first screen (App._mount_other_panes), and focuses then
        target = found.first() if found else main.pod_list
        if target.focusable:
            target.focus()

    async def key(self, event: events.Key) -> None:
        """A key no binding took (the focus is outside the visible pane, e.g. in the pod list): the
        pane's own binding for it runs. Text fields keep their keys."""
        focused = self.view.focused
        if _types_text(focused) or event.key in ("tab", "shift+tab"):
            return
        pane = self.active_pane()
        binding = self.pane_bindings().get(event.key)
        if pane is None or binding is None:
            return
        if focused is not None and pane in focused.ancestors_with_self:
            return  # the focus is in the pane: its bindings had the key already
        event.stop()
        await self.view.run_action(binding.action, pane)

    def check_action(self, action: str) -> bool | None:
        keys = self.app_keys
        if action in keys and set(keys[action]) & set(self.pane_bindings()):
            return False  # the visible pane uses this key: it is the pane's (hidden here, run in key())
        if action in POD_ACTIONS:  # None: shown dimmed (footer, help), not runnable
            main = self.view.main()
            return True if main is not None and main.pod_list.selected else None
        return True

    def show(self, name: str) -> None:
        main = self.view.main()
        if main is None:
            return
        if main.tabs.active == name:
            self.focus_pane()
        main.tabs.active = name

    async def run_pane_action(self, pane: Pane[Any], action: str) -> None:
        self.show(pane.name)
        if (widget := self.mounted(pane)) is not None:  # (none in the App's first instant: nothing to run it on)
            await self.view.run_action(action, widget)


def _types_text(widget: Widget | None) -> bool:
    """An Input or a TextArea (imported only by the panes that use one: TextArea brings tree-sitter, ~4 ms of
    start-up the first screen does not need)."""
    if isinstance(widget, Input):
        return True
    text_area = sys.modules.get("textual.widgets._text_area")
    return text_area is not None and isinstance(widget, text_area.TextArea)
