"""The App's side of renting pods: the confirmation, the launch worker, ``T`` (terminate), the deadline
watch, the start-up question about rentals already past their deadline, and the rates real runs reach
(the Offers pane's calibration).

State lives in the audit log (services/offers/rentals.py), so a rental survives an app crash mid-launch:
at the next start it is still watched, and offered for termination when overdue. A rented pod joins the
sidebar (and pods.toml) with its price and deadline once SSH answers.

A rental whose create answer was lost stays "creating?" (provisional); while one is open at a provider,
renting there again asks first, naming it ("Rent ANOTHER pod anyway?", default No) — at Enter, and again at
the moment of renting, where the audit log is read under its lock (services/offers/rentals.AuditLog.claim):
one that another app or process opened meanwhile is asked about too, and nothing is sent without a yes."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from app.host import AppHost, DeadlineMoved, PodLost, PodRented, PodTerminated
from app.pane_registry import OFFERS
from app.screens.confirm import ConfirmScreen
from app.screens.rent import RentScreen
from services.models import Pod, PodKind
from services.offers.rentals import AuditLog, Rental, overdue
from services.text import plain

if TYPE_CHECKING:
    from textual.worker import Worker

    from services.models import PodSnapshot
    from services.offers.calibration import ObservationLog
    from services.offers.launch import DeadlineEvent, DeadlineWatch, LaunchEvent, LaunchPlan, Providers
    from services.offers.ranking import Ranked
    from services.offers.settings import OfferSettings

EXTEND = 3600.0  # "not now" on the overdue question moves the deadline this far


def default_providers() -> Providers:
    from app.settings import load_offer_settings
    from services.offers.launch import Providers

    return Providers.configured(load_offer_settings())


class Rentals:
    def __init__(
        self,
        app: AppHost,
        audit: AuditLog,
        *,
        providers: Callable[[], Providers] | None = None,
        clock: Callable[[], float] = time.time,
        settings: OfferSettings | None = None,
        watch_interval: float = 30.0,
        poll: float = 5.0,
        ssh_ready: Any = None,
    ) -> None:
        self.app, self.audit, self.clock = app, audit, clock
        self.providers = providers or default_providers
        if settings is not None:
            self.settings = settings
        self.watch_interval, self.poll, self.ssh_ready = watch_interval, poll, ssh_ready
        self.busy: set[str] = set()  # pod names being terminated
        self.key_warned: set[str] = set()  # pod ids whose provider rejected the key (said once)
        self._pass: Worker[None] | None = None  # the deadline watch's running pass
        self.watch: DeadlineWatch | None = None  # built by the first pass that finds an open rental

    @functools.cached_property
    def settings(self) -> OfferSettings:
        """settings.toml's ``[offers]``, read at first use (the Offers pane, a rental): its checks bring the offer
        models, the spot-risk rules and the providers' names, ~20 ms not needed for the first screen. A file that
        cannot be read is said once, as a warning, and the defaults apply."""
        from app.settings import load_offer_settings
        from services.errors import PrimeTrainError
        from services.offers.settings import OfferSettings

        try:
            return load_offer_settings()
        except PrimeTrainError as err:
            self.app.notify(f"{err} — offers use the defaults", severity="warning", timeout=10)
            return OfferSettings()

    @functools.cached_property
    def observations(self) -> ObservationLog:
        """The measured steps/hr log, opened by its first use (the Offers pane, a real run's first rate): its
        module brings the ranking and the config checks, ~10 ms not needed for the first screen."""
        from app.settings import data_dir
        from services.offers.calibration import NAME as OBSERVED, ObservationLog

        return ObservationLog(data_dir() / OBSERVED)

    def record_rate(self, snapshot: PodSnapshot) -> None:
        """The steps/hr a real run reaches on its GPUs, for the Offers pane's estimates (at most one line
        per model and GPU shape per 10 min; never from the simulated pod). Called for every snapshot."""
        run, latest = snapshot.run, snapshot.latest
        if (
            snapshot.pod.simulated
            or run is None
            or latest is None
            or not run.steps_per_hr
            or (run.step or 0) < 3
            or not latest.model
            or not latest.gpus
        ):
            return
        from services.offers.calibration import observation

        total = latest.gpus[0].mem_total
        ob = observation(
            latest.model,
            [g.name for g in latest.gpus],
            total / 2**30 if total else None,
            run.steps_per_hr,
            latest.tokens_per_step,
        )
        if ob is not None:
            try:
                self.observations.record(ob, self.clock())
            except OSError:
                pass  # losing one calibration point costs nothing

    # ------------------------------------------------------------------ start-up
    def start(self) -> None:
        """Ask about overdue rentals first, then start the deadline watch; rented pods missing from the
        sidebar (a launch the app was closed during) are looked up and brought back."""
        rentals = self.audit.open_rentals()
        if any(r.name not in self.app.pods for r in rentals):
            self.app.run_worker(self._adopt_missing(), name="rented pods", group="rent", exit_on_error=False)
        late = overdue(rentals, self.clock())
        if not late:
            self._start_watch()
            return
        lines = "\n".join(
            f"  • {r.name}: {r.title}, ${r.price_hr:.2f}/hr, ≈ ${r.spent(self.clock()):.2f} so far" for r in late
        )
        question = (
            f"{len(late)} rented pod(s) are past their auto-terminate deadline:\n{lines}\n\n"
            f"Terminate them now? (No moves each deadline {EXTEND / 3600:.0f} h later.)"
        )
        self.app.push_screen(
            ConfirmScreen(question, yes="Terminate now", no="Keep 1 h more"), partial(self._overdue_answered, late)
        )

    def _overdue_answered(self, late: list[Rental], yes: bool | None) -> None:
        if yes:
            for r in late:
                self.app.run_worker(
                    self._terminate(r, "overdue at start-up"), name=f"terminating {r.name}", exit_on_error=False
                )
        else:
            for r in late:
                deadline = self.clock() + EXTEND
                self.audit.append(
                    "deadline", provider=r.provider, pod_id=r.pod_id, deadline=deadline, reason="kept at start-up"
                )
                self.app.post_message(DeadlineMoved(r.name, deadline))
        self._start_watch()

    def _start_watch(self) -> None:
        """A pass now and every ``watch_interval`` s — each a short worker, and only when a rental is open
        (no long-lived worker: nothing to wait for when nothing is rented). The watch itself is built by the
        first pass that finds an open rental: its module loads the HTTP client (~55 ms of every start-up when it
        was built here, for the many users who rent nothing from the app)."""
        self._watch_pass()
        self.app.set_interval(self.watch_interval, self._watch_pass)

    def _watch_pass(self) -> None:
        """One pass at a time: a slow provider must not have a terminate in flight cancelled by the next."""
        if self._pass is not None and not self._pass.is_finished:
            return
        self._pass = self.app.run_worker(
            self._check_deadlines(), name="deadline watch", group="deadline-watch", exit_on_error=False
        )

    async def _check_deadlines(self) -> None:
        if not await asyncio.to_thread(self.audit.open_rentals):
            return
        if self.watch is None:
            from services.offers.launch import DeadlineWatch

            self.watch = DeadlineWatch(self.audit, clock=self.clock)
        async with self.providers() as providers:
            for ev in await self.watch.check(providers):
                self._deadline_event(ev)
            await self._check_gone(providers)

    async def _check_gone(self, providers: Providers) -> None:
        """A rented pod the monitor cannot reach: ask its provider. "Terminated" (a spot pod taken back,
        a pod deleted in the console) closes the rental and tells the preemption tracker at once, instead
        of after N minutes of SSH silence."""
        from services.models import PodState
        from services.offers.launch import confirm_gone
        from services.offers.models import ProviderFailure

        for r in self.audit.open_rentals():
            snap = self.app.snapshots.get(r.name)
            if r.provisional or r.name not in self.app.pods or snap is None or snap.status.state is PodState.ONLINE:
                continue
            try:
                access = await providers.status(r.provider, r.pod_id)
                # absent from the answer: gone only when the provider's own list of pods says so
                gone = (
                    access.message
                    if access.state == "terminated"
                    else await confirm_gone(providers, r, self.clock())
                    if access.state == "unknown"
                    else None
                )
            except ProviderFailure as exc:
                self._key_problem(r, exc)
                continue  # asked again next pass; the rental and its deadline stay
            if not gone:
                continue
            self.audit.append(
                "gone",
                provider=r.provider,
                pod_id=r.pod_id,
                name=r.name,
                reason=gone,
                spent=round(r.spent(self.clock()), 2),
            )
            self.app.post_message(PodLost(r.name))  # the preemption tracker: its run is interrupted
            self.app.notify(
                f"{r.provider} reports {r.name} terminated ({gone or 'gone'}): its run is "
                "marked interrupted. Restore from the bucket (Checkpoints) or let auto-resume act.",
                severity="error",
                title="Pod gone",
                timeout=30,
            )

    def record_preemption(self, pod: str, run_id: str) -> None:
        """A run marked interrupted: its rental (if the pod is one) gets its ``preempted`` record, which the spend
        ledger counts and the spot risk learns from (the watcher's record of the same outage is not doubled)."""

        async def record() -> None:
            try:
                await asyncio.to_thread(self.audit.record_preemption, pod, run_id, now=self.clock())
            except OSError as exc:  # AuditWriteError: the log did not take it; the run's own record says interrupted
                self.app.notify(str(exc), severity="warning", title="Preemption not recorded", markup=False)

        self.app.run_worker(record(), name=f"record preemption {pod}", group="rentals", exit_on_error=False)

    def _key_problem(self, r: Rental, exc: Exception) -> None:
        """A rejected key is said once per rental: the pod may be billing and nothing here can stop it."""
        if getattr(exc, "auth", False) and r.pod_id not in self.key_warned:
            self.key_warned.add(r.pod_id)
            self.app.notify(f"{r.name}: {exc}", severity="error", title="Provider key rejected", timeout=60)

    def _deadline_event(self, ev: DeadlineEvent) -> None:
        if ev.kind == "warn":
            self.app.notify(ev.message, severity="warning", title="Deadline in 15 min", timeout=30)
        elif ev.kind == "failed":  # the provider's own words are in it: never markup
            self.app.notify(plain(ev.message), severity="error", title="Terminate failed", timeout=60, markup=False)
        else:
            self.app.notify(ev.message, title="Deadline reached", timeout=15)
            self.app.post_message(PodTerminated(ev.rental.name))

    async def _adopt_missing(self) -> None:
        from services.offers.launch import confirm_gone, resolve_provisional
        from services.offers.models import ProviderFailure

        async with self.providers() as providers:
            if any(r.provisional for r in self.audit.open_rentals()):
                for r, outcome in await resolve_provisional(providers, self.audit, self.clock()):
                    if outcome not in ("found", "none"):
                        self.app.notify(
                            f"{r.name} ({r.title}) is 'creating?': its create answer was lost and "
                            f"{r.provider} does not list it yet ({outcome}). It may be billing — it is "
                            "looked for by name on every pass; check the provider's console.",
                            severity="warning",
                            title="Rented pod",
                            timeout=30,
                        )
            missing = [r for r in self.audit.open_rentals() if r.name not in self.app.pods and not r.provisional]
            for r in missing:
                try:
                    access = await providers.status(r.provider, r.pod_id)
                    gone = (
                        (access.message or "terminated while the app was closed")
                        if access.state == "terminated"
                        else await confirm_gone(providers, r, self.clock())
                        if access.state == "unknown"
                        else None
                    )
                except ProviderFailure as exc:
                    self.app.notify(
                        f"{r.name} ({r.title}) is rented but not in the sidebar, and {r.provider} did not "
                        f"answer ({exc}). The Spend view ($) lists it.",
                        severity="warning",
                        title="Rented pod",
                        timeout=20,
                    )
                    continue
                if gone:
                    self.audit.append("gone", provider=r.provider, pod_id=r.pod_id, name=r.name, reason=gone)
                elif access.state == "ready":
                    pod = Pod(
                        name=r.name,
                        kind=PodKind.SSH,
                        host=access.host,
                        user=access.user,
                        port=access.port,
                        price_per_hr=r.price_hr,
                        provider=r.provider,
                        provider_id=r.pod_id,
                        deadline=r.deadline,
                        saved=True,
                    )
                    self.app.post_message(PodRented(pod))
                    self.app.notify(f"{r.name} was rented and is up: back in the sidebar.", title="Rented pod")
                else:
                    self.app.notify(
                        f"{r.name} ({r.title}) is rented and {access.state} ({access.message}); it "
                        "bills until its deadline or until you terminate it in the provider's console.",
                        severity="warning",
                        title="Rented pod",
                        timeout=20,
                    )

    # ------------------------------------------------------------------ renting
    def request(self, ranked: Ranked) -> None:
        from services.offers.launch import not_rentable, plan_launch

        if ranked.offer.params.get("simulated"):
            self.app.notify(
                "A SIMULATED offer (--demo): there is nothing to rent. Set a provider key to see and rent real offers.",
                severity="warning",
                title="Demo",
            )
            return
        if why := not_rentable(ranked.offer.provider):  # RunPod: listed and ranked, rented in its console
            self.app.notify(why, severity="warning", title="Not rentable here", timeout=15)
            return

        plan = plan_launch(
            ranked.offer,
            ranked.est_hours,
            now=self.clock(),
            cap_margin=self.settings.cap_margin,
            deadline_margin=self.settings.deadline_margin,
        )
        plan = replace(plan, image=self.settings.image, disk_gb=self.settings.disk_gb)
        if plan.name in self.app.pods:
            plan = replace(plan, name=f"{plan.name}-{len(self.app.pods)}")
        open_ones = [r for r in self.audit.open_rentals() if r.provisional and r.provider == plan.offer.provider]
        if open_ones:  # a create there may have started a pod: asked first, and again at the moment of renting
            self._ask_another(plan, open_ones, (), self._rent_dialog)
            return
        self._rent_dialog(plan, ())

    def _rent_dialog(self, plan: LaunchPlan, also: tuple[str, ...]) -> None:
        self.app.push_screen(RentScreen(plan, clock=self.clock), partial(self._confirmed, also=also))

    def _ask_another(
        self,
        plan: LaunchPlan,
        open_ones: list[Rental],
        also: tuple[str, ...],
        then: Callable[[LaunchPlan, tuple[str, ...]], None],
    ) -> None:
        """The second confirmation, naming the provisional rentals at the provider (default: No). Yes goes
        on with those names in ``also``: only they are rented beside."""
        from services.offers.rentals import still_starting

        names = (*also, *(r.name for r in open_ones if r.name not in also))
        self.app.push_screen(
            ConfirmScreen(still_starting(open_ones, self.clock()), yes="Rent ANOTHER pod", no="No, do not rent"),
            lambda yes: then(plan, names) if yes else self._not_rented(open_ones),
        )

    def _not_rented(self, open_ones: list[Rental]) -> None:
        pane = self.app.mounted(OFFERS)
        if pane is not None:
            pane.set_rent_status(
                f"Not rented: {', '.join(r.name for r in open_ones)} may still be starting at "
                f"{open_ones[0].provider} (it is looked for by name; the Spend view, $, lists it)."
            )

    def _confirmed(self, plan: LaunchPlan | None, also: tuple[str, ...] = ()) -> None:
        if plan is not None:
            self._start_rent(plan, also)

    def _start_rent(self, plan: LaunchPlan, also: tuple[str, ...]) -> None:
        self.app.run_worker(self._rent(plan, also), name=f"renting {plan.name}", group="rent", exit_on_error=False)

    async def _rent(self, plan: LaunchPlan, also: tuple[str, ...] = ()) -> None:
        from services.offers.launch import launch_offer

        kw: dict[str, Any] = {"clock": self.clock, "poll": self.poll, "also": also}
        if self.ssh_ready is not None:
            kw["ssh_ready"] = self.ssh_ready
        async with self.providers() as providers:
            async for ev in launch_offer(providers, plan, self.audit, **kw):
                if ev.kind == "pending":  # another one opened since the dialog (this app or another): ask again
                    self._ask_another(plan, list(ev.pending), also, self._start_rent)
                    continue
                self._show(ev)

    def _show(self, ev: LaunchEvent) -> None:
        pane = self.app.mounted(OFFERS)
        if pane is not None:
            pane.set_rent_status(ev.message)
        if ev.kind == "created":
            self.app.notify(ev.message, title="Pod created — billing started", timeout=10)
        elif ev.kind == "failed":
            self.app.notify(ev.message, severity="error", title="Renting failed", timeout=30)
        elif ev.kind == "ready" and ev.access is not None and ev.rental is not None:
            r, a = ev.rental, ev.access
            pod = Pod(
                name=r.name,
                kind=PodKind.SSH,
                host=a.host,
                user=a.user,
                port=a.port,
                price_per_hr=r.price_hr,
                provider=r.provider,
                provider_id=r.pod_id,
                deadline=r.deadline,
                saved=True,
            )
            self.app.post_message(PodRented(pod))
            self.app.notify(f"{ev.message}. Its host key is asked for on first connect.", title="Pod ready", timeout=15)

    # ------------------------------------------------------------------ terminating
    def rental_for(self, pod: Pod) -> Rental | None:
        for r in self.audit.open_rentals():
            if r.provisional:  # no pod id to terminate yet
                continue
            if r.name == pod.name or (pod.provider_id and (r.provider, r.pod_id) == (pod.provider, pod.provider_id)):
                return r
        return None

    def terminate(self, pod: Pod, ckpt_note: str = "") -> None:
        rental = self.rental_for(pod)
        if rental is None:
            self.app.notify(
                f"{pod.name} was not rented through prime-train-tui (or is already terminated): "
                "terminate it in the provider's console.",
                severity="warning",
                title="Not a rental",
            )
            return
        if pod.name in self.busy:
            self.app.notify(f"{pod.name} is already being terminated.", severity="warning")
            return
        spent = rental.spent(self.clock())
        question = (
            f"Terminate {rental.title} ({rental.provider} pod {rental.pod_id})?\n"
            f"It has cost ≈ ${spent:.2f} so far at ${rental.price_hr:.2f}/hr. Everything on its disk is "
            f"lost{ckpt_note}."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.run_worker(
                    self._terminate(rental, "user"), name=f"terminating {rental.name}", exit_on_error=False
                )

        self.app.push_screen(ConfirmScreen(question, yes="Terminate", no="Keep it"), answered)

    async def _terminate(self, rental: Rental, reason: str) -> None:
        from services.offers.launch import terminate_rental
        from services.offers.models import ProviderFailure

        self.busy.add(rental.name)
        try:
            async with self.providers() as providers:
                outcome = await terminate_rental(providers, rental, self.audit, reason=reason, now=self.clock())
        except ProviderFailure as exc:
            from services.offers.launch import NotConfirmed

            title = "Terminate NOT confirmed: may still bill" if isinstance(exc, NotConfirmed) else "Terminate failed"
            self.app.notify(plain(f"{rental.name}: {exc}"), severity="error", title=title, timeout=60, markup=False)
            return
        finally:
            self.busy.discard(rental.name)
        self.app.notify(
            f"{rental.name} terminated ({outcome}); ≈ ${rental.spent(self.clock()):.2f} spent.", title="Terminated"
        )
        self.app.post_message(PodTerminated(rental.name))
