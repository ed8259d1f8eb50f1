"""Renting a pod from an offer: create it through the provider's API with a price cap, poll until SSH
answers, terminate it on request or at its deadline. Every spending action goes to the audit log.

Price caps: Prime Intellect takes ``maxPrice`` and refuses to start above it; Vast bids are the
offer's minimum bid and never above the cap; Vast on-demand and Lambda have no cap in the API, so the
price is checked against the cap before the create and again in every status answer — a pod that
reports more than the cap is terminated at once. RunPod offers are listed only: renting one is refused
(:func:`not_rentable`) before any request, since its pod API is not implemented. Creates are never
retried blindly (a retry could start a second billed pod): when the answer is lost, the provider's pod
list is searched by name, a few times; until it shows the pod (or, after ``GONE_GRACE``, shows there is
none) the rental stays open as provisional ("creating?") and is looked for again on every deadline pass,
at app start and by the ``rentals`` command. While one is, a create at that provider is refused unless the
user named it (``also``): rentals.AuditLog.claim, under the audit log's lock, for every app and process.

Money rule: a rental is never closed on absence alone. A rejected key (401/403, Vast's 404 "Invalid user
key") says nothing about the pod: it is raised as "VAST key rejected — the pod may still be billing" and
the rental stays open with its deadline. A 404 about the pod, or a status answer that does not mention
it, is ``unknown``; only the provider's list of the account's pods (no such pod, or listed as ended) —
and for a pod younger than ``GONE_GRACE``, not even that — closes it."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import httpx

from services.errors import PodSpecError
from services.offers._http import RetryPolicy
from services.offers.models import Listed, Offer, PodAccess, ProviderFailure
from services.offers.rentals import AuditLog, Rental, default_deadline, due_warnings, overdue, still_starting
from services.offers.settings import OfferSettings
from services.pod.specs import ssh_host, ssh_user
from services.text import plain

CAP_MARGIN = 0.10  # default max price: 10 % above the listed price
READY_TIMEOUT = 20 * 60.0
SSH_TIMEOUT = 5 * 60.0
GONE_GRACE = 10 * 60.0  # a pod younger than this may not be in the provider's list yet
RECONCILE_WAITS = (0.0, 5.0, 15.0)  # find by name after a lost create answer: now, +5 s, +20 s
# after an accepted terminate the pod is listed again: now, then backing off (~1 min in all) until gone
VERIFY_WAITS = (0.0, 2.0, 4.0, 8.0, 16.0, 30.0)


def not_rentable(provider: str) -> str | None:
    """Why this provider's offers cannot be rented from here (its module sets ``RENTABLE = False``: RunPod,
    whose pod API is not implemented), else None. Checked before any request or audit record."""
    from services.offers.providers import PROVIDERS

    mod = PROVIDERS[provider].module if provider in PROVIDERS else None
    if mod is None or getattr(mod, "RENTABLE", True):
        return None
    return str(getattr(mod, "NOT_RENTABLE", f"renting {provider} pods from here is not supported"))


def _module(provider: str) -> ModuleType:
    """The provider's pod API (create/status/terminate/find/pods); a listing-only provider is refused."""
    from services.offers.providers import PROVIDERS

    if provider not in PROVIDERS:
        raise ProviderFailure(f"unknown provider {provider!r}")
    if why := not_rentable(provider):
        raise ProviderFailure(why)
    return PROVIDERS[provider].module


