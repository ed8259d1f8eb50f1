"""The watcher's cleanup daemons: the TUI's (services/lifecycle/auto_cleanup.py), one per watched pod with cleanup
enabled in settings (``[lifecycle] cleanup_pods``), run here as asyncio tasks and fed every snapshot.

Headless, nobody can approve the dry-run preview the TUI shows before a daemon's first deletion. So a daemon
deletes only when the user approved headless deletion in settings (``[watch] cleanup = true``: ``approved``);
otherwise its rounds only plan, and the first plan with deletions is reported once per pod (``cleanup waiting``,
with the preview) — the user approves it in the TUI (whose own daemon then deletes) or in settings.
Outcomes go to ``on_event(what, level, fields)``: every round that deleted something (``cleanup done``), a
failure once per streak (``cleanup failed``), the preview once (``cleanup waiting``); the long parts
(``preview``, the deleted ``paths``) are in fields of their own, for the log and the push, not the state file."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from services.lifecycle.auto_cleanup import CleanupDaemon
from services.lifecycle.events import Event
from services.models import Pod, PodSnapshot
from services.units import fmt_bytes
from services.watch.tasks import cancel_all

if TYPE_CHECKING:
    from services.pod.connection import Connection

OnEvent = Callable[[str, int, dict[str, Any]], None]
PREVIEW_LINES = 40  # a long preview (hundreds of broadcasts) is cut in the message; the log keeps the counts
APPROVE = "approve it in the TUI (its cleanup preview) or set [watch] cleanup = true in settings.toml"


class WatchCleanup:
    def __init__(
        self,
        settings: Any,
        backup: Any,
        on_event: OnEvent,
        *,
        approved: bool = False,
        connect: Callable[[Pod], Connection],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings, self.backup, self.on_event = settings, backup, on_event
        self.approved, self.connect, self.clock = approved, connect, clock
        self.daemons: dict[str, CleanupDaemon] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._previewed: set[str] = set()  # pods whose waiting preview was said (once per pod)

    def wanted(self, pod: Pod) -> bool:
        """Cleanup enabled for this pod in settings (the demo pod's simulated run is the TUI's sandbox)."""
        return self.settings is not None and self.settings.cleanup_enabled(pod.name) and not pod.simulated

    def add(self, pod: Pod) -> None:
        """Start the pod's daemon (its first round now) when settings enable cleanup for it."""
        if pod.name in self.daemons or not self.wanted(pod):
            return
        daemon = CleanupDaemon(
            pod,
            self.settings,
            connect=self.connect,
            backup=self.backup,
            clock=self.clock,
            approved=self.approved,
            on_event=functools.partial(self._event, pod.name),
        )
        self.daemons[pod.name] = daemon
        self._tasks[pod.name] = asyncio.ensure_future(self._run(pod.name, daemon))

    def observe(self, snapshot: PodSnapshot) -> None:
        """Every snapshot (cheap: a round is only nudged on a new complete checkpoint or a full volume)."""
        daemon = self.daemons.get(snapshot.pod.name)
        if daemon is not None:
            daemon.observe(snapshot)

    def forget(self, name: str) -> None:
        self.daemons.pop(name, None)
        self._previewed.discard(name)
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()

    async def aclose(self) -> None:
        await cancel_all(self._tasks)

    async def _run(self, name: str, daemon: CleanupDaemon) -> None:
        try:
            await daemon.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one pod's daemon dying never stops the watcher
            self.on_event(
                "cleanup failed",
                logging.ERROR,
                {
                    "pod": name,
                    "error": f"{type(exc).__name__}: {exc}"[:300],
                    "message": f"{name}: the cleanup daemon stopped ({type(exc).__name__}: {exc})"[:300],
                },
            )

    def _event(self, pod: str, ev: Event) -> None:
        data = ev.data or {}
        if "preview" in data:  # a plan with deletions, not approved: reported once per pod
            if pod in self._previewed:
                return
            self._previewed.add(pod)
            plan = data.get("plan") or {}
            steps = [f"step_{c['step']}" for c in plan.get("delete", [])]
            leftovers = len(plan.get("leftovers", []))
            what = ", ".join(steps) if steps else "no checkpoint"
            if leftovers:
                what += f" and {leftovers} leftover dir(s)"
            lines = list(data["preview"])
            if len(lines) > PREVIEW_LINES:
                lines = lines[:PREVIEW_LINES] + [f"... and {len(lines) - PREVIEW_LINES} more line(s)"]
            self.on_event(
                "cleanup waiting",
                logging.WARNING,
                {
                    "pod": pod,
                    "delete": steps,
                    "leftovers": leftovers,
                    "bytes": int(plan.get("bytes") or 0),
                    "message": f"{pod}: cleanup would delete {what} ({fmt_bytes(int(plan.get('bytes') or 0))}); "
                    f"{APPROVE}",
                    "preview": lines,
                },
            )
        elif ev.kind == "done":
            deleted = list(data.get("deleted") or [])
            if deleted:
                freed = int(data.get("bytes") or 0)
                self.on_event(
                    "cleanup done",
                    logging.INFO,
                    {
                        "pod": pod,
                        "deleted": len(deleted),
                        "bytes": freed,
                        "paths": [str(d.get("path")) for d in deleted],
                        "message": f"{pod}: cleanup deleted {len(deleted)} dir(s), freed {fmt_bytes(freed)}",
                    },
                )
        elif ev.kind == "error" and self._new_streak(pod):
            reason = ev.message.removeprefix(f"cleanup daemon on {pod}: ")
            self.on_event(
                "cleanup failed",
                logging.WARNING,
                {
                    "pod": pod,
                    "error": reason[:300],
                    "message": f"{pod}: cleanup failed ({reason[:200]}); tried again at its next round",
                },
            )

    def _new_streak(self, pod: str) -> bool:
        """An error now (the round in progress): said when the pod's previous round went well (or was the first)."""
        daemon = self.daemons.get(pod)
        return daemon is None or not daemon.rounds or not daemon.rounds[-1].error
