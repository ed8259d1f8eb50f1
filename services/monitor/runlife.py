"""A run's life, one state machine for the monitor, the watcher, ``status`` and the TUI (pure: no I/O).

Phases: starting (no step yet), running, checkpointing (a checkpoint is being written), evaluating (the
orchestrator runs evals and training waits for them), and the ends: finished (exited 0, or the trainer said it
finished), killed (by a user: the pod's record says so, whichever machine killed it; or this machine's record),
crashed (exited non-zero, not killed), interrupted (its processes vanished without an exit code: the pod
rebooted or was lost, or this machine's preemption tracker marked it). ``resumed`` says a run continued another
from a checkpoint.

The health rules are judged against it (services/monitor/health.py): no stall, dead-GPU or hang alert for a run
that ended; a crash is its own alert, once; none while a checkpoint or an eval runs. Alerts are recomputed per
sample, so an open one closes as soon as the phase says so.

Evidence, strongest first: the pod's record of a run the app launched (services/pod/agent/rundir.py
``run_life``: state, leader alive, exit code), this machine's run record (services/runs.py), then the run's
own logs (prime-rl's "RL trainer finished!", "Saving checkpoint at step N", "Starting evals in ...",
"Evaluated ENV (Step N)") and its progress.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from services.models import PodRunRecord, RunProgress

# prime-rl's orchestrator: "Starting evals in a, b (N total rollouts)" ... "Evaluated a (Step N) | ..."
_EVAL_START = re.compile(r"\bStarting evals? in (?P<envs>.+?) \(\d+ total rollouts\)")
_EVAL_DONE = re.compile(r"\bEvaluated (?P<env>\S+) \(Step \d+\)|\bEval @ step=\d+ env=(?P<empty>\S+): no episodes")


class Phase(str, enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    EVALUATING = "evaluating"
    FINISHED = "finished"
    KILLED = "killed"
    CRASHED = "crashed"
    INTERRUPTED = "interrupted"

    @property
    def ended(self) -> bool:
        """The run is over: nothing of it can stall, die or hang any more."""
        return self in (Phase.FINISHED, Phase.KILLED, Phase.CRASHED, Phase.INTERRUPTED)

    @property
    def paused(self) -> bool:
        """Alive, and legitimately making no steps right now."""
        return self in (Phase.CHECKPOINTING, Phase.EVALUATING)


@dataclass(frozen=True)
class RunLife:
    phase: Phase
    since: float | None = None  # the pod's clock when this phase began (None: not known)
    resumed: bool = False
    exit_code: int | None = None
    reason: str = ""  # what says so, in the user's words ("killed from this machine", "exited with code 1")

    @property
    def ended(self) -> bool:
        return self.phase.ended


def judge(
    progress: RunProgress,
    *,
    record: PodRunRecord | None = None,
    local_state: str | None = None,
    evaluating: bool = False,
) -> tuple[Phase, str, int | None]:
    """(phase, reason, exit code) from the evidence; ``local_state``: this machine's record of the run ("running",
    "killed", "interrupted", "exited")."""
    code = record.exit_code if record is not None else None
    if record is not None and record.state in ("killing", "killed"):
        return Phase.KILLED, "killed by a user (the pod's run record)", code
    if local_state == "killed":
        return Phase.KILLED, "killed from this machine", code
    if record is not None and code is not None:
        if code == 0:
            return Phase.FINISHED, "exited with code 0", 0
        if code in (137, -9):
            return (
                Phase.CRASHED,
                f"exited with code {code}: killed by SIGKILL, not from the app (often the "
                "kernel's out-of-memory killer: see dmesg on the pod)",
                code,
            )
        return Phase.CRASHED, f"exited with code {code}", code
    if local_state == "interrupted":
        return Phase.INTERRUPTED, "marked interrupted (the pod was lost)", None
    if progress.finished:
        return Phase.FINISHED, "the trainer said it finished", None
    if record is not None and record.alive is False:
        return (
            Phase.INTERRUPTED,
            "its processes are gone without an exit code (the pod restarted, or they were killed outside the app)",
            None,
        )
    if progress.checkpointing:
        return Phase.CHECKPOINTING, "a checkpoint is being written", None
    if evaluating:
        return Phase.EVALUATING, "evals are running", None
    if progress.step is None:
        return Phase.STARTING, "no step yet", None
    return Phase.RUNNING, "", None


class LifeTracker:
    """Follows one run's phase over samples (``since`` = when the phase changed, on the pod's clock)."""

    def __init__(self, eval_max_s: float = 2700.0) -> None:
        self.eval_max_s = eval_max_s  # an eval that never reports its end stops pausing the stall budget then
        self.life = RunLife(Phase.STARTING)
        self.record: PodRunRecord | None = None
        self.local_state: str | None = None
        self._evals: set[str] = set()  # eval envs started and not yet reported
        self.eval_since: float | None = None

    def feed_log(self, line: str, at: float) -> None:
        """Evals begin and end in the orchestrator's log (an env that returned no episodes ends too). The
        trainer may finish the step it had in flight meanwhile, so steps do not end an eval; an eval that never
        reports pauses the stall budget for at most ``eval_max_s`` (:meth:`evaluating`)."""
        if "val" not in line:
            return
        if (m := _EVAL_START.search(line)) is not None:
            self._evals |= {e.strip() for e in m.group("envs").split(",") if e.strip()}
            self.eval_since = at if self.eval_since is None else self.eval_since
        elif (m := _EVAL_DONE.search(line)) is not None:
            self._evals.discard(m.group("env") or m.group("empty"))
            if not self._evals:
                self.eval_since = None

    def evaluating(self, now: float) -> bool:
        return bool(self._evals) and self.eval_since is not None and now - self.eval_since <= self.eval_max_s

    def update(self, progress: RunProgress, now: float) -> RunLife:
        phase, reason, code = judge(
            progress, record=self.record, local_state=self.local_state, evaluating=self.evaluating(now)
        )
        resumed = self.record.resumed if self.record is not None else self.life.resumed
        if phase is not self.life.phase or reason != self.life.reason or resumed != self.life.resumed:
            since = self.life.since if phase is self.life.phase else now
            if phase.ended and self.record is not None and self.record.ended is not None and phase is Phase.KILLED:
                since = min(now, self.record.ended)
            self.life = RunLife(phase, since, resumed, code, reason)
        return self.life
