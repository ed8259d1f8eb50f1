"""widgets/paint.py: `filtered` gives what the App's line filters give, and skips only work that changes nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import MONOKAI
from textual.color import Color
from textual.filter import ANSIToTruecolor, DimFilter, Monochrome
from textual.strip import Strip

from widgets.paint import filtered, truecolor_already

COLOURS = st.one_of(
    st.none(),
    st.builds(RichColor.from_rgb, st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)),  # RGB
    st.integers(0, 255).map(RichColor.from_ansi),  # the terminal's palette, by number
    st.sampled_from(["red", "bright_green", "default", "color(200)"]).map(RichColor.parse),  # by name
)
STYLES = st.one_of(
    st.none(),
    st.builds(
        lambda c, b, dim, bold: Style(color=c, bgcolor=b, dim=dim, bold=bold),
        COLOURS,
        COLOURS,
        st.sampled_from([None, False, True]),
        st.booleans(),
    ),
)
BACKGROUNDS = st.sampled_from([Color(10, 20, 30), Color(255, 255, 255), Color(0, 0, 0, 0.5)])


def cells(strip: Strip) -> list[tuple[str, Style | None]]:
    return [(segment.text, segment.style) for segment in strip]


@given(st.lists(st.tuples(st.text(min_size=1, max_size=4), STYLES), max_size=6), BACKGROUNDS)
def test_filtered_is_what_the_filters_make(parts: list[tuple[str, Style | None]], background: Color) -> None:
    strip = Strip([Segment(text, style) for text, style in parts])
    truecolor = ANSIToTruecolor(MONOKAI)
    for filters in ([truecolor], [truecolor, Monochrome()], [truecolor, DimFilter()], []):
        expected = strip
        try:
            for line_filter in filters:
                expected = expected.apply_filter(line_filter, background)
        except AttributeError:  # Textual's dim and monochrome filters take only styles its own widgets make
            with pytest.raises(AttributeError):
                filtered(strip, filters, background)
            continue
        assert cells(filtered(strip, filters, background)) == cells(expected)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=4), STYLES), min_size=1, max_size=6), BACKGROUNDS)
def test_a_line_the_truecolour_filter_leaves_alone_is_not_copied(
    parts: list[tuple[str, Style | None]], background: Color
) -> None:
    strip = Strip([Segment(text, style) for text, style in parts])
    unchanged = all(truecolor_already(style) for _, style in parts)
    assert (filtered(strip, [ANSIToTruecolor(MONOKAI)], background) is strip) == unchanged
    if unchanged:  # the claim the skip rests on: the filter would have changed no style
        assert cells(strip.apply_filter(ANSIToTruecolor(MONOKAI), background)) == cells(strip)


def test_palette_colours_and_dim_colours_still_go_through_the_filter() -> None:
    background = Color(0, 0, 0)
    rgb = Style(color=RichColor.from_rgb(1, 2, 3))
    for style in (Style(color="red"), Style(bgcolor="blue"), rgb + Style(dim=True), Style(color="default")):
        strip = Strip([Segment("x", rgb), Segment("y", style)])
        out = filtered(strip, [ANSIToTruecolor(MONOKAI)], background)
        assert out is not strip
        assert list(out)[1].style != style
