"""Idle rentals: a rented pod whose monitor snapshot carries an idle figure (services/monitor/idle.py: every GPU
~0 % and ~0 memory with no live run for the whole ``[health] idle_minutes``) is pushed once per idle streak.
With ``[watch] terminate_idle = true`` it is then terminated through the verified terminate
(services.offers.launch.terminate_rental) AFTER a final backup of its run's newest complete checkpoint, as the
budget does (services/watch/budget.py's final_backup): no bucket, an unreachable pod or a backup that does not
verify keep the pod (said once, retried every pass). A pod with no run dir has nothing the app knows of to
back up and is terminated. Only pods rented here (an open, non-provisional rental) are touched."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.models import IdleFigure, Pod, PodSnapshot
from services.offers.rentals import AuditLog, Rental
from services.watch.budget import _short, final_backup

if TYPE_CHECKING:
    from services.pod.connection import Connection

log = logging.getLogger("services.watch")


@dataclass(frozen=True)
class IdleEvent:
    kind: str  # idle | backed-up | terminated | failed
    rental: Rental
    message: str
    idle: IdleFigure
    step: int | None = None


class IdleWatch:
    def __init__(
        self,
        audit: AuditLog,
        *,
        terminate: bool = False,
        backup: Any = None,
        connect: Callable[[Pod], Connection] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.audit, self.terminate, self.backup, self.connect = audit, terminate, backup, connect
        self.clock, self.sleep = clock, sleep
        self.pushed: dict[str, float] = {}  # pod id -> the idle streak (its start) already pushed
        self.failed: set[str] = set()  # pod ids whose idle termination failed: said once, retried silently

    async def check(
        self,
        providers: Any,
        snapshots: Mapping[str, PodSnapshot],
        rentals: list[Rental],
        pod_for: Callable[[Rental], Pod | None],
    ) -> list[IdleEvent]:
        events: list[IdleEvent] = []
        for r in rentals:
            if r.provisional:
                continue
            pod = pod_for(r)
            snap = snapshots.get(pod.name) if pod is not None else None
            idle = snap.idle if snap is not None else None
            if idle is None:
                self.pushed.pop(r.pod_id, None)
                self.failed.discard(r.pod_id)
                continue
            wasted = idle.wasted_usd if idle.wasted_usd is not None else round(r.price_hr * idle.seconds / 3600, 2)
            figure = IdleFigure(idle.since, idle.seconds, wasted)
            if self.pushed.get(r.pod_id) != idle.since:
                self.pushed[r.pod_id] = idle.since
                events.append(
                    IdleEvent(
                        "idle",
                        r,
                        f"{r.name}: GPUs idle with no run — {figure.label}; it keeps "
                        f"billing ${r.price_hr:.2f}/hr"
                        + (
                            ". It is terminated after a final backup"
                            if self.terminate
                            else f" (terminate it: prime-train-tui rentals --terminate {r.name}; or set "
                            "[watch] terminate_idle = true)"
                        ),
                        figure,
                    )
                )
            if self.terminate and providers is not None:
                events.extend(await self._end(providers, r, pod, figure))
        return events

    async def _end(self, providers: Any, r: Rental, pod: Pod | None, idle: IdleFigure) -> list[IdleEvent]:
        from services.offers.launch import terminate_rental

        events: list[IdleEvent] = []
        step: int | None = None
        if pod is not None and pod.run_dir:
            try:
                step = await final_backup(r, self.backup, pod, self.connect)
            except Exception as exc:  # noqa: BLE001 - every failure keeps the pod, says why
                return self._failed(
                    r,
                    idle,
                    f"is idle ({idle.label}) but NOT terminated: the final backup failed "
                    f"({_short(exc)}). It keeps billing ${r.price_hr:.2f}/hr: back it up and "
                    f"terminate it by hand (prime-train-tui rentals --terminate {r.name})",
                )
            events.append(
                IdleEvent(
                    "backed-up",
                    r,
                    f"{r.name}: final backup before the idle termination: "
                    + (
                        f"step {step} verified in the bucket"
                        if step is not None
                        else "no complete checkpoint on the pod, nothing to back up"
                    ),
                    idle,
                    step,
                )
            )
        try:
            outcome = await terminate_rental(
                providers, r, self.audit, reason="idle", now=self.clock(), sleep=self.sleep
            )
        except Exception as exc:  # noqa: BLE001 - ProviderFailure, NotConfirmed and any transport error
            return events + self._failed(
                r,
                idle,
                f"is idle ({idle.label}); terminating it failed ({_short(exc)}); "
                "retrying every pass — check the provider's console",
            )
        events.append(
            IdleEvent(
                "terminated",
                r,
                f"{r.name} terminated after {idle.label} ({outcome})"
                + (f"; step {step} is in the bucket" if step is not None else ""),
                idle,
                step,
            )
        )
        return events

    def _failed(self, r: Rental, idle: IdleFigure, why: str) -> list[IdleEvent]:
        if r.pod_id in self.failed:
            log.info("idle termination of %s still blocked: %s", r.name, why[:200])
            return []
        self.failed.add(r.pod_id)
        return [IdleEvent("failed", r, f"{r.name} {why}", idle)]
