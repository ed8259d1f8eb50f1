"""The Monitor pane: live numbers and history sparklines of the selected pod.

It renders whatever :class:`PodSnapshot` it is handed and only touches the widgets whose text or
data changed; it never reads a clock of its own (``now`` comes from the App's injected clock).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import TypeVar, overload

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Label, Static

from services.models import PodSnapshot, PodState, Sample
from services.monitor.health import default_patterns, match_line
from services.monitor.trend import BUCKET_S, HISTORY_LEN, TrendBucket
from services.text import plain
from widgets.alerts import SEVERITY_STYLE, AlertList, recent_alerts_text, run_line, wandb_line
from widgets.cluster_view import ClusterPanel
from widgets.format import (
    NA,
    Timeline,
    age,
    age_changes,
    clock_time,
    countdown_changes,
    duration,
    elapsed_changes,
    gib,
    number,
    received_at,
    set_label,
    status_reason_now,
    used_total_gib,
)
from widgets.monitor_rows import (
    FIGURE_WIDTH,
    INDEX_WIDTH,
    METRICS,
    GpuHeader,
    GpuRows,
    HostRow,
    LogTail,
    TextLine,
    level,
)
from widgets.pod_list import cut_text

DISK_WARN_PCT, DISK_CRITICAL_PCT = 80.0, 90.0
NOFILE_WARN = 32000  # prime-rl's docs ask for `ulimit -n 32000` at least
LOG_TAIL_LINES = 8
ALERT_LOG_LINES = 5
# the timeline of the monitor's recent samples: as many as it keeps, so a full history sliding on is appended to, not
# rebuilt (a longer timeline would rebuild, and every graph with it, on every snapshot)
HISTORY_POINTS = HISTORY_LEN
GRAPH_POINTS = 3600  # an hour at 1 Hz per GPU graph (older than the samples: the monitor's buckets), fitted to width
W = TypeVar("W", bound=Widget)


def state_text(snapshot: PodSnapshot, now: float) -> str:
    """A pod that is not online: why, the real reason first, and what to do (keys, in the user's words);
    with the age of the figures still shown. "" when online."""
    status, name = snapshot.status, snapshot.pod.name
    state = status.state
    if state is PodState.ONLINE:
        return ""
    reason = status_reason_now(snapshot, now)
    retry = f"retries in {duration(status.next_retry - now)}" if status.next_retry is not None else ""
    at = received_at(snapshot)
    old = f" The last figures below are from {age(now - at)} ago." if snapshot.latest is not None and at else ""
    if state is PodState.OFFLINE:
        return (
            f"{name} is not answering"
            + (f": {reason}" if reason else "")
            + "."
            + (f" The monitor {retry}; r retries now." if retry else " r retries now.")
            + old
        )
    if state is PodState.UNSUPPORTED:
        return (
            f"{name} cannot be monitored as it is: {reason or 'it lacks what monitoring needs'}."
            + (f" The monitor {retry}; r retries now." if retry else " r retries now.")
            + old
        )
    if state is PodState.STALE:
        return "Connected, but no new sample" + (f": {reason}" if reason else "") + f".{old} r reconnects."
    if state is PodState.CONNECTING:
        detail = reason if reason and reason.lower() != "connecting" else ""  # not "Connecting (connecting)…"
        return (
            "Connecting" + (f" ({detail})" if detail else "") + "…" + (f" The monitor {retry}." if retry else "") + old
        )
    if state is PodState.AUTH_FAILED:
        return (
            f"{name} refused the login" + (f": {reason}" if reason else "") + ". Check the user and the SSH "
            "key for this pod (d removes it, a adds it again as user@host), then r." + old
        )
    if state is PodState.HOSTKEY_UNKNOWN:
        return f"{name}'s host key is not known yet: answer the question about it to connect." + old
    return (
        f"{name}'s host key changed since it was trusted: it may not be the same machine, so nothing is "
        "sent to it until the key is checked." + old
    )


def no_gpus(latest: Sample | None) -> str:
    """Why no GPU shows: what was looked for and not found, and what to do (a broken driver looks the same)."""
    if latest is None:
        return "GPUs: none reported yet"
    if latest.source in ("", "none"):
        return (
            "GPUs: none found. Neither NVML nor nvidia-smi answered on this machine: on a GPU pod its "
            "NVIDIA driver is missing or broken (reinstall it, or rent another pod)."
        )
    return (
        f"GPUs: {latest.source} answered but listed none: the driver sees no GPU (a pod whose GPUs were "
        "taken away, or a broken driver)."
    )


def log_tail_lines(lines: Sequence[str], limit: int) -> list[tuple[str, str]]:
    """The last ``limit`` log lines, each with its style: a line matching an error pattern in its severity's
    colour (as :func:`widgets.alerts.log_tail_text`)."""
    patterns = default_patterns()
    out = []
    for line in lines[-limit:]:
        hit = match_line(line, patterns)
        out.append((line, SEVERITY_STYLE[hit.severity] if hit is not None else ""))
    return out


class GpuScroll(VerticalScroll):
    """The GPUs' lines. When they do not all fit, the line under them says how many are below ("1 more ↓"):
    eight GPUs are the common case and a scrollbar one cell wide is easy to miss."""

    def _scroll_update(self, virtual_size) -> None:
        super()._scroll_update(virtual_size)
        self.call_later(self._say_more)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._say_more()

    def _say_more(self) -> None:
        below = max(0, self.virtual_size.height - round(self.scroll_y) - self.scrollable_content_region.height)
        label = self.parent.query_one("#gpu-more", Label) if self.parent is not None else None
        if label is not None and (label.display, str(label.content)) != (below > 0, f"{below} more ↓"):
            label.update(f"{below} more ↓")
            label.display = below > 0


def older_buckets(snapshot: PodSnapshot, timeline: Timeline) -> tuple[TrendBucket, ...]:
    """The monitor's downsampled buckets that end before the timeline's first sample (the graphs' older part)."""
    first = next((entry.t for entry in timeline.entries if entry is not None), None)
    if first is None or not snapshot.trend:
        return ()
    return tuple(b for b in snapshot.trend if b.t + BUCKET_S <= first)


class MonitorPane(Widget):
    """Everything the monitor knows about one pod, or a plain line saying there is no pod."""

    DEFAULT_CSS = """
    #monitor-title, #monitor-stats, #monitor-gaps, #gpu-models, #gpu-procs { width: 100%; }
    #monitor-state { width: 100%; color: $warning; margin-top: 1; }
    #run-progress { color: $text; text-style: bold; width: 100%; }
    #gpu-procs { color: $text-muted; }
    #gpu-more { display: none; color: $warning; width: 100%; content-align: right middle; }
    #log-tail-box { height: auto; max-height: 10; border-top: solid $panel; }
    #log-tail { height: auto; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    #wandb-info { color: $text-muted; }
    #monitor-alert-log { height: auto; max-height: 7; border-top: solid $panel; }
    """
    SPARK_ORDER = ("util", "mem", "temp", "power")  # kept longest first: a graph is worth the room from 10 cells
    SPARK_MIN = 10
    FIXED = {tight: INDEX_WIDTH[tight] + sum(FIGURE_WIDTH[tight].values()) for tight in (False, True)}  # per -tight
    TIGHT_BELOW, SHORT_BELOW = 100, 30

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._found: dict[str, Widget] = {}
        self._tight, self._graphs = False, frozenset(METRICS)  # what fits, from the width (on_resize)

    def compose(self) -> ComposeResult:
        yield Static("No pod selected. Press [b]a[/b] to add one.", id="monitor-empty")
        with Vertical(id="monitor-body"):
            yield Label("", id="monitor-title")
            yield Static("", id="monitor-state")
            yield TextLine("", id="monitor-stats")
            yield Label("", id="monitor-gaps")
            yield TextLine("", id="run-progress")
            yield Label("", id="wandb-info")
            yield AlertList("", id="monitor-alerts")
            yield ClusterPanel(id="cluster-panel")
            yield HostRow(id="host-row")
            yield Label("", id="gpu-models")
            yield GpuHeader(id="gpu-header")
            with GpuScroll(id="gpu-rows"):
                yield GpuRows(id="gpu-lines", limit=GRAPH_POINTS)
            yield Label("", id="gpu-more")
            yield Label("", id="gpu-procs")
            with Vertical(id="log-tail-box"):  # its border: the tail's lines painted without the styles cache
                yield LogTail(id="log-tail")
            yield Static("", id="monitor-alert-log")
            yield Label("", id="monitor-errors")

    def on_mount(self) -> None:
        self._one("#monitor-body").display = False
        for extra in (
            "#run-progress",
            "#wandb-info",
            "#monitor-alerts",
            "#cluster-panel",
            "#gpu-procs",
            "#log-tail",
            "#log-tail-box",
            "#monitor-alert-log",
        ):
            self._one(extra).display = False
        self._tail_shown: tuple[str, ...] | None = None
        self._alert_log_shown: tuple[str | None, int, object] | None = None
        self._pod_name: str | None = None
        self._snapshot: PodSnapshot | None = None
        self._now = 0.0
        self._drawn_at = 0.0  # the moment the relative times on screen were drawn for (show, tick)
        self._gpu_timeline = Timeline(HISTORY_POINTS)
        self._timeline_of: object = None  # the history the timeline was brought to

    def on_resize(self, event: events.Resize) -> None:
        """Fit the width and height: -tight (narrow figures), -short, and which GPU graphs still fit (the header
        and the rows place them, widgets/monitor_rows.py)."""
        width, height = event.size.width, event.size.height
        tight = width < self.TIGHT_BELOW
        self.set_class(tight, "-tight")
        self.set_class(height < self.SHORT_BELOW, "-short")
        room = width - self.FIXED[tight] - 2 - 2  # the padding, the GPU list's scrollbar
        keep = max(0, min(len(self.SPARK_ORDER), room // (self.SPARK_MIN + 1)))
        self._tight, self._graphs = tight, frozenset(self.SPARK_ORDER[:keep])
        self._one("#gpu-lines", GpuRows).fit(tight, self._graphs)
        self._one("#host-row", HostRow).fit(tight)
        self._one("#gpu-header", GpuHeader).fit(tight, self._graphs)
        if (snapshot := getattr(self, "_snapshot", None)) is not None:  # the parts a short pane hides or shows again
            self._alert_log_shown = None
            self.show(snapshot, self._now)

    @overload
    def _one(self, selector: str) -> Widget: ...
    @overload
    def _one(self, selector: str, kind: type[W]) -> W: ...

    def _one(self, selector: str, kind: type[Widget] = Widget) -> Widget:
        """The pane's own widgets (composed once), found once: a DOM query per label per snapshot was a third of
        the pane's time."""
        found = self._found.get(selector)
        if found is None:
            found = self._found[selector] = self.query_one(selector, kind)
        return found

    @property
    def pod_name(self) -> str | None:
        return self._pod_name

    def clear(self) -> None:
        self._pod_name = None
        self._snapshot = None
        self._one("#monitor-empty").display = True
        self._one("#monitor-body").display = False

    def show(self, snapshot: PodSnapshot, now: float) -> None:
        self._one("#monitor-empty").display = False
        self._one("#monitor-body").display = True
        self._pod_name = snapshot.pod.name
        self._snapshot, self._now = snapshot, now
        self._drawn_at = now
        latest = snapshot.latest
        self._show_title(snapshot, now)
        self._show_stats(snapshot, now)
        self._show_gaps(snapshot, now)
        self._show_wandb(snapshot, now)
        self._show_alert_log(snapshot.pod.name)
        for part in ("#monitor-stats", "#host-row", "#gpu-models", "#gpu-rows"):  # (the gaps: _show_gaps)
            shown = latest is not None or snapshot.status.state is PodState.ONLINE  # no empty "N/A" figures
            if self._one(part).display != shown:
                self._one(part).display = shown
        self._show_host(latest)
        self._show_gpus(snapshot)
        self._show_run(snapshot)
        self._show_cluster(snapshot, now)
        errors = latest.errors if latest else ()
        errors_label = self._one("#monitor-errors", Label)
        set_label(errors_label, "probe could not read: " + "; ".join(errors) if errors else "")
        errors_label.display = bool(errors)

    def tick(self, snapshot: PodSnapshot, now: float) -> None:
        """Only the relative times moved on; the data did not."""
        if snapshot.pod.name != self._pod_name or self._snapshot is not snapshot:
            self.show(snapshot, now)
            return
        self._drawn_at = now
        self._show_title(snapshot, now)
        self._show_stats(snapshot, now)
        self._show_gaps(snapshot, now)
        self._show_wandb(snapshot, now)
        self._show_alert_log(snapshot.pod.name)

    def next_change(self, snapshot: PodSnapshot) -> float | None:
        """The moment (App clock) a relative time :meth:`tick` redraws for ``snapshot`` next reads differently
        ("last sample 3 s ago", "retries in 4 s", an ongoing gap, W&B's heartbeat); None: never."""
        if snapshot.pod.name != self._pod_name or self._snapshot is not snapshot:
            return 0.0  # tick shows it whole: due at once
        drawn = self._drawn_at
        status, at = snapshot.status, received_at(snapshot)
        due: list[float | None] = []
        if at is not None and (snapshot.latest is not None or status.state is PodState.STALE):
            due.append(age_changes(at, drawn))
        if status.state is not PodState.ONLINE and status.next_retry is not None:
            due.append(countdown_changes(status.next_retry, drawn))
        due.extend(elapsed_changes(gap.start, drawn) for gap in snapshot.gaps[-3:] if gap.end is None)
        wandb = snapshot.wandb
        if wandb is not None and not wandb.error and wandb.heartbeat_at is not None:
            beat = wandb.heartbeat_at  # "heartbeat N s ago": whole seconds, however many
            due.append(beat + math.floor(max(0.0, drawn - beat)) + 1)
        return min((d for d in due if d is not None), default=None)

    def _show_wandb(self, snapshot: PodSnapshot, now: float) -> None:
        label = self._one("#wandb-info", Label)
        text = wandb_line(snapshot.wandb, now)
        set_label(label, text)
        if label.display != bool(text):
            label.display = bool(text)

    def _show_alert_log(self, pod: str) -> None:
        """This pod's recent entries of the App's alert log (``App.alert_log``: (pod, alert) as they fired),
        so what fired, and cleared since, is on the main screen too, not only in the fleet view."""
        entries = getattr(self.app, "alert_log", ())
        last = entries[-1] if entries else None
        key = (pod, len(entries), last)
        if key == self._alert_log_shown:
            return
        self._alert_log_shown = key
        box = self._one("#monitor-alert-log", Static)
        has = any(name == pod for name, _ in entries) and not self.has_class("-short")  # short: o shows it
        if has:
            box.update(recent_alerts_text(list(entries), pod, ALERT_LOG_LINES))
        if box.display != has:
            box.display = has

    def _show_cluster(self, snapshot: PodSnapshot, now: float) -> None:
        """A Slurm login node's jobs and nodes; hidden for every other pod."""
        panel = self._one("#cluster-panel", ClusterPanel)
        view = snapshot.cluster
        if view is not None:
            panel.show(view, now)
        if panel.display != (view is not None):
            panel.display = view is not None

    def _show_run(self, snapshot: PodSnapshot) -> None:
        """Run progress, alerts, GPU processes and the log tail; each hidden while it has nothing to say.
        The log tail appears once the run is stepping or a log line matched an error pattern (start-up
        chatter alone is not worth the space)."""
        latest = snapshot.latest
        progress = self._one("#run-progress", TextLine)
        text = run_line(snapshot.run, latest.t if latest else None)
        basis = snapshot.run.cost_basis if snapshot.run is not None else None
        if basis in ("since rented", "since the pod started"):  # the pod's bill, not the run's steps' estimate
            text = text.replace(" spent, ", f" spent ({basis}), ", 1)
        if snapshot.idle is not None:  # GPUs idle with no run: what the wait costs (services/monitor/idle.py)
            text = f"{text} · {snapshot.idle.label}" if text else snapshot.idle.label
        progress.update(text)
        if progress.display != bool(text):
            progress.display = bool(text)
        self._one("#monitor-alerts", AlertList).show_alerts(snapshot.alerts)
        procs = latest.procs if latest else ()
        label = self._one("#gpu-procs", Label)
        set_label(
            label,
            "GPU processes: "
            + "; ".join(
                f"{p.pid} on GPU {NA if p.gpu is None else p.gpu} ({gib(p.mem)} GiB) {p.cmd[:60]}" for p in procs[:8]
            )
            if procs
            else "",
        )
        if label.display != bool(procs):
            label.display = bool(procs)
        tail = snapshot.log_tail
        show_tail = bool(tail) and (snapshot.run is not None or any(a.id.startswith("log:") for a in snapshot.alerts))
        box = self._one("#log-tail", LogTail)
        if show_tail and tail is not self._tail_shown:
            lines, shown = tail[-LOG_TAIL_LINES:], self._tail_shown
            self._tail_shown = tail
            if shown is None or lines != shown[-LOG_TAIL_LINES:]:
                box.show(log_tail_lines(lines, LOG_TAIL_LINES))
        if box.display != show_tail:
            box.display = self._one("#log-tail-box").display = show_tail

    def _show_title(self, snapshot: PodSnapshot, now: float) -> None:
        pod = snapshot.pod
        simulated = "  SIMULATED" if pod.simulated else ""
        title = f"{pod.label} — {snapshot.status.state.value}{simulated}"
        set_label(self._one("#monitor-title", Label), title)
        box = self._one("#monitor-state", Static)
        text = state_text(snapshot, now)
        if getattr(self, "_state_shown", None) != text:
            self._state_shown = text
            box.update(Content(plain(text)))  # the reason is a pod's or an exception's text: never markup
            box.display = bool(text)

    def _show_stats(self, snapshot: PodSnapshot, now: float) -> None:
        latest = snapshot.latest
        at = received_at(snapshot)
        if latest is None:
            since = "no sample yet"
        elif at is None:
            since = "last sample: time unknown"
        else:
            since = f"last sample {age(now - at)} ago"
        source = (latest.source or "none") if latest else "none"
        text = f"{since} · source {source} · {snapshot.samples_total} samples"
        if snapshot.malformed_total:  # only when there were some: a zero is noise on a small terminal
            text += f" · {snapshot.malformed_total} malformed"
        if snapshot.dropped_total:  # a pod sending samples faster than the monitor takes them
            text += f" · {snapshot.dropped_total} dropped (too fast)"
        if cut := cut_text(snapshot):
            text += f" · {cut}"
        self._one("#monitor-stats", TextLine).update(text)

    def _show_gaps(self, snapshot: PodSnapshot, now: float) -> None:
        if not snapshot.gaps:
            text = "history: no gaps"
        else:
            shown = [
                f"gap {duration((gap.end if gap.end is not None else now) - gap.start)}"
                f" at {clock_time(gap.start)}{'' if gap.end is not None else ' (ongoing)'}"
                for gap in snapshot.gaps[-3:]
            ]
            more = len(snapshot.gaps) - len(shown)
            text = "history: " + ", ".join(shown) + (f" (+{more} earlier)" if more > 0 else "")
            text += " — blank in the graphs"
        label = self._one("#monitor-gaps", Label)
        set_label(label, text)
        # a short pane: only gaps are news; no sample at all: nothing to say about them
        visible = (bool(snapshot.gaps) or not self.has_class("-short")) and (
            snapshot.latest is not None or snapshot.status.state is PodState.ONLINE
        )
        if label.display != visible:
            label.display = visible

    def _show_host(self, latest: Sample | None) -> None:
        host = latest.host if latest else None
        row = self._one("#host-row", HostRow)
        if host is None:
            row.show((f"{title} {NA}", "") for title in ("CPU", "RAM", "disk", "open files"))
            return
        limit = host.nofile_soft
        row.show(
            (
                (f"CPU {number(host.cpu_pct, '%')}", ""),
                (f"RAM {used_total_gib(host.mem_used, host.mem_total)}", ""),
                (
                    f"disk {used_total_gib(host.disk_used, host.disk_total)}",
                    level(host.disk_pct, DISK_WARN_PCT, DISK_CRITICAL_PCT),
                ),
                (
                    f"open files ≤ {NA if limit is None else limit}",
                    "warn" if limit is not None and limit < NOFILE_WARN else "",
                ),
            )
        )

    def _show_gpus(self, snapshot: PodSnapshot) -> None:
        latest = snapshot.latest
        gpus = {gpu.index: gpu for gpu in latest.gpus} if latest else {}
        models = Counter(gpu.name for gpu in gpus.values())
        summary = ", ".join(f"{count} × {name}" for name, count in models.items())
        set_label(self._one("#gpu-models", Label), f"GPUs: {summary}" if summary else no_gpus(latest))
        self._one("#gpu-header").display = bool(gpus)
        timeline = self._timeline()
        self._one("#gpu-lines", GpuRows).show(gpus, timeline, partial(older_buckets, snapshot, timeline))

    def _timeline(self) -> Timeline:
        """The GPU graphs' timeline, brought up to the shown snapshot's history once per snapshot, for every GPU
        (another pod's history does not continue it: the timeline is rebuilt, and the rows read it all)."""
        snapshot = self._snapshot
        assert snapshot is not None
        if self._timeline_of is not snapshot.history:
            self._timeline_of = snapshot.history
            self._gpu_timeline.update(snapshot.history)
        return self._gpu_timeline
