"""Auto-backup decisions, fed every snapshot of every pod (whatever the screen shows).

With ``auto_backup`` on, each pod's newest *complete* checkpoint (the probe's rule: a step still being
written is never picked) goes to the bucket once, unless the bucket already holds a verified copy or
a newer step was sent. One backup at a time per pod; before the first one the bucket is listed (so an
app restart does not send what is already there). A failed attempt is retried after a backoff that
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


@dataclass
class _PodState:
    listed: bool = False
    sent: set[int] = field(default_factory=set)  # verified in the bucket (listed or sent by us)
    skipped: set[int] = field(default_factory=set)  # the user cancelled it: not retried
    running: int | None = None  # the step being backed up (or listed for)
    held: str = ""  # a transfer started elsewhere (the pane's b/u) for this pod
    failures: int = 0
    retry_at: float = float("-inf")
    last_error: str = ""
    last_step: int | None = None


class AutoBackupPlanner:
    def __init__(self, clock: Callable[[], float] = time.monotonic, retry_base: float = RETRY_BASE,
                 retry_max: float = RETRY_MAX) -> None:
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
        complete = [c.step for c in latest.ckpts if c.complete]
        if not complete:
            return None
        step = max(complete)  # older ones would be pruned by keep-last anyway
        if step in st.sent or step in st.skipped or (st.sent and step < max(st.sent)):
            return None
        st.running = step
        return Job(pod, pod.run_dir, step, list_first=not st.listed)

    def running(self, name: str) -> int | None:
        st = self._pods.get(name)
        return st.running if st else None

    def failures(self, name: str) -> int:
        """Failed attempts in a row for this pod (0 after a success)."""
        st = self._pods.get(name)
        return st.failures if st else 0

    # ------------------------------------------------------------------ outcomes
    def listed(self, name: str, verified: Iterable[int]) -> bool:
        """The bucket's verified steps for the pod's run; True when the running step needs no backup."""
        st = self._state(name)
        st.listed = True
        st.sent.update(verified)
        if st.running is not None and st.running in st.sent:
            st.running = None
            return True
        return False

    def succeeded(self, name: str, step: int) -> bool:
        """The step is verified in the bucket. True when it ends a streak of failures (say so)."""
        st = self._state(name)
        recovered = st.failures > 0
        st.sent.add(step)
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
