"""The Monitor pane's GPU graphs, now appended to per snapshot (issue 17), show what recomputing them from the whole
history shows: the same points, the same power scale and the same cells, through a full 10-minute window
wrapping, gaps, N/A values, a terminal resize and a switch to another pod. The cells are the points' means in
buckets anchored to the clock (``clock_buckets``: a timeline drawn afresh puts its newest point at its sample's
second, each point after it one second on), so that a new sample changes only the newest bucket."""

from __future__ import annotations

import random
from collections import deque

from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.geometry import Region

from app.tui import STYLES
from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from tests.app.helpers import wait_for
from widgets.format import GIB, series
from widgets.monitor_pane import GRAPH_POINTS, HISTORY_POINTS, MonitorPane
from widgets.monitor_rows import PICKS, GpuRows
from widgets.trend import bar_cells, clock_buckets


class PaneApp(App[None]):
    CSS_PATH = STYLES

    def compose(self) -> ComposeResult:
        yield MonitorPane()


class FakeMonitor:
    """One pod's bounded history, as the monitor keeps it, with random figures, N/A and gaps."""

    def __init__(self, name: str, gpus: int, seed: int) -> None:
        self.pod = Pod(name=name, kind=PodKind.SSH, host=f"{name}.example")
        self.rng, self.gpus = random.Random(seed), gpus
        self.history: deque[Sample] = deque(maxlen=HISTORY_POINTS)
        self.t = 1_000.0

    def sample(self) -> Sample:
        r = self.rng
        gap = r.random() < 0.02  # now and then a stretch without samples
        self.t += r.uniform(5, 30) if gap else r.choice([1.0, 1.0, 1.0, 0.998, 1.003])
        gpus = tuple(
            GpuSample(
                i,
                "H100",
                None if r.random() < 0.05 else float(r.randint(0, 100)),
                int(r.uniform(10, 80) * GIB),
                80 * GIB,
                None if r.random() < 0.05 else round(r.uniform(100, 700), 1),
                float(r.randint(40, 90)),
            )
            for i in range(self.gpus)
            if r.random() > 0.02
        )  # a GPU missing from a sample: blank
        sample = Sample(t=self.t, gpus=gpus, host=HostSample(20.0, GIB, 2 * GIB, GIB, 2 * GIB, 65536), source="nvml")
        self.history.append(sample)
        return sample

    def snapshot(self, new: int) -> PodSnapshot:
        for _ in range(new):
            self.sample()
        return PodSnapshot(
            pod=self.pod,
            status=PodStatus(PodState.ONLINE, "via nvml"),
            history=tuple(self.history),
            samples_total=len(self.history),
            last_received=self.t,
        )


def expected(history: tuple[Sample, ...], index: int, metric: str) -> list[float | None]:
    """The graph recomputed from the whole history, as the pane did before it kept its own buffers."""

    def value(sample: Sample) -> float | None:
        gpu = {g.index: g for g in sample.gpus}.get(index)
        return None if gpu is None else PICKS[metric](gpu)

    return series(history, value, limit=HISTORY_POINTS)


class Clock:
    """Where the graphs' newest point sits (the position after it), worked out as docs/monitor.md says: a
    timeline (re)built puts its newest point at its newest sample's second, each point appended since one on."""

    def __init__(self) -> None:
        self.generation, self.origin = -1, 0

    def end(self, pane: MonitorPane, snapshot: PodSnapshot) -> int:
        timeline = pane._gpu_timeline
        if timeline.generation != self.generation:
            assert snapshot.latest is not None
            self.generation = timeline.generation
            self.origin = round(snapshot.latest.t) + 1 - timeline.appended
        return self.origin + timeline.appended


def check(pane: MonitorPane, snapshot: PodSnapshot, clock: Clock | None = None) -> int:
    """Every GPU graph against the full recomputation; the number of graphs drawn at a width > 0."""
    end = (clock or Clock()).end(pane, snapshot)
    drawn = 0
    table = pane.query_one(GpuRows)
    rows = table.lines
    assert sorted(row.index for row in rows) == sorted({g.index for g in snapshot.latest.gpus})
    for y, row in enumerate(rows):
        strip = table.render_lines(Region(0, y, table.size.width, 1))[0]
        painted = strip.text  # as painted: stale if not repainted
        # the length the line declares (not measured cell by cell: GpuRows.line_strip) is the cells it holds
        assert strip.cell_length == cell_len(painted) == table.size.width, (y, painted)
        for metric in PICKS:
            want = expected(snapshot.history, row.index, metric)
            # the graph keeps an hour of points as they came (GRAPH_POINTS); its newest are the history's
            data = list(row.data(metric))
            assert len(want) <= len(data) <= GRAPH_POINTS, (row.index, metric)
            assert data[len(data) - len(want) :] == want, (row.index, metric)
            high = (max([v for v in data if v is not None], default=0.0) or 1.0) if metric == "power" else 100.0
            assert row.high(metric) == high, (row.index, metric)
            column = table.column("graph", metric)
            if column is not None and column.width:
                drawn += 1
                on_screen = painted[column.x : column.x + column.width]
                assert on_screen == bar_cells(clock_buckets(data, column.width, end), 0.0, high, column.width), (
                    row.index,
                    metric,
                )
    return drawn


