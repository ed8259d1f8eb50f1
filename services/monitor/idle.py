"""Idle GPUs that still bill (pure: no I/O). A pod is idle when every GPU it reports reads ~0 % util and ~0
memory (the dead-GPU rule's thresholds: ``gpu_dead_util_pct``, ``gpu_dead_mem_bytes``) AND no run is alive on
it: no run at all, a run that ended (finished, killed, crashed, interrupted), or a run still "starting" that
the app did not launch and that has written nothing yet. A run that is stepping, checkpointing, evaluating or
starting with its leader alive is never idle, whatever its GPUs read (a stall is the health rules' business).

Judged on the samples only: a pod that reports no GPUs, or a GPU with an unread util or memory, is not known
to be idle, and the window starts again. After ``idle_minutes`` of idle samples (the pod's clock) the monitor's
snapshot carries an :class:`~services.models.IdleFigure`: how long, and the $ it cost at the pod's price. The
watcher pushes it once and, with ``[watch] terminate_idle``, terminates the rental after a final backup
(services/watch/idle.py)."""

from __future__ import annotations

from services.models import IdleFigure, PodRunRecord, Sample
from services.monitor.health import HealthSettings
from services.monitor.runlife import Phase

ACTIVE = (Phase.RUNNING, Phase.CHECKPOINTING, Phase.EVALUATING)


def gpus_idle(sample: Sample, settings: HealthSettings) -> bool:
    gpus = sample.gpus
    return bool(gpus) and all(
        g.util is not None
        and g.util <= settings.gpu_dead_util_pct
        and g.mem_used is not None
        and g.mem_used <= settings.gpu_dead_mem_bytes
        for g in gpus
    )


def run_active(phase: Phase | None, record: PodRunRecord | None, wrote: bool) -> bool:
    """``wrote``: the run's logs or metrics said anything yet (a run starting that we did not launch)."""
    if phase is None or phase.ended:
        return False
    if phase in ACTIVE:
        return True
    launched_alive = record is not None and record.alive is not False and record.state not in ("killed", "exited")
    return launched_alive or wrote


class IdleTracker:
    def __init__(self, settings: HealthSettings, price_per_hr: float | None) -> None:
        self.window_s = max(0.0, settings.idle_minutes) * 60.0
        self.settings, self.price_per_hr = settings, price_per_hr
        self.since: float | None = None  # the pod's clock at the first idle sample of this streak

    def observe(self, sample: Sample, *, active: bool) -> IdleFigure | None:
        """The idle figure after this sample: None while not idle for the whole window (or turned off)."""
        if not self.window_s or active or not gpus_idle(sample, self.settings):
            self.since = None
            return None
        if self.since is None or sample.t < self.since:
            self.since = sample.t
        seconds = sample.t - self.since
        if seconds < self.window_s:
            return None
        wasted = None if self.price_per_hr is None else round(self.price_per_hr * seconds / 3600.0, 2)
        return IdleFigure(self.since, seconds, wasted)
