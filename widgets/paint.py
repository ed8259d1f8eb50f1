"""When a widget may paint its own lines as Textual's styles cache would, without it.

Textual's styles cache (``Widget.render_lines``) sends each line a widget draws through its general path (border,
padding, outline, tint, opacity, hatch: ~40 style lookups), copies it into a new Strip and passes it through the
App's line filters into a third. A widget whose styles draw none of those gets from it only its line, filtered:
the Monitor's rows and the fleet table then paint their kept lines themselves (their tests compare the result with
the cache's, cell for cell).

Of the App's line filters, the one always on (``ANSIToTruecolor``: a colour given by the terminal's palette
number or name made the theme's RGB, a dim colour blended into its background) changes nothing in a line drawn
only in RGB colours: :func:`filtered` leaves such a line as it is rather than copying it segment by segment into a
new Strip (every line a Monitor snapshot changes went through it: ~8 % of the pane's CPU per snapshot).

And how those widgets get a changed line on screen: :func:`repaint` marks it for the screen at once (what
``refresh`` comes to two messages later), and :func:`one_frame` draws a frame's changes at its end, in one go."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from weakref import WeakSet

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.dom import NoScreen
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import NULL_SPACING, Region
from textual.screen import Screen
from textual.strip import Strip
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


@functools.lru_cache(maxsize=1024)
def truecolor_already(style: Style | None) -> bool:
    """``ANSIToTruecolor`` leaves ``style`` as it is: its colours (if any) are RGB, and it is not dim with a colour
    (the filter blends a dim colour into the background)."""
    if style is None:
        return True
    color, bgcolor = style.color, style.bgcolor
    return (color is None or (color.triplet is not None and not style.dim)) and (
        bgcolor is None or bgcolor.triplet is not None
    )


def filtered(strip: Strip, filters: Iterable[LineFilter], background: Color, *, rgb_only: bool = False) -> Strip:
    """``strip`` through the App's line filters (``Strip.apply_filter``, each result kept by the strip), the
    truecolour filter skipped where it would change nothing: :func:`truecolor_already` for every segment, or
    ``rgb_only`` (the caller knows every style of the line is, having checked the few it draws with)."""
    for line_filter in filters:
        if type(line_filter) is ANSIToTruecolor and (rgb_only or all(map(truecolor_already, map(_style, strip)))):
            continue
        strip = strip.apply_filter(line_filter, background)
    return strip


def _style(segment: Segment) -> Style | None:
    return segment.style


_PAINTING: WeakSet[Screen[object]] = WeakSet()  # screens whose frame is being made: drawn when it is made


@contextmanager
def one_frame(screen: Screen[object], paint: Callable[[], None]) -> Iterator[None]:
    """Changes made inside are drawn by ``paint`` at the end, in one go: a row repainted inside does not also
    prompt the screen's idle pass (:func:`painted_at_the_end`), a message to the screen and a pass through its
    queue per frame that would find everything drawn. What ``paint`` leaves undrawn (an update batch still open,
    another screen on top) goes the usual way: the screen is prompted."""
    _PAINTING.add(screen)
    try:
        yield
    finally:
        _PAINTING.discard(screen)
        paint()
        if screen._dirty_widgets:
            screen.check_idle()


def painted_at_the_end(screen: Screen[object]) -> bool:
    """A frame of ``screen`` is being made (:func:`one_frame`): what is marked dirty now is drawn at its end."""
    return screen in _PAINTING


def repaint(widget: Widget, *regions: Region) -> bool:
    """``widget``'s ``regions`` (else all of it) drawn again for what it shows now, its styles as they were: what
    ``widget.refresh(*regions)`` comes to two messages later (the widget's idle pass, then the screen's ``Update``
    handler), done at once with Textual's own ``_set_dirty`` and ``Screen._dirty_widgets``; the screen is prompted
    for its idle pass unless the frame under way draws it (:func:`one_frame`). With a row per figure changing every
    second, those messages were a third of what a snapshot cost (tests/app/monitor/test_monitor_screen_pin.py and
    tests/app/test_fleet_render.py fail when Textual's way changes). False, and nothing done, when ``widget`` is on
    no screen (not mounted yet, or being removed): the caller refreshes it Textual's way."""
    if not widget.is_mounted or widget._closing or widget._parent is None:
        return False
    try:
        screen = widget.screen
    except NoScreen:
        return False
    widget._set_dirty(*regions)
    if widget.display:
        screen._dirty_widgets.add(widget)
        if not painted_at_the_end(screen):
            screen.check_idle()
    return True