class Providers:
    """The providers' pod APIs behind one httpx client, keys and base URLs (keys never leave here)."""

    def __init__(
        self,
        keys: Mapping[str, str],
        urls: Mapping[str, str] | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        teams: Mapping[str, str] | None = None,
    ) -> None:
        from services.offers.providers import base_urls

        self._keys = dict(keys)
        self.teams = dict(teams or {})  # provider -> the team a pod is created for (services.offers.keys.find_teams)
        self.retry = retry  # for status/terminate (creates are never retried)
        self.urls = {**base_urls({}), **(urls or {})}
        self._own = client is None
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))

    @classmethod
    def configured(cls, settings: OfferSettings) -> Providers:
        """The providers with this user's keys, base URLs and teams: the environment, the providers' own CLI
        files, then settings.toml (services.offers.keys)."""
        from services.offers.keys import find_keys, find_teams, find_urls

        return cls(
            {n: k.key for n, k in find_keys(settings=settings).items()},
            find_urls(settings=settings),
            teams=find_teams(),
        )

    def has_key(self, provider: str) -> bool:
        return bool(self._keys.get(provider))

    def _key(self, provider: str) -> str:
        from services.offers.providers import PROVIDERS

        key = self._keys.get(provider)
        if not key:
            env = PROVIDERS[provider].key_env if provider in PROVIDERS else "the provider's key"
            raise ProviderFailure(f"no API key for {provider}: set {env}")
        return key

    async def create(
        self, offer: Offer, *, name: str, max_price: float, disk_gb: int | None = None, image: str | None = None
    ) -> str:
        mod = _module(offer.provider)
        team = {"team_id": t} if (t := self.teams.get(offer.provider)) else {}
        return await mod.create(
            self.client,
            self._key(offer.provider),
            offer,
            name=name,
            max_price=max_price,
            disk_gb=disk_gb,
            image=image,
            base_url=self.urls[offer.provider],
            **team,
        )

    async def status(self, provider: str, pod_id: str) -> PodAccess:
        with _key_rejected(provider):
            access = await _module(provider).status(
                self.client, self._key(provider), pod_id, base_url=self.urls[provider], retry=self.retry
            )
        return checked_access(access)

    async def terminate(self, provider: str, pod_id: str) -> str:
        with _key_rejected(provider):
            return await _module(provider).terminate(
                self.client, self._key(provider), pod_id, base_url=self.urls[provider], retry=self.retry
            )

    async def find(self, provider: str, name: str) -> str | None:
        with _key_rejected(provider):
            return await _module(provider).find(self.client, self._key(provider), name, base_url=self.urls[provider])

    async def pods(self, provider: str) -> list[Listed] | None:
        """The account's pods at this provider; None when the list cannot prove absence (odd or truncated)."""
        with _key_rejected(provider):
            return await _module(provider).pods(self.client, self._key(provider), base_url=self.urls[provider])

    async def aclose(self) -> None:
        if self._own:
            await self.client.aclose()

    async def __aenter__(self) -> Providers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def checked_access(access: PodAccess) -> PodAccess:
    """The provider's SSH host and user checked and normalised (an IPv6 address in one spelling) before
    anything saves them to pods.toml or connects: garbage there would make pods.toml unreadable or reach
    the wrong place. A ready pod with an unusable one stays "pending" with the reason — never terminated
    on it: the provider may still correct it, and its deadline applies."""
    if not access.host:
        return access
    try:
        return replace(access, host=ssh_host(access.host), user=ssh_user(access.user), port=_port(access.port))
    except PodSpecError as exc:
        state = "pending" if access.state == "ready" else access.state
        return replace(access, state=state, host="", message=f"the provider gives an unusable SSH address: {exc}")


def _port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise PodSpecError(f"not a usable SSH port: {str(port)[:20]!r}")
    return port


@contextmanager
def _key_rejected(provider: str) -> Iterator[None]:
    """A rejected key becomes the message the user must act on: nothing is known about the pod."""
    try:
        yield
    except ProviderFailure as exc:
        if not exc.auth:
            raise
        from services.offers.providers import PROVIDERS

        who = PROVIDERS[provider].key_env.split("_")[0] if provider in PROVIDERS else provider
        raise ProviderFailure(
            f"{who} key rejected ({exc}) — the pod may still be billing: check the console", exc.status, auth=True
        ) from None


# ----------------------------------------------------------------------------------------- gone or not
async def confirm_gone(providers: Providers, rental: Rental, now: float, *, grace: float = GONE_GRACE) -> str | None:
    """Why the pod is over when the provider's list of the account's pods shows it (no pod with its id or
    name, or listed as ended), else None — also when the list cannot tell (odd, truncated) or the pod is
    younger than ``grace``. Raises ProviderFailure when the list cannot be had."""
    listed = await providers.pods(rental.provider)
    if listed is None:
        return None
    mine = [p for p in listed if (rental.pod_id and p.id == rental.pod_id) or (rental.name and p.name == rental.name)]
    if any(not p.ended for p in mine):
        return None
    if mine:
        return f"the provider lists it as {mine[0].state}"
    if now - rental.created_at < grace:
        return None
    return f"the provider's list of pods has no {rental.pod_id or rental.name}"


