"""OffersPane in a small App: `r` fetches through MockTransport fixtures, a failing provider shows in the
status line while the others fill the table, filters and header sorting work."""

from __future__ import annotations

import httpx
from textual.app import App, ComposeResult
from textual.widgets import Checkbox, Input, Label

from app.panes.offers import OffersPane
from services.offers._http import RetryPolicy
from services.offers.fetch_all import fetch_all
from services.offers.ranking import RunSpec
from tests.services.test_offers import KEYS, URLS, body
from widgets.offers_view import OffersView


async def _nosleep(_: float) -> None:
    return None


async def fetcher(spot: bool):
    routes = {"pi.test": (200, body("primeintellect-availability-gpus.json")),
              "vast.test": (429, body("vast-edge-http429-plaintext.txt")),
              "lambda.test": (200, body("lambda-instance-types.json"))}
    transport = httpx.MockTransport(lambda r: httpx.Response(routes[r.url.host][0], content=routes[r.url.host][1]))
    async with httpx.AsyncClient(transport=transport) as client:
        return await fetch_all(keys=KEYS, urls=URLS, client=client, spot=spot,
                               retry=RetryPolicy(attempts=2, base=0, sleep=_nosleep))


class PaneApp(App):
    def compose(self) -> ComposeResult:
        yield OffersPane(run=RunSpec(model="Qwen/Qwen3-8B"), fetcher=fetcher)


async def test_refresh_filter_sort():
    app = PaneApp()
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(OffersPane)
        pane.focus()
        await pilot.press("r")
        for _ in range(100):
            if pane.ranked:
                break
            await pilot.pause(0.05)
        table = app.query_one(OffersView)
        status = str(app.query_one("#of-status", Label).render())
        assert "vast: HTTP 429: API requests too frequent" in status
        assert {r.offer.provider for r in pane.ranked} == {"primeintellect", "lambda"}
        costs = [r.est_cost for r in table.ordered()]
        assert costs == sorted(costs) and table.row_count == len(pane.ranked)
        top = pane.ranked[0]
        assert f"${top.est_cost:.2f}" in str(app.query_one("#of-best", Label).render())
        table.sort_by("price")
        prices = [r.offer.price_hr for r in table.ordered()]
        assert prices == sorted(prices)
        table.sort_by("price")
        assert [r.offer.price_hr for r in table.ordered()] == sorted(prices, reverse=True)
        app.query_one("#of-max-price", Input).value = "3"
        await pilot.pause()
        assert pane.ranked and all(r.offer.price_hr <= 3 for r in pane.ranked)
        n = len(pane.ranked)
        app.query_one("#of-misfits", Checkbox).value = True
        await pilot.pause()
        assert len(pane.ranked) > n and not pane.ranked[-1].fits
