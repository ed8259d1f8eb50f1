"""Which table columns fit: each column has a priority, and when the width does not hold them all the
lowest-priority ones are dropped first (whole columns, never headers cut to "s…"). Pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from rich.cells import cell_len


def content_width(label: str, cells: Iterable[object]) -> int:
    """The widest of the header and the cells, in terminal cells (str() of Rich Text is its plain text)."""
    return max([cell_len(label), *(max((cell_len(line) for line in str(c).split("\n")), default=0) for c in cells)])


def fit_columns(
    keys: Sequence[str],
    widths: Mapping[str, int],
    priority: Mapping[str, int],
    available: int,
    *,
    gap: int = 2,
    edge: int = 0,
) -> list[str]:
    """The columns to show, in their own order: the lowest ``priority`` go first (the later column on a tie)
    until ``sum(width + gap) + edge`` fits ``available``. At least one column always stays."""
    kept = list(keys)

    def total() -> int:
        return sum(widths[k] + gap for k in kept) + edge

    while len(kept) > 1 and total() > available:
        drop = min(reversed(kept), key=lambda k: priority.get(k, 0))
        kept.remove(drop)
    return kept
