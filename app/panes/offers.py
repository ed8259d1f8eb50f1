"""The Offers pane: GPU offers from all providers ranked by estimated $ per completed run.

``r`` refreshes in a worker (``fetcher`` is an async callable returning a ``FetchResult``; by default
``services.offers.fetch_all`` with keys and base URLs from the environment). Filters: max $/hr, spot,
GPU count, provider, and a toggle that shows misfits. A line names the best $/completion offer; provider
failures go to the status line while the other providers' offers still show."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select

from services.offers.models import PROVIDERS, FetchResult
from services.offers.ranking import Ranked, RunSpec, best, rank
from widgets.format import duration, set_label
from widgets.offers_view import OffersView

Fetcher = Callable[[bool], Awaitable[FetchResult]]  # (spot) -> result


async def default_fetcher(spot: bool) -> FetchResult:
    from services.offers.fetch_all import api_keys, base_urls, fetch_all

    return await fetch_all(keys=api_keys(), urls=base_urls(), spot=spot)


class OffersPane(Widget, can_focus=True):
    BINDINGS = [Binding("r", "refresh_offers", "Refresh offers", id="offers.refresh"),
                Binding("m", "toggle_misfits", "Show misfits", id="offers.misfits")]

    DEFAULT_CSS = """
    OffersPane { height: 1fr; }
    OffersPane #of-filters { height: auto; }
    OffersPane #of-filters Input { width: 16; }
    OffersPane #of-filters Select { width: 24; }
    OffersPane #of-best { padding: 0 1; text-style: bold; }
    OffersPane #of-status { padding: 0 1; color: $text-muted; }
    """

    def __init__(self, *, run: RunSpec | None = None, fetcher: Fetcher | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.run = run or RunSpec()
        self.fetcher = fetcher or default_fetcher
        self.result = FetchResult()
        self.ranked: list[Ranked] = []
        self.fetched_spot: bool | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="of-filters"):
            yield Input(placeholder="max $/hr", id="of-max-price", type="number")
            yield Input(placeholder="GPUs", id="of-gpus", type="integer")
            yield Select([(p, p) for p in PROVIDERS], prompt="all providers", id="of-provider")
            yield Checkbox("spot", id="of-spot")
            yield Checkbox("misfits", id="of-misfits")
        yield Label("Press r to fetch offers.", id="of-best")
        yield Label("", id="of-status")
        yield OffersView(id="of-table")

    # ------------------------------------------------------------------ actions
    def action_refresh_offers(self) -> None:
        spot = self.query_one("#of-spot", Checkbox).value
        set_label(self.query_one("#of-status", Label), "Fetching offers…")
        self.run_worker(self._refresh(spot), exclusive=True, group="offers")

    def action_toggle_misfits(self) -> None:
        box = self.query_one("#of-misfits", Checkbox)
        box.value = not box.value

    async def _refresh(self, spot: bool) -> None:
        self.result = await self.fetcher(spot)
        self.fetched_spot = spot
        self.apply_filters()

    # ------------------------------------------------------------------ filters
    def on_input_changed(self, event: Input.Changed) -> None:
        self.apply_filters()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.apply_filters()

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        if event.checkbox.id == "of-spot" and self.fetched_spot is not None and event.value != self.fetched_spot:
            self.action_refresh_offers()  # spot and on-demand are different searches
            return
        self.apply_filters()

    def _float(self, wid: str) -> float | None:
        try:
            return float(self.query_one(wid, Input).value)
        except ValueError:
            return None

    def apply_filters(self) -> None:
        price = self._float("#of-max-price")
        count = self._float("#of-gpus")
        provider = self.query_one("#of-provider", Select).value
        self.ranked = rank(self.result.offers, self.run, max_price=price,
                           spot=self.query_one("#of-spot", Checkbox).value,
                           gpus=int(count) if count else None,
                           providers=[provider] if isinstance(provider, str) else None,
                           include_misfits=self.query_one("#of-misfits", Checkbox).value)
        self.query_one(OffersView).show(self.ranked)
        top = best(self.ranked)
        set_label(self.query_one("#of-best", Label),
                  f"Best $/completion: {top.offer.provider} {top.offer.gpu_count}× {top.offer.gpu_type} "
                  f"{top.offer.region} — ${top.est_cost:.2f} in {duration(top.est_hours * 3600)} "
                  f"at ${top.offer.price_hr:.2f}/hr" if top else "No offer fits the filters.")
        errors = "; ".join(f"{e.provider}: {e.message}" for e in self.result.errors)
        n = len(self.result.offers)
        set_label(self.query_one("#of-status", Label),
                  f"{len(self.ranked)} of {n} offers shown" + (f" · failed: {errors}" if errors else ""))
