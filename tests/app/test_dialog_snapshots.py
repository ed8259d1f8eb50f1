"""Snapshots of every dialog (each ModalScreen in app/screens) at 80x24 and 160x48, over the whole App.

Each dialog is built from fixed data and pushed on the layout App (tests/app/layout_app.py: parked pods fed
fixed snapshots, a fixed clock, UTC, no keys): the plans are made by the real plan code from fixed inputs
(a kill plan from a fixed process list, a cleanup plan long enough to scroll at 80x24, a launch plan), the
pod is never asked, no temp path or pid of this machine is in the text, and no cursor blinks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.screen import ModalScreen
from textual.widgets import Input, TextArea

from app.tui import PrimeTrainApp
from services.lifecycle.cleanup import CleanupPlan
from services.lifecycle.preflight import LifecycleSettings
from services.lifecycle.targets import SingleHost
from services.models import HostKeyPrompt, Pod
from services.units import fmt_bytes
from tests.app.helpers import wait_for
from tests.app.layout_app import (
    GIB,
    NOW,
    OFFLINE,
    RUN_DIR,
    TRAINING,
    isolate,
    layout_app,
    offline_snapshot,
    training_snapshot,
)

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
CKPTS = f"{RUN_DIR}/checkpoints"
KNOWN_HOSTS = "/home/me/.ssh/known_hosts"


class FixedPlan:
    """The connection a lifecycle dialog opens for its plan: the plan here is made from fixed data, so the
    pod is never asked (and its dialog never waits on a network)."""

    def __init__(self, pod: Pod) -> None:
        self.pod = pod

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None


def lifecycle(action: str, confirm: str, plan: Callable[[Any], Awaitable[str]]) -> ModalScreen:
    from app.screens.lifecycle import LifecycleScreen

    async def never(conn: Any, force: bool):  # the snapshot is of the confirm step: nothing runs
        raise AssertionError("the action ran")
        yield

    return LifecycleScreen(
        action, TRAINING, plan=plan, run=never, confirm=confirm, connect=FixedPlan, settings=LifecycleSettings()
    )  # type: ignore[arg-type]


async def fixed_run(conn: Any) -> dict[str, Any]:
    """What the pod's helper reports for its active run (services/lifecycle/actions.plan_kill)."""
    procs = [
        {"pid": 4242, "cmd": "uv run rl @ rl.toml"},
        {"pid": 4250, "cmd": "python -m prime_rl.orchestrator --config /workspace/rl-qwen3-8b/orch.toml"},
        {"pid": 4251, "cmd": "python -m prime_rl.trainer --config /workspace/rl-qwen3-8b/trainer.toml"},
        {"pid": 4252, "cmd": "vllm serve Qwen/Qwen3-8B --port 8000 --tensor-parallel-size 2"},
    ]
    return {
        "id": "r7",
        "run_dir": RUN_DIR,
        "pid": 4242,
        "pgid": 4242,
        "tmux_session": None,
        "pids": [p["pid"] for p in procs],
        "procs": procs,
    }


