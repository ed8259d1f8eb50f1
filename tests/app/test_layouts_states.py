"""Snapshots at 80x24 of the fleet view and of the empty/error states (no bucket, an offline pod), in
the whole App; set up as tests/app/test_layouts.py does (fixed clock, parked pods, fixed snapshots)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.app.layout_app import PANES, isolate, layout_app, metrics_snapshot, prepare


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory):
    return metrics_snapshot(tmp_path_factory.mktemp("metrics"))


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)


def test_fleet_at_80x24(snap_compare, metrics) -> None:
    """Pod, state, step, $/hr and alerts stay; the loss trend, tok/s and GPU util give way."""
    assert snap_compare(layout_app(), terminal_size=(80, 24), run_before=partial(prepare, metrics=metrics, key="o"))


@pytest.mark.parametrize(
    "pane,pod,bucket",
    [("checkpoints", "h100-a", False), ("monitor", "h100-b", True), ("bottleneck", "h100-b", True)],
    ids=["checkpoints-no-bucket", "monitor-offline", "bottleneck-offline"],
)
def test_empty_state_at_80x24(snap_compare, metrics, pane: str, pod: str, bucket: bool) -> None:
    assert snap_compare(
        layout_app(),
        terminal_size=(80, 24),
        run_before=partial(prepare, metrics=metrics, key=PANES[pane], pod=pod, bucket=bucket),
    )
