"""How alerts, run progress and log lines read on screen (shared by the monitor pane, the sidebar badge
and the fleet view), and how one alert reads in the fleet view's alert log (widgets/alert_log.py): pod, time
on the pod's clock, title. Cleared alerts stay in the log; the sidebar badge and the monitor pane show what
stands now."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text
from textual.notifications import SeverityLevel
from textual.widgets import Static

from services.models import Alert, RunProgress, Severity, WandbStatus
from services.monitor.health import default_patterns, match_line
from widgets.format import NA, duration
from widgets.trend import bar_cells

SEVERITY_STYLE = {Severity.INFO: "cyan", Severity.WARNING: "yellow", Severity.CRITICAL: "bold red"}
SEVERITY_ICON = {Severity.INFO: "i", Severity.WARNING: "!", Severity.CRITICAL: "‼"}
TOAST_SEVERITY: dict[Severity, SeverityLevel] = {
    Severity.INFO: "information",
    Severity.WARNING: "warning",
    Severity.CRITICAL: "error",
}


def worst(alerts: Sequence[Alert]) -> Severity | None:
    return max((a.severity for a in alerts), key=lambda s: s.rank, default=None)


def badge_text(alerts: Sequence[Alert]) -> str:
    """The sidebar badge: "‼ 2 alerts" ("" when none)."""
    if not alerts:
        return ""
    sev = worst(alerts)
    assert sev is not None
    return f"{SEVERITY_ICON[sev]} {len(alerts)} alert{'s' if len(alerts) > 1 else ''}"


def badge_class(alerts: Sequence[Alert]) -> str:
    sev = worst(alerts)
    return "" if sev is None else f"-{sev.value}"


def alerts_text(alerts: Sequence[Alert]) -> Text:
    text = Text()
    for i, a in enumerate(alerts):
        if i:
            text.append("\n")
        text.append(f"{SEVERITY_ICON[a.severity]} {a.title}: ", style=SEVERITY_STYLE[a.severity])
        text.append(a.message)
    return text


def money(value: float | None) -> str:
    return NA if value is None else f"${value:,.2f}"


ENDED_PHASES = ("finished", "killed", "crashed", "interrupted")  # services.monitor.runlife.Phase.ended


def run_line(run: RunProgress | None, pod_now: float | None) -> str:
    """One line: step / max, loss, reward, tokens/s, MFU, steps/hr, ETA, $ so far / to finish."""
    if run is None or run.step is None:
        return ""
    step = f"step {run.step}" + (f"/{run.max_steps}" if run.max_steps else "")
    parts = [step]
    if run.loss is not None:
        parts.append(f"loss {run.loss:.4g}")
    if run.reward is not None:
        parts.append(f"reward {run.reward:.3g}")
    if run.tokens_per_s is not None:
        parts.append(f"{run.tokens_per_s:,.0f} tok/s")
    if run.mfu is not None:
        parts.append(f"MFU {run.mfu:.1f}%")
    ended = run.phase in ENDED_PHASES
    if run.steps_per_hr is not None and not ended:  # a rate of a run that stopped is no rate
        parts.append(f"{run.steps_per_hr:,.0f} steps/hr")
    if ended:
        pass  # no ETA for a run that stopped: nothing is to go
    elif run.eta_s is not None:
        parts.append(f"ETA {duration(run.eta_s)}")
    elif not run.max_steps:  # the reason, not a bare N/A: nothing says where the run ends
        parts.append("no ETA: the run names no max_steps")
    else:
        parts.append(f"ETA {NA}")  # the first steps: no rate yet
    if run.cost_so_far is not None:
        parts.append(
            f"{money(run.cost_so_far)} spent"
            + (f", {money(run.cost_to_finish)} to go" if run.cost_to_finish is not None else "")
        )
    if ended:
        parts.append(
            f"{run.phase}"
            + (
                f" (last step {duration(pod_now - run.last_step_at)} ago)"
                if run.last_step_at is not None and pod_now is not None
                else ""
            )
        )
    elif run.finished:
        parts.append("finished")
    elif run.checkpointing:
        parts.append("writing checkpoint")
    elif run.phase == "evaluating":
        parts.append("running evals")
    elif run.last_step_at is not None and pod_now is not None:
        parts.append(f"last step {duration(pod_now - run.last_step_at)} ago")
    return "run: " + " · ".join(parts)


def wandb_line(status: WandbStatus | None, now: float) -> str:
    """W&B's view of the run, labelled as information: it trails the pod by 15 s or more and its "crashed"
    comes ~5 min after a lost heartbeat, so the pod's own logs and clock stay the evidence."""
    if status is None:
        return ""
    return f"{status.note(now)} · {status.run_path} (information only; the pod's logs are the evidence)"


def recent_alerts_text(entries: Sequence[tuple[str, Alert]], pod: str, limit: int) -> Text:
    """The pod's last ``limit`` alerts as they fired (the alert log, filtered), newest last."""
    mine = [a for name, a in entries if name == pod][-limit:]
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("Alert log (this pod, newest last; o: every pod)", style="bold")
    for alert in mine:
        text.append("\n")
        text.append_text(log_entry(pod, alert))
    return text


def loss_trend(run: RunProgress | None, width: int = 12) -> str:
    if run is None or not run.loss_history:
        return ""
    values = run.loss_history[-width:]
    low, high = min(values), max(values)
    if high <= low:
        high = low + 1.0
    return bar_cells(list(values), low, high, len(values))


def log_tail_text(lines: Sequence[str], limit: int) -> Text:
    """The last ``limit`` log lines; lines matching an error pattern are highlighted."""
    patterns = default_patterns()
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(lines[-limit:]):
        if i:
            text.append("\n")
        hit = match_line(line, patterns)
        text.append(line, style=SEVERITY_STYLE[hit.severity] if hit is not None else "")
    return text


class AlertList(Static):
    """The pod's current alerts, worst first; re-rendered only when they change."""

    DEFAULT_CSS = """
    AlertList { height: auto; max-height: 10; margin: 1 0 0 0; }
    """

    def show_alerts(self, alerts: Sequence[Alert]) -> None:
        if getattr(self, "_shown", None) == tuple(alerts):
            return
        self._shown = tuple(alerts)
        self.update(alerts_text(alerts))
        self.display = bool(alerts)


def log_entry(pod: str, alert: Alert) -> Text:
    stamp = time.strftime("%H:%M:%S", time.localtime(alert.since))
    text = Text(f"{stamp} {pod}: ", style="dim")
    text.append(f"{SEVERITY_ICON[alert.severity]} {alert.title}", style=SEVERITY_STYLE[alert.severity])
    if alert.line:
        text.append(f" — {alert.line}")
    return text
