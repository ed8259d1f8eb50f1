"""The watcher: the TUI's monitor and health rules for every pod, the rentals' deadlines, push messages,
the exporter and the state file — one asyncio loop, no Textual. Every ``[watch] sweep_minutes`` (30) it
sweeps every provider with a key for pods (services/offers/sweep.py): one terminated here that its provider
still lists is pushed once, critical.

Every ``tick_s`` the pods' latest snapshots go through the :class:`AlertBook` (threads, de-duplication,
rate limit); the messages it decides on go to the outbox (services/watch/outbox.py): one sender per
target, each push bounded in time and retried with backoff until delivered or expired, so a slow service
delays neither the evaluation nor the other targets, nor the watcher's stop. A pod that is not online is
"not known", not "clear": its open threads stay open, and after ``offline_after_s`` it gets an alert of
its own (``unreachable``). The deadline pass (services.offers.launch.DeadlineWatch, the TUI's) runs
every ``deadline_interval_s`` while a rental is open: warnings, terminations and failures are pushed too;
so are the budgets' (services/watch/budget.py: 80 % warning, termination after a final backup when
allowed) and idle rentals' (services/watch/idle.py: GPUs idle with no run for ``[health] idle_minutes``,
pushed once; terminated after a final backup with ``[watch] terminate_idle``). Each such pass also brings
the spend ledger up to date (services/offers/spend.py), which the exporter's $ metrics read. While it
runs (never in ``once``) it also acts as the TUI does: auto-backup (backups.py), preemption tracking with the
opt-in auto-resume, and the cleanup daemons (cleanup.py), which delete only with ``[watch] cleanup = true`` —
else their preview is said once per pod.
What the watcher does goes to the JSON-lines log, the state file and (``out``) stdout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.connect import open_connection
from services.models import Alert, Pod, PodSnapshot, PodState, Severity
from services.monitor.service import ConnectionFactory, MonitorService
from services.monitor.worker import MonitorSettings
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.offers.spend import LEDGER_NAME, Spend, SpendLedger
from services.watch.backups import WatchBackups
from services.watch.budget import BudgetEvent, BudgetWatch
from services.watch.cleanup import WatchCleanup
from services.watch.exporter import DEFAULT_ADDR, Exporter, WatchView, is_loopback
from services.watch.idle import IdleEvent, IdleWatch
from services.watch.jsonlog import event
from services.watch.notify import Notifier, NotifySettings
from services.watch.outbox import RETRY_BASE_S, Dispatcher, Outbox
from services.watch.state import WatchState
from services.watch.summary import brief_json, pod_json, unreachable_alert
from services.watch.threads import AlertBook, Event, Message

log = logging.getLogger("services.watch")
Out = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class WatchOptions:
    data_dir: Path
    notify: NotifySettings = field(default_factory=NotifySettings)
    metrics_port: int | None = None  # None: no exporter; 0: any free port
    metrics_addr: str = DEFAULT_ADDR
    tick_s: float = 1.0
    offline_after_s: float = 300.0
    deadline_interval_s: float = 30.0
    heartbeat_s: float = 30.0  # the state file is rewritten at least this often
    terminate_over_budget: bool = False  # [watch] terminate_over_budget: at 100 % of a rental's budget_usd
    terminate_idle: bool = False  # [watch] terminate_idle: a rental idle for [health] idle_minutes
    backup: Any = None  # services.backup.s3.BackupSettings (backup.toml): auto-backup, the final backup's bucket
    preempt_after_s: float = 600.0  # SSH down this long: the pod's running run is marked interrupted
    lifecycle: Any = None  # services.lifecycle.preflight.LifecycleSettings: [lifecycle] auto_resume (opt-in) and how
    cleanup: bool = False  # [watch] cleanup: the cleanup daemons ([lifecycle] cleanup_pods) delete with no approval
    notices: tuple[str, ...] = ()  # said once at the start: secrets' files others can read, pods.toml entries left out
    retry_base_s: float = RETRY_BASE_S  # a failed push is retried after this, doubling
    sweep_minutes: float = 30.0  # [watch] sweep_minutes: every pod at every provider with a key (0: never)


class Watcher:
    def __init__(
        self,
        pods: list[Pod],
        options: WatchOptions,
        *,
        monitor_settings: MonitorSettings = MonitorSettings(),
        providers: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.time,
        connector: ConnectionFactory | None = None,
        out: Out | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.pods, self.options, self.clock, self.out = list(pods), options, clock, out
        self.sleep = sleep  # the waits of a terminate's verification (tests: none)
        self.monitor_settings, self.providers, self.connector = monitor_settings, providers, connector
        # a bad URL fails here, before anything starts
        self.notifier = Notifier(options.notify.urls, options.notify.timeout_s)
        self.book = AlertBook(options.notify.policy())
        self.state = WatchState(options.data_dir, clock=clock)
        self.audit = AuditLog(Path(options.data_dir) / AUDIT_NAME)
        self.snapshots: dict[str, PodSnapshot] = {}
        self.down_since: dict[str, float] = {}
        self.rentals: tuple[Rental, ...] = ()
        self.ledger = SpendLedger(Path(options.data_dir) / LEDGER_NAME)
        self.spends: tuple[Spend, ...] = ()
        self.budget = BudgetWatch(
            self.audit,
            terminate=options.terminate_over_budget,
            backup=options.backup,
            pod_for=self._pod_for,
            connect=connector,
            clock=clock,
            sleep=sleep,
        )
        self.idle = IdleWatch(
            self.audit,
            terminate=options.terminate_idle,
            backup=options.backup,
            connect=connector,
            clock=clock,
            sleep=sleep,
        )
        self._deadline_watch: Any = None
        self.backups = WatchBackups(options.backup, self._backup_event, connect=connector, clock=clock)
        from services.lifecycle.preemption import AutoResumePolicy, AutoResumer, PreemptionTracker

        policy = (
            AutoResumePolicy.from_settings(options.lifecycle) if options.lifecycle is not None else AutoResumePolicy()
        )
        self.preemption = PreemptionTracker(
            Path(options.data_dir) / "runs", down_after=options.preempt_after_s, policy=policy, clock=clock
        )
        # auto-resume, opt-in as in the TUI ([lifecycle] auto_resume): the ordinary resume path, newest complete
        # checkpoint or the verified backup; one at a time per run (the tracker never decides a run twice)
        self.resumer = (
            AutoResumer(self.preemption, options.lifecycle, connect=connector or open_connection, backup=options.backup)
            if policy.enabled
            else None
        )
        self._resumes: dict[str, asyncio.Future] = {}
        self.cleanup = WatchCleanup(
            options.lifecycle,
            options.backup,
            self._cleanup_event,
            approved=options.cleanup,
            connect=connector or open_connection,
            clock=clock,
        )
        self._acting = False  # run(): backups and preemption act; once(): they only look
        self._said_no_keys = False
        self.last_sweep: Any = None  # services.offers.sweep.Sweep
        self.orphans_pushed: set[tuple[str, str]] = set()  # (provider, pod id) of billing orphans pushed
        self.sent: Counter[tuple[str, str]] = Counter()
        self.exporter: Exporter | None = None
        self.monitor: MonitorService | None = None
        self.dispatch: Dispatcher | None = None
        self._dirty = True

    # ------------------------------------------------------------------ the long run
    async def run(self, stop: asyncio.Event) -> None:
        self.book.restore(self.state.restore())
        for gone in {pod for pod, _ in self.book.open} - {p.name for p in self.pods}:
            self.book.drop_pod(gone, self.clock())  # a pod no longer watched: its old threads end quietly
        self._read_rentals()
        if self.options.metrics_port is not None:  # a port in use fails here, before anything started
            self.exporter = Exporter(self.view, self.options.metrics_port, self.options.metrics_addr)
            self.exporter.start()
        self._acting = True
        self._start_monitor()
        for pod in self.pods:
            self.cleanup.add(pod)
        waiting = 0
        if self.notifier:
            self.dispatch = Dispatcher(
                self.notifier,
                Outbox(self.options.data_dir, clock=self.clock),
                self._notified,
                retry_for_s=self.options.notify.retry_for_s,
                retry_base_s=self.options.retry_base_s,
                clock=self.clock,
            )
            waiting = self.dispatch.start()
            self.state.outbox = self.dispatch.outbox.summary()
        deadlines = asyncio.ensure_future(self._deadlines())
        sweeps = asyncio.ensure_future(self._sweeps()) if self.options.sweep_minutes > 0 else None
        try:
            self._say(
                "watch started",
                pods=[p.name for p in self.pods],
                notify=self.options.notify.masked,
                metrics=None if self.exporter is None else f"http://{self.exporter.addr}:{self.exporter.port}/metrics",
                **({"notifications_waiting": waiting} if waiting else {}),
            )
            if self.exporter is not None and not is_loopback(self.exporter.addr):
                self._say(
                    "metrics served with no login",
                    logging.WARNING,
                    message=f"serving metrics on {self.exporter.addr}:{self.exporter.port} with no login: "
                    "anyone on the network who can reach it can read your pods' names, runs, "
                    "GPUs and spend",
                )
            for notice in self.options.notices:
                self._say("settings notice", logging.WARNING, message=notice)
            self.state.record("started", pods=[p.name for p in self.pods])
            while not stop.is_set():
                try:
                    self.evaluate()
                except Exception:  # one bad pass must never stop the watcher
                    log.exception("evaluating the alerts failed")
                self._save()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.options.tick_s)
        finally:
            deadlines.cancel()
            if sweeps is not None:
                sweeps.cancel()
            for resuming in self._resumes.values():  # a resume cut here is retried by the next watcher or the TUI
                resuming.cancel()
            self._acting = False
            await self.cleanup.aclose()
            await self.backups.aclose()
            if self.monitor is not None:
                await self.monitor.aclose()
            if self.dispatch is not None:
                await self.dispatch.aclose()  # a few seconds at most, whatever a target does
            if self.exporter is not None:
                self.exporter.stop()
            self.state.stopped = round(self.clock(), 3)
            self.state.record("stopped")
            self._dirty = True
            self._save()
            self._say("watch stopped")

    def _start_monitor(self) -> None:
        self.monitor = MonitorService(self._on_snapshot, settings=self.monitor_settings, connector=self.connector)
        self.monitor.runs_dir = Path(self.options.data_dir) / "runs"
        self.monitor.rented_at = self._rented_at
        for pod in self.pods:
            self.monitor.add(pod)

    def _on_snapshot(self, snap: PodSnapshot) -> None:
        old = self.snapshots.get(snap.pod.name)
        self.snapshots[snap.pod.name] = snap
        if self._acting:
            try:
                self.backups.observe(snap)
                self.cleanup.observe(snap)
                self._preempted(self.preemption.observe(snap))
            except Exception:  # never stops the monitor's callbacks
                log.exception("auto-backup / cleanup / preemption bookkeeping failed")
        if old is None or old.status.state is not snap.status.state:
            self._dirty = True
            level = logging.INFO if snap.status.state in (PodState.ONLINE, PodState.CONNECTING) else logging.WARNING
            event(
                log,
                "pod state",
                level,
                pod=snap.pod.name,
                state=snap.status.state.value,
                reason=snap.status.reason[:300],
            )

    def _rented_at(self, pod: Pod) -> float | None:
        for r in self.rentals:
            if r.name == pod.name or (pod.provider_id and (r.provider, r.pod_id) == (pod.provider, pod.provider_id)):
                return r.created_at
        return None

    def _pod_for(self, r: Rental) -> Pod | None:
        """The watched pod a rental is (by provider id, else by name)."""
        return next(
            (p for p in self.pods if p.provider_id and (p.provider, p.provider_id) == (r.provider, r.pod_id)),
            next((p for p in self.pods if p.name == r.name), None),
        )

    # ------------------------------------------------------------------ alerts
    def evaluate(self, now: float | None = None) -> list[Event]:
        """One pass over every pod's latest snapshot: threads opened, escalated, resolved; messages queued."""
        now = self.clock() if now is None else now
        events: list[Event] = []
        if self._acting:
            self._preempted(self.preemption.check())  # a pod that stays down sends few snapshots
        for name, snap in list(self.snapshots.items()):
            online = snap.status.state is PodState.ONLINE
            if online:
                self.down_since.pop(name, None)
            else:
                self.down_since.setdefault(name, now)
            extra: tuple[Alert, ...] = ()
            down = self.down_since.get(name)
            if down is not None and now - down >= self.options.offline_after_s:  # never reached counts too
                extra = (unreachable_alert(snap, down, now),)
            alerts = (*snap.alerts, *extra) if online else extra
            step = snap.run.step if snap.run is not None else None
            for ev in self.book.update(name, alerts, now, step=step, run_dir=snap.pod.run_dir, keep_absent=not online):
                self._on_event(ev)
                events.append(ev)
            brief = brief_json(snap)
            if self.state.pods.get(name) != brief:
                self.state.pods[name] = brief
                self._dirty = True
        return events

    def _on_event(self, ev: Event) -> None:
        th = ev.thread
        held = ev.held if ev.message is None else ""
        if ev.message is not None and not self.notifier:
            held = "no notification URLs ([notify] urls or --notify)"
        fields = {
            "pod": th.pod,
            "rule": th.rule,
            "severity": th.severity,
            "tid": th.tid,
            "title": th.title,
            "step": th.step,
            "pushed": ev.message is not None and bool(self.notifier),
        }
        if held:
            fields["held"] = held
        level = logging.WARNING if ev.kind != "resolved" and Severity(th.severity).rank >= 1 else logging.INFO
        self._say(f"alert {ev.kind}", level, **fields)
        self.state.record(f"alert {ev.kind}", **fields)
        self._dirty = True
        if ev.message is not None and self.dispatch is not None:
            self.dispatch.push(ev.message)

    def push(self, message: Message) -> None:
        """Queue a message of the watcher's own (a deadline event)."""
        if self.dispatch is not None:
            self.dispatch.push(message)

    def _notified(self, what: str, level: int, fields: dict[str, Any]) -> None:
        """An outbox outcome (services/watch/outbox.py): logged, counted, recorded; the state file also says
        what still waits."""
        event(log, what, level, **fields)
        if what in ("notification sent", "notification failed"):
            self.sent[(str(fields.get("kind")), "sent" if what == "notification sent" else "failed")] += 1
            ok = what == "notification sent"
            self.state.record("notified", **fields, sent=int(ok), failed=int(not ok))
        elif what != "cannot write the notification outbox":
            self.state.record(what, **fields)
        if self.out is not None and (level >= logging.WARNING or (fields.get("attempts") or 0) > 1):
            with contextlib.suppress(Exception):
                self.out({"t": round(self.clock(), 3), "event": what, **fields})
        if self.dispatch is not None:
            self.state.outbox = self.dispatch.outbox.summary()
        self._dirty = True

    # ------------------------------------------------------------------ rentals
    def _read_rentals(self) -> None:
        try:
            self.rentals = tuple(self.audit.open_rentals())
        except OSError as exc:
            event(log, "cannot read the rentals' audit log", logging.WARNING, error=str(exc)[:200])

    async def _deadlines(self) -> None:
        while True:
            await self.rentals_pass()
            await asyncio.sleep(self.options.deadline_interval_s)

    async def rentals_pass(self) -> None:
        """One pass over the rentals: deadlines, budgets, then the spend ledger. Never raises (but cancels)."""
        from services.offers.launch import DeadlineWatch

        if self._deadline_watch is None:
            self._deadline_watch = DeadlineWatch(self.audit, clock=self.clock, sleep=self.sleep)
        try:
            await asyncio.to_thread(self._read_rentals)
            if self.rentals and self.providers is None:
                if not self._said_no_keys:
                    self._said_no_keys = True
                    event(
                        log,
                        "rentals are open but no provider client: deadlines and budgets are not enforced",
                        logging.WARNING,
                        rentals=[r.name for r in self.rentals],
                    )
            elif self.rentals and self.providers is not None:
                async with self.providers() as providers:
                    for ev in await self._deadline_watch.check(providers):
                        await self._deadline_event(ev)
                    for bev in await self.budget.check(providers):
                        await self._budget_event(bev)
                    for iev in await self.idle.check(providers, self.snapshots, list(self.rentals), self._pod_for):
                        await self._idle_event(iev)
            if self.rentals and self.providers is None:
                for iev in await self.idle.check(None, self.snapshots, list(self.rentals), self._pod_for):
                    await self._idle_event(iev)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a provider outage must not end the watcher
            event(log, "deadline pass failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}"[:300])
        try:
            self.spends = tuple(await asyncio.to_thread(self.ledger.sync, self.audit, self.clock()))
        except OSError as exc:
            event(
                log,
                "cannot write the spend ledger",
                logging.ERROR,
                path=str(self.ledger.path),
                error=exc.strerror or str(exc),
            )

    async def _sweeps(self) -> None:
        while True:
            await self.sweep_pass()
            await asyncio.sleep(self.options.sweep_minutes * 60)

    async def sweep_pass(self) -> Any:
        """One sweep (services/offers/sweep.py) of every provider with a key; a pod terminated here that its
        provider still lists is pushed once (critical) per watcher. Never raises (but cancels)."""
        from services.offers.sweep import describe, keyed, sweep

        if self.providers is None:
            return None
        try:
            async with self.providers() as providers:
                if not keyed(providers):
                    return None
                result = await sweep(providers, self.audit, self.clock())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a provider outage must not end the watcher
            event(log, "sweep failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}"[:300])
            return None
        self.last_sweep = result
        for provider, why in result.errors.items():
            event(log, "sweep incomplete", logging.WARNING, provider=provider, error=why)
        for row in result.billing:
            if (row.provider, row.pod_id) in self.orphans_pushed:
                continue
            self.orphans_pushed.add((row.provider, row.pod_id))
            fields = {
                "pod": row.name,
                "provider": row.provider,
                "pod_id": row.pod_id,
                "state": row.state,
                "price_hr": row.price_hr,
            }
            self._say("billing orphan", logging.ERROR, message=row.message, **fields)
            self.state.record("billing orphan", message=row.message, **fields)
            self._dirty = True
            self.push(
                Message(
                    "sweep",
                    f"[BILLING] {row.provider} pod {row.name}: still listed after its terminate",
                    describe(row) + ". Terminate it in the provider's console (or again from here).",
                    Severity.CRITICAL,
                    pod=row.name,
                )
            )
        return result

    async def _budget_event(self, ev: BudgetEvent) -> None:
        r = ev.rental
        fields = {
            "pod": r.name,
            "provider": r.provider,
            "pod_id": r.pod_id,
            "kind": ev.kind,
            "budget_usd": r.budget_usd,
            "step": ev.step,
        }
        level = logging.ERROR if ev.kind in ("failed", "over") else logging.WARNING
        self._say(f"budget {ev.kind}", level, message=ev.message, **fields)
        self.state.record(f"budget {ev.kind}", message=ev.message, **fields)
        self._dirty = True
        sev = (
            Severity.CRITICAL
            if ev.kind in ("failed", "over")
            else Severity.WARNING
            if ev.kind in ("warn", "terminated")
            else Severity.INFO
        )
        self.push(Message("budget", f"[BUDGET] {r.name}: {ev.kind}", ev.message, sev, pod=r.name))
        if ev.kind == "terminated":
            await self._forget_pod(r.name)

    async def _idle_event(self, ev: IdleEvent) -> None:
        r = ev.rental
        fields = {
            "pod": r.name,
            "provider": r.provider,
            "pod_id": r.pod_id,
            "kind": ev.kind,
            "idle_s": round(ev.idle.seconds),
            "wasted_usd": ev.idle.wasted_usd,
            "step": ev.step,
        }
        level = logging.ERROR if ev.kind == "failed" else logging.WARNING
        self._say(f"idle {ev.kind}", level, message=ev.message, **fields)
        self.state.record(f"idle {ev.kind}", message=ev.message, **fields)
        self._dirty = True
        sev = (
            Severity.CRITICAL
            if ev.kind == "failed"
            else Severity.WARNING
            if ev.kind in ("idle", "terminated")
            else Severity.INFO
        )
        title = f"[IDLE] {r.name}: {ev.idle.label}" if ev.kind == "idle" else f"[IDLE] {r.name}: {ev.kind}"
        self.push(Message("idle", title, ev.message, sev, pod=r.name))
        if ev.kind == "terminated":
            await self._forget_pod(r.name)

    def _backup_event(self, what: str, level: int, fields: dict[str, Any]) -> None:
        self._say(what, level, **fields)
        self.state.record(what, **fields)
        self._dirty = True
        if what == "backup failed":
            self.push(
                Message(
                    "backup",
                    f"[BACKUP] {fields.get('pod')}: failed",
                    str(fields.get("message")),
                    Severity.WARNING,
                    pod=str(fields.get("pod") or ""),
                )
            )

    def _cleanup_event(self, what: str, level: int, fields: dict[str, Any]) -> None:
        """A cleanup daemon's outcome (services/watch/cleanup.py): logged and recorded; the preview waiting for an
        approval and a failure are pushed (each once: per pod, per streak), deletions only logged."""
        long = {key: fields.pop(key) for key in ("preview", "paths") if key in fields}
        self._say(what, level, **fields, **long)
        self.state.record(what, **fields)  # the counts and the message: the preview and paths go to the log
        preview = long.get("preview")
        self._dirty = True
        pod = str(fields.get("pod") or "")
        if what == "cleanup waiting":
            body = str(fields.get("message")) + ".\n\n" + "\n".join(preview or ())
            self.push(Message("cleanup", f"[CLEANUP] {pod}: waiting for your approval", body, Severity.INFO, pod=pod))
        elif what == "cleanup failed":
            self.push(
                Message("cleanup", f"[CLEANUP] {pod}: failed", str(fields.get("message")), Severity.WARNING, pod=pod)
            )

    def _preempted(self, decisions: list[Any]) -> None:
        """The preemption tracker's decisions: a run marked interrupted (its pod lost) is said and pushed; with
        auto-resume on, a resume decision is carried out in a task of its own and a give-up is said why."""
        for d in decisions:
            fields = {"pod": d.pod, "run_id": d.run_id, "kind": d.kind, "message": d.reason}
            if d.kind == "resume":
                if self.resumer is None or not self._acting:
                    self.preemption.resumed(d, False, error="the watcher is not resuming runs now")
                    continue
                self._say("auto-resume started", logging.WARNING, target=d.target, **fields)
                self.state.record("auto-resume started", target=d.target, **fields)
                self._resumes[d.run_id] = asyncio.ensure_future(self._auto_resume(d))
                continue
            if d.kind == "give_up":
                self._say("auto-resume gave up", logging.WARNING, **fields)
                self.state.record("auto-resume gave up", **fields)
                self._dirty = True
                self.push(
                    Message(
                        "auto-resume",
                        f"[AUTO-RESUME] {d.pod}: run {d.run_id} not resumed",
                        d.reason + ". Resume it by hand from its newest checkpoint or its verified backup.",
                        Severity.WARNING,
                        pod=d.pod,
                    )
                )
                continue
            self._say(f"preempted {d.kind}", logging.WARNING, **fields)
            self.state.record(f"preempted {d.kind}", **fields)
            self._record_preemption(d)
            self._dirty = True
            then = (
                " Auto-resume is on: the watcher resumes it when "
                f"{self.preemption.policy.target_pod or d.pod} answers again."
                if self.resumer is not None
                else " Resume it from its newest checkpoint or its verified backup (prime-train-tui resume)."
            )
            self.push(
                Message(
                    "preempted",
                    f"[PREEMPTED] {d.pod}: run {d.run_id} interrupted",
                    d.reason + "." + then,
                    Severity.CRITICAL,
                    pod=d.pod,
                )
            )

    def _record_preemption(self, d: Any) -> None:
        """A rental's pod lost with its run: one "preempted" record in the audit log (the App records the same
        run at most once more: AuditLog.record_preemption skips a run already recorded)."""
        try:
            self.audit.record_preemption(d.pod, d.run_id, now=self.clock())
        except OSError as exc:  # AuditWriteError included
            event(log, "cannot write the rentals' audit log", logging.WARNING, error=str(exc)[:200])

    async def _auto_resume(self, d: Any) -> None:
        """One resume decision carried out (services.lifecycle.preemption.AutoResumer: its outcome is counted in
        the run records, a failure retried at a later check while attempts and budget allow)."""
        assert self.resumer is not None
        try:
            last = await self.resumer.execute(d)
            fields = {"pod": d.target, "run_id": d.run_id, "message": last.message}
            if last.kind == "done":
                data = last.data or {}
                self._say("auto-resume done", logging.WARNING, new_run=data.get("id"), **fields)
                self.state.record("auto-resume done", new_run=data.get("id"), **fields)
                if self.monitor is not None and isinstance(data.get("run_dir"), str) and data["run_dir"]:
                    self.monitor.set_run_dir(d.target, data["run_dir"])  # progress and run alerts follow the new run
                self.push(
                    Message(
                        "auto-resume",
                        f"[RESUMED] {d.target}: run {d.run_id} resumed",
                        last.message,
                        Severity.WARNING,
                        pod=d.target,
                    )
                )
            elif (last.data or {}).get("waiting"):  # the pod did not take the connection: no attempt, no push
                self._say("auto-resume waits", logging.INFO, **fields)
            else:
                self._say("auto-resume failed", logging.ERROR, **fields)
                self.state.record("auto-resume failed", **fields)
                self.push(
                    Message(
                        "auto-resume",
                        f"[AUTO-RESUME FAILED] {d.target}: run {d.run_id}",
                        last.message + ". Tried again at a later check while its attempts and budget allow.",
                        Severity.CRITICAL,
                        pod=d.target,
                    )
                )
        except Exception:  # never stops the watcher
            log.exception("auto-resume of %s failed", d.run_id)
        finally:
            self._resumes.pop(d.run_id, None)
            self._dirty = True

    async def _forget_pod(self, name: str) -> None:
        """A pod terminated on purpose: no longer watched, and not "unreachable"."""
        self.backups.forget(name)
        self.cleanup.forget(name)
        if self.monitor is not None and name in self.monitor.names():
            await self.monitor.remove(name)
        self.snapshots.pop(name, None)
        self.down_since.pop(name, None)
        self.book.drop_pod(name, self.clock())

    async def _deadline_event(self, ev: Any) -> None:
        r = ev.rental
        fields = {"pod": r.name, "provider": r.provider, "pod_id": r.pod_id, "kind": ev.kind}
        self._say(
            f"deadline {ev.kind}",
            logging.ERROR if ev.kind == "failed" else logging.WARNING,
            message=ev.message,
            **fields,
        )
        self.state.record(f"deadline {ev.kind}", message=ev.message, **fields)
        self._dirty = True
        sev = {"failed": Severity.CRITICAL, "warn": Severity.WARNING}.get(ev.kind, Severity.INFO)
        self.push(Message("deadline", f"[DEADLINE] {r.name}: {ev.kind}", ev.message, sev, pod=r.name))
        if ev.kind == "terminated" and self.monitor is not None and r.name in self.monitor.names():
            await self._forget_pod(r.name)  # gone on purpose: not "unreachable"

    # ------------------------------------------------------------------ views
    def view(self) -> WatchView:
        """For a scrape (any thread): immutable copies."""
        return WatchView(
            tuple(self.snapshots.values()),
            dict(self.book.opened_total),
            self.rentals,
            dict(self.sent),
            self.monitor_settings.demo_price_per_hr,
            self.clock(),
            self.spends,
            self.backups.ages(self.clock()),
        )

    def summary(self, now: float | None = None) -> dict[str, Any]:
        now = self.clock() if now is None else now
        pods = [pod_json(s, now) for s in self.snapshots.values()]
        return {
            "time": round(now, 3),
            "pods": pods,
            "reached": sum(1 for p in pods if p["reached"]),
            "alerts": sum(len(p["alerts"]) for p in pods),
            "rentals": [
                {
                    "name": r.name,
                    "provider": r.provider,
                    "price_hr": r.price_hr,
                    "spent": round(r.spent(now), 2),
                    "budget_usd": r.budget_usd,
                    "deadline_in_s": None if r.deadline is None else round(r.deadline - now),
                }
                for r in self.rentals
            ],
        }

    async def once(self, timeout: float = 60.0) -> dict[str, Any]:
        """One sample of every pod (or its failure), evaluated by the same rules; no message, no state file."""
        self._read_rentals()
        self._start_monitor()
        assert self.monitor is not None
        end = time.monotonic() + timeout
        try:
            while time.monotonic() < end and not all(self._settled(n) for n in self.monitor.names()):
                await asyncio.sleep(0.05)
            return self.summary()
        finally:
            await self.monitor.aclose()

    def _settled(self, name: str) -> bool:
        snap = self.snapshots.get(name)
        return snap is not None and (
            snap.samples_total > 0 or snap.status.state not in (PodState.CONNECTING, PodState.ONLINE)
        )

    # ------------------------------------------------------------------ output
    def _say(self, what: str, level: int = logging.INFO, **fields: Any) -> None:
        event(log, what, level, **fields)
        if self.out is not None:
            with contextlib.suppress(Exception):
                self.out({"t": round(self.clock(), 3), "event": what, **fields})

    def _save(self) -> None:
        if not self._dirty and self.clock() - self.state.saved_at < self.options.heartbeat_s:
            return
        try:
            self.state.save(self.book)
            self._dirty = False
        except OSError as exc:
            event(
                log,
                "cannot write the state file",
                logging.ERROR,
                path=str(self.state.path),
                error=exc.strerror or str(exc),
            )
