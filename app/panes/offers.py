"""The Offers pane: GPU offers from all providers ranked by estimated $ per completed run.

``r`` refreshes in a worker (``fetcher`` is an async callable returning a ``FetchResult``; by default
``services.offers.fetch_all`` with keys and base URLs from the environment, the providers' CLI files and
settings.toml). The last answer is cached on disk (``cache_dir``) and shown at once while younger than
the TTL. Spot and on-demand offers are fetched together and ranked in one list, a spot offer by its expected
$ with preemptions priced in (services/offers/spot_risk.py; its Est. $ is the range "not preempted –
expected", explained on one line). Filters: max $/hr, kind (both / spot / on-demand, no refetch), GPU count,
provider, and a toggle that shows misfits. A line names the best $/completion offer; provider failures go to the status
line while the other providers' offers
still show. The run being priced follows the Config pane (``use_config``). ``enter`` on an offer posts
:class:`OffersPane.RentRequested`; the App confirms and rents.

Scale (issue 17): with more than :data:`DEBOUNCE_OVER` offers fetched, typing in a filter field filters
once the frame that shows the typed key is drawn, once for all the keys typed meanwhile (:data:`DEBOUNCE_S`),
not on every keystroke; the table holds the first few hundred
rows (widgets/offers_view.py ``MAX_ROWS``) and the status line says how many are left out."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.markup import escape
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, DataTable, Input, Label, Select

from services.offers.models import PROVIDERS, FetchResult
from services.offers.ranking import Ranked, RunSpec, best, rank
from services.offers.spot_risk import SpotRisk
from widgets.format import duration, set_label
from widgets.offers_view import OffersView

Fetcher = Callable[[bool | None], Awaitable[FetchResult]]  # (spot; None: both kinds) -> result
KINDS = (("both", "both"), ("spot", "spot"), ("on-demand", "on-demand"))  # the kind filter: label, value
KIND_SPOT = {"both": None, "spot": True, "on-demand": False}
# When a filter field's keys filter the offers again (a filtering keeps the rows of the fetch's one ranking:
# services.offers.ranking.rank, a few ms at 10,000 offers; the table's refill and frame cost more). None: right
# after the frame that echoes the key, once for every key typed until then (a burst, a paste: one filtering), so
# the typist sees the character at once and the table one filtering later, with no fixed pause (a 30-ms pause
# was a third of the 100-ms budget: tests/benchmarks/offers_table.py); seconds: after the typing pauses that long
DEBOUNCE_S: float | None = None
DEBOUNCE_OVER = 500  # offers fetched: below this a keystroke re-ranks at once (a few ms), above it after the pause


async def default_fetcher(spot: bool | None) -> FetchResult:
    from app.settings import load_offer_settings
    from services.offers.fetch_all import fetch_all
    from services.offers.keys import find_keys, find_urls

    settings = load_offer_settings()
    keys = {name: k.key for name, k in find_keys(settings=settings).items()}
    return await fetch_all(keys=keys, urls=find_urls(settings=settings), spot=spot)


async def demo_fetcher(spot: bool | None) -> FetchResult:
    """``--demo``: the real providers when a key is set, else SIMULATED offers (services/demo/offers.py)."""
    from app.settings import load_offer_settings
    from services.offers.keys import find_keys

    if find_keys(settings=load_offer_settings()):
        return await default_fetcher(spot)
    from services.demo.offers import demo_offers

    return demo_offers(spot)


class OffersPane(Widget, can_focus=True):
    BINDINGS = [
        Binding("r", "refresh_offers", "Refresh offers", id="offers.refresh"),
        Binding("m", "toggle_misfits", "Show misfits", id="offers.misfits"),
    ]

    DEFAULT_CSS = """
    OffersPane { height: 1fr; }
    OffersPane #of-filters { height: auto; }
    OffersPane #of-filters Input { width: 16; }
    OffersPane #of-filters Select { width: 24; }
    OffersPane #of-filters #of-spot { width: 17; }
    OffersPane #of-best { padding: 0 1; text-style: bold; }
    OffersPane #of-status { padding: 0 1; color: $text-muted; }
    OffersPane #of-run { padding: 0 1; color: $text-muted; }
    OffersPane #of-keys { padding: 0 1; color: $text-muted; }
    OffersPane #of-rent { padding: 0 1; color: $warning; }
    OffersPane #of-spot-why { padding: 0 1; color: $text-muted; }
    OffersPane #of-best, OffersPane #of-status, OffersPane #of-run, OffersPane #of-keys, OffersPane #of-rent,
    OffersPane #of-spot-why {
        width: 100%;  /* wrap: the reason is never cut off at the right edge */
    }
    """

    class RentRequested(Message):
        def __init__(self, ranked: Ranked) -> None:
            super().__init__()
            self.ranked = ranked

    def __init__(
        self,
        *,
        run: RunSpec | None = None,
        fetcher: Fetcher | None = None,
        cache_dir: Path | None = None,
        cache_ttl: float = 600.0,
        clock: Callable[[], float] = time.time,
        observed_path: Path | None = None,
        debounce: float | None = DEBOUNCE_S,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.debounce = debounce  # 0: every keystroke re-ranks at once (the benchmark's baseline)
        self._pending: Any = None  # a re-rank waiting: its Timer, or True until the next frame is drawn
        self.run = run or RunSpec()
        self.run_source = "default run (open a config to price yours)"
        self.fetcher = fetcher or default_fetcher
        self.cache_dir, self.cache_ttl, self.clock = cache_dir, cache_ttl, clock
        self.observed_path = observed_path
        self.observed: list = []  # services.offers.ranking.Observed: this user's measured steps/hr
        self.result = FetchResult()
        self.ranked: Sequence[Ranked] = ()
        self.fetched_spot: bool | None = None  # None: nothing fetched yet; the pane fetches both kinds (False)
        self.spot_rates: dict[str, float] | None = None  # provider → interruptions/hr (settings.toml, defaults)
        self.note = ""  # what the status line adds: "cached 3 min ago", SIMULATED

    def compose(self) -> ComposeResult:
        with Horizontal(id="of-filters"):
            yield Input(placeholder="max $/hr", id="of-max-price", type="number")
            yield Input(placeholder="GPUs", id="of-gpus", type="integer")
            yield Select([(p, p) for p in PROVIDERS], prompt="all providers", id="of-provider")
            yield Select(KINDS, value="both", allow_blank=False, id="of-spot")
            yield Checkbox("misfits", id="of-misfits")
        yield Label("Press r to fetch offers.", id="of-best")
        yield Label("", id="of-run")
        yield Label("", id="of-keys")
        yield Label("", id="of-status")
        yield Label("", id="of-spot-why")
        yield Label("", id="of-rent")
        yield OffersView(id="of-table")

    def on_mount(self) -> None:
        self._show_run()
        if self.cache_dir is not None or self.observed_path is not None:
            self.run_worker(self._load_cache(), group="offers-cache")

    def _load_rates(self) -> None:
        """Spot interruption rates: this user's measured ones (the spend ledger), over settings.toml's
        ``[offers] spot_interruptions_per_hour``, over the defaults (a broken settings.toml is reported by the
        Keys line and the fetch; the defaults apply meanwhile)."""
        from app.settings import data_dir, load_offer_settings
        from services.errors import PrimeTrainError
        from services.offers.spend import measured_spot_rates
        from services.offers.spot_risk import interruption_rates

        try:
            configured = load_offer_settings().spot_interruptions_per_hour
        except PrimeTrainError:
            configured = None
        self.spot_rates = interruption_rates(configured, measured_spot_rates(data_dir()))

    async def _load_cache(self) -> None:
        from services.offers import cache
        from services.offers.calibration import ObservationLog

        self._load_rates()
        if self.observed_path is not None:
            self.observed = ObservationLog(self.observed_path).load()
        if self.fetcher in (default_fetcher, demo_fetcher):
            self.show_keys()
        hits = [
            h
            for kind in (False, True)
            if self.cache_dir and (h := cache.load(self.cache_dir, kind, self.clock(), self.cache_ttl)) is not None
        ]
        if not hits and self.fetcher is demo_fetcher and self.fetched_spot is None:
            self.action_refresh_offers()  # the demo shows offers at once
            return
        if not hits or self.fetched_spot is not None:
            return
        self.result = FetchResult(tuple(o for result, _ in hits for o in result.offers))
        age = max(a for _, a in hits)
        self.fetched_spot = False
        self.note = f"cached {max(1, round(age / 60))} min ago — r refreshes"
        self.apply_filters()

    # ------------------------------------------------------------------ the run being priced
    def use_config(self, data: dict[str, Any] | None, name: str = "the config") -> None:
        """Price the run this prime-rl config describes (the Config pane's current text)."""
        from services.offers.ranking import run_spec_from_config
        from services.offers.sizing import size_note, sizing_model

        if not isinstance(data, dict):
            return
        spec, notes = run_spec_from_config(data)
        if sizing_model(spec.model) is None:
            notes.append(f"{spec.model} is not in the model registry: priced as {self.run.model}")
            spec = replace(spec, model=self.run.model)
        elif note := size_note(spec.model):
            notes.append(note)
        if spec == self.run and not notes:
            return
        self.run, self.run_source = spec, f"{name}" + (f" ({'; '.join(notes)})" if notes else "")
        self._show_run()
        if self.result.offers:
            self.apply_filters()

    def _show_run(self) -> None:
        r = self.run
        set_label(
            self.query_one("#of-run", Label),
            f"Pricing {r.model} on {r.gpu_need()}, {r.steps} steps × {r.train_tokens_per_step:,} tokens — "
            f"{self.run_source}",
        )

    def show_keys(self) -> None:
        """Which providers have a key and where it came from (masked), or how to set one."""
        from app.settings import load_offer_settings
        from services.errors import PrimeTrainError
        from services.offers.keys import find_keys

        try:
            keys = find_keys(settings=load_offer_settings())
        except PrimeTrainError as exc:
            set_label(self.query_one("#of-keys", Label), f"settings.toml: {exc}")
            return
        from services.offers.providers import PROVIDERS as ALL

        parts = [f"{n} ✓ {keys[n].masked}" if n in keys else f"{n} ✗ set {p.key_env}" for n, p in ALL.items()]
        set_label(self.query_one("#of-keys", Label), "Keys: " + " · ".join(parts))

    def set_rent_status(self, text: str) -> None:
        set_label(self.query_one("#of-rent", Label), text)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        ranked = self.query_one(OffersView).ranked_for(event.row_key.value)
        if ranked is None:
            return
        if not ranked.fits:
            self.notify(f"{ranked.offer.title} does not fit: {ranked.reason}", severity="warning")
            return
        self.post_message(self.RentRequested(ranked))

    # ------------------------------------------------------------------ actions
    def action_refresh_offers(self) -> None:
        set_label(self.query_one("#of-status", Label), "Fetching offers…")
        self.run_worker(self._refresh(), exclusive=True, group="offers", name="fetching offers")

    def action_toggle_misfits(self) -> None:
        box = self.query_one("#of-misfits", Checkbox)
        box.value = not box.value

    async def _refresh(self) -> None:
        from services.errors import SettingsError

        status = self.query_one("#of-status", Label)
        if self.spot_rates is None:
            self._load_rates()
        try:
            result = await self.fetcher(None)  # both kinds: the kind filter narrows without a refetch
        except SettingsError as exc:  # settings.toml [offers] (keys, URLs) is wrong: say where, keep the table
            set_label(status, f"Not fetched — settings.toml: {exc}")
            self.notify(f"{exc}\n{exc.hint}".strip(), severity="error", title="Offers: settings.toml", timeout=15)
            return
        except Exception:
            set_label(status, "Fetching offers failed (see the error message); r tries again.")
            raise  # the App's worker hub reports it
        self.result = result
        self.fetched_spot = False
        simulated = bool(self.result.offers) and all(o.params.get("simulated") for o in self.result.offers)
        if simulated:
            from services.demo.offers import NOTE

            self.note = NOTE
        else:
            self.note = ""
        self.apply_filters()
        if not simulated and self.cache_dir is not None and self.result.offers:
            from services.offers import cache

            try:  # one cache per kind
                for kind in (False, True):
                    cache.save(
                        self.cache_dir,
                        kind,
                        FetchResult(tuple(o for o in self.result.offers if o.spot == kind)),
                        self.clock(),
                    )
            except OSError:
                pass  # costs a refetch next time, nothing else

    # ------------------------------------------------------------------ filters
    def on_input_changed(self, event: Input.Changed) -> None:
        if self.debounce is None and len(self.result.offers) > DEBOUNCE_OVER:
            if self._pending is None:
                self._pending = True
                self.call_after_refresh(self._apply_pending)
            return
        self._stop_pending()
        if self.debounce and len(self.result.offers) > DEBOUNCE_OVER:
            self._pending = self.set_timer(self.debounce, self._apply_pending)
        else:
            self.apply_filters()

    def _stop_pending(self) -> None:
        if self._pending is not None and self._pending is not True:
            self._pending.stop()
        self._pending = None

    def _apply_pending(self) -> None:
        if self._pending is None:  # filtered since, for another reason
            return
        self._pending = None
        self.apply_filters()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.apply_filters()

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        self.apply_filters()

    def _why_none(self) -> str:
        """Why the table is empty, the real reason first: no keys, every provider failed, or the filters."""
        fetched, errors = self.result.offers, self.result.errors
        if fetched:
            return f"No offer fits the filters ({len(fetched)} offers fetched: widen the filters or tick misfits)."
        if self.fetched_spot is None:
            return "Press r to fetch offers."
        from services.offers.providers import PROVIDERS

        missing = [e for e in errors if e.message.startswith("no API key")]
        if errors and len(missing) == len(errors) == len(PROVIDERS):
            names = ", ".join(p.key_env for p in PROVIDERS.values())
            return (
                f"No provider API key is set, so there is nothing to show: set one of {names} "
                "(in the environment or settings.toml [offers]) and press r."
            )
        if errors:
            return "No offers: " + "; ".join(f"{e.provider}: {e.message}" for e in errors)
        return "The providers returned no offers right now; press r to ask again."

    def _float(self, wid: str) -> float | None:
        try:
            return float(self.query_one(wid, Input).value)
        except ValueError:
            return None

    def apply_filters(self) -> None:
        self._stop_pending()  # a re-rank for another reason includes the typed value
        note = self.note
        price = self._float("#of-max-price")
        count = self._float("#of-gpus")
        provider = self.query_one("#of-provider", Select).value
        kind = self.query_one("#of-spot", Select).value
        self.ranked = ranked = rank(
            self.result.offers,
            self.run,
            max_price=price,
            spot=KIND_SPOT.get(kind) if isinstance(kind, str) else None,
            gpus=int(count) if count else None,
            providers=[provider] if isinstance(provider, str) else None,
            include_misfits=self.query_one("#of-misfits", Checkbox).value,
            observed=self.observed,
            spot_rates=self.spot_rates,
        )
        view = self.query_one(OffersView)
        view.show(self.ranked)
        set_label(self.query_one("#of-spot-why", Label), spot_line(ranked.risks(), self.run))
        top = best(self.ranked)
        set_label(
            self.query_one("#of-best", Label),
            f"Best $/completion: {top.offer.provider} {top.offer.gpu_count}× {top.offer.gpu_type} "
            f"{top.offer.region} — ${top.est_cost:.2f} in {duration(top.est_hours * 3600)} "
            f"at ${top.offer.price_hr:.2f}/hr"
            + (" (✓ = time measured on your earlier runs)" if ranked.any_measured() else "")
            if top
            else self._why_none(),
        )
        errors = "; ".join(f"{e.provider}: {e.message}" for e in self.result.errors)
        n = len(self.result.offers)
        hidden = view.hidden
        shown = (
            f"showing the top {len(self.ranked) - hidden} of {len(self.ranked):,} matching offers ({n:,} fetched)"
            " — narrow the filters to see the rest"
            if hidden
            else f"{len(self.ranked)} of {n} offers shown"
        )
        set_label(
            self.query_one("#of-status", Label),
            shown
            + (f" · {note}" if note else "")
            + (f" · failed: {errors}" if errors else "")
            + " · enter rents the highlighted offer",
        )


def spot_line(risks: list[SpotRisk], run: RunSpec) -> str:
    """The one line explaining a spot row's Est. $ range (empty when no spot offer is shown): ``risks``, those
    of the rows shown (:meth:`Rankings.risks`)."""
    if not risks:
        return ""
    rates = sorted({r.rate for r in risks})
    rate = f"{rates[0]:g}" if len(rates) == 1 else f"{rates[0]:g}–{rates[-1]:g}"
    lost = (
        f"half a {run.ckpt_interval}-step checkpoint interval"
        if run.ckpt_interval and run.ckpt_interval < run.steps
        else "the run so far (no checkpoints)"
    )
    notes = sorted({r.note for r in risks if r.note})
    return escape(
        f"Spot Est. $ = not preempted – expected: {rate} preemptions/hr, each losing {lost} + restart"
        + "".join(f" · ⚠ {n}" for n in notes)
    )
