"""Frozen data passed between layers: pods, samples, pod status and monitor snapshots.

The probe line (version 1, docs/json.md) is parsed here, once, into these types; everything above the
monitor service sees only them. Units: bytes are ints in bytes, percentages are 0-100 floats, power
in watts, temperature in °C. A field the pod could not measure is ``None`` (shown as "N/A"), never 0.
"""

from __future__ import annotations

import enum
import json
import math
import sys
from dataclasses import MISSING, dataclass, fields
from typing import Any

from services.errors import ProbeFormatError
from services.text import plain


def _quick_init(cls: type) -> type:
    """A frozen dataclass's ``__init__`` without its ``object.__setattr__`` call per field: the fields are stored
    through their slots (or the instance dict), which a frozen class's own ``__setattr__`` would refuse. Same
    parameters, defaults and result; the monitor builds several such objects per sample of every pod, and the
    generated ``__init__`` was about a quarter of parsing one. Only for plain fields (no factories, no
    ``__post_init__``, every field in ``__init__``)."""
    params = fields(cls)
    if hasattr(cls, "__post_init__") or any(
        not f.init or f.kw_only or f.default_factory is not MISSING for f in params
    ):
        raise TypeError(f"{cls.__name__}: _quick_init is for plain fields only")
    names = [f.name for f in params]
    slotted = "__slots__" in cls.__dict__
    scope: dict[str, Any] = {f"_set_{n}": cls.__dict__[n].__set__ for n in names} if slotted else {}
    body = (
        "".join(f"    _set_{n}(self, {n})\n" for n in names)
        if slotted
        else "    d = self.__dict__\n" + "".join(f"    d[{n!r}] = {n}\n" for n in names)
    )
    exec(f"def __init__(self, {', '.join(names)}):\n{body}", scope)  # the field names only: no outside text
    init = scope["__init__"]
    generated: Any = cls.__dict__["__init__"]  # the dataclass's own
    init.__defaults__, init.__kwdefaults__ = generated.__defaults__, generated.__kwdefaults__
    init.__qualname__, init.__module__, init.__doc__ = generated.__qualname__, cls.__module__, generated.__doc__
    init.__annotations__ = dict(generated.__annotations__)
    setattr(cls, "__init__", init)  # noqa: B010 -- mypy refuses assigning a method on a type
    return cls


PROBE_VERSION = 1
_DECODE = json.JSONDecoder().raw_decode


def loads_line(line: bytes) -> Any:
    """``json.loads(line)`` for a probe line, without its per-call encoding detection and whitespace scans when
    the line is what the probe writes (UTF-8, one object, a newline after it); any other line goes the way of
    ``json.loads``, so the result, or the error, is always the same."""
    if line[:2] == b'{"' and line[-2:] == b"}\n":  # json.loads would read such bytes as UTF-8 as well
        try:
            text = line.decode("utf-8", "surrogatepass")
            obj, end = _DECODE(text)
        except (ValueError, RecursionError):  # said by json.loads, below, in its own words
            pass
        else:
            if end == len(text) - 1:
                return obj
    return json.loads(line)


class PodKind(str, enum.Enum):
    SSH = "ssh"
    LOCAL = "local"
    DEMO = "demo"


