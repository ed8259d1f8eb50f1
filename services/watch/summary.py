"""Plain-JSON views of a pod snapshot: ``watch --once``'s summary and the state file's ``pods``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from services.models import Alert, PodSnapshot, PodState, Severity
from services.units import whole_duration
from services.watch.threads import split_fix

UNREACHABLE = "unreachable"


def unreachable_alert(snap: PodSnapshot, down_since: float, now: float) -> Alert:
    """The watcher's own rule: a pod with no sample for a while (a spot pod taken back, a crash, a cut)."""
    state = snap.status.state
    why = f"{state.value}" + (f": {snap.status.reason}" if snap.status.reason else "")
    if state in (PodState.HOSTKEY_UNKNOWN, PodState.HOSTKEY_CHANGED, PodState.AUTH_FAILED):
        fix = (
            "Open the TUI on this pod (the watcher never trusts a host key nor changes keys), or fix "
            "~/.ssh/known_hosts and the key by hand."
        )
    else:
        fix = (
            "Check the pod with ssh and in the provider's console; if it is gone, restore the run from the "
            "bucket and resume elsewhere."
        )
    msg = (
        f"No sample from {snap.pod.name} for {whole_duration(now - down_since)} ({why[:300]}). A spot pod taken "
        f"back, a crashed machine or a network cut looks like this, and its run may be stopped. {fix}"
    )
    return Alert(UNREACHABLE, Severity.WARNING, "Pod unreachable", msg, since=down_since)


def run_json(snap: PodSnapshot, now: float) -> dict[str, Any] | None:
    run = snap.run
    if run is None:
        return None
    t = snap.latest.t if snap.latest is not None else now
    return {
        "step": run.step,
        "max_steps": run.max_steps,
        "loss": run.loss,
        "reward": run.reward,
        "tokens_per_s": run.tokens_per_s,
        "steps_per_hr": run.steps_per_hr,
        "eta_s": run.eta_s,
        "step_age_s": None if run.last_step_at is None else round(max(0.0, t - run.last_step_at), 1),
        "cost_so_far": run.cost_so_far,
        "cost_basis": run.cost_basis,
        "finished": run.finished,
        "phase": run.phase,
    }


def alert_json(a: Alert) -> dict[str, Any]:
    evidence, fix = split_fix(a.message)
    return {
        "id": a.id,
        "severity": a.severity.value,
        "title": a.title,
        "message": a.message,
        "fix": fix,
        "line": a.line,
    }


def pod_json(snap: PodSnapshot, now: float, extra: tuple[Alert, ...] = ()) -> dict[str, Any]:
    latest = snap.latest
    return {
        "name": snap.pod.name,
        "state": snap.status.state.value,
        "reason": snap.status.reason,
        "reached": snap.samples_total > 0,
        "run_dir": snap.pod.run_dir,
        "gpus": [asdict(g) for g in latest.gpus] if latest is not None else [],
        "host": asdict(latest.host) if latest is not None else None,
        "run": run_json(snap, now),
        "alerts": [alert_json(a) for a in (*snap.alerts, *extra)],
    }


def brief_json(snap: PodSnapshot) -> dict[str, Any]:
    """The state file's line per pod (what changes rarely: the file is rewritten when it does)."""
    return {
        "state": snap.status.state.value,
        "step": snap.run.step if snap.run is not None else None,
        "alerts": [a.id for a in snap.alerts],
    }
