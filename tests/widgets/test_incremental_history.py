"""The graphs' incremental buffers equal the full recomputation they replace (issue 17).

``History`` (a GPU graph's points with running sums) against ``clock_buckets`` of the same points (buckets anchored
to the points' positions, so its cells are kept from one call to the next but the newest), and ``Timeline``
(the GPU graphs' shared timeline, appended to per snapshot) against ``series`` over the whole history, for
random sequences: window wrap-around, gaps, N/A values, widths that change (a resized widget), histories that
do not continue (another pod, a restarted monitor)."""

from __future__ import annotations

import math
from collections import deque

from hypothesis import given, strategies as st

from services.models import GpuSample, HostSample, Sample
from widgets.format import Timeline, series
from widgets.trend import History, bar_cells, clock_buckets, mean, peak

HOST = HostSample(10.0, 1, 2, 1, 2)

values = st.one_of(
    st.none(),
    st.integers(0, 100).map(float),  # whole percentages: bucket means land on cell boundaries
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.floats(1e-12, 1e-6),  # needs more bits than the running sums start with
)


@given(
    limit=st.integers(1, 40),
    start=st.integers(-1000, 10**10),
    points=st.lists(values, max_size=160),
    widths=st.lists(st.integers(0, 50), min_size=1, max_size=6),
    highs=st.lists(st.sampled_from([100.0, 100.0, 100.0, 50.0]), min_size=1, max_size=4),
)
def test_history_equals_clock_buckets_of_the_points(
    limit: int, start: int, points: list[float | None], widths: list[int], highs: list[float]
) -> None:
    history, kept = History(limit), deque(maxlen=limit)
    history.clear(start=start)
    for i, point in enumerate(points):
        history.append(point)
        kept.append(point)
        end = start + i + 1  # the position after the newest point
        assert list(history.points) == list(kept)
        width = widths[i % len(widths)]  # the widget resized between points
        high = highs[i % len(highs)]  # the power graph's scale moved
        want = clock_buckets(list(kept), width, end)
        assert history.downsample(width) == want
        # the cells, kept from the last call where their bucket's points are the same
        assert history.bars(width, 0, high) == bar_cells(want, 0, high, width)
        assert history.peak() == peak(kept)
    end = start + len(points)
    for width in widths:
        want = bar_cells(clock_buckets(list(kept), width, end), 0, 100, width)
        assert bar_cells(history.downsample(width), 0, 100, width) == want
        assert history.bars(width, 0, 100) == want  # the one-pass drawing the GPU rows use
        assert history.bars(width, 50, 50) == bar_cells(clock_buckets(list(kept), width, end), 50, 50, width)


def test_the_oldest_bucket_losing_points_is_drawn_again() -> None:
    # 10 points in buckets of 3 from position 0: positions 1-10 are [1 2] [3-5] [6-8] [9 10]; one more point and
    # the oldest bucket holds position 2 alone: its cell changes though it was drawn before
    history = History(10)
    history.extend([0.0, 100.0, 0.0] + [50.0] * 8)
    assert history.bars(4, 0, 100) == bar_cells(clock_buckets(list(history.points), 4, 11), 0, 100, 4) == "▅▅▅▅"
    history.append(50.0)
    assert history.bars(4, 0, 100) == bar_cells(clock_buckets(list(history.points), 4, 12), 0, 100, 4) == "▁▅▅▅"


def test_clock_buckets_are_anchored_to_positions() -> None:
    # positions 7..16, buckets of 4: [4-7] [8-11] [12-15] [16-19]; the newest 3
    values = [float(v) for v in range(7, 17)]
    assert clock_buckets(values, 3, 17) == [9.5, 13.5, 16.0]
    # one more value changes the newest bucket alone; the older ones are the same
    assert clock_buckets(values[1:] + [17.0], 3, 18) == [9.5, 13.5, 16.5]
    assert clock_buckets([1.0, 2.0], 3, 50) == [1.0, 2.0]  # fewer values than cells: one a cell


