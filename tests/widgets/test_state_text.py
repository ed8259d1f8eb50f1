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