@dataclass(frozen=True)
class Pod:
    """A machine to watch. ``target`` is what the user typed: an ssh alias, ``user@host[:port]``,
    ``local`` or ``demo``; host/user/port are only set when the user gave them explicitly, so that
    ``~/.ssh/config`` fills in the rest."""

    name: str
    kind: PodKind = PodKind.SSH
    host: str = ""
    user: str | None = None
    port: int | None = None
    run_dir: str | None = None
    price_per_hr: float | None = None
    probe_dir: str | None = None  # where the probe is uploaded on the pod (default ~/.cache/...)
    provider: str | None = None  # rented through the Offers pane: the provider and its pod id
    provider_id: str | None = None
    deadline: float | None = None  # epoch seconds when the deadline watch terminates it
    saved: bool = False  # comes from pods.toml (so `d` removes it from there too)
    scheduler: str | None = None  # "slurm": the host is a Slurm cluster's login node (pods.toml kind = "slurm")

    @property
    def simulated(self) -> bool:
        """The demo pod: a simulated run in a sandbox on this machine, started on demand."""
        return self.kind is PodKind.DEMO

    @property
    def host_rules(self) -> bool:
        """Whether the health rules about the host (disk, open files) apply: the simulated pod simulates GPUs
        and a run, not a host (its host figures are this machine's)."""
        return not self.simulated

    @property
    def billed_since_boot(self) -> bool:
        """Whether its uptime says since when it costs money, when nothing better is known: a machine reached
        over SSH (this machine and the simulated pod cost nothing)."""
        return self.kind is PodKind.SSH

    @property
    def label(self) -> str:
        if self.kind is PodKind.SSH:
            who = f"{self.user}@" if self.user else ""
            port = f":{self.port}" if self.port else ""
            target = f"{who}{self.host}{port}"
            return self.name if target == self.name else f"{self.name} ({target})"
        return self.name


@_quick_init
@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    name: str
    util: float | None
    mem_used: int | None
    mem_total: int | None
    power_w: float | None
    temp_c: float | None

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return 100.0 * self.mem_used / self.mem_total


@_quick_init
@dataclass(frozen=True, slots=True)
class HostSample:
    cpu_pct: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    disk_used: int | None = None
    disk_total: int | None = None
    nofile_soft: int | None = None

    @property
    def mem_pct(self) -> float | None:
        return _pct(self.mem_used, self.mem_total)

    @property
    def disk_pct(self) -> float | None:
        return _pct(self.disk_used, self.disk_total)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu: int | None
    mem: int | None
    cmd: str


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: str
    bytes: int | None
    mtime: float | None
    complete: bool


@dataclass(frozen=True)
class PodRunRecord:
    """What the pod says about the run the app launched there (the probe's "life" field, from
    ``<run_dir>/.ptt/``): the record's state ("running", "killing", "killed", "exited"; a kill from any
    machine writes it), whether the run's leader process still lives, and its exit code once it ended."""

    id: str = ""
    state: str = ""
    started: float | None = None
    ended: float | None = None
    alive: bool | None = None  # None: not known (no leader recorded yet)
    exit_code: int | None = None
    resumed: bool = False  # the run continued another from a checkpoint


@dataclass(frozen=True)
class BroadcastMarkers:
    """The newest <run>/broadcasts/step_N: its STABLE (the trainer waits) and NCCL_READY (inference is
    ready; the transfer runs) mtimes on the pod's clock, None when absent; ``handshakes``: (step, seconds
    from STABLE to NCCL_READY) of up to 10 earlier steps, oldest first."""

    step: int
    stable: float | None
    ready: float | None
    handshakes: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class EndpointCheck:
    """One local HTTP endpoint's answer: /health 2xx or not; the trainer's metrics server adds its
    ``trainer_step`` and ``trainer_last_step_timestamp_seconds`` (pod clock)."""

    health: bool
    step: int | None = None
    last_step_ts: float | None = None


@dataclass(frozen=True)
class PodSignals:
    """prime-rl's own signals as the probe read them (its "signals" field, services/pod/agent/signals.py).
    ``roles``: (title, live processes) per PRIME-RL::<title>, None when not read; ``http_at``: when the
    endpoints were last asked (pod clock), None when no config names one."""

    broadcast: BroadcastMarkers | None = None
    roles: tuple[tuple[str, int], ...] | None = None
    http_at: float | None = None
    trainer: EndpointCheck | None = None
    inference: EndpointCheck | None = None

    def alive(self, role: str) -> bool | None:
        """Whether a PRIME-RL::<role> process lives; None when the roles were not read."""
        if self.roles is None:
            return None
        return any(name == role and n > 0 for name, n in self.roles)


