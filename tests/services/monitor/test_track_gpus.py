"""The health rules' per-sample GPU bookkeeping (services/monitor/health.py ``HealthTracker._track_gpus``), run for
every sample of every pod, is written for speed (one pass, no object per GPU per sample). What must hold: for any
run of samples (memory and util at the dead and in-use thresholds, power at the NCCL-hang bound, N/A values,
GPUs coming and going) it keeps exactly what the straightforward reading below keeps: which GPUs the run used,
since when each sits at ~0 and at which step, since when the busy GPUs look hung, and how many.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import HealthCheck, given, settings, strategies as st

from services.models import GpuSample
from services.monitor.health import HealthSettings, HealthTracker

S = HealthSettings()
MEMS = [
    None,
    0,
    S.gpu_dead_mem_bytes,
    S.gpu_dead_mem_bytes + 1,
    S.gpu_used_mem_bytes - 1,
    S.gpu_used_mem_bytes,
    80 << 30,
]
UTILS = [None, 0.0, S.gpu_dead_util_pct, S.gpu_dead_util_pct + 0.5, S.nccl_util_pct - 0.5, S.nccl_util_pct, 100.0]
POWERS = [None, 70.0, S.nccl_power_w, S.nccl_power_w + 0.5, 650.0]

gpu_st = st.builds(
    GpuSample,
    st.integers(0, 3),
    st.just("H100"),
    st.sampled_from(UTILS),
    st.sampled_from(MEMS),
    st.just(80 << 30),
    st.sampled_from(POWERS),
    st.just(60.0),
)


class Reference:
    """The rules' GPU bookkeeping read straight from their definition."""

    def __init__(self) -> None:
        self.gpus: dict[int, list] = {}  # index: [used, dead_since, step_at_death]
        self.hang_since: float | None = None
        self.hang_gpus = 0

    def track(self, gpus: list[GpuSample], now: float, step: int | None) -> None:
        for g in gpus:
            state = self.gpus.setdefault(g.index, [False, None, None])
            if g.mem_used is not None and g.mem_used >= S.gpu_used_mem_bytes:
                state[0] = True
            zero = (
                g.mem_used is not None
                and g.mem_used <= S.gpu_dead_mem_bytes
                and g.util is not None
                and g.util <= S.gpu_dead_util_pct
            )
            if zero and state[0]:
                if state[1] is None:
                    state[1], state[2] = now, step
            else:
                state[1], state[2] = None, None
        low = [
            g
            for g in gpus
            if g.util is not None
            and g.util >= S.nccl_util_pct
            and g.power_w is not None
            and g.power_w <= S.nccl_power_w
        ]
        busy = [g for g in gpus if g.mem_used is not None and g.mem_used >= S.gpu_used_mem_bytes]
        if busy and len(low) >= len(busy):
            self.hang_since = now if self.hang_since is None else self.hang_since
        else:
            self.hang_since = None
        self.hang_gpus = len(low)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(gpu_st, max_size=5), min_size=1, max_size=12))
def test_gpu_bookkeeping_is_the_straightforward_one(samples):
    tracker, ref = HealthTracker(S), Reference()
    for k, gpus in enumerate(samples):
        now = 1000.0 + k
        tracker._track_gpus(gpus, now)
        ref.track(gpus, now, tracker.run.progress().step)
        got = {i: [g.used, g.dead_since, g.step_at_death] for i, g in tracker._gpus.items()}
        assert got == ref.gpus
        assert (tracker._hang_since, tracker._hang_gpus) == (ref.hang_since, ref.hang_gpus)
