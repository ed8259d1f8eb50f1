"""The App's parts and their edges (docs/architecture.md, "The App's parts"): the controllers change the App's
state only by posting it messages (app/host.py), which the App applies through its PodBook (app/pods.py) — the
pod, its sidebar row and pods.toml together; the pane tables, the number keys and the palette come from one
registry (app/pane_registry.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.binding import Binding

from app.host import DeadlineMoved, PodRented, PodTerminated, RunStarted
from app.pane_registry import PANE_FOCUS, PANE_IDS, PANE_REGISTRY, PANES
from app.settings import load_pods
from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from tests.app.helpers import Parked, panes_mounted, wait_for


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))


def ssh_pod(name: str, **kw) -> Pod:
    return Pod(name=name, kind=PodKind.SSH, host="127.0.0.1", user="root", port=1, saved=True, **kw)


def saved(path: Path) -> dict[str, Pod]:
    return {p.name: p for p in load_pods(path)} if path.exists() else {}


async def test_the_controllers_messages_change_the_pod_its_row_and_pods_toml_together(tmp_path: Path) -> None:
    pods_path = tmp_path / "pods.toml"
    app = PrimeTrainApp(
        [ssh_pod("gpu1")],
        pods_path=pods_path,
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
    )
    async with app.run_test(size=(140, 45)) as pilot:
        app.post_message(DeadlineMoved("gpu1", 2_000_000_000.0))
        await wait_for(
            pilot,
            lambda: saved(pods_path).get("gpu1") is not None and saved(pods_path)["gpu1"].deadline == 2_000_000_000.0,
        )
        assert app.pods["gpu1"].deadline == 2_000_000_000.0
        assert app.pod_list.row("gpu1").pod is app.pods["gpu1"]

        app.post_message(RunStarted("gpu1", "/runs/exp-7"))
        await wait_for(pilot, lambda: saved(pods_path)["gpu1"].run_dir == "/runs/exp-7")
        assert app.pods["gpu1"].run_dir == "/runs/exp-7" and app.pod_list.row("gpu1").pod is app.pods["gpu1"]
        assert app.pods["gpu1"].deadline == 2_000_000_000.0  # one change does not undo the other

        app.post_message(PodRented(ssh_pod("rented", provider="lambda", provider_id="i-1")))
        await wait_for(pilot, lambda: "rented" in saved(pods_path) and app.selected == "rented")
        assert list(app.pods) == ["gpu1", "rented"] and sorted(app.monitor.names()) == ["gpu1", "rented"]

        app.post_message(PodTerminated("rented"))
        await wait_for(pilot, lambda: "rented" not in saved(pods_path))
        assert list(app.pods) == ["gpu1"] and app.pod_list.row("rented") is None
        await wait_for(pilot, lambda: app.monitor.names() == ["gpu1"])


async def test_a_run_started_for_a_pod_no_longer_listed_changes_nothing(tmp_path: Path) -> None:
    pods_path = tmp_path / "pods.toml"
    app = PrimeTrainApp(
        [ssh_pod("gpu1")],
        pods_path=pods_path,
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
    )
    async with app.run_test(size=(140, 45)) as pilot:
        app.post_message(RunStarted("gone", "/runs/x"))
        app.post_message(DeadlineMoved("gone", 1.0))
        await pilot.pause(0.1)
        assert list(app.pods) == ["gpu1"] and not pods_path.exists()


async def test_the_panes_keys_palette_and_focus_come_from_the_registry(tmp_path: Path) -> None:
    names = [p.name for p in PANE_REGISTRY]
    assert list(PANES) == names
    assert PANE_IDS == {p.name: f"#{p.widget_id}" for p in PANE_REGISTRY}
    assert PANE_FOCUS == {p.name: p.focus for p in PANE_REGISTRY}
    numbers = {b.key: b.action for b in PrimeTrainApp.BINDINGS if isinstance(b, Binding) and b.key.isdigit()}
    assert numbers == {str(n): f"show_pane('{name}')" for n, name in enumerate(names, 1)}
    app = PrimeTrainApp([], monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))
    async with app.run_test(size=(140, 45)) as pilot:
        await panes_mounted(pilot)
        for pane in PANE_REGISTRY:  # each one mounted where the registry says, as the class its factory makes
            widget = app.mounted(pane)
            assert widget is not None and widget.id == pane.widget_id
            assert app.screen_stack[0].query_one(f"TabPane#{pane.name}").query_one(pane.selector) is widget
        assert sorted(app.frames.live) == sorted(p.name for p in PANE_REGISTRY if p.live)
        goto = [title for title, _help, _run in app.palette_commands() if title.startswith("Go to: ")]
        assert goto == [f"Go to: {p.title}" for p in PANE_REGISTRY if p.name != app.tabs.active]