def kill_dialog(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from services.lifecycle import actions

    monkeypatch.setattr(actions, "plan_kill", fixed_run)

    async def plan(conn: Any) -> str:
        found = await SingleHost().plan_kill(conn, LifecycleSettings())
        assert found is not None
        return found.text

    return lifecycle("kill", SingleHost.kill_button, plan)


def cleanup_plan(threshold: float | None = None) -> CleanupPlan:
    """Twelve old checkpoints and prime-rl's leftovers: more lines than a dialog holds at 80x24."""

    def ckpt(step: int, size: float) -> dict[str, Any]:
        return {"step": step, "path": f"{CKPTS}/step_{step}", "bytes": int(size * GIB)}

    delete = tuple(ckpt(step, 16) for step in range(10, 130, 10))
    leftovers = tuple(
        {"kind": "broadcast", "step": s, "path": f"{RUN_DIR}/broadcasts/step_{s}", "bytes": 8 * GIB} for s in (100, 110)
    )
    return CleanupPlan(
        CKPTS,
        2,
        delete,
        kept=(ckpt(130, 16), ckpt(140, 16)),
        in_progress=(ckpt(150, 3),),
        run_dir=RUN_DIR,
        leftovers=leftovers,
        disk={"used": 700 * GIB, "total": 1000 * GIB},
        threshold_pct=threshold,
        for_disk=(120,) if threshold else (),
    )


def cleanup_dialog(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    async def plan(conn: Any) -> str:
        return "\n".join(cleanup_plan().preview(fmt_bytes))

    return lifecycle("cleanup", "Delete", plan)


def launch_dialog(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    async def plan(conn: Any) -> str:
        return SingleHost().plan_launch(TRAINING, Path("rl.toml"), RUN_DIR, LifecycleSettings()).text

    return lifecycle("launch", "Launch", plan)


def cleanup_preview(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from app.screens.lifecycle import CleanupPreviewScreen

    return CleanupPreviewScreen(TRAINING.name, cleanup_plan(threshold=60).preview(fmt_bytes))


def confirm_remove(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> None:
    app.action_remove_pod()  # the App's own question, for the selected pod


def help_dialog(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> None:
    app.action_help()  # the live bindings of the pane shown


def prompt(changed: bool) -> HostKeyPrompt:
    return HostKeyPrompt(
        host="203.0.113.7",
        port=2222,
        key_type="ssh-ed25519",
        fingerprint="SHA256:Qm9vdHN0cmFwLWZpeGVkLWZpbmdlcnByaW50LWZvci10ZXN0cw",
        key_line="[203.0.113.7]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFixedKeyForTheSnapshot",
        known_hosts_file=KNOWN_HOSTS,
        changed=changed,
    )


def host_key_unknown(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from app.screens.host_key import HostKeyScreen

    return HostKeyScreen(OFFLINE.name, prompt(changed=False))


def host_key_changed(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from app.screens.host_key import HostKeyChangedScreen

    return HostKeyChangedScreen(OFFLINE.name, prompt(changed=True))


def add_pod(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from app.screens.add_pod import AddPodScreen

    return AddPodScreen()


def tasks_dialog(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    """Finished tasks only: a running one's elapsed time is the machine's clock (it ticks)."""
    from app.screens.tasks import TasksScreen
    from app.tasks import Task

    done = Task(
        1,
        TRAINING.name,
        "launch",
        100.0,
        state="done",
        progress=1.0,
        status="started run r7",
        lines=["✓ GPUs visible", "✓ config valid", "✓ started run r7"],
        finished=112.0,
    )
    failed = Task(
        2,
        OFFLINE.name,
        "cleanup",
        200.0,
        state="failed",
        progress=0.4,
        status="pre-flight failed: the pod is offline",
        finished=203.0,
    )
    cancelled = Task(3, TRAINING.name, "kill", 300.0, state="cancelled", status="cancelled", finished=301.5)
    app.tasks.items[:] = [done, failed, cancelled]
    return TasksScreen(app.tasks)


def spend_dialog(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    """Two closed rentals in a real audit log (an open one's cost is the machine's clock: it ticks)."""
    import os

    from app.screens.spend import SpendScreen
    from services.offers.rentals import AUDIT_NAME, AuditLog, Rental

    audit = AuditLog(Path(os.environ["PRIME_TRAIN_TUI_DATA_DIR"]) / AUDIT_NAME)
    for pod_id, name, run, start, hours in (
        ("1", "vast-h100x8-a1", "grpo-1", NOW - 86400, 5),
        ("2", "vast-h100x1-b2", "sft-2", NOW - 7200, 1.5),
    ):
        r = Rental(name, "vast", pod_id, f"vast 8x H100 ({name})", 2.0, 2.2, start, None, run=run, budget_usd=50.0)
        audit.append("create", provider="vast", pod_id=pod_id, rental=r.to_json())
        audit.append("terminate", provider="vast", pod_id=pod_id, reason="deadline", now=start + hours * 3600)
    return SpendScreen()


def wizard(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from app.screens.wizard import WizardScreen

    return WizardScreen(Path("rl-2.toml"))


def save_as(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    from app.screens.save_as import SaveAsScreen

    return SaveAsScreen(Path("rl-2.toml"))


def rent(app: PrimeTrainApp, monkeypatch: pytest.MonkeyPatch) -> ModalScreen:
    """A spot offer from the simulated ones (fixed rows), planned at the fixed clock."""
    from app.screens.rent import RentScreen
    from services.demo.offers import demo_offers
    from services.offers.launch import plan_launch

    offer = demo_offers(True).offers[0]
    return RentScreen(plan_launch(offer, 6.0, now=NOW), clock=lambda: NOW)


@dataclass(frozen=True)
class Dialog:
    build: Callable[[PrimeTrainApp, pytest.MonkeyPatch], ModalScreen | None]  # None: the App pushed it itself
    ready: Callable[[ModalScreen], bool] = lambda screen: True


def plan_shown(screen: ModalScreen) -> bool:
    return bool(getattr(screen, "_plan_ready", False))


def swept(screen: ModalScreen) -> bool:
    return "Other pods" in str(screen.query_one("#spend-sweep").render())


DIALOGS = {
    "kill": Dialog(kill_dialog, plan_shown),
    "cleanup": Dialog(cleanup_dialog, plan_shown),
    "launch": Dialog(launch_dialog, plan_shown),
    "cleanup-preview": Dialog(cleanup_preview),
    "confirm-remove-pod": Dialog(confirm_remove),
    "help": Dialog(help_dialog),
    "host-key-unknown": Dialog(host_key_unknown),
    "host-key-changed": Dialog(host_key_changed),
    "add-pod": Dialog(add_pod),
    "tasks": Dialog(tasks_dialog),
    "spend": Dialog(spend_dialog, swept),
    "wizard": Dialog(wizard),
    "save-as": Dialog(save_as),
    "rent": Dialog(rent),
}


async def show(pilot: Pilot, *, dialog: Dialog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods fed and shown, no toast, then the dialog on top, ready, with no cursor blinking."""
    app = pilot.app
    assert isinstance(app, PrimeTrainApp)
    app.on_snapshot(training_snapshot())
    app.on_snapshot(offline_snapshot())
    app.pod_list.select(TRAINING.name)
    await wait_for(pilot, lambda: TRAINING.name in app.snapshots and not app.frame_pending)
    app.clear_notifications()  # the pods' toasts, before the dialog covers the screen they are on
    await pilot.pause()
    screen = dialog.build(app, monkeypatch)
    if screen is not None:
        await app.push_screen(screen)
    await wait_for(pilot, lambda: isinstance(app.screen, ModalScreen) and dialog.ready(app.screen))
    await pilot.pause()
    for widget in app.screen.query("Input, TextArea"):
        assert isinstance(widget, Input | TextArea)
        widget.cursor_blink = False  # the cursor shows, steadily


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(DIALOGS))
def test_dialog(snap_compare, monkeypatch: pytest.MonkeyPatch, name: str, size: str) -> None:
    assert snap_compare(
        layout_app(config=False),
        terminal_size=SIZES[size],
        run_before=partial(show, dialog=DIALOGS[name], monkeypatch=monkeypatch),
    )
