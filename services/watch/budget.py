"""Budgets per run: a rental's ``budget_usd`` (the rental record: ``rentals --budget NAME USD``).

At ``WARN_AT`` (80 %) of it the watcher warns once. At 100 % it warns once more, and — only when allowed
(``[watch] terminate_over_budget = true`` in settings.toml) — terminates the pod through the same path the
deadlines use (services.offers.launch.terminate_rental), AFTER a final backup of the pod's newest complete
checkpoint to the bucket (backup.toml) through the backup service (services.backup.transfer). It fails
closed: no bucket, a pod the watcher does not know (no SSH target, no run dir), an unreachable pod or a
backup that does not verify means NO termination — the pod keeps billing and a critical message says why
and what to do; the next pass tries again (reported once). A pod without any complete checkpoint has
nothing to lose to the bucket and is terminated. A provisional rental (no pod id yet) is never touched."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.models import Pod
from services.offers.rentals import AuditLog, Rental

if TYPE_CHECKING:
    from services.pod.connection import Connection

log = logging.getLogger("services.watch")
WARN_AT = 0.8


@dataclass(frozen=True)
class BudgetEvent:
    kind: str  # warn | over | backed-up | terminated | failed
    rental: Rental
    message: str
    step: int | None = None


class BudgetWatch:
    def __init__(
        self,
        audit: AuditLog,
        *,
        terminate: bool = False,
        backup: Any = None,
        pod_for: Callable[[Rental], Pod | None] = lambda r: None,
        connect: Callable[[Pod], Connection] | None = None,
        clock: Callable[[], float] = time.time,
        warn_at: float = WARN_AT,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.audit, self.terminate, self.backup, self.pod_for = audit, terminate, backup, pod_for
        self.connect, self.clock, self.warn_at, self.sleep = connect, clock, warn_at, sleep
        self.warned: set[str] = set()  # pod ids warned about at 80 %
        self.over: set[str] = set()  # ... and at 100 %
        self.failed: set[str] = set()  # a final backup / termination that failed: said once, retried silently

    async def check(self, providers: Any, rentals: list[Rental] | None = None) -> list[BudgetEvent]:
        now = self.clock()
        events: list[BudgetEvent] = []
        for r in self.audit.open_rentals() if rentals is None else rentals:
            if r.provisional or not r.budget_usd:
                continue
            spent = r.spent(now)
            share = spent / r.budget_usd
            if share < self.warn_at:
                continue
            if share < 1.0:
                if r.pod_id not in self.warned:
                    self.warned.add(r.pod_id)
                    events.append(
                        BudgetEvent(
                            "warn",
                            r,
                            f"{r.name} has spent ≈ ${spent:.2f} of its "
                            f"${r.budget_usd:.2f} budget ({share:.0%})"
                            + ("; it will be terminated at 100 % after a final backup" if self.terminate else ""),
                        )
                    )
                continue
            if not self.terminate:
                if r.pod_id not in self.over:
                    self.over.add(r.pod_id)
                    events.append(
                        BudgetEvent(
                            "over",
                            r,
                            f"{r.name} is over its budget: ≈ ${spent:.2f} of "
                            f"${r.budget_usd:.2f}; still running and billing ${r.price_hr:.2f}/hr "
                            f"(terminate it: prime-train-tui rentals --terminate {r.name}; or set "
                            "[watch] terminate_over_budget = true)",
                        )
                    )
                continue
            events.extend(await self._end(providers, r, spent))
        return events

    async def _end(self, providers: Any, r: Rental, spent: float) -> list[BudgetEvent]:
        """The final backup, then the termination; a failure of either is one "failed" event (once)."""
        from services.offers.launch import terminate_rental

        events: list[BudgetEvent] = []
        try:
            step = await self._final_backup(r)
        except Exception as exc:  # noqa: BLE001 - every failure keeps the pod, says why
            return self._failed(
                r,
                f"over its budget (≈ ${spent:.2f} of ${r.budget_usd:.2f}) but NOT terminated: the "
                f"final backup failed ({_short(exc)}). It keeps billing ${r.price_hr:.2f}/hr: "
                "back it up and terminate it by hand "
                f"(prime-train-tui rentals --terminate {r.name})",
            )
        events.append(
            BudgetEvent(
                "backed-up",
                r,
                f"{r.name}: final backup before the budget termination: "
                + (
                    f"step {step} verified in the bucket"
                    if step is not None
                    else "no complete checkpoint on the pod, nothing to back up"
                ),
                step,
            )
        )
        try:
            outcome = await terminate_rental(
                providers, r, self.audit, reason="budget", now=self.clock(), sleep=self.sleep
            )
        except Exception as exc:  # noqa: BLE001 - ProviderFailure and any transport error
            return events + self._failed(
                r,
                f"over its budget, backed up, but terminating it failed ({_short(exc)}); "
                "retrying every pass — check the provider's console",
            )
        events.append(
            BudgetEvent(
                "terminated",
                r,
                f"{r.name} terminated over its budget ({outcome}); spent ≈ "
                f"${r.spent(self.clock()):.2f} of ${r.budget_usd:.2f}"
                + (f"; step {step} is in the bucket" if step is not None else ""),
                step,
            )
        )
        return events

    def _failed(self, r: Rental, why: str) -> list[BudgetEvent]:
        if r.pod_id in self.failed:
            log.info("budget termination of %s still blocked: %s", r.name, why[:200])
            return []
        self.failed.add(r.pod_id)
        return [BudgetEvent("failed", r, f"{r.name} {why}")]

    async def _final_backup(self, r: Rental) -> int | None:
        return await final_backup(r, self.backup, self.pod_for(r), self.connect)


async def final_backup(
    r: Rental, backup: Any, pod: Pod | None, connect: Callable[[Pod], Connection] | None
) -> int | None:
    """The pod's newest complete checkpoint, backed up and verified (its step), or None when it has none; raises
    (the pod must then be kept) when there is no bucket, no watched pod with a run dir, or it does not verify."""
    from services.backup.transfer import backup_checkpoint, pod_checkpoints
    from services.connect import open_connection
    from services.errors import PrimeTrainError

    if backup is None or not getattr(backup, "bucket", ""):
        raise PrimeTrainError("no bucket: set one in backup.toml")
    if pod is None or not pod.run_dir:
        raise PrimeTrainError(f"the watcher does not watch {r.name} with a run dir: it cannot find its checkpoints")
    conn = (connect or open_connection)(pod)
    try:
        await conn.connect()
        ckpts, _disk = await pod_checkpoints(conn, pod.run_dir)
        done = [c for c in ckpts if c.complete]
        if not done:
            return None
        step = max(c.step for c in done)
        result = await backup_checkpoint(conn, backup, pod.run_dir, step)
        if not result.verified:
            raise PrimeTrainError(f"step {step} did not verify in the bucket: " + "; ".join(result.problems)[:200])
        return step
    finally:
        try:
            await conn.close()
        except Exception:  # noqa: BLE001
            pass


def _short(exc: BaseException) -> str:
    return (f"{exc}" or type(exc).__name__).splitlines()[0][:240]
