"""Empty and error states say the real reason first and what to do, in the user's words, with keys and
panes (never command-line flags or "run prime-train-tui X") — checked on the screen of the whole App.

No backup bucket (no backup.toml), no run on the pod, a pod that is offline; at 80x24, so the reason
is also where a small terminal shows it (near the top, whole)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

from app.tui import PrimeTrainApp
from services.models import HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from tests.app.layout_app import (
    NOW,
    OFFLINE,
    TRAINING,
    isolate,
    layout_app,
    offline_snapshot,
    screen_text,
    settle,
    training_snapshot,
)

CLI_ADVICE = re.compile(r"prime-train-tui \w|(?<![\w-])--[a-z]")
IDLE = Pod(name="idle", kind=PodKind.SSH, host="10.0.0.9", saved=True)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)


def idle_snapshot() -> PodSnapshot:
    """Online, GPUs idle, no run dir known, no run."""
    from tests.app.monitor.test_fleet import pod_snapshot

    snap = pod_snapshot(IDLE, 3)
    history = tuple(replace(s, log=()) for s in snap.history)
    return replace(snap, history=history, run=None, alerts=(), log_tail=())


async def shown(pilot: Pilot, pane: str, pod: str) -> str:
    app = pilot.app
    assert isinstance(app, PrimeTrainApp)
    await settle(pilot)
    app.on_snapshot(training_snapshot())
    app.on_snapshot(offline_snapshot())
    app.on_snapshot(idle_snapshot())
    await settle(pilot)
    app.pod_list.select(pod)
    await pilot.press(pane)
    app.clear_notifications()
    await settle(pilot)
    left = app.pod_list.region.right + 1
    return "\n".join(row[left:].rstrip() for row in screen_text(pilot)[3:-1])


def first_lines(text: str, n: int) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())[: n * 60]


async def test_checkpoints_without_a_bucket_say_so_first_and_how_to_set_one() -> None:
    async with layout_app([TRAINING, OFFLINE, IDLE]).run_test(size=(80, 24)) as pilot:
        text = await shown(pilot, "5", "h100-a")
        head = first_lines(text, 5)
        assert "No backup bucket" in head and "backup.toml" in head, text
        assert "~/config/backup.toml" in text.replace("\n", " ").replace("  ", " ") or "backup.toml" in head
        assert "step" in text and "writing" in text, text  # the pod's checkpoints are still listed
        assert not CLI_ADVICE.search(text), text


async def test_checkpoints_of_a_pod_without_a_run_say_why_the_list_is_empty() -> None:
    async with layout_app([TRAINING, OFFLINE, IDLE]).run_test(size=(80, 24)) as pilot:
        text = await shown(pilot, "5", "idle")
        head = first_lines(text, 4)
        assert "No run on idle" in head and "L" in head, text
        assert "N/A (no run_dir)" not in text and not CLI_ADVICE.search(text), text


async def test_bottleneck_without_a_run_says_there_is_no_run_and_how_to_start_one() -> None:
    async with layout_app([TRAINING, OFFLINE, IDLE]).run_test(size=(80, 24)) as pilot:
        text = await shown(pilot, "4", "idle")
        head = first_lines(text, 3)
        assert head.startswith("No run on idle"), text
        assert "launch" in head.lower() and "(L)" in head, text
        assert "Press p to profile" not in text and not CLI_ADVICE.search(text), text


async def test_bottleneck_of_an_offline_pod_gives_the_pods_state_first() -> None:
    async with layout_app([TRAINING, OFFLINE]).run_test(size=(80, 24)) as pilot:
        text = await shown(pilot, "4", "h100-b")
        assert first_lines(text, 2).startswith("h100-b is offline: connection refused"), text
        assert not CLI_ADVICE.search(text), text


async def test_bottleneck_follows_the_pods_state_at_once() -> None:
    """Connecting, then offline, with no new step timings and the clock standing still: the reason changes at
    once (it waited for the pane's 10-second refresh)."""
    async with layout_app([OFFLINE]).run_test(size=(80, 24)) as pilot:
        app = pilot.app
        assert isinstance(app, PrimeTrainApp)
        await pilot.press("4")
        await settle(pilot)
        left = lambda: app.pod_list.region.right + 1  # noqa: E731
        text = lambda: " ".join(row[left() :].strip() for row in screen_text(pilot)[3:-1])  # noqa: E731
        assert "h100-b is connecting" in text(), text()
        app.on_snapshot(offline_snapshot())
        await settle(pilot)
        assert "h100-b is offline: connection refused" in text() and "connecting" not in text(), text()


async def test_monitor_of_an_offline_pod_says_why_and_what_to_do_first() -> None:
    async with layout_app([TRAINING, OFFLINE]).run_test(size=(80, 24)) as pilot:
        text = await shown(pilot, "3", "h100-b")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        assert lines[0].startswith("h100-b (10.0.0.2) — offline"), text
        said = " ".join(lines[1:4])
        assert "connection refused" in said and "retries in 25 s" in said and "r " in said, text
        assert "CPU N/A" not in text and "GPUs: none reported" not in text, text  # no empty figures
        assert not CLI_ADVICE.search(text), text


async def test_monitor_of_an_offline_pod_keeps_its_last_figures_and_says_how_old() -> None:
    last = training_snapshot(OFFLINE)
    went = replace(
        last,
        status=PodStatus(PodState.OFFLINE, "connection reset", since=NOW - 40, next_retry=NOW + 5),
        last_received=NOW - 40,
    )
    async with layout_app([OFFLINE]).run_test(size=(100, 30)) as pilot:
        app = pilot.app
        assert isinstance(app, PrimeTrainApp)
        await settle(pilot)
        app.on_snapshot(went)
        await settle(pilot)
        text = "\n".join(screen_text(pilot))
        assert "connection reset" in text and "last figures below are from 40 s ago" in text, text
        assert "GPU0" in text


async def test_no_pod_at_all_says_how_to_add_one() -> None:
    async with layout_app([]).run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for pane in ("3", "4", "5"):
            await pilot.press(pane)
            await settle(pilot)
            text = "\n".join(screen_text(pilot))
            assert "No pod selected" in text and "a to add one" in text.replace("Press a", "a"), (pane, text)
            assert not CLI_ADVICE.search(text), text
    _ = (HostSample, Sample)