async def test_graphs_equal_the_full_recomputation_through_wrap_resize_and_pod_switch() -> None:
    a, b = FakeMonitor("a", 3, seed=1), FakeMonitor("b", 3, seed=2)
    for _ in range(HISTORY_POINTS - 5):  # a nearly full 10-minute window: the next snapshots wrap it
        a.sample()
    for _ in range(40):
        b.sample()
    rng = random.Random(3)
    async with PaneApp().run_test(size=(150, 40)) as pilot:
        pane = pilot.app.query_one(MonitorPane)
        drawn, clock = 0, Clock()
        for step in range(24):
            if step == 10:
                await pilot.resize_terminal(110, 40)  # narrower graphs: other buckets
            if step == 16:
                await pilot.resize_terminal(180, 40)
            fake = b if 12 <= step < 15 else a  # another pod shown, then back
            snapshot = fake.snapshot(rng.choice([0, 1, 1, 1, 2, 3]))
            pane.show(snapshot, now=snapshot.last_received)
            indices = sorted({g.index for g in snapshot.latest.gpus})  # a GPU missing from the latest: no row
            table = pane.query_one(GpuRows)
            await wait_for(
                pilot,
                lambda table=table, indices=indices: (
                    [row.index for row in table.lines] == indices
                    and table.size.width
                    and table.size.height == len(indices)
                ),
            )
            await pilot.pause()
            drawn += check(pane, snapshot, clock)
        assert drawn > 24 * 12 // 2  # the cells were compared, not only the points


async def test_an_hour_of_graphs_from_the_monitors_buckets_then_its_samples() -> None:
    """Issue 36: the monitor keeps 5 minutes of samples and the hour before in 10 s buckets; a pod shown afresh
    graphs the whole hour: the buckets' means (one point per sample they hold), then the samples themselves."""
    from services.monitor.trend import BUCKET_S
    from services.monitor.worker import MonitorSettings, PodMonitorState
    from widgets.monitor_rows import older_points

    pod = Pod(name="long", kind=PodKind.SSH, host="long.example")
    state = PodMonitorState(pod, MonitorSettings(), clock=lambda: 0.0)
    for k in range(3700):
        gpus = tuple(
            GpuSample(i, "H100", float(20 + 60 * (k < 1800)), 40 * GIB, 80 * GIB, 300.0 + k % 7, 60.0) for i in range(2)
        )
        state.keep(
            Sample(t=50_000.0 + k, gpus=gpus, host=HostSample(20.0, GIB, 2 * GIB, GIB, 2 * GIB, 65536), source="nvml"),
            1300,
        )
    state.status = PodStatus(PodState.ONLINE, "via nvml")
    snapshot = state._build()
    history = snapshot.history
    older = [b for b in snapshot.trend if b.t + BUCKET_S <= history[0].t]
    assert older and len(history) < 600
    async with PaneApp().run_test(size=(150, 40)) as pilot:
        pane = pilot.app.query_one(MonitorPane)
        pane.show(snapshot, now=history[-1].t)
        table = pane.query_one(GpuRows)
        await wait_for(pilot, lambda: len(table.lines) == 2 and table.size.width > 0)
        await pilot.pause()
        for row in table.lines:
            for metric in PICKS:
                data = list(row.data(metric))
                recent = expected(history, row.index, metric)
                assert data == (older_points(older, row.index, metric, GRAPH_POINTS - len(recent)) + recent)
                assert len(data) >= GRAPH_POINTS - 2 * int(BUCKET_S)  # the hour, less the bucket the samples start in
        util = table.column("graph", "util")
        assert util is not None and util.width
        painted = table.render_lines(Region(0, 0, table.size.width, 1))[0].text[util.x : util.x + util.width]
        # 80 % for the hour's first half, 20 % since: both show, the first half from the buckets alone
        assert painted[0] == bar_cells([80.0], 0.0, 100.0, 1) and painted[-1] == bar_cells([20.0], 0.0, 100.0, 1)


async def test_a_full_history_sliding_on_appends_to_the_graphs() -> None:
    """Issue 36: the monitor keeps fewer samples than it used to; a timeline longer than the history it is given
    rebuilt itself, and every GPU graph with its hour of points, on each snapshot once the history was full
    (50 ms of CPU per snapshot instead of 15). A full history sliding on must be appended to."""
    from services.monitor.worker import MonitorSettings, PodMonitorState

    pod = Pod(name="full", kind=PodKind.SSH, host="full.example")
    state = PodMonitorState(pod, MonitorSettings(), clock=lambda: 0.0)
    state.status = PodStatus(PodState.ONLINE, "via nvml")

    def feed(k: int) -> PodSnapshot:
        state.keep(
            Sample(
                t=90_000.0 + k,
                gpus=(GpuSample(0, "H100", float(k % 100), 40 * GIB, 80 * GIB, 300.0, 60.0),),
                host=HostSample(20.0, GIB, 2 * GIB, GIB, 2 * GIB, 65536),
                source="nvml",
            ),
            1300,
        )
        return state._build()

    for k in range(MonitorSettings().history_len + 50):
        snapshot = feed(k)
    assert len(snapshot.history) == MonitorSettings().history_len
    async with PaneApp().run_test(size=(150, 40)) as pilot:
        pane = pilot.app.query_one(MonitorPane)
        pane.show(snapshot, now=snapshot.history[-1].t)
        await pilot.pause()
        clock = Clock()
        clock.end(pane, snapshot)  # the graphs drawn afresh: the clock's second of the newest sample
        generation = pane._gpu_timeline.generation
        for k in range(MonitorSettings().history_len + 50, MonitorSettings().history_len + 60):
            snapshot = feed(k)
            pane.show(snapshot, now=snapshot.history[-1].t)
            assert pane._gpu_timeline.generation == generation  # appended, never rebuilt
        await pilot.pause()
        check(pane, snapshot, clock)
