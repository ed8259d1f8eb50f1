"""Textual's Footer, recomposed once per frame however often the bindings change.

Textual 8's Footer schedules a full recompose (a widget per key) for every ``bindings_updated`` signal, and
the signal fires on each focus change, tab switch and ``refresh_bindings``: the app's start alone sent 36,
each one rebuilding the footer (~1/5 of the first frame). Here the requests between two refreshes become
one recompose, of the bindings as they are by then.

A request whose bindings are those the keys were built from rebuilds nothing: the focus Textual sets while the
first screen is composed signals once more after that screen is up, and rebuilding the same keys then cost a
full restyle and layout of the screen (~100 ms on loaded cores) while the demo pod's probe was starting.

Keys that do not fit beside the command palette's key (docked right) are left out whole, from the first that
does not fit on: a narrow terminal showed "d R" under "^p Commands" (help and the palette list them all).
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey


class Footer(TextualFooter):
    _recompose_pending = False
    _composed_from: tuple[Any, ...] | None = None  # what the keys shown were built from (_shown_bindings)

    def compose(self) -> ComposeResult:
        self._composed_from = self._shown_bindings() if self._bindings_ready else None
        yield from super().compose()

    def _shown_bindings(self) -> tuple[Any, ...]:
        """Everything Textual's Footer.compose reads to build the keys."""
        app = self.app
        return (
            self.compact,
            self.show_command_palette,
            tuple(
                (b.key, app.get_key_display(b), b.description, b.action, b.show, b.group, b.tooltip, enabled, tip)
                for _node, b, enabled, tip in self.screen.active_bindings.values()
            ),
        )

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus or self._recompose_pending:
            return
        if self.is_attached and screen is self.screen:
            self._recompose_pending = True
            self.call_after_refresh(self._recompose_once)

    async def _recompose_once(self) -> None:
        self._recompose_pending = False
        if self.is_attached and self._shown_bindings() != self._composed_from:
            await self.recompose()

    async def recompose(self) -> None:
        await super().recompose()
        self._fit()

    def on_resize(self, event: events.Resize) -> None:
        self._fit()

    def _fit(self) -> None:
        """Show the keys, in order, while each fits whole; the command palette's key always stays."""
        width = self.size.width
        if not width:
            return
        keys = list(self.query_children(FooterKey))
        palette = [k for k in keys if k.has_class("-command-palette")]
        left = width - sum(self._width(k) for k in palette)
        fits = True
        for key in keys:
            if key in palette:
                continue
            need = self._width(key)
            fits = fits and need <= left
            left -= need
            key.display = fits

    def _width(self, key: FooterKey) -> int:
        styles = key.styles
        return key.get_content_width(self.size, self.app.size) + styles.gutter.width + styles.margin.width
