"""The command palette's provider: what is possible right now, from ``App.palette_commands()``."""

from __future__ import annotations

from textual.command import DiscoveryHit, Hit, Hits, Provider


class PodCommands(Provider):
    """Command palette entries for what is possible right now ("Pod: remove demo", "Go to: Offers")."""

    async def discover(self) -> Hits:
        for title, help_text, callback in self.app.palette_commands():  # type: ignore[attr-defined]
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self.app.palette_commands():  # type: ignore[attr-defined]
            if (score := matcher.match(title)) > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