@_quick_init
@dataclass(frozen=True, slots=True)
class Sample:
    """One probe line. ``t`` is the pod's clock (epoch seconds); ``source`` says how GPUs were read
    ("nvml", "nvidia-smi" or "none")."""

    t: float
    gpus: tuple[GpuSample, ...]
    host: HostSample
    procs: tuple[GpuProcess, ...] = ()
    log: tuple[str, ...] = ()
    ckpts: tuple[CheckpointInfo, ...] = ()
    source: str = ""
    errors: tuple[str, ...] = ()  # what the probe could not read this tick (for the UI, not fatal)
    metrics: tuple[str, ...] = ()  # new <run>/metrics.jsonl lines, unparsed (services.monitor.metrics parses them)
    max_steps: int | None = None  # from the run's resolved configs (probe "run" field), when known
    model: str | None = None  # the run's model and tokens per step (same source; Offers calibration)
    tokens_per_step: int | None = None
    # what the probe left out of this sample to keep it small (its "cut" field): bytes of the run's logs,
    # metrics.jsonl and training.csv not carried, and lines shortened or dropped (0 from older probes)
    cut_bytes: int = 0
    cut_lines: int = 0
    life: PodRunRecord | None = None  # the pod's record of the run we launched (None: not launched by us)
    signals: PodSignals | None = None  # prime-rl's own signals (probe "signals" field); None from older probes

    @classmethod
    def from_line(cls, line: str | bytes) -> Sample:
        """Parse one probe line; raises ProbeFormatError on anything that is not a v1 sample, never
        anything else (the line comes from a pod we do not control)."""
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ProbeFormatError(f"not JSON: {str(exc)[:200]}") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: Any) -> Sample:
        try:
            return cls._from_dict(obj)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError, RecursionError) as exc:
            raise ProbeFormatError(f"malformed probe field: {str(exc)[:200]}") from None

    @classmethod
    def _from_dict(cls, obj: Any) -> Sample:
        if not isinstance(obj, dict):
            raise ProbeFormatError("probe line is not a JSON object")
        if obj.get("v") != PROBE_VERSION or isinstance(obj.get("v"), bool):
            raise ProbeFormatError(f"unsupported probe version {str(obj.get('v'))[:20]}")
        t = _num(obj.get("t"))
        if t is None:
            raise ProbeFormatError("probe line has no time")
        notes: list[str] = []  # what was left out of this sample, said in its errors
        gpus = _gpus_fast(obj.get("gpus")) or _gpus_careful(obj, notes)
        host = _host(obj.get("host") or {})
        procs = tuple(map(_proc, _capped(obj, "procs", MAX_PROCS, notes)))
        ckpts = tuple(map(_ckpt, _capped(obj, "ckpts", MAX_CKPTS, notes)))
        run = obj.get("run")
        run = run if isinstance(run, dict) else {}
        max_steps, tokens = _int(run.get("max_steps")), _int(run.get("tokens_per_step"))
        model = plain(run["model"], oneline=True) if isinstance(run.get("model"), str) else None
        log = tuple([plain(_text(x)) for x in _capped(obj, "log", MAX_LINES, notes)])
        metrics = tuple(map(_text, _capped(obj, "metrics", MAX_LINES, notes)))
        signals = _signals(obj.get("signals"), notes)
        errors = tuple([plain(_text(x), oneline=True)[:1000] for x in _capped(obj, "errors", MAX_ERRORS, notes)])
        if notes:
            errors += tuple(notes)
        cut_bytes = cut_lines = 0
        if isinstance(cut := obj.get("cut"), dict) and cut:
            cut_bytes = sum(max(0, _int(cut.get(k)) or 0) for k in ("log_bytes", "metrics_bytes"))
            cut_lines = sum(max(0, _int(cut.get(k)) or 0) for k in ("lines", "metrics_lines"))
        return cls(
            t,
            gpus,
            host,
            procs,
            log,
            ckpts,
            plain(_text(obj.get("source", "")), oneline=True),
            errors,
            metrics,
            max_steps if max_steps and max_steps > 0 else None,
            model,
            tokens if tokens and tokens > 0 else None,
            cut_bytes,
            cut_lines,
            _life(obj.get("life")),
            signals,
        )


