"""Auto-backup decisions, fed every snapshot of every pod (whatever the screen shows).

With ``auto_backup`` on, each pod's newest *complete* checkpoint (the probe's rule: a step still being
written is never picked) goes to the bucket once, unless the bucket already holds a verified copy of
it from this run or this app sent that very checkpoint (same step, same mtime: a fresh run's step_N in
the same dir is another checkpoint). A step older than one sent before is no reason to skip: it is the
pod's newest complete checkpoint, so the newer one left the pod (a fresh launch, a resume from an older
step). What is known is per run dir: a pod that follows another run starts afresh. One backup at a
time per pod; before the first one the bucket is listed (so an app restart does not send what is
already there; the controller counts only this run's verified backups, not another run's under the
same prefix). A failed attempt is retried after a backoff that
doubles from ``retry_base`` up to ``retry_max``; only the first failure of a streak is to be reported
(the caller notifies once, not at every retry), and a success after failures says it recovered.

No I/O and no Textual here: the app's controller (app/auto_backup.py) runs the :class:`Job` s this
returns and tells the outcome back (:meth:`AutoBackupPlanner.listed`, ``succeeded``, ``failed``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from services.models import Pod, PodSnapshot, PodState

RETRY_BASE = 30.0
RETRY_MAX = 1800.0


@dataclass(frozen=True)
class Job:
    pod: Pod
    run_dir: str
    step: int
    list_first: bool  # the bucket was not listed yet for this pod: list, skip the step if it is verified
    mtime: float | None = None  # the checkpoint's, as the snapshot showed it


@dataclass
class _PodState:
    run_dir: str | None = None  # what follows is about this run dir
    listed: bool = False
    # verified in the bucket for this run, of the checkpoint listed (step -> its mtime in the snapshot
    # then: a checkpoint written again since, e.g. a relaunch by hand in the same run dir, is not it)
    there: dict[int, float | None] = field(default_factory=dict)
    seen: dict[int, float | None] = field(default_factory=dict)  # the complete ones of the last snapshot
    sent: dict[int, float | None] = field(default_factory=dict)  # step -> its mtime when sent (None: any)
    skipped: set[int] = field(default_factory=set)  # the user cancelled it: not retried
    running: int | None = None  # the step being backed up (or listed for)
    held: str = ""  # a transfer started elsewhere (the pane's b/u) for this pod
    failures: int = 0
    retry_at: float = float("-inf")
    last_error: str = ""
    last_step: int | None = None


class AutoBackupPlanner:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, retry_base: float = RETRY_BASE, retry_max: float = RETRY_MAX
    ) -> None:
        self.clock, self.retry_base, self.retry_max = clock, retry_base, retry_max
        self._pods: dict[str, _PodState] = {}

    def _state(self, name: str) -> _PodState:
        return self._pods.setdefault(name, _PodState())

    # ------------------------------------------------------------------ what to do now
    def want(self, snapshot: PodSnapshot, enabled: bool = True) -> Job | None:
        """The backup to start now for this snapshot's pod (the pod is then busy until the outcome is
        told), or None: disabled, no run dir, a simulated pod, offline, busy, waiting to retry, or
        nothing new and complete."""
        pod, latest = snapshot.pod, snapshot.latest
        if not enabled or not pod.run_dir or pod.simulated or latest is None:
            return None
        if snapshot.status.state is not PodState.ONLINE:
            return None
        st = self._state(pod.name)
        if st.running is not None or st.held or self.clock() < st.retry_at:
            return None
        st = self._follow(pod.name, pod.run_dir)
        complete = {c.step: c.mtime for c in latest.ckpts if c.complete}
        if not complete:
            return None
        step = max(complete)  # older ones would be pruned by keep-last anyway
        st.seen = complete
        done = {**st.there, **st.sent}  # step -> the checkpoint's mtime when it was verified (None: any)
        if step in st.skipped or (step in done and done[step] in (None, complete[step])):
            return None
        st.running = step
        return Job(pod, pod.run_dir, step, list_first=not st.listed, mtime=complete[step])

    def _follow(self, name: str, run_dir: str | None) -> _PodState:
        """The pod's state for ``run_dir``: a pod now following another run starts afresh (what was
        listed or sent was about the other run), keeping a transfer that runs and a hold."""
        st = self._state(name)
        if run_dir and st.run_dir != run_dir:
            if st.run_dir is not None:
                st = self._pods[name] = _PodState(running=st.running, held=st.held)
            st.run_dir = run_dir
        return st

    def running(self, name: str) -> int | None:
        st = self._pods.get(name)
        return st.running if st else None

    def failures(self, name: str) -> int:
        """Failed attempts in a row for this pod (0 after a success)."""
        st = self._pods.get(name)
        return st.failures if st else 0

    # ------------------------------------------------------------------ outcomes
    def listed(self, name: str, verified: Iterable[int]) -> bool:
        """The bucket's verified steps of the pod's run (never another run's under the same prefix);
        True when the running step needs no backup."""
        st = self._state(name)
        st.listed = True
        st.there.update({step: st.seen.get(step) for step in verified})
        if st.running is not None and st.running in st.there:
            st.running = None
            return True
        return False

    def succeeded(self, name: str, step: int, mtime: float | None = None, run_dir: str | None = None) -> bool:
        """The step (whose checkpoint had ``mtime``) is verified in the bucket -- by the auto-backup, or by
        a backup the user started (``run_dir``: the run it was for). True when it ends a streak of
        failures (say so)."""
        st = self._follow(name, run_dir)
        recovered = st.failures > 0
        st.sent[step] = mtime
        st.running, st.failures, st.retry_at, st.last_error, st.last_step = None, 0, float("-inf"), "", step
        return recovered

    def failed(self, name: str, step: int, reason: str) -> bool:
        """An attempt failed (listing or backup); retry after a backoff. True when this is the first
        failure of a streak: the one to report."""
        st = self._state(name)
        st.failures += 1
        st.running, st.last_error, st.last_step = None, reason, step
        st.retry_at = self.clock() + min(self.retry_max, self.retry_base * 2 ** (st.failures - 1))
        return st.failures == 1

    def cancelled(self, name: str, step: int) -> None:
        """The user stopped it: that step is not retried (a newer complete one will be)."""
        st = self._state(name)
        st.skipped.add(step)
        st.running = None

    def hold(self, name: str, what: str) -> None:
        """A transfer the user started for this pod: no auto-backup until :meth:`release`."""
        self._state(name).held = what

    def release(self, name: str) -> None:
        self._state(name).held = ""

    def forget(self, name: str) -> None:
        self._pods.pop(name, None)

    def status(self, name: str) -> str:
        """One line for the Checkpoints pane: the last failure and when it is retried, else ''."""
        st = self._pods.get(name)
        if st is None or not st.last_error or st.failures == 0:
            return ""
        wait = st.retry_at - self.clock()
        when = f"retry in {wait:.0f} s" if wait > 0 else "retrying"
        times = f" ({st.failures} attempts)" if st.failures > 1 else ""
        return f"auto-backup of step {st.last_step} failed{times}: {st.last_error} · {when}"