def test_history_with_non_finite_points_falls_back_to_plain_sums() -> None:
    history = History(6)
    history.extend([1.0, math.inf, 2.0, None, math.nan, 3.0, 4.0])
    kept = [math.inf, 2.0, None, math.nan, 3.0, 4.0]
    assert list(history.points) == kept
    # positions 1-6 in buckets of 2 from position 0: [inf] [2 -] [nan 3] [4]; the newest 3
    got, want = history.downsample(3), clock_buckets(kept, 3, 7)
    assert got[0] == want[0] == 2.0 and math.isnan(got[1]) and math.isnan(want[1]) and got[2] == want[2] == 4.0
    assert history.peak() is not None and math.isnan(history.peak()) == math.isnan(peak(kept))
    history.extend([5.0, 6.0, 7.0, 8.0])  # the odd points left the window: running sums again
    assert history.downsample(2) == clock_buckets([3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 2, 11) == [5.0, 7.5]
    assert history.peak() == 8.0


def test_mean_is_rounded_once() -> None:
    # plain left-to-right float addition loses the 1.0; the exact sum keeps it, as the running sums do
    assert mean([1e16, 1.0, -1e16, 1.0]) == 0.5
    history = History(4)
    history.extend([1e16, 1.0, -1e16, 1.0])
    assert history.downsample(1) == [0.5]


def _sample(t: float, util: float | None) -> Sample:
    return Sample(t=t, gpus=(GpuSample(0, "H100", util, 40, 80, 300.0, 60.0),), host=HOST)


steps = st.one_of(
    st.sampled_from([1.0, 1.0, 1.0, 0.999, 1.001, 2.0]),  # the usual step, with jitter
    st.floats(3.0, 40.0),  # a gap (or a long step when many)
    st.sampled_from([0.0, -5.0]),  # the pod's clock stood still or went back
)


@given(
    limit=st.integers(2, 30),
    keep=st.integers(2, 40),
    moves=st.lists(st.tuples(st.integers(0, 4), steps, st.one_of(st.none(), st.floats(0, 100))), max_size=120),
)
def test_timeline_equals_series_over_the_whole_history(
    limit: int, keep: int, moves: list[tuple[int, float, float | None]]
) -> None:
    """Snapshots as the monitor sends them: its bounded history, 0-4 new samples each; now and then a history
    that does not continue (another pod shown)."""
    timeline = Timeline(limit)
    monitor: deque[Sample] = deque(maxlen=keep)
    t = 1_000.0
    drawn: list[float | None] = []  # what a reader that follows ``update`` holds
    generation, appended = timeline.generation, timeline.appended
    for i, (new, step, util) in enumerate(moves):
        if i % 37 == 36:  # another pod: fresh sample objects
            monitor = deque((_sample(s.t, s.gpus[0].util) for s in monitor), maxlen=keep)
        for _ in range(new):
            t += step
            monitor.append(_sample(t, util))
        history = tuple(monitor)
        rebuilt, entries = timeline.update(history)
        value = [None if e is None else e.gpus[0].util for e in entries]
        drawn = value if rebuilt else (drawn + value)[-limit:]
        want = series(history, lambda s: s.gpus[0].util, limit=limit)
        assert [None if e is None else e.gpus[0].util for e in timeline.entries] == want
        assert drawn == want
        every, since = timeline.since(generation, appended)  # a reader that skipped snapshots catches up
        if not every:
            assert since == list(timeline.entries)[len(timeline.entries) - len(since) :]
        generation, appended = timeline.generation, timeline.appended


def test_timeline_appends_only_the_new_samples() -> None:
    timeline = Timeline(600)
    history = tuple(_sample(float(t), 50.0) for t in range(600))
    assert timeline.update(history)[0]  # the first: built from the whole history
    grown = history[1:] + (_sample(600.0, 60.0),)
    rebuilt, entries = timeline.update(grown)
    assert not rebuilt and entries == [grown[-1]]
    assert timeline.update(grown) == (False, [])  # the same history again: nothing new
    gap = grown[1:] + (_sample(620.0, 70.0),)  # 20 s without samples: 19 blanks, then the sample
    rebuilt, entries = timeline.update(gap)
    assert not rebuilt and entries == [None] * 19 + [gap[-1]]
    assert [None if e is None else e.t for e in timeline.entries] == series(gap, lambda s: s.t, limit=600)
    other = tuple(_sample(s.t, s.gpus[0].util) for s in gap)  # same times, other objects: another pod
    assert timeline.update(other)[0]
