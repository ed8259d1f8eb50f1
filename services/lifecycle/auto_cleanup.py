"""The cleanup daemon of one pod: keep the newest N complete checkpoints and the run volume under a ceiling.

A round plans through the pod's run target, ``target_for(pod).plan_cleanup`` (keep-last N, then older complete ones
while the volume would stay above ``disk_threshold_pct``, plus prime-rl's leftovers) and deletes with
:func:`services.lifecycle.cleanup.cleanup` — so the rules are the command's: never the newest complete
checkpoint, never one in progress, never one not yet verified in the bucket when backup is on, every
deletion logged with its size (``<runs_dir>/lifecycle.log``), the pod's action lock held meanwhile.

Rounds run every ``interval`` seconds and sooner when :meth:`CleanupDaemon.observe` sees, in a monitor
snapshot, a new complete checkpoint or the volume over the ceiling (at most one round per ``min_gap``
of the injected clock). Nothing is deleted before :meth:`CleanupDaemon.approve`: until then a round only
stores its plan as :attr:`CleanupDaemon.preview` (and reports it) for the app to show as a dry run.
No Textual here: the app runs :meth:`CleanupDaemon.run` as a worker and listens through ``on_event``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from services.errors import PrimeTrainError
from services.lifecycle.cleanup import CleanupPlan, cleanup
from services.lifecycle.events import Event, with_hint
from services.lifecycle.preflight import LifecycleSettings
from services.lifecycle.targets import target_for
from services.models import Pod, PodSnapshot

if TYPE_CHECKING:
    from services.pod.connection import Connection


@dataclass(frozen=True)
class Round:
    at: float  # the injected clock
    reason: str  # "periodic", "new checkpoint step_40", "volume 91% ≥ 85%", "approved", ...
    plan: CleanupPlan | None = None
    deleted: tuple[dict[str, Any], ...] = ()
    freed: int = 0
    waiting: bool = False  # the plan had deletions but the preview was not approved yet
    error: str = ""


@dataclass
class CleanupDaemon:
    pod: Pod
    settings: LifecycleSettings
    connect: Callable[[Pod], Connection]  # not connected yet
    backup: Any = None  # services.backup.s3.BackupSettings with a bucket: only verified checkpoints go
    clock: Callable[[], float] = time.time
    interval: float | None = None  # default: settings.cleanup_interval
    min_gap: float = 30.0  # seconds of ``clock`` between two rounds triggered by snapshots
    on_event: Callable[[Event], None] | None = None
    approved: bool = False
    preview: CleanupPlan | None = None
    rounds: deque = field(default_factory=lambda: deque(maxlen=50))
    _reasons: list[str] = field(default_factory=list)
    _wake: asyncio.Event | None = None
    _newest: int | None = None
    _last_round: float | None = None

    # ------------------------------------------------------------------ what the app calls
    def approve(self) -> None:
        """The user accepted the dry-run preview: deletions may start (now)."""
        self.approved = True
        self.nudge("approved")

    def nudge(self, reason: str) -> None:
        self._reasons.append(reason)
        if self._wake is not None:
            self._wake.set()

    def observe(self, snapshot: PodSnapshot) -> str | None:
        """Feed every monitor snapshot of this pod; returns the reason when it triggers a round."""
        sample = snapshot.latest
        if sample is None or snapshot.pod.name != self.pod.name:
            return None
        reason = None
        done = [c.step for c in sample.ckpts if c.complete]
        if done and (self._newest is None or max(done) > self._newest):
            if self._newest is not None:
                reason = f"new checkpoint step_{max(done)}"
            self._newest = max(done)
        pct = sample.host.disk_pct
        if reason is None and pct is not None and pct >= self.settings.disk_threshold_pct:
            reason = f"volume {pct:.0f}% ≥ {self.settings.disk_threshold_pct:g}%"
        if reason is None:
            return None
        now = self.clock()
        if self._last_round is not None and now - self._last_round < self.min_gap:
            return None
        self._last_round = now  # no second trigger before the round had its chance
        self.nudge(reason)
        return reason

    # ------------------------------------------------------------------ the work
    async def run_once(self, reason: str = "periodic") -> Round:
        self._last_round = self.clock()
        conn = self.connect(self.pod)
        try:
            await conn.connect()
            plan = await target_for(self.pod).plan_cleanup(
                conn,
                keep=None,
                settings=self.settings,
                backup=self.backup,
                threshold_pct=self.settings.disk_threshold_pct,
            )
            if plan.prunes and plan.delete:  # prime-rl prunes them itself: never fight it (its leftovers are ours)
                self._emit(
                    Event(
                        "cleanup",
                        "progress",
                        f"cleanup daemon on {self.pod.name}: prime-rl prunes this "
                        f"run's checkpoints itself ({plan.prunes_text()}); the daemon "
                        "leaves them to it",
                    )
                )
                plan = replace(
                    plan,
                    delete=(),
                    kept=tuple(sorted((*plan.kept, *plan.delete), key=lambda c: c["step"])),
                    for_disk=(),
                    superseded=(),
                )
            if plan.empty:
                self.preview = None
                return self._done(Round(self.clock(), reason, plan))
            if not self.approved:
                self.preview = plan
                self._emit(
                    Event(
                        "cleanup",
                        "warn",
                        f"cleanup daemon on {self.pod.name}: waiting for the "
                        f"preview to be approved before its first deletion",
                        data={"preview": plan.preview(), "plan": plan.to_json()},
                    )
                )
                return self._done(Round(self.clock(), reason, plan, waiting=True))
            self.preview = None
            deleted: tuple[dict[str, Any], ...] = ()
            freed, error = 0, ""
            async for ev in cleanup(conn, plan, settings=self.settings, backup=self.backup):
                self._emit(ev)
                if ev.kind == "done" and ev.data:
                    deleted, freed = tuple(ev.data.get("deleted", ())), int(ev.data.get("bytes", 0))
                elif ev.kind == "error":
                    error = ev.message
            return self._done(Round(self.clock(), reason, plan, deleted, freed, error=error))
        except PrimeTrainError as exc:
            self._emit(Event("cleanup", "error", f"cleanup daemon on {self.pod.name}: {with_hint(exc)}"))
            return self._done(Round(self.clock(), reason, error=with_hint(exc)))
        finally:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - a dead connection must not end the daemon
                pass

    async def run(self) -> None:
        """Forever: a round now, then one per interval or per nudge. Cancel the task to stop it."""
        self._wake = asyncio.Event()
        if self._reasons:
            self._wake.set()
        interval = self.interval if self.interval is not None else self.settings.cleanup_interval
        reason = "start"
        while True:
            await self.run_once(reason)
            # asyncio.wait, not wait_for: on Python 3.11 a cancel that lands as the wait ends can be lost in
            # wait_for, and the daemon then never stops (a test's `await task` hung past its timeout under load)
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({waiter}, timeout=interval)
            finally:
                waiter.cancel()
            self._wake.clear()
            reason = ", ".join(dict.fromkeys(self._reasons)) or "periodic"
            self._reasons.clear()

    def _done(self, rnd: Round) -> Round:
        self.rounds.append(rnd)
        return rnd

    def _emit(self, ev: Event) -> None:
        if self.on_event is not None:
            try:
                self.on_event(ev)
            except Exception:  # noqa: BLE001 - a broken listener must not stop the cleanup
                pass
