"""Preemption: a pod that disappears marks its run interrupted; an auto-resume policy may relaunch it.

:class:`PreemptionTracker` is pure bookkeeping fed the monitor's snapshots and an injected clock: a pod
whose SSH is down (monitor state offline / connecting) for ``down_after`` seconds, or that the provider
reports terminated (``terminated`` callback or :meth:`mark_terminated`), has its active local run record
(``services.runs``) marked ``interrupted``. With the policy enabled (off by default) it then decides to
resume — on the same pod once it answers again, or on the named other pod once that one is online —
within ``max_attempts`` auto-resumes of the run's lineage and a budget in hours or $ (the lineage's run
time x the pod's price), else it gives up and says why. :class:`AutoResumer` carries a decision out
through the ordinary resume path (newest complete checkpoint, or the verified backup when the pod has
none). No Textual here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services import runs
from services.lifecycle.events import Event
from services.lifecycle.preflight import LifecycleSettings
from services.models import Pod, PodSnapshot, PodState

if TYPE_CHECKING:
    from services.pod.connection import Connection

UP = (PodState.ONLINE,)
DOWN = (PodState.OFFLINE, PodState.CONNECTING)  # auth / host-key trouble is the user's, not a preemption
# STALE (no valid sample for a while: connected and silent, or answering garbage while connecting) changes
# neither: it does not end an outage (a pod spewing garbage is no pod to resume on) nor start one


@dataclass(frozen=True)
class AutoResumePolicy:
    enabled: bool = False
    max_attempts: int = 3
    budget_usd: float = 0.0  # 0 = no limit
    budget_hours: float = 0.0
    target_pod: str = ""  # "" = the same pod

    @classmethod
    def from_settings(cls, s: LifecycleSettings) -> AutoResumePolicy:
        return cls(
            s.auto_resume,
            s.auto_resume_max_attempts,
            s.auto_resume_budget_usd,
            s.auto_resume_budget_hours,
            s.auto_resume_pod,
        )


@dataclass(frozen=True)
class Decision:
    kind: str  # "interrupted" | "resume" | "give_up"
    pod: str  # the pod the run was on
    run_id: str
    reason: str
    target: str = ""  # resume: the pod to relaunch on


@dataclass
class _Pod:
    pod: Pod
    up: bool = False
    down_since: float | None = None
    terminated: bool = False
    finished: bool = False  # the run's own logs said it finished: its pod going away is no preemption
    handled: bool = False  # this outage was looked at (records read once per outage, not per check)


@dataclass
class PreemptionTracker:
    runs_dir: Path
    down_after: float = 600.0  # seconds of SSH down before the run counts as interrupted
    policy: AutoResumePolicy = AutoResumePolicy()
    clock: Callable[[], float] = time.time
    terminated: Callable[[str], bool] | None = None  # a provider's "this pod is gone", when known
    _pods: dict[str, _Pod] = field(default_factory=dict)
    _waiting: dict[str, str] = field(default_factory=dict)  # interrupted run id -> its pod, resume pending
    _busy: set[str] = field(default_factory=set)  # run ids being resumed now
    # before this moment no pod's outage can be decided (the earliest down_since + down_after of the outages not
    # looked at yet; -inf when a pod was marked terminated): a snapshot before it needs no walk over every pod
    _due: float = float("-inf")

    @classmethod
    def from_settings(cls, s: LifecycleSettings, **kw: Any) -> PreemptionTracker:
        if s.runs_dir is None:
            raise ValueError("preemption tracking needs the local run records (settings.runs_dir)")
        return cls(Path(s.runs_dir), s.preempt_after_minutes * 60.0, AutoResumePolicy.from_settings(s), **kw)

    def mark_terminated(self, pod: str) -> None:
        p = self._pods.setdefault(pod, _Pod(Pod(pod)))
        p.terminated, p.handled = True, False
        self._due = float("-inf")

    def observe(self, snapshot: PodSnapshot) -> list[Decision]:
        """The pod's state from a snapshot; the decisions due now, as :meth:`check` gives them (every pod's, not
        only this one's). Every snapshot of every pod comes here: unless an outage may be due (or a provider's
        ``terminated`` may say so at any moment), only the resumes waiting on a pod that came back are looked at."""
        name, state = snapshot.pod.name, snapshot.status.state
        p = self._pods.get(name)
        if p is None:
            p = self._pods[name] = _Pod(snapshot.pod)
        p.pod = snapshot.pod
        if snapshot.run is not None:
            p.finished = snapshot.run.finished
        now = self.clock()
        if state in UP:
            p.up, p.down_since, p.terminated, p.handled = True, None, False, False
        elif state in DOWN:
            p.up = False
            if p.down_since is None:
                p.down_since = now
                self._due = min(self._due, now + self.down_after)
        # a millisecond early: check() compares ``now - down_since`` with ``down_after``, which may round otherwise
        if self.terminated is not None or now >= self._due - 1e-3:
            return self._check(now)
        return self._resume_decisions(now)

    def check(self) -> list[Decision]:
        """Also call it on a timer: a pod that stays down sends few snapshots."""
        return self._check(self.clock())

    def _check(self, now: float) -> list[Decision]:
        out: list[Decision] = []
        due = float("inf")
        for name, p in self._pods.items():
            gone = p.terminated or bool(self.terminated and self.terminated(name))
            if p.up and not gone:
                continue
            if p.handled or (not gone and (p.down_since is None or now - p.down_since < self.down_after)):
                if not p.handled and p.down_since is not None:  # an outage not due yet: when it will be
                    due = min(due, p.down_since + self.down_after)
                continue
            p.handled = True
            rec = self._active_record(name)
            if rec is None or p.finished:
                continue
            why = (
                "the provider reports it terminated"
                if gone
                else f"SSH down for {(now - (p.down_since or now)) / 60:.0f} min"
            )
            runs.update_record(
                self.runs_dir, rec["id"], state="interrupted", interrupted=now, ended=now, interrupted_reason=why
            )
            out.append(Decision("interrupted", name, rec["id"], f"{name} lost: {why}"))
            if self.policy.enabled:
                self._waiting[rec["id"]] = name
        self._due = due
        return out + self._resume_decisions(now)

    def _resume_decisions(self, now: float) -> list[Decision]:
        out = []
        for run_id, pod in list(self._waiting.items()):
            if run_id in self._busy:
                continue
            target = self.policy.target_pod or pod
            t = self._pods.get(target)
            if t is None or not t.up or t.terminated:
                continue  # wait for it to answer
            why = self._over_budget(run_id, now)
            del self._waiting[run_id]
            if why:
                runs.update_record(self.runs_dir, run_id, auto_resume=f"gave up: {why}")
                out.append(Decision("give_up", pod, run_id, f"not resuming run {run_id}: {why}"))
                continue
            self._busy.add(run_id)
            out.append(Decision("resume", pod, run_id, f"resuming run {run_id} on {target}", target))
        return out

    def handed_over(self, decision: Decision) -> None:
        """Another process carries this ``resume`` decision out (the headless watcher, which holds the data
        dir): forget it here, uncounted and not retried."""
        self._busy.discard(decision.run_id)
        self._waiting.pop(decision.run_id, None)

    def not_back(self, decision: Decision) -> None:
        """A ``resume`` decision whose pod did not take the connection (a snapshot said "online" that was sent
        before it went down, read late): not an attempt; the run waits again for a fresh "online"."""
        self._busy.discard(decision.run_id)
        self._waiting[decision.run_id] = decision.pod
        target = self._pods.get(decision.target)
        if target is not None:
            target.up = False

    def resumed(self, decision: Decision, ok: bool, new_run_id: str | None = None, error: str = "") -> None:
        """The outcome of a ``resume`` decision: counted as an attempt either way; a failure retries
        on the next check while attempts and budget allow."""
        self._busy.discard(decision.run_id)
        rec = runs.load_record(self.runs_dir, decision.run_id) or {}
        runs.update_record(
            self.runs_dir,
            decision.run_id,
            auto_attempts=int(rec.get("auto_attempts") or 0) + 1,
            auto_resume=f"resumed as {new_run_id}" if ok else f"failed: {error}",
        )
        if ok and new_run_id:
            runs.update_record(self.runs_dir, new_run_id, auto_resumed_from=decision.run_id)
        elif not ok:
            self._waiting[decision.run_id] = decision.pod

    # ------------------------------------------------------------------ records
    def _active_record(self, pod: str) -> dict[str, Any] | None:
        rec = runs.latest_record(self.runs_dir, pod)
        return rec if rec and rec.get("state") == "running" else None

    def lineage(self, run_id: str) -> list[dict[str, Any]]:
        """The run and the runs it was resumed from, newest first."""
        out, seen = [], set()
        rec = runs.load_record(self.runs_dir, run_id)
        while rec and rec.get("id") not in seen:
            seen.add(rec["id"])
            out.append(rec)
            prev = rec.get("resumed_from") or rec.get("auto_resumed_from")
            rec = runs.load_record(self.runs_dir, prev) if prev else None
        return out

    def _over_budget(self, run_id: str, now: float) -> str:
        chain = self.lineage(run_id)
        attempts = sum(int(r.get("auto_attempts") or 0) for r in chain)
        if attempts >= self.policy.max_attempts:
            return f"{attempts} auto-resume attempt(s) already (max {self.policy.max_attempts})"
        hours = sum(max(0.0, float(r.get("ended") or now) - float(r.get("started") or now)) for r in chain) / 3600
        if self.policy.budget_hours and hours >= self.policy.budget_hours:
            return f"the run has used {hours:.1f} h of its {self.policy.budget_hours:g} h budget"
        if self.policy.budget_usd:
            price = self._price(chain)
            if price is None:
                return "a $ budget is set but the pod has no price (price_per_hr in pods.toml)"
            if hours * price >= self.policy.budget_usd:
                return f"the run has cost ${hours * price:.2f} of its ${self.policy.budget_usd:g} budget"
        return ""

    def _price(self, chain: list[dict[str, Any]]) -> float | None:
        for r in chain:
            p = self._pods.get(r.get("pod", ""))
            if p is not None and p.pod.price_per_hr is not None:
                return float(p.pod.price_per_hr)
        return None


@dataclass
class AutoResumer:
    """Carries out ``resume`` decisions through the target pod's run target (``target_for``), as the dialog and
    the commands do."""

    tracker: PreemptionTracker
    settings: LifecycleSettings
    connect: Callable[[Pod], Connection]
    backup: Any = None
    on_event: Callable[[Event], None] | None = None

    async def execute(self, decision: Decision) -> Event:
        last = await _last(self.events(decision), self.on_event)
        return last

    async def events(self, decision: Decision) -> AsyncIterator[Event]:
        from services.lifecycle.targets import target_for

        target = self.tracker._pods.get(decision.target)
        rec = runs.load_record(self.tracker.runs_dir, decision.run_id)
        if target is None or rec is None:
            ev = Event(
                "resume",
                "error",
                f"cannot resume run {decision.run_id}: "
                f"{'no pod ' + decision.target if target is None else 'no record'}",
            )
            self.tracker.resumed(decision, False, error=ev.message)
            yield ev
            return
        conn = self.connect(target.pod)
        last: Event | None = None
        try:
            await conn.connect()
        except Exception as exc:  # noqa: BLE001 - the pod does not answer yet: no attempt was made on it
            with contextlib.suppress(Exception):
                await conn.close()
            self.tracker.not_back(decision)
            yield Event(
                "resume",
                "error",
                f"{decision.target} does not answer yet ({exc}): run {decision.run_id} is resumed when it does",
                data={"waiting": True},
            )
            return
        try:
            resumed = target_for(target.pod).resume_run(conn, rec, settings=self.settings, backup=self.backup)
            async for ev in resumed:
                last = ev
                yield ev
        except Exception as exc:  # noqa: BLE001 - reported as the outcome; the tracker may retry
            last = Event("resume", "error", f"auto-resume of {decision.run_id} on {decision.target}: {exc}")
            yield last
        finally:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001
                pass
        ok = last is not None and last.kind == "done"
        new_id = (last.data or {}).get("id") if ok and last is not None else None
        self.tracker.resumed(decision, ok, new_id, "" if ok else (last.message if last else "no answer"))


async def _last(events: AsyncIterator[Event], on_event: Callable[[Event], None] | None) -> Event:
    last = Event("resume", "error", "nothing happened")
    async for ev in events:
        last = ev
        if on_event is not None:
            try:
                on_event(ev)
            except Exception:  # noqa: BLE001
                pass
    return last
