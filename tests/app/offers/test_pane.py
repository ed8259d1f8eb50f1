"""OffersPane in a small App: `r` fetches through MockTransport fixtures, a failing provider shows in the
status line while the others fill the table, filters and header sorting work."""

from __future__ import annotations

import httpx
from textual.app import App, ComposeResult
from textual.widgets import Checkbox, Input, Label

from app.panes.offers import OffersPane
from services.offers._http import RetryPolicy
from services.offers.fetch_all import fetch_all
from services.offers.models import FetchResult
from services.offers.ranking import RunSpec
from tests.services.offers.test_fetch import KEYS, URLS, body
from widgets.offers_view import OffersView


async def _nosleep(_: float) -> None:
    return None


async def fetcher(spot: bool):
    routes = {
        "pi.test": (200, body("primeintellect-availability-gpus.json")),
        "vast.test": (429, body("vast-edge-http429-plaintext.txt")),
        "lambda.test": (200, body("lambda-instance-types.json")),
        "runpod.test": (200, body("runpod-edge-graphql-errors.json")),
    }
    transport = httpx.MockTransport(lambda r: httpx.Response(routes[r.url.host][0], content=routes[r.url.host][1]))
    async with httpx.AsyncClient(transport=transport) as client:
        return await fetch_all(
            keys=KEYS, urls=URLS, client=client, spot=spot, retry=RetryPolicy(attempts=2, base=0, sleep=_nosleep)
        )


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
        assert "runpod: GraphQL error: Something went wrong (synthetic)" in status
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


# ------------------------------------------------------------------ snapshots (fixed clock, cached offers)
FIXED = 1_800_000_000.0


class CachedApp(App):
    """The pane opening from the disk cache (three providers' fixtures), nothing fetched."""

    from app.tui import STYLES as CSS_PATH

    def __init__(self, cache_root, rent: bool = False) -> None:
        super().__init__()
        self.cache_root, self.rent = cache_root, rent

    def compose(self) -> ComposeResult:
        yield OffersPane(
            run=RunSpec(model="Qwen/Qwen3-8B"), fetcher=fetcher, cache_dir=self.cache_root, clock=lambda: FIXED
        )

    def on_offers_pane_rent_requested(self, message: OffersPane.RentRequested) -> None:
        from app.screens.rent import RentScreen
        from services.offers.launch import plan_launch

        self.push_screen(
            RentScreen(
                plan_launch(message.ranked.offer, message.ranked.est_hours, now=FIXED, name="primei-h100x1-demo"),
                clock=lambda: FIXED,
            )
        )


def _cache(root) -> None:
    from services.offers import cache, lambda_, primeintellect, vast
    from tests.services.offers.test_fetch import load

    offers = (
        primeintellect.parse(load("primeintellect-availability-gpus.json"))
        + vast.parse(load("vast-bundles-ondemand.json"))
        + lambda_.parse(load("lambda-instance-types.json"))
    )
    cache.save(root, False, FetchResult(tuple(offers)), FIXED - 180)


async def _shown(pilot) -> None:
    for _ in range(100):
        if pilot.app.query_one(OffersPane).ranked:
            break
        await pilot.pause(0.05)
    await pilot.pause()


def test_offers_pane_snapshot(snap_compare, tmp_path) -> None:
    _cache(tmp_path)
    assert snap_compare(CachedApp(tmp_path), terminal_size=(150, 34), run_before=_shown)


def test_rent_confirmation_snapshot(snap_compare, tmp_path, monkeypatch) -> None:
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    _cache(tmp_path)

    async def open_rent(pilot) -> None:
        await _shown(pilot)
        pilot.app.query_one(OffersView).focus()
        await pilot.press("enter")
        await pilot.pause(0.2)

    try:
        assert snap_compare(CachedApp(tmp_path), terminal_size=(150, 34), run_before=open_rent)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