class PodState(str, enum.Enum):
    CONNECTING = "connecting"
    ONLINE = "online"
    STALE = "stale"
    OFFLINE = "offline"
    AUTH_FAILED = "auth failed"
    HOSTKEY_UNKNOWN = "host key unknown"
    HOSTKEY_CHANGED = "host key changed"
    UNSUPPORTED = "unsupported"  # the pod lacks what monitoring needs (exec channel, python3): reason says what

    @property
    def retrying(self) -> bool:
        """States the monitor leaves by itself; the others wait for the user."""
        return self in (PodState.CONNECTING, PodState.ONLINE, PodState.STALE, PodState.OFFLINE, PodState.UNSUPPORTED)


@dataclass(frozen=True)
class HostKeyPrompt:
    """What the user needs to decide whether to trust a pod's host key."""

    host: str
    port: int
    key_type: str
    fingerprint: str  # "SHA256:..."
    key_line: str  # the known_hosts line that trusting appends
    known_hosts_file: str
    changed: bool


@dataclass(frozen=True)
class PodStatus:
    state: PodState
    reason: str = ""
    since: float = 0.0
    next_retry: float | None = None  # monitor clock; None when not waiting to retry
    host_key: HostKeyPrompt | None = None

    @classmethod
    def connecting(cls, since: float) -> PodStatus:
        """What the monitor says of a pod first (added, or listed by the App before its watching starts)."""
        return cls(PodState.CONNECTING, "connecting", since=since)


@dataclass(frozen=True)
class Gap:
    """A stretch without samples (connection lost, pod stale)."""

    start: float
    end: float | None  # None while it lasts


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return ("info", "warning", "critical").index(self.value)


@dataclass(frozen=True)
class Alert:
    """One health finding (services.monitor.health). ``id`` is stable while the condition lasts, so the App can
    toast it once; ``message`` says what happened and what to do; ``line`` is the log line behind it."""

    id: str
    severity: Severity
    title: str
    message: str
    since: float  # the pod's clock when the condition started
    line: str | None = None
    count: int = 1  # matching log lines seen while the alert stands


@dataclass(frozen=True)
class RunProgress:
    """What the run's own logs and metrics.jsonl say (services.monitor.progress). ``None`` = not known."""

    step: int | None = None
    max_steps: int | None = None
    loss: float | None = None
    reward: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    step_time_s: float | None = None  # median of the recent steps' wall time
    steps_per_hr: float | None = None
    eta_s: float | None = None
    cost_so_far: float | None = None  # $ at the pod's price for the run's (estimated) elapsed time
    cost_to_finish: float | None = None
    last_step_at: float | None = None  # the pod's clock when the latest step was seen
    finished: bool = False
    checkpointing: bool = False  # a checkpoint is being written right now
    loss_history: tuple[float, ...] = ()  # the last few losses, oldest first (for trend cells)
    source: str = "none"  # "console", "metrics.jsonl", "training.csv"
    phase: str | None = None  # the run's life (services.monitor.runlife.Phase): running, killed, finished, ...
    # what cost_so_far counts from: "since rented", "since the pod started" or "est. from the run's steps"
    cost_basis: str | None = None


