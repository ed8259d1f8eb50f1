"""Textual's Footer, recomposed once per frame however often the bindings change.

Textual 8's Footer schedules a full recompose (a widget per key) for every ``bindings_updated`` signal, and
the signal fires on each focus change, tab switch and ``refresh_bindings``: the app's start alone sent 36,
each one rebuilding the footer (~1/5 of the first frame). Here the requests between two refreshes become
one recompose, of the bindings as they are by then.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    _recompose_pending = False

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus or self._recompose_pending:
            return
        if self.is_attached and screen is self.screen:
            self._recompose_pending = True
            self.call_after_refresh(self._recompose_once)

    async def _recompose_once(self) -> None:
        self._recompose_pending = False
        if self.is_attached:
            await self.recompose()
