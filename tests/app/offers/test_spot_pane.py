"""The Offers pane's kind filter (both / spot / on-demand) over one fetch of both kinds, the spot rows' Est. $
range and the one line that explains it (issue 20)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Label, Select

from app.panes.offers import OffersPane
from services.demo.offers import demo_offers
from services.offers.ranking import RunSpec
from widgets.offers_view import OffersView, cells

ASKED: list = []


async def fetcher(spot):
    ASKED.append(spot)
    return demo_offers(spot)


class PaneApp(App):
    def compose(self) -> ComposeResult:
        yield OffersPane(run=RunSpec(model="Qwen/Qwen3-8B"), fetcher=fetcher)


async def test_kind_filter_narrows_one_list_without_refetching(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    (tmp_path / "settings.toml").write_text("[offers]\nspot_interruptions_per_hour = {primeintellect = 0.2}\n")
    ASKED.clear()
    app = PaneApp()
    async with app.run_test(size=(200, 40)) as pilot:
        pane = app.query_one(OffersPane)
        pane.action_refresh_offers()
        for _ in range(100):
            if pane.ranked:
                break
            await pilot.pause(0.05)
        assert ASKED == [None]  # one fetch, both kinds
        assert app.query_one("#of-spot", Select).value == "both"
        kinds = {r.offer.spot for r in pane.ranked}
        assert kinds == {True, False}
        fits = [r.est_cost for r in pane.ranked if r.fits]
        assert fits == sorted(fits)
        why = str(app.query_one("#of-spot-why", Label).render())
        assert "not preempted – expected" in why and "0.1–0.2 preemptions/hr" in why  # settings + default Vast
        assert "each losing half a 50-step checkpoint interval + restart" in why and "interruptible-pod API" in why
        prime = next(r for r in pane.ranked if r.offer.spot and r.offer.provider == "primeintellect")
        assert prime.risk.rate == 0.2
        row = cells(prime)
        assert row[8] == f"{prime.base_cost:.2f}–{prime.est_cost:.2f}" and row[5] == "spot"
        runpod = next(r for r in pane.ranked if r.offer.spot and r.offer.provider == "runpod")
        assert cells(runpod)[5] == "spot ⚠"
        on_demand = next(r for r in pane.ranked if not r.offer.spot)
        assert cells(on_demand)[8] == f"{on_demand.est_cost:.2f}"

        app.query_one("#of-spot", Select).value = "spot"
        await pilot.pause()
        assert pane.ranked and all(r.offer.spot for r in pane.ranked)
        app.query_one("#of-spot", Select).value = "on-demand"
        await pilot.pause()
        assert pane.ranked and not any(r.offer.spot for r in pane.ranked)
        assert str(app.query_one("#of-spot-why", Label).render()) == ""  # no spot row, nothing to explain
        assert app.query_one(OffersView).row_count == len(pane.ranked)
        assert ASKED == [None]  # narrowing never refetched
