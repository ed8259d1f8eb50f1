"""An hour of GPU graphs at a few hundred KB per pod: the samples downsampled into fixed buckets of the pod's
clock (``BUCKET_S``), each holding the min, max and mean of every GPU's util, memory %, power and temperature.

A parsed sample is ~2.4 KB (8 GPUs), so an hour of them would be ~8.5 MB per pod; a closed bucket is one float32
array (8 GPUs x 4 metrics x 3 figures: 384 bytes) and a few fields, ~0.6 KB per ``BUCKET_S`` seconds. The
monitor keeps full samples for the recent window (``MonitorSettings.history_len``) and these buckets for
``MonitorSettings.trend_s`` (docs/monitor.md); the Monitor pane's graphs read the buckets older than the samples.
Only the pod's own monitor task mutates a :class:`TrendBuilder`; closed buckets are never changed.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass
from operator import attrgetter

from services.models import Sample

HISTORY_LEN = 300  # full samples the monitor keeps per pod (MonitorSettings.history_len): 5 min at 1 Hz
BUCKET_S = 10.0  # seconds of the pod's clock per bucket: a graph cell of an hour's graph is wider than this
METRICS = ("util", "mem", "power", "temp")  # the Monitor pane's GPU graphs (mem: % of the GPU's memory); add() reads
# util, mem_pct, power_w, temp_c in this order
STATS = ("min", "max", "mean")
_NAN = float("nan")
_INDEX = attrgetter("index")


@dataclass(frozen=True, slots=True)
class TrendBucket:
    """``BUCKET_S`` seconds of one pod's GPUs from ``t`` (the pod's clock): ``n`` samples, and per GPU (``gpus``,
    their indices) per metric (``METRICS``) the min, max and mean of the values it had (NaN: none had one)."""

    t: float
    n: int
    gpus: tuple[int, ...]
    values: array  # float32: [gpu][metric][min, max, mean]

    def stat(self, gpu: int, metric: str, which: str = "mean") -> float | None:
        """One figure; None when the GPU is not in the bucket or had no value for the metric."""
        try:
            at = (self.gpus.index(gpu) * len(METRICS) + METRICS.index(metric)) * len(STATS) + STATS.index(which)
        except ValueError:
            return None
        value = self.values[at]
        return None if math.isnan(value) else float(value)


class TrendBuilder:
    """Buckets samples as they come (oldest first, by the pod's clock); ``view`` is the closed buckets of the
    last ``keep_s`` seconds, oldest first, a tuple rebuilt only when a bucket closes."""

    def __init__(self, keep_s: float, bucket_s: float = BUCKET_S) -> None:
        self.bucket_s = bucket_s
        self.closed: deque[TrendBucket] = deque(maxlen=max(1, int(keep_s // bucket_s)))
        self.view: tuple[TrendBucket, ...] = ()
        self._start: float | None = None  # the open bucket's start, its sample count, its GPUs and running figures
        self._n = 0
        self._gpus: tuple[int, ...] = ()
        self._acc: list[list[float]] = []  # per GPU per metric: [min, max, sum, count]

    def add(self, sample: Sample) -> None:
        t = sample.t
        start = math.floor(t / self.bucket_s) * self.bucket_s
        if self._start is not None and start != self._start:
            if start < self._start:  # the pod's clock went back: a fresh start, nothing of the future kept
                self.closed.clear()
                self.view = ()
                self._open(start, sample)
            else:
                self._close()
        if self._start is None:
            self._open(start, sample)
        gpus = tuple(map(_INDEX, sample.gpus))
        if gpus != self._gpus:  # another set of GPUs within a bucket: the bucket ends early, a new one starts
            if self._n:
                self._close()
            self._open(start, sample)
        self._n += 1
        acc = self._acc  # per GPU per metric, in METRICS order: the k-th figure of the sample is acc[k]
        k = 0
        for gpu in sample.gpus:
            used, total = gpu.mem_used, gpu.mem_total  # GpuSample.mem_pct, without a call per GPU
            mem = None if used is None or not total else 100.0 * used / total
            for value in (gpu.util, mem, gpu.power_w, gpu.temp_c):
                if value is not None and value - value == 0.0:  # finite (inf - inf and NaN - NaN are NaN)
                    a = acc[k]
                    if not a[3]:
                        a[0] = a[1] = a[2] = value
                    else:
                        if value < a[0]:
                            a[0] = value
                        elif value > a[1]:
                            a[1] = value
                        a[2] += value
                    a[3] += 1
                k += 1

    def _open(self, start: float, sample: Sample) -> None:
        self._start, self._n = start, 0
        gpus = tuple(map(_INDEX, sample.gpus))
        self._gpus = self.closed[-1].gpus if self.closed and self.closed[-1].gpus == gpus else gpus  # one tuple
        self._acc = [[0.0, 0.0, 0.0, 0] for _ in range(len(self._gpus) * len(METRICS))]

    def _close(self) -> None:
        if self._start is not None and self._n:
            values = array("f")
            for lo, hi, total, count in self._acc:
                values.extend((lo, hi, total / count) if count else (_NAN, _NAN, _NAN))
            self.closed.append(TrendBucket(self._start, self._n, self._gpus, values))
            self.view = tuple(self.closed)
        self._start, self._n, self._gpus, self._acc = None, 0, (), []
