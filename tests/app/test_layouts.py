"""Snapshots of every pane at 80x24 (the classic terminal) and 160x48, in the whole App (the fleet view
and the empty/error states at 80x24: tests/app/test_layouts_states.py).

Deterministic by construction (tests/app/layout_app.py): a fixed clock, pods parked on a connection that
never completes and fed fixed snapshots through the App's own ``on_snapshot``, 20 steps of metrics from
the simulated trainer with seed 0, the SIMULATED offers (fixed rows), a bucket listing set as if just
listed, no provider or AWS key in the environment, UTC, and the working directory a temp dir.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.app.layout_app import PANES, isolate, layout_app, metrics_snapshot, prepare

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory):
    return metrics_snapshot(tmp_path_factory.mktemp("metrics"))


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("pane", list(PANES))
def test_pane(snap_compare, metrics, pane: str, size: str) -> None:
    assert snap_compare(
        layout_app(), terminal_size=SIZES[size], run_before=partial(prepare, metrics=metrics, key=PANES[pane])
    )
