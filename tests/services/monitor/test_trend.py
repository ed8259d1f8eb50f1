"""An hour of GPU history per pod at under 1 MiB (issue 36).

What was broken: the monitor kept every parsed sample of the graphs' window (600 at ~3.5 KB with 8 GPUs: 10 minutes
for ~2.1 MB per pod); an hour would have been ~12 MB per pod and seconds of garbage collection at 64 pods. What must
hold now: a pod watched for an hour keeps its recent samples in full and the hour in 10-second buckets (min, max,
mean of every GPU's util, memory %, power and temperature), the whole under 1 MiB; a bucket's figures are those
of its samples; the pod's clock going back, a GPU missing and N/A values lose nothing that was kept.
"""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from services.models import GpuSample, HostSample, Pod, PodKind, Sample
from services.monitor.trend import BUCKET_S, METRICS, TrendBuilder
from services.monitor.worker import MonitorSettings, PodMonitorState

GIB = 1 << 30
HOST = HostSample(None, None, None, None, None, None)


def sample(t: float, rng: random.Random, gpus: int = 8, na: float = 0.0) -> Sample:
    def maybe(v: float) -> float | None:
        return None if rng.random() < na else v

    return Sample(
        t=t,
        gpus=tuple(
            GpuSample(
                i,
                "NVIDIA H100 80GB HBM3",
                maybe(float(rng.randint(0, 100))),
                int(rng.uniform(10, 80) * GIB),
                80 * GIB,
                maybe(round(rng.uniform(100, 700), 2)),
                maybe(float(rng.randint(40, 90))),
            )
            for i in range(gpus)
        ),
        host=HostSample(20.0, GIB, 2 * GIB, GIB, 2 * GIB, 65536),
        source="nvml",
    )


def test_a_bucket_holds_the_min_max_and_mean_of_its_samples() -> None:
    rng = random.Random(1)
    builder = TrendBuilder(keep_s=3600)
    samples = [sample(1000.0 + k, rng, gpus=2, na=0.1) for k in range(35)]  # buckets 1000, 1010, 1020; 1030 open
    for s in samples:
        builder.add(s)
    assert [b.t for b in builder.view] == [1000.0, 1010.0, 1020.0]
    for bucket in builder.view:
        inside = [s for s in samples if bucket.t <= s.t < bucket.t + BUCKET_S]
        assert bucket.n == len(inside) == 10
        for gpu in (0, 1):
            for metric in METRICS:
                values = [v for s in inside if (v := getattr_metric(s.gpus[gpu], metric)) is not None]
                if not values:
                    assert bucket.stat(gpu, metric) is None
                    continue
                for which, want in (("min", min(values)), ("max", max(values)), ("mean", sum(values) / len(values))):
                    assert bucket.stat(gpu, metric, which) == pytest.approx(want, rel=1e-6), (gpu, metric, which)
        assert bucket.stat(7, "util") is None  # no such GPU


def getattr_metric(gpu: GpuSample, metric: str) -> float | None:
    return {"util": gpu.util, "mem": gpu.mem_pct, "power": gpu.power_w, "temp": gpu.temp_c}[metric]


def test_clock_back_and_another_gpu_set_keep_what_was_closed_and_start_afresh() -> None:
    rng = random.Random(2)
    builder = TrendBuilder(keep_s=3600)
    for k in range(25):
        builder.add(sample(2000.0 + k, rng, gpus=2))
    assert [b.t for b in builder.view] == [2000.0, 2010.0]
    builder.add(sample(2025.0, rng, gpus=1))  # a GPU gone: the open bucket (5 samples) closes early
    assert [(b.t, b.n, b.gpus) for b in builder.view][-1] == (2020.0, 5, (0, 1))
    builder.add(sample(2031.0, rng, gpus=1))
    assert [(b.t, b.n, b.gpus) for b in builder.view][-1] == (2020.0, 1, (0,))
    builder.add(sample(100.0, rng, gpus=1))  # the pod's clock went back: its future is not kept
    assert builder.view == ()
    for k in range(1, 12):
        builder.add(sample(100.0 + k, rng, gpus=1))
    assert [b.t for b in builder.view] == [100.0]


def test_an_hour_of_8_gpus_is_kept_downsampled_under_one_mib_per_pod() -> None:
    rng = random.Random(3)
    settings = MonitorSettings()
    gc.collect()
    tracemalloc.start()
    try:
        state = PodMonitorState(Pod(name="p", kind=PodKind.SSH, host="h"), settings, clock=lambda: 0.0)
        before = tracemalloc.get_traced_memory()[0]
        for k in range(3610):  # each sample its own objects, as parsed from its probe line
            state.keep(sample(10_000.0 + k, rng), 1300)
        snapshot = state._build()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(snapshot.history) == settings.history_len < 3600
    assert snapshot.history[-1].t == 10_000.0 + 3609
    trend = snapshot.trend
    assert len(trend) == int(settings.trend_s // BUCKET_S)  # the hour, bucket by bucket
    assert trend[-1].t + BUCKET_S == 10_000.0 + 3600  # the last closed bucket ends where the open one starts
    assert trend[0].t == 10_000.0 + 3600 - settings.trend_s
    assert all(b.n == BUCKET_S for b in trend)
    assert kept < 1 << 20, f"{kept / (1 << 20):.2f} MiB for an hour of one pod"


def test_values_that_are_not_finite_are_left_out_of_a_bucket() -> None:
    """add() tests finiteness in line (value - value == 0.0): NaN and both infinities are skipped like N/A."""
    builder = TrendBuilder(keep_s=3600)
    odd = (float("nan"), float("inf"), float("-inf"), 50.0, None, 30.0)
    for k, util in enumerate(odd):
        builder.add(Sample(t=2000.0 + k, gpus=(GpuSample(0, "G", util, None, None, util, 60.0 + k),), host=HOST))
    builder.add(Sample(t=2010.0, gpus=(), host=HOST))  # closes the bucket
    (bucket,) = builder.view
    assert (bucket.stat(0, "util", "min"), bucket.stat(0, "util", "max"), bucket.stat(0, "util")) == (30.0, 50.0, 40.0)
    assert bucket.stat(0, "power", "max") == 50.0 and bucket.stat(0, "mem") is None
    assert (bucket.stat(0, "temp", "min"), bucket.stat(0, "temp", "max")) == (60.0, 65.0) and bucket.n == 6