async def resolve_provisional(
    providers: Providers, audit: AuditLog, now: float, *, grace: float = GONE_GRACE
) -> list[tuple[Rental, str]]:
    """Match each provisional rental ("creating?") to a pod by name: found → a ``create`` record opens the
    real rental (its deadline applies); the provider's list showing none ``grace`` seconds after the
    request → ``create-failed`` closes it; otherwise it stays. Returns (rental, "found" | "none" | "waiting"
    | the error) per provisional rental; a provider that fails leaves its rentals as they are."""
    out: list[tuple[Rental, str]] = []
    for r in [r for r in audit.open_rentals() if r.provisional]:
        try:
            pod_id = await providers.find(r.provider, r.name)
            gone = None if pod_id else await confirm_gone(providers, r, now, grace=grace)
        except ProviderFailure as exc:
            out.append((r, str(exc)))
            continue
        if pod_id:
            rental = replace(r, pod_id=pod_id, provisional=False)
            audit.append(
                "create",
                now=now,
                provider=r.provider,
                pod_id=pod_id,
                rental=rental.to_json(),
                reason="found by name after the create answer was lost",
            )
            out.append((rental, "found"))
        elif gone:
            audit.append(
                "create-failed",
                now=now,
                provider=r.provider,
                name=r.name,
                reason=f"no pod named {r.name}: {gone} {(now - r.created_at) / 60:.0f} min after the request",
            )
            out.append((r, "none"))
        else:
            out.append((r, "waiting"))
    return out


# ----------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class LaunchPlan:
    offer: Offer
    name: str
    max_price: float
    deadline: float | None
    est_hours: float
    est_cost: float
    disk_gb: int | None = None
    image: str | None = None

    def worst_case(self, now: float) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - now) / 3600 * self.max_price


def pod_name(offer: Offer, now: float) -> str:
    """A short name that is a valid hostname and label: ``vast-h100x8-k3f9a``."""
    gpu = re.sub(r"[^a-z0-9]+", "", offer.gpu_type.lower()) or "gpu"
    stamp = format(int(now) % 36**5, "x")[-5:]
    return f"{offer.provider[:6]}-{gpu}x{offer.gpu_count}-{stamp}"


def plan_launch(
    offer: Offer,
    est_hours: float,
    *,
    now: float,
    cap_margin: float = CAP_MARGIN,
    deadline_margin: float = 0.25,
    name: str | None = None,
) -> LaunchPlan:
    """Defaults: cap = price + 10 % rounded up to the cent, deadline = estimate × 1.25 + 30 min setup."""
    cap = math.ceil(offer.price_hr * (1 + cap_margin) * 100) / 100
    return LaunchPlan(
        offer,
        name or pod_name(offer, now),
        cap,
        default_deadline(now, est_hours, margin=deadline_margin),
        est_hours,
        est_hours * offer.price_hr,
    )


# ----------------------------------------------------------------------------------------- events
@dataclass(frozen=True)
class LaunchEvent:
    kind: str  # step | created | status | ready | failed | pending (nothing sent: see ``pending``)
    message: str
    rental: Rental | None = None
    access: PodAccess | None = None
    pending: tuple[Rental, ...] = ()  # "pending": the provisional rentals at this provider not named in ``also``

    @property
    def final(self) -> bool:
        return self.kind in ("ready", "failed", "pending")


SshCheck = Callable[[str, int, float], Awaitable[bool]]


