"""The main screen's and the fleet view's compositor: a frame renders only the lines it changes, and only the
widgets seen on them (:class:`LineCompositor`), and the screen that uses it (:class:`LineScreen`)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

from textual._compositor import Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip

NOTHING: Mapping[int, Strip | None] = MappingProxyType({})  # a line not drawn in a frame: no piece, none to add
RUN_GAP = 4  # lines: two changed lines closer than this are rendered in one call (a call costs ~4 lines)


def _runs(lines: list[int]) -> list[tuple[int, int]]:
    """Sorted line numbers as (first, end) runs, those less than RUN_GAP apart joined."""
    runs: list[tuple[int, int]] = []
    for y in lines:
        if runs and y - runs[-1][1] < RUN_GAP:
            runs[-1] = (runs[-1][0], y + 1)
        else:
            runs.append((y, y + 1))
    return runs


class LineCompositor(Compositor):
    """Textual's compositor, drawing only the lines a frame changes and only the widgets seen on them.

    For a partial update Textual renders every widget overlapping the box around all changed regions, and a
    widget it shows whole, whole: a new GPU figure on one line drew the screen, every container between it and the
    GPU rows (nine deep) and the header and footer, ~570 widget lines a frame for ~15 that changed, most of the
    Monitor pane's CPU per snapshot and all of the idle app's (tests/benchmarks/render_load.py). Here each widget
    renders only the runs of its lines that changed, and not at all where widgets in front of it
    already cover every cell of those lines (front widgets are drawn first and their cells win, as in Textual: what
    a container would draw there is thrown away), nor beside the changed box (the sidebar, a pane's padding: Textual
    rendered them and then sent only the changed spans to the terminal). The result is Textual's, cell for cell
    (tests/app/test_line_compositor.py compares them); it overrides Textual's private ``_render_chops`` (pinned
    < 9 in pyproject.toml)."""

    def _render_chops(self, crop: Region, is_rendered_line: Callable[[int], bool]) -> Sequence[Mapping[int, Strip]]:
        cuts = self.cuts
        intersection = Region.intersection
        crop_overlaps = crop.overlaps
        crop_left, crop_right = crop.x, crop.right
        # the lines this frame draws, in order, and per line its cuts whose piece reaches into the crop (the rest
        # is not sent) and no widget in front has drawn yet: once a line has none, no widget behind is asked for it
        rendered = [y for y in range(crop.y, crop.bottom) if is_rendered_line(y)]
        # a piece per cut of the lines drawn (Textual made them for every line of the screen: only the drawn ones
        # are read, ``ChopsUpdate`` goes through its spans' lines)
        drawn: dict[int, dict[int, Strip | None]] = {y: dict.fromkeys(cuts[y][:-1]) for y in rendered}
        chops: list[Mapping[int, Strip | None]] = [NOTHING] * len(cuts)
        for y, pieces in drawn.items():
            chops[y] = pieces
        open_cuts = {  # (sorted, as a line's cuts are)
            y: [cut for cut, end in zip(cuts[y], cuts[y][1:]) if cut < crop_right and end > crop_left] for y in rendered
        }
        for widget, (region, clip) in self.visible_widgets.items():  # front to back
            shown = intersection(region, clip)
            if not crop_overlaps(shown):
                continue  # beside the changed box: nothing of it is sent to the terminal
            left, right = shown.x, shown.right
            wanted = [  # (a cut still open from ``left`` to ``right``: the first at or after ``left`` is before it)
                y
                for y in rendered[bisect_left(rendered, shown.y) : bisect_left(rendered, shown.bottom)]
                if (still := open_cuts[y]) and (i := bisect_left(still, left)) < len(still) and still[i] < right
            ]
            if not wanted:
                continue  # no line of it is drawn in this frame, or what it would draw is hidden
            for first, last in _runs(wanted):
                strips = widget.render_lines(Region(left - region.x, first - region.y, shown.width, last - first))
                for y, strip in zip(range(first, last), strips):
                    chops_line = drawn.get(y)
                    if chops_line is None:
                        continue  # (between two drawn lines of a run: not sent)
                    final_cuts = [cut for cut in cuts[y] if right >= cut >= left]
                    for cut, piece in zip(final_cuts, strip.divide([cut - left for cut in final_cuts[1:]])):
                        if chops_line.get(cut) is None:
                            chops_line[cut] = piece
                    still = open_cuts[y]
                    if still:
                        open_cuts[y] = [cut for cut in still if chops_line[cut] is None]
        return cast("Sequence[Mapping[int, Strip]]", chops)  # (as Textual's: a line's unrendered cuts stay None)


class LineScreen(Screen[Any]):
    """A screen drawn by :class:`LineCompositor` (the main screen, the fleet view)."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = LineCompositor()

    def paint_now(self) -> None:
        """Draw what changed now, as the screen's update timer would at its next tick (Textual's
        ``_on_timer_update``: nothing while an update batch is open or another screen is on top; a layout first
        where one is due). A snapshot's frame is drawn by the handler that brings it (app/frames.py, through
        widgets/paint.py ``one_frame``), not after a message to the screen, its idle pass and a wait for the timer's
        next sixtieth of a second: ~7 % of a Monitor snapshot's CPU (tests/benchmarks/render_load.py) and up to
        17 ms of its latency."""
        if self._dirty_widgets or self._layout_required or self._repaint_required or self._scroll_required:
            self._on_timer_update()
