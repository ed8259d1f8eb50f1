"""The Monitor rows that say they draw with their looks alone (``PartsRow.LOOKS_ONLY``: the GPU lines, the host
row, the GPU header) do: every segment of every line they draw has one of :attr:`PartsRow.looks`' styles, in
every colour a figure can take (warnings, critical). Their lines skip the truecolour filter on that word alone
(widgets/paint.py ``filtered``), so a style from elsewhere would go to the terminal unfiltered."""

from __future__ import annotations

import pytest

from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from tests.app.helpers import parked_app, shown
from widgets.monitor_rows import PartsRow

GIB = 1024**3
NOW = 1_700_000_000.0
POD = Pod(name="pod00", kind=PodKind.SSH, host="10.0.0.1", price_per_hr=23.92)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_looks_only_rows_draw_with_their_looks(size: tuple[int, int]) -> None:
    gpus = (
        GpuSample(0, "NVIDIA H100 80GB HBM3", 99.0, 79 * GIB, 80 * GIB, 700.0, 90.0),  # memory and heat: critical
        GpuSample(1, "NVIDIA H100 80GB HBM3", 50.0, 20 * GIB, 80 * GIB, 300.0, 78.0),  # heat: warning
        GpuSample(2, "NVIDIA H100 80GB HBM3", None, None, None, None, None),  # N/A everywhere
    )
    host = HostSample(99.0, 990 * GIB, 1000 * GIB, 999 * GIB, 1000 * GIB, 1048576)
    snapshot = PodSnapshot(
        pod=POD,
        status=PodStatus(PodState.ONLINE, "via nvml", since=NOW - 60),
        history=tuple(Sample(t=NOW - k, gpus=gpus, host=host, source="nvml") for k in range(30, -1, -1)),
        samples_total=31,
        last_received=NOW,
    )
    app = parked_app([POD], NOW)
    async with app.run_test(size=size) as pilot:
        app.on_snapshot(snapshot)
        await shown(pilot)
        rows = [row for row in app.screen.query(PartsRow) if row.LOOKS_ONLY and row.display]
        assert {type(row).__name__ for row in rows} >= {"GpuRows", "HostRow", "GpuHeader"}
        for row in rows:
            looks = set(row.looks.values())
            for y in range(row.size.height):
                for segment in row.render_line(y):
                    assert segment.style in looks, (type(row).__name__, y, segment)
