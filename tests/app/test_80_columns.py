"""What must survive at 80 columns (issue 33, item 10; the rules: docs/architecture.md "At 80x24").

- The Monitor hid GPU7 of eight behind a scrollbar one cell wide: eight GPUs now fit at 80x24 with a run, its
  log tail and the host figures; when more do not fit, a line under them says how many are below.
"""

from __future__ import annotations

from dataclasses import replace

from services.models import GpuSample, PodSnapshot
from tests.app.helpers import shown
from tests.app.layout_app import TRAINING, isolate, layout_app, screen_text, training_snapshot


def _with_gpus(snapshot: PodSnapshot, n: int) -> PodSnapshot:
    def widen(sample):
        first = sample.gpus[0]
        return replace(
            sample, gpus=tuple(replace(first, index=i) if isinstance(first, GpuSample) else first for i in range(n))
        )

    return replace(snapshot, history=tuple(widen(s) for s in snapshot.history))


async def _monitor_rows(tmp_path, monkeypatch, gpus: int, *, alerts: bool = True) -> list[str]:
    isolate(tmp_path, monkeypatch)
    app = layout_app()
    snapshot = _with_gpus(training_snapshot(TRAINING), gpus)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.on_snapshot(snapshot if alerts else replace(snapshot, alerts=()))
        await shown(pilot)
        await pilot.press("3")
        await pilot.pause(0.2)
        return screen_text(pilot)


async def test_eight_gpus_fit_in_the_monitor_at_80x24(tmp_path, monkeypatch) -> None:
    """A run with its log tail and no alert (alerts take rows: then the next test's line counts the rest)."""
    rows = await _monitor_rows(tmp_path, monkeypatch, 8, alerts=False)
    text = "\n".join(rows)
    assert all(f"GPU{i} " in text for i in range(8)), text
    assert "run:" in text and "more ↓" not in text, text


async def test_gpus_that_do_not_fit_are_counted_under_them(tmp_path, monkeypatch) -> None:
    for gpus in (8, 12):  # eight with two alerts above them, twelve
        rows = await _monitor_rows(tmp_path, monkeypatch, gpus)
        text = "\n".join(rows)
        shown_gpus = sum(f"GPU{i} " in text for i in range(gpus))
        assert 0 < shown_gpus < gpus, text
        assert f"{gpus - shown_gpus} more ↓" in text, text


async def test_offers_at_80x24_keep_the_column_they_rank_by(tmp_path, monkeypatch) -> None:
    """With `m` (misfits shown) the Offers pane dropped the Est. $ column its rows are ranked by."""
    from services.demo.offers import demo_offers
    from tests.app.helpers import wait_for

    isolate(tmp_path, monkeypatch)
    app = layout_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        offers = app.offers_pane
        assert offers is not None

        async def simulated(spot: bool):
            return demo_offers(spot)

        offers.fetcher = simulated
        offers.action_refresh_offers()
        await wait_for(pilot, lambda: bool(offers.ranked))
        await pilot.pause(0.2)
        header = next(row for row in screen_text(pilot) if "Provider" in row and "GPU" in row)
        assert "Est. $" in header, header
        await pilot.press("m")
        await pilot.pause(0.2)
        header = next(row for row in screen_text(pilot) if "Provider" in row and "GPU" in row)
        assert "Est. $" in header, header
