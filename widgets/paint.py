"""When a widget may paint its own lines as Textual's styles cache would, without it.

Textual's styles cache (``Widget.render_lines``) sends each line a widget draws through its general path (border,
padding, outline, tint, opacity, hatch: ~40 style lookups), copies it into a new Strip and passes it through the
App's line filters into a third. A widget whose styles draw none of those gets from it only its line, filtered:
the Monitor's rows and the fleet table then paint their kept lines themselves (their tests compare the result with
the cache's, cell for cell)."""

from __future__ import annotations

from textual.geometry import NULL_SPACING
from textual.widget import Widget


def draws_own_lines_only(widget: Widget) -> bool:
    """True when ``widget``'s styles draw nothing around or over its lines: no border or border title, padding,
    outline, tint, text opacity, hatch or opacity, and its content fills its region."""
    styles = widget.styles
    return not (
        widget.BLANK
        or widget._border_title is not None
        or widget._border_subtitle is not None
        or styles.padding != NULL_SPACING
        or any(edge for edge, _ in styles.border)
        or any(edge for edge, _ in styles.outline)
        or styles.tint.a
        or styles.text_opacity != 1.0
        or (styles.has_rule("hatch") and styles.hatch != "none")
        or widget.opacity != 1.0
        or widget.region.size != widget.content_region.size
    )