async def ssh_banner(host: str, port: int, timeout: float = 5.0) -> bool:
    """True when something at host:port speaks SSH (sends an ``SSH-`` banner)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
        return line.startswith(b"SSH-")
    except (OSError, asyncio.TimeoutError):
        return False
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def launch_offer(
    providers: Providers,
    plan: LaunchPlan,
    audit: AuditLog,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    poll: float = 5.0,
    ready_timeout: float = READY_TIMEOUT,
    ssh_timeout: float = SSH_TIMEOUT,
    ssh_ready: SshCheck = ssh_banner,
    also: Collection[str] = (),
) -> AsyncIterator[LaunchEvent]:
    """``also``: the provisional rentals at this provider the user was shown and rents beside; any other
    one open at the moment of renting (read under the audit log's lock) stops the launch with a "pending"
    event before anything is sent (rentals.still_starting says why)."""
    offer = plan.offer
    if why := not_rentable(offer.provider):  # before the audit log and any request: nothing is spent
        yield LaunchEvent("failed", why)
        return
    if offer.price_hr > plan.max_price:
        yield LaunchEvent(
            "failed", f"${offer.price_hr:.2f}/hr is above the cap ${plan.max_price:.2f}/hr: nothing created"
        )
        return
    requested = clock()
    open_ones = await asyncio.to_thread(  # a thread: the lock may be another process's for a moment
        audit.claim,
        offer.provider,
        plan.name,
        also=frozenset(also),
        now=requested,
        offer=offer.id,
        title=offer.title,
        price_hr=offer.price_hr,
        max_price=plan.max_price,
        deadline=plan.deadline,
        est_cost=plan.est_cost,
    )
    if open_ones:
        yield LaunchEvent("pending", still_starting(open_ones, requested), pending=tuple(open_ones))
        return
    yield LaunchEvent("step", f"creating {offer.title} at ≤ ${plan.max_price:.2f}/hr…")
    try:
        pod_id = await providers.create(
            offer, name=plan.name, max_price=plan.max_price, disk_gb=plan.disk_gb, image=plan.image
        )
    except ProviderFailure as exc:
        if not exc.uncertain:
            audit.append("create-failed", now=clock(), provider=offer.provider, name=plan.name, reason=str(exc))
            yield LaunchEvent("failed", f"{offer.provider} refused: {exc}")
            return
        yield LaunchEvent("step", f"no answer to the create ({exc}); looking for {plan.name} by name…")
        found = await _reconcile(providers, plan, sleep)
        if found is None:
            yield LaunchEvent(
                "failed",
                f"the create answer was lost ({exc}) and {offer.provider} does not list "
                f"{plan.name} yet: it may be billing. It stays in the rentals as 'creating?' and is "
                f"looked for by name until found or the provider's list shows none "
                f"({GONE_GRACE / 60:.0f} min) — check the {offer.provider} console",
            )
            return
        pod_id = found
    rental = Rental(
        plan.name,
        offer.provider,
        pod_id,
        offer.title,
        offer.price_hr,
        plan.max_price,
        requested,
        plan.deadline,
        plan.est_cost,
        spot=bool(offer.spot),
    )
    audit.append("create", now=clock(), provider=offer.provider, pod_id=pod_id, rental=rental.to_json())
    yield LaunchEvent("created", f"{offer.provider} pod {pod_id} created; waiting for it to start", rental)

    started, last, access = clock(), "", None
    while True:
        try:
            access = await providers.status(offer.provider, pod_id)
        except ProviderFailure as exc:
            access = PodAccess(pod_id, "pending", message=f"status check failed: {exc}")
        if access.price_hr is not None and access.price_hr > plan.max_price + 1e-9:
            reason = f"the provider charges ${access.price_hr:.2f}/hr, above the cap ${plan.max_price:.2f}/hr"
            yield await _give_up(providers, rental, audit, clock, reason)
            return
        if access.state == "ready":
            break
        if access.state == "failed":
            yield await _give_up(providers, rental, audit, clock, f"the pod failed: {access.message}")
            return
        if access.state == "terminated":
            audit.append("gone", now=clock(), provider=offer.provider, pod_id=pod_id, reason=access.message)
            yield LaunchEvent("failed", f"the provider terminated the pod ({access.message})", rental, access)
            return
        if access.state == "unknown":  # absent from the answer: gone only when the provider's list says so
            try:
                gone = await confirm_gone(providers, rental, clock())
            except ProviderFailure as exc:
                gone, access = None, replace(access, message=f"{access.message}; listing pods failed: {exc}")
            if gone:
                audit.append(
                    "gone",
                    now=clock(),
                    provider=offer.provider,
                    pod_id=pod_id,
                    name=rental.name,
                    reason=f"{access.message}; {gone}",
                )
                yield LaunchEvent("failed", f"the pod is gone ({gone})", rental, access)
                return
        if access.message != last:
            last = access.message
            yield LaunchEvent("status", access.message, rental, access)
        if clock() - started > ready_timeout:
            yield LaunchEvent(
                "failed",
                f"not ready after {ready_timeout / 60:.0f} min ({access.message}); the pod "
                "is kept and its deadline still applies — press T to terminate it",
                rental,
                access,
            )
            return
        await sleep(poll)

    if access.price_hr is not None and access.price_hr != rental.price_hr:
        rental = replace(rental, price_hr=access.price_hr)
    yield LaunchEvent("status", f"running at {access.target}; waiting for SSH", rental, access)
    ssh_started = clock()
    while not await ssh_ready(access.host, access.port, 5.0):
        if clock() - ssh_started > ssh_timeout:
            yield LaunchEvent(
                "failed",
                f"{access.target} does not answer SSH after {ssh_timeout / 60:.0f} min; "
                "the pod is kept — press T to terminate it",
                rental,
                access,
            )
            return
        await sleep(poll)
    audit.append(
        "ready", now=clock(), provider=offer.provider, pod_id=pod_id, target=access.target, price_hr=rental.price_hr
    )
    yield LaunchEvent("ready", f"{plan.name} is up at {access.target}", rental, access)


async def _reconcile(providers: Providers, plan: LaunchPlan, sleep: Callable[[float], Awaitable[Any]]) -> str | None:
    """After a create whose answer was lost (timeout, connection, 5xx, a 2xx without an id), look for the
    pod by name a few times: a new pod may take seconds to show in the provider's list."""
    for wait in RECONCILE_WAITS:
        if wait:
            await sleep(wait)
        try:
            pod_id = await providers.find(plan.offer.provider, plan.name)
        except ProviderFailure:
            continue
        if pod_id:
            return pod_id
    return None


async def _give_up(
    providers: Providers, rental: Rental, audit: AuditLog, clock: Callable[[], float], reason: str
) -> LaunchEvent:
    try:
        outcome = await terminate_rental(providers, rental, audit, reason=reason, now=clock())
    except ProviderFailure as exc:
        return LaunchEvent(
            "failed",
            f"{reason}; terminating it FAILED ({exc}) — terminate pod {rental.pod_id} in the {rental.provider} console",
            rental,
        )
    return LaunchEvent("failed", f"{reason}; pod terminated ({outcome})", rental)


class NotConfirmed(ProviderFailure):
    """The provider accepted the terminate but still lists the pod as running after :data:`VERIFY_WAITS`:
    it may still be billing. ``str()`` carries the provider's own words (its state, its status message)."""


async def verify_terminated(
    providers: Providers,
    rental: Rental,
    *,
    waits: Sequence[float] = VERIFY_WAITS,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> tuple[bool, str]:
    """After an accepted terminate: list the account's pods again (now, then after each of ``waits``) until
    the pod is no longer billed — absent from the list or listed as ended, or (when the list cannot tell: a
    truncated one) its status says terminated. (True, how it shows) then; else (False, what the provider
    last said about it). A list that fails is asked again at the next wait."""
    said = "no answer from the provider"
    for wait in waits:
        if wait:
            await sleep(wait)
        try:
            listed = await providers.pods(rental.provider)
            if listed is not None:
                mine = [p for p in listed if p.id == rental.pod_id]
                live = [p for p in mine if not p.ended]
                if not live:
                    return True, f"listed as {mine[0].state}" if mine else "no longer listed"
                pod = live[0]
                said = f"{rental.provider} still lists it as {pod.state or 'no state'!r}" + (
                    f": {pod.message}" if pod.message else ""
                )
                continue
            access = await providers.status(rental.provider, rental.pod_id)
        except ProviderFailure as exc:
            said = f"asking {rental.provider} failed: {exc}"
            continue
        if access.state == "terminated":
            return True, f"its status is {access.message or 'terminated'}"
        said = f"{rental.provider} reports it {access.state}" + (f": {access.message}" if access.message else "")
    return False, plain(said, oneline=True)[:300]


async def terminate_rental(
    providers: Providers,
    rental: Rental,
    audit: AuditLog,
    *,
    reason: str,
    now: float | None = None,
    waits: Sequence[float] = VERIFY_WAITS,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> str:
    """Terminate, verify (:func:`verify_terminated`: a destroy call that answers success while the instance
    keeps billing is a known failure of GPU clouds) and record it. A failure is recorded too and re-raised:
    the rental stays open, its deadline pass tries again. An accepted terminate the provider's list does not
    confirm is recorded as ``terminate-unconfirmed`` ("terminate requested, not confirmed") and raised as
    :class:`NotConfirmed` with the provider's own words."""
    try:
        outcome = await providers.terminate(rental.provider, rental.pod_id)
        if outcome == "already gone":  # a 404 about the pod: closed only when the pod list agrees
            gone = await confirm_gone(providers, rental, time.time() if now is None else now)
            if gone is None:
                raise ProviderFailure(
                    f"{rental.provider} answers 404 for pod {rental.pod_id} but its pod list does "
                    "not confirm it is gone"
                )
            outcome = f"already gone: {gone}"
        else:
            confirmed, said = await verify_terminated(providers, rental, waits=waits, sleep=sleep)
            if not confirmed:
                audit.append(
                    "terminate-unconfirmed",
                    now=now,
                    provider=rental.provider,
                    pod_id=rental.pod_id,
                    name=rental.name,
                    reason=reason,
                    outcome=outcome,
                    provider_says=said,
                    note="terminate requested, not confirmed",
                )
                raise NotConfirmed(
                    f"terminate requested ({outcome}) but not confirmed after {sum(waits):.0f} s: "
                    f"{said} — it may still be billing: check the {rental.provider} console"
                )
            outcome = f"{outcome}, {said}"
    except NotConfirmed:
        raise
    except ProviderFailure as exc:
        audit.append(
            "terminate-failed", now=now, provider=rental.provider, pod_id=rental.pod_id, reason=reason, error=str(exc)
        )
        raise
    audit.append(
        "terminate",
        now=now,
        provider=rental.provider,
        pod_id=rental.pod_id,
        name=rental.name,
        reason=reason,
        outcome=outcome,
        spent=round(rental.spent(time.time() if now is None else now), 2),
    )
    return outcome


# ----------------------------------------------------------------------------------------- deadlines
@dataclass(frozen=True)
class DeadlineEvent:
    kind: str  # warn | terminated | failed
    rental: Rental
    message: str


class DeadlineWatch:
    """One pass per ``check``: warn 15 min before a deadline (once), terminate rentals past it. The
    providers' client is only opened when a rental is open."""

    def __init__(
        self,
        audit: AuditLog,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.audit, self.clock, self.sleep = audit, clock, sleep
        self.warned: set[str] = set()
        self.failed: set[str] = set()  # reported once; retried silently on every pass

    async def check(self, providers: Providers) -> list[DeadlineEvent]:
        """Provisional rentals are matched by name first (found: their deadline applies from now on)."""
        now = self.clock()
        if any(r.provisional for r in self.audit.open_rentals()):
            await resolve_provisional(providers, self.audit, now)
        rentals = self.audit.open_rentals()
        events = [
            DeadlineEvent(
                "warn",
                r,
                f"{r.name} ({r.title}) will be terminated in "
                f"{max(1, round((r.deadline or now) - now) // 60)} min at its deadline",
            )
            for r in due_warnings(rentals, now, self.warned)
        ]
        for r in overdue(rentals, now):
            try:
                outcome = await terminate_rental(providers, r, self.audit, reason="deadline", now=now, sleep=self.sleep)
            except ProviderFailure as exc:
                if r.pod_id not in self.failed:
                    self.failed.add(r.pod_id)
                    what = (
                        "terminated at the deadline, NOT confirmed"
                        if isinstance(exc, NotConfirmed)
                        else "terminating at the deadline failed"
                    )
                    events.append(
                        DeadlineEvent(
                            "failed", r, f"{r.name}: {what} ({exc}); retrying every pass — check the provider's console"
                        )
                    )
            else:
                events.append(
                    DeadlineEvent(
                        "terminated", r, f"{r.name} terminated at its deadline ({outcome}); spent ≈ ${r.spent(now):.2f}"
                    )
                )
        return events

    async def run(
        self,
        providers: Callable[[], Providers],
        on_event: Callable[[DeadlineEvent], None],
        *,
        interval: float = 30.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        while True:
            if self.audit.open_rentals():
                async with providers() as p:
                    for ev in await self.check(p):
                        on_event(ev)
            await sleep(interval)