@dataclass(frozen=True)
class WandbStatus:
    """What W&B says of a run (information beside the pod's own evidence, never an alarm)."""

    run_path: str  # "entity/project/run_id"
    checked_at: float
    state: str | None = None  # running, finished, crashed, killed, preempting, preempted
    heartbeat_at: float | None = None
    error: str = ""

    def as_json(self, now: float) -> dict[str, Any]:
        lag = self.lag(now)
        return {
            "run_path": self.run_path,
            "state": self.state,
            "heartbeat_age_s": None if lag is None else round(lag, 1),
            "error": self.error or None,
        }

    def lag(self, now: float) -> float | None:
        return None if self.heartbeat_at is None else max(0.0, now - self.heartbeat_at)

    def note(self, now: float) -> str:
        """ "W&B: running, heartbeat 45 s ago" — for the no-progress alert's context and the run line."""
        if self.error:
            return f"W&B: unavailable ({self.error})"
        lag = self.lag(now)
        beat = "no heartbeat yet" if lag is None else f"heartbeat {int(lag)} s ago"
        return f"W&B: {self.state or 'unknown'}, {beat}"


@dataclass(frozen=True)
class IdleFigure:
    """A pod whose GPUs sat idle with no run for the whole ``[health] idle_minutes`` window
    (services/monitor/idle.py): since when (the pod's clock), for how long, and what that cost at its price."""

    since: float
    seconds: float
    wasted_usd: float | None = None  # None: the pod's price is not known

    @property
    def label(self) -> str:
        minutes = int(self.seconds // 60)
        span = f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"
        return f"idle {span}" + ("" if self.wasted_usd is None else f" · ${self.wasted_usd:,.2f} wasted")


@_quick_init
@dataclass(frozen=True)
class PodSnapshot:
    """Everything a widget needs about one pod, immutable: the monitor builds a new one per change."""

    pod: Pod
    status: PodStatus
    history: tuple[Sample, ...] = ()  # oldest first, bounded
    # the GPU graphs' longer history (an hour), downsampled: services.monitor.trend.TrendBucket, oldest first, the
    # closed buckets only (typed loosely: the module sits above this one)
    trend: tuple[Any, ...] = ()
    gaps: tuple[Gap, ...] = ()
    samples_total: int = 0
    malformed_total: int = 0
    dropped_total: int = 0  # lines over the monitor's rate cap (MonitorSettings.max_rate), skipped unread
    bytes_total: int = 0
    cut_bytes: int = 0  # what the probe left out of its samples to keep them small (Sample.cut_*), in all
    cut_lines: int = 0
    last_received: float | None = None  # monitor clock (not the pod's) when the latest sample came
    # the pod's latest metrics.jsonl lines (oldest first, bounded; kept beyond the sample history so
    # the bottleneck breakdown sees the last steps of a slow run) and how many arrived in all
    metrics: tuple[str, ...] = ()
    metrics_total: int = 0
    # services.monitor.health over the stream: current alerts (worst first), the run's progress, the logs' tail
    alerts: tuple[Alert, ...] = ()
    run: RunProgress | None = None
    log_tail: tuple[str, ...] = ()
    wandb: WandbStatus | None = None  # what W&B says about the run: information only, never behind an alert
    # a Slurm login node (Pod.scheduler == "slurm"): the monitor's latest look at its cluster, a
    # services.slurm.models.ClusterView (typed loosely: the kernel sits below services.slurm); None otherwise
    cluster: Any = None
    # the monitor's window of per-trace timings from the run's traces.jsonl (services.monitor.metrics.EpisodeTiming,
    # newest last, bounded by MonitorSettings.episodes_len): the bottleneck breakdown's tool-time percentiles
    episodes: tuple[Any, ...] = ()
    # the pod's GPUs idle with no run for the whole [health] idle_minutes window (None: not so, or not known)
    idle: IdleFigure | None = None

    @property
    def latest(self) -> Sample | None:
        return self.history[-1] if self.history else None


def _pct(used: int | None, total: int | None) -> float | None:
    if used is None or not total:
        return None
    return 100.0 * used / total


# What one sample may carry (the probe sends far less; a pod we do not control may not): the history keeps
# history_len samples per pod, so each cap bounds the monitor's memory per pod (docs/monitor.md).
MAX_GPUS = 64
MAX_PROCS = 256
MAX_CKPTS = 2000  # the first sample lists every checkpoint of the run
MAX_LINES = 1000  # log and metrics lines (the probe sends at most 200 log lines)
MAX_ERRORS = 50


def _capped(obj: dict, key: str, cap: int, notes: list[str]) -> list:
    items = obj.get(key)
    if type(items) is list and len(items) <= cap:
        return items
    items = _list(items)
    if len(items) <= cap:
        return items
    notes.append(f"the pod reported {len(items)} {key} in one sample: the first {cap} are shown")
    return items[:cap]


def _list(value: Any) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProbeFormatError(f"expected a list, got {type(value).__name__}")
    return value


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    raise ValueError(f"not a number: {value!r}")


def _int(value: Any) -> int | None:
    v = _num(value)
    return None if v is None else int(v)


MAX_TEXT = 8192  # characters of one text field (the probe itself carries the first 4 KiB of a log line)


def _text(value: Any) -> str:
    """A text field, at most MAX_TEXT characters; None as ""; anything else (a nested list from a broken probe)
    as its JSON, bounded."""
    if value is None:
        return ""
    return value[:MAX_TEXT] if isinstance(value, str) else json.dumps(value)[:1000]


def _required_int(value: Any) -> int:
    """An integer field that must be there (a pid, a step): a finite number, else ValueError."""
    v = _int(value)
    if v is None:
        raise ValueError(f"not a number: {str(value)[:40]}")
    return v


GPU_FIELDS = ("index", "name", "util", "mem_used", "mem_total", "power_w", "temp_c")


def gpu_rows(columns: dict[str, list], limit: int | None = None) -> list[dict[str, Any]]:
    """The probe's columns of GPU fields (all of one length) as one object per GPU, the first ``limit``."""
    n = min((len(c) for c in columns.values()), default=0)
    return [{k: c[i] for k, c in columns.items()} for i in range(n if limit is None else min(n, limit))]


def _gpus_careful(obj: dict, notes: list[str]) -> tuple[GpuSample, ...]:
    """The probe's "gpus": one list per field (GPU_FIELDS; a field left out is null for every GPU, unknown ones
    are ignored), all of one length; a list of one object per GPU is read the same way."""
    gpus = obj.get("gpus")
    if isinstance(gpus, dict):
        columns = {k: _list(gpus.get(k)) for k in GPU_FIELDS if gpus.get(k) is not None}
        sizes = {len(c) for c in columns.values()}
        if len(sizes) > 1:
            raise ProbeFormatError(f"GPU fields of different lengths: {sorted(sizes)[:4]}")
        n = sizes.pop() if sizes else 0
        rows = gpu_rows(columns, MAX_GPUS + 1)
        if n > MAX_GPUS:
            notes.append(f"the pod reported {n} gpus in one sample: the first {MAX_GPUS} are shown")
            rows = rows[:MAX_GPUS]
    else:
        rows = _capped(obj, "gpus", MAX_GPUS, notes)
    return tuple([_gpu_careful(g, i) for i, g in enumerate(rows)])


def _gpu_careful(g: dict, position: int) -> GpuSample:
    idx = _int(g.get("index"))
    util = _num(g.get("util"))
    if util is not None and not 0.0 <= util <= 100.0:
        raise ValueError(f"GPU util out of range: {util}")
    return GpuSample(
        index=position if idx is None else idx,
        name=_gpu_name(g.get("name")),
        util=util,
        mem_used=_int(g.get("mem_used")),
        mem_total=_int(g.get("mem_total")),
        power_w=_num(g.get("power_w")),
        temp_c=_num(g.get("temp_c")),
    )


# The fast path of the well-formed entry: each figure checked by its exact type in line, no call per field. It
# accepts only what the careful path (_gpu_careful, _host_careful) turns into the same value (an int that is
# exactly a float, a finite float, null) and answers None for anything else, which the careful path then reads
# or refuses as before: tests/services/test_models.py pins the two equal on well-formed and garbage entries.
_EXACT = 2**53  # ints up to this are exactly the float the careful path makes of them (int(float(v)) == v)
_GPU_NAMES: dict[str, str] = {}  # the probe's GPU names as shown (plain, one line, interned): the same few per pod


def _gpu_name(raw: Any) -> str:
    name = sys.intern(plain(_text(raw or "GPU"), oneline=True))
    if type(raw) is str and len(raw) <= 256:
        if len(_GPU_NAMES) >= 256:  # a pod renaming its GPUs every sample costs the careful path, not memory
            _GPU_NAMES.clear()
        _GPU_NAMES[raw] = name
    return name


_FLOAT, _FLOAT_OR_NULL = {float}, {float, type(None)}
_INT, _INT_OR_NULL = {int}, {int, type(None)}


def _finite_floats(col: list, lo: float | None = None, hi: float | None = None) -> bool:
    """Every entry a float (never an int: the careful path turns those into floats) or null, finite, within
    [lo, hi] when given."""
    types = set(map(type, col))
    if types == _FLOAT:
        vals = col
    elif types <= _FLOAT_OR_NULL:
        vals = [v for v in col if v is not None]
    else:
        return False
    total = sum(vals)
    if total - total != 0.0:  # a NaN or an infinity among them (or a sum past the float range: careful path)
        return False
    return lo is None or not vals or (min(vals) >= lo and max(vals) <= hi)


def _exact_ints(col: list, nulls: bool = True) -> bool:
    """Every entry an int (bool is not) the careful path keeps as it is (|v| <= 2**53), or null when allowed."""
    types = set(map(type, col))
    if types == _INT:
        vals = col
    elif nulls and types <= _INT_OR_NULL:
        vals = [v for v in col if v is not None]
    else:
        return not col
    return not vals or (min(vals) >= -_EXACT and max(vals) <= _EXACT)


def _gpus_fast(gpus: Any) -> tuple[GpuSample, ...] | None:
    """The probe's columns as it writes them, checked a column at a time; None for anything else."""
    if type(gpus) is not dict:
        return None
    get = gpus.get
    idx, raw, util, used, total, power, temp = (get(k) for k in GPU_FIELDS)
    if type(raw) is not list or not 0 < len(raw) <= MAX_GPUS:
        return None
    n = len(raw)
    if not (
        type(idx) is type(util) is type(used) is type(total) is type(power) is type(temp) is list
        and len(idx) == len(util) == len(used) == len(total) == len(power) == len(temp) == n
    ):
        return None
    try:
        names = [_GPU_NAMES[r] for r in raw]
    except (KeyError, TypeError):  # a name not seen yet, or not text
        return None
    if not (
        _exact_ints(idx, nulls=False)
        and _finite_floats(util, 0.0, 100.0)
        and _exact_ints(used)
        and _exact_ints(total)
        and _finite_floats(power)
        and _finite_floats(temp)
    ):
        return None
    return tuple(map(GpuSample, idx, names, util, used, total, power, temp))


def _host(h: dict) -> HostSample:
    return _host_fast(h) or _host_careful(h)


def _host_careful(h: dict) -> HostSample:
    return HostSample(
        cpu_pct=_num(h.get("cpu_pct")),
        mem_used=_int(h.get("mem_used")),
        mem_total=_int(h.get("mem_total")),
        disk_used=_int(h.get("disk_used")),
        disk_total=_int(h.get("disk_total")),
        nofile_soft=_int(h.get("nofile_soft")),
    )


def _host_fast(h: Any) -> HostSample | None:
    if type(h) is not dict:
        return None
    get = h.get
    cpu = get("cpu_pct")
    if cpu is not None:
        if type(cpu) is float:
            if cpu - cpu != 0.0:
                return None
        elif type(cpu) is int and -_EXACT <= cpu <= _EXACT:
            cpu = float(cpu)
        else:
            return None
    ints = (get("mem_used"), get("mem_total"), get("disk_used"), get("disk_total"), get("nofile_soft"))
    for v in ints:
        if v is not None and (type(v) is not int or not -_EXACT <= v <= _EXACT):
            return None
    return HostSample(cpu, *ints)


def _proc(p: dict) -> GpuProcess:
    return GpuProcess(
        pid=_required_int(p["pid"]),
        gpu=_int(p.get("gpu")),
        mem=_int(p.get("mem")),
        cmd=plain(_text(p.get("cmd", "")), oneline=True),
    )


def _life(raw: Any) -> PodRunRecord | None:
    """The probe's "life" field (absent from older probes, and for a run we did not launch)."""
    if not isinstance(raw, dict):
        return None
    alive = raw.get("alive")

    def num(key: str) -> float | None:
        try:
            return _num(raw.get(key))
        except ValueError:  # a garbled field costs that field, not the sample
            return None

    exit_code = num("exit")
    return PodRunRecord(
        id=plain(_text(raw.get("id")), oneline=True)[:80],
        state=plain(_text(raw.get("state")), oneline=True)[:20],
        started=num("started"),
        ended=num("ended"),
        alive=alive if isinstance(alive, bool) else None,
        exit_code=None if exit_code is None else int(exit_code),
        resumed=raw.get("resumed") is True,
    )


def _ckpt(c: dict) -> CheckpointInfo:
    return CheckpointInfo(
        step=_required_int(c["step"]),
        path=plain(_text(c.get("path", "")), oneline=True),
        bytes=_int(c.get("bytes")),
        mtime=_num(c.get("mtime")),
        complete=bool(c.get("complete", False)),
    )


MAX_ROLES = 32
MAX_HANDSHAKES = 50


def _signals(value: Any, notes: list[str]) -> PodSignals | None:
    """The probe's "signals" field; a malformed one is left out (the rest of the sample stands) and said."""
    if value is None:
        return None
    try:
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return PodSignals(_broadcast(value.get("broadcast")), _roles(value.get("roles")), *_http(value.get("http")))
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        notes.append(f"the pod's prime-rl signals were unreadable: {plain(str(exc), oneline=True)[:200]}")
        return None


def _broadcast(b: Any) -> BroadcastMarkers | None:
    if b is None:
        return None
    hist = []
    for item in _list(b.get("handshakes"))[-MAX_HANDSHAKES:]:
        step, secs = _required_int(item[0]), _num(item[1])
        if secs is not None and secs >= 0:
            hist.append((step, secs))
    return BroadcastMarkers(_required_int(b["step"]), _num(b.get("stable")), _num(b.get("ready")), tuple(hist))


def _roles(r: Any) -> tuple[tuple[str, int], ...] | None:
    if r is None:
        return None
    if not isinstance(r, dict):
        raise ValueError("roles: not an object")
    return tuple((plain(str(k), oneline=True)[:40], max(0, _required_int(n))) for k, n in list(r.items())[:MAX_ROLES])


def _http(h: Any) -> tuple[float | None, EndpointCheck | None, EndpointCheck | None]:
    if h is None:
        return None, None, None

    def check(e: Any) -> EndpointCheck | None:
        if e is None:
            return None
        if not isinstance(e.get("health"), bool):
            raise ValueError("endpoint health: not true/false")
        return EndpointCheck(e["health"], _int(e.get("step")), _num(e.get("last_step_ts")))

    return _num(h.get("at")), check(h.get("trainer")), check(h.get("inference"))
