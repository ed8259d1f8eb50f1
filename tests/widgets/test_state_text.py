"""The Monitor pane's line for a pod that is not online: the real reason, said once."""

from __future__ import annotations

from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus
from widgets.monitor_pane import state_text

POD = Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1")


def text(state: PodState, reason: str) -> str:
    return state_text(PodSnapshot(pod=POD, status=PodStatus(state, reason, since=0.0)), 0.0)


def test_connecting_says_the_reason_once() -> None:
    assert text(PodState.CONNECTING, "connecting") == "Connecting…"  # the monitor's own word is not a reason
    assert text(PodState.CONNECTING, "") == "Connecting…"
    assert text(PodState.CONNECTING, "uploading the probe") == "Connecting (uploading the probe)…"


def test_the_run_line_says_why_there_is_no_eta() -> None:
    from services.models import RunProgress
    from widgets.alerts import run_line

    open_ended = RunProgress(step=14, loss=0.47, steps_per_hr=3600.0, cost_so_far=0.25)
    assert run_line(open_ended, None) == (
        "run: step 14 · loss 0.47 · 3,600 steps/hr · no ETA: the run names no max_steps · $0.25 spent"
    )
    early = RunProgress(step=1, max_steps=100)
    assert run_line(early, None) == "run: step 1/100 · ETA N/A"  # no rate yet
    known = RunProgress(step=50, max_steps=100, steps_per_hr=100.0, eta_s=1800.0, cost_so_far=1.0, cost_to_finish=1.0)
    assert run_line(known, None) == "run: step 50/100 · 100 steps/hr · ETA 30 min · $1.00 spent, $1.00 to go"
