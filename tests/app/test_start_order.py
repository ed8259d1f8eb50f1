"""What the first frame waits for: the pods are listed in it; watching them (the monitor, the lifecycle's
background work, the demo sandbox, auto-backup, the rentals' checks) starts just after it (issue 17: ~15 ms of
the first paint of --demo)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot

import app.frames
import app.tui
from app.pane_registry import MONITOR, PANE_REGISTRY
from app.tui import PrimeTrainApp
from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from services.monitor.service import MonitorService
from tests.app.helpers import Parked, panes_mounted, shown, wait_for

GIB = 1024**3

PODS = [Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1"), Pod(name="gpu2", kind=PodKind.SSH, host="10.0.0.2")]


def parked_app(pods: list[Pod] = PODS) -> PrimeTrainApp:
    return PrimeTrainApp(pods, monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))


async def test_the_first_frame_lists_the_pods_and_their_watching_starts_just_after(monkeypatch) -> None:
    at_first_frame: list[tuple[bool, list[str], list[str], str, bool, str]] = []
    display = App._display

    def first(self: App, screen, renderable) -> None:
        if isinstance(self, PrimeTrainApp) and renderable is not None and not at_first_frame:
            sidebar = [name for name in self.pods if self.pod_list.row(name) is not None]
            pane = self.monitor_pane
            at_first_frame.append(
                (
                    self.watching,
                    sidebar,
                    self.monitor.names(),
                    self.sub_title,
                    pane.query_one("#monitor-empty").display,
                    f"{pane.query_one('#monitor-title').render()} / {pane.query_one('#monitor-state').render()}",
                )
            )
        display(self, screen, renderable)

    monkeypatch.setattr(App, "_display", first)
    app = parked_app()
    async with app.run_test(size=(120, 40)) as pilot:  # hands over once the app watches (tests/conftest.py)
        # the selected pod's state, not "No pod selected": it is connecting (from a frame later, for real)
        assert at_first_frame == [
            (False, ["gpu1", "gpu2"], [], "", False, "gpu1 (10.0.0.1) — connecting / Connecting…")
        ]
        assert app.watching and sorted(app.monitor.names()) == ["gpu1", "gpu2"]
        assert app.lifecycle_bg is app.lifecycle_bg and app.auto_backup.running("gpu1") is None
        await wait_for(
            pilot, lambda: (s := app.snapshots.get("gpu1")) is not None and s.status.state is PodState.CONNECTING
        )  # the monitor's own first word on screen


async def test_a_pod_removed_before_its_watching_starts_is_never_watched() -> None:
    app = parked_app()
    async with App.run_test(app, size=(120, 40)) as pilot:  # Textual's own: hands over right after on_mount
        app.forget_pod("gpu2")
        await wait_for(pilot, lambda: app.watching)
        await pilot.pause()
        assert app.monitor.names() == ["gpu1"] and list(app.pods) == ["gpu1"]
        assert app.pod_list.row("gpu2") is None


@pytest.mark.parametrize("first_use", ["lifecycle_bg", "auto_backup"])
async def test_asking_for_the_background_before_the_first_frame_starts_the_watching(first_use: str) -> None:
    app = parked_app()
    async with App.run_test(app, size=(120, 40)) as pilot:
        assert getattr(app, first_use) is not None
        assert app.watching and sorted(app.monitor.names()) == ["gpu1", "gpu2"]
        await pilot.pause()
        assert sorted(app.monitor.names()) == ["gpu1", "gpu2"]  # once: the deferred start found it done


def sampled(pod: Pod, n: int = 1) -> PodSnapshot:
    """The pod with n samples of 8 GPUs."""
    now = time.time()
    history = tuple(
        Sample(
            t=now - n + i,
            gpus=tuple(GpuSample(g, "NVIDIA H100 80GB HBM3", 90.0, 60 * GIB, 80 * GIB, 600.0, 65) for g in range(8)),
            host=HostSample(12.0, 300 * GIB, 2000 * GIB, 400 * GIB, 1000 * GIB, 1048576),
            source="nvidia-smi",
        )
        for i in range(n)
    )
    return PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "via nvidia-smi", since=now - 5),
        history=history,
        samples_total=n,
        last_received=history[-1].t,
    )


def others_mounted(app: PrimeTrainApp) -> list[str]:
    return [p.name for p in PANE_REGISTRY if p is not MONITOR and app.screen_stack[0].query(p.selector)]


async def test_the_other_panes_mount_after_the_selected_pods_first_sample_is_on_screen(monkeypatch) -> None:
    """Mounting the ~250 widgets of the other panes held the event loop ~0.4 s right after the first frame, and the
    demo pod's probe started only after them (tests/benchmarks/startup.py): they mount once the frame that shows
    the selected pod's first sample is drawn (at the latest FIRST_LOOK_WAIT after the first screen)."""
    monkeypatch.setattr(app.tui, "FIRST_LOOK_WAIT", 60.0)
    at_frames: list[tuple[bool, list[str]]] = []  # each frame: gpu1's sample shown, the other panes there
    display = App._display

    def record(self: App, screen, renderable) -> None:
        if isinstance(self, PrimeTrainApp) and renderable is not None and self.screen_stack:
            shown = (s := self.snapshots.get("gpu1")) is not None and s.latest is not None
            at_frames.append((shown, others_mounted(self)))
        display(self, screen, renderable)

    monkeypatch.setattr(App, "_display", record)
    tui = parked_app()
    async with App.run_test(tui, size=(120, 40)) as pilot:  # Textual's own: the background waits for the sample
        for _ in range(5):
            await pilot.pause()
        tui.on_snapshot(sampled(PODS[1]))  # not the selected pod: nothing changes
        await shown(pilot)
        await pilot.pause(0.2)
        assert others_mounted(tui) == []
        tui.on_snapshot(sampled(PODS[0]))
        await panes_mounted(pilot)
    first_shown = next(i for i, (sample, _) in enumerate(at_frames) if sample)
    assert all(others == [] for _, others in at_frames[: first_shown + 1]), at_frames[first_shown - 2 : first_shown + 3]


async def test_keys_for_the_other_panes_at_once_after_the_first_frame_each_find_their_pane(monkeypatch) -> None:
    """Before the other panes mount, a number key mounts its pane and shows it then: no frame shows an empty pane,
    and the keys after it (here the Config pane's e) reach it."""
    from textual.widgets import TextArea

    monkeypatch.setattr(app.tui, "FIRST_LOOK_WAIT", 60.0)
    empty: list[str] = []  # a frame that showed a pane not mounted yet
    display = App._display

    def record(self: App, screen, renderable) -> None:
        if isinstance(self, PrimeTrainApp) and renderable is not None and (main := self.main()) is not None:
            active = main.tabs.active
            if not self.screen_stack[0].query(f"#{active}-pane"):
                empty.append(active)
        display(self, screen, renderable)

    monkeypatch.setattr(App, "_display", record)
    tui = parked_app()
    async with App.run_test(tui, size=(120, 40)) as pilot:  # Textual's own: the background waits for the panes
        await pilot.pause()
        assert others_mounted(tui) == []
        await pilot.press("2", "3", "4", "5", "6", "1", "e")
        await wait_for(pilot, lambda: isinstance(tui.focused, TextArea))  # the Config pane's e: its editor
        assert tui.tabs.active == "config"
        assert sorted(others_mounted(tui)) == sorted(p.name for p in PANE_REGISTRY if p is not MONITOR)
    assert empty == []


async def test_the_selected_pods_first_sample_shows_at_once_later_ones_with_the_frame(monkeypatch) -> None:
    """The pods' snapshots reach the screen once per frame (FRAME_S), and the "connecting" frames at start put the
    next one up to FRAME_S away: the selected pod's first sample (its GPUs, what the user waits for) shows at
    once; its next samples, and another pod's first, wait for the frame as before."""
    monkeypatch.setattr(app.frames, "FRAME_S", 30.0)
    tui = parked_app()
    async with tui.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "gpu1" in tui.snapshots)
        tui.on_snapshot(sampled(PODS[0]))
        await wait_for(pilot, lambda: tui.snapshots["gpu1"].latest is not None, timeout=10)
        tui.on_snapshot(sampled(PODS[0], 2))
        tui.on_snapshot(sampled(PODS[1]))
        for _ in range(5):
            await pilot.pause()
        assert tui.snapshots["gpu1"].samples_total == 1 and tui.snapshots["gpu2"].latest is None
        assert tui.frame_pending


@pytest.mark.parametrize(
    "pods",
    [
        [Pod(name="demo", kind=PodKind.DEMO)],
        [Pod(name="demo", kind=PodKind.DEMO), Pod(name="local", kind=PodKind.LOCAL)],  # what --demo lists
        PODS,
    ],
    ids=["demo", "demo+local", "ssh"],
)
async def test_every_pods_connection_starts_before_the_background_which_gets_their_snapshots_after(
    monkeypatch, pods: list[Pod]
) -> None:
    """Whatever the pods: every pod's monitor connection starts first, the lifecycle's background (~40-100 ms of
    imports and set-up on loaded cores, which held the probes' start back) after the selected pod's first look;
    the background still observes every snapshot the monitor gave, in order. The monitor knows the runs dir
    before any pod connects (a pod without run_dir follows its newest launch there)."""
    from app.demo import DemoInApp
    from app.lifecycle_bg import BackgroundLifecycle, runs_dir

    monkeypatch.setattr(app.tui, "FIRST_LOOK_WAIT", 60.0)  # the background waits for the first look, not a timer
    monkeypatch.setattr(DemoInApp, "_launch", lambda *a: None)  # the demo run (its processes) is not what is tested
    observed: list[PodSnapshot] = []
    observe = BackgroundLifecycle.observe

    def spy(self: BackgroundLifecycle, snapshot: PodSnapshot) -> None:
        observed.append(snapshot)
        observe(self, snapshot)

    monkeypatch.setattr(BackgroundLifecycle, "observe", spy)
    emitted: list[PodSnapshot] = []
    at_add: list[tuple[str, bool, object]] = []  # each pod added: the background there, the monitor's runs dir

    def factory(cb):  # the App's own callback, every snapshot noted on its way
        def noted(snap: PodSnapshot) -> None:
            emitted.append(snap)
            cb(snap)

        mon = MonitorService(noted, connector=lambda p: Parked(p))
        add = mon.add

        def adding(pod: Pod) -> None:
            at_add.append((pod.name, tui._lifecycle_bg is not None, mon.runs_dir))
            add(pod)

        mon.add = adding  # type: ignore[method-assign]
        return mon

    tui = PrimeTrainApp(pods, monitor_factory=factory)
    async with App.run_test(tui, size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(at_add) == len(pods))
        for _ in range(3):
            await pilot.pause()
        assert tui._lifecycle_bg is None, "the background was set up before the selected pod's first look"
        assert at_add == [(pod.name, False, runs_dir()) for pod in pods]
        emitted.append(first := sampled(tui.pods[pods[0].name]))  # the selected pod's first sample
        tui.on_snapshot(first)
        await wait_for(pilot, lambda: tui._lifecycle_bg is not None)
        assert len(emitted) > len(pods) and [id(s) for s in observed] == [id(s) for s in emitted]
        await panes_mounted(pilot)


def test_the_app_imports_no_slurm_module_before_a_slurm_pod_is_drawn() -> None:
    """Every Monitor pane imports widgets.cluster_view; Slurm's models and health words it needs only to draw a
    Slurm pod's look, and importing them with the app cost ~7 ms before the first screen of any pod."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, app.cli, app.tui; print(' '.join(sorted(m for m in sys.modules if 'slurm' in m)))"
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


FIRST_FRAME_MODULES = r"""
import asyncio, sys
from textual.app import App
from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from tests.app.helpers import Parked

seen = []
display = App._display

def first(self, screen, renderable):
    if renderable is not None and not seen:
        seen.append(sorted(m for m in sys.modules if m.startswith("services.offers.")))
    display(self, screen, renderable)

App._display = first

async def main():
    pods = [Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1")]
    app = PrimeTrainApp(pods, monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)))
    async with App.run_test(app, size=(120, 40)) as pilot:
        while not seen:
            await pilot.pause()

asyncio.run(main())
print(" ".join(seen[0]))
"""


def test_the_first_frame_reads_no_offer_settings(tmp_path) -> None:
    """settings.toml's [offers] is read when the Offers pane or a rental first needs it: its checks brought the
    offer models, the spot-risk rules and every provider's module, ~20 ms before the first screen of any pod."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", FIRST_FRAME_MODULES], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert "services.offers.rentals" in loaded  # the rentals' start-up check reads the audit log, as before
    assert not loaded & {
        "services.offers.settings",
        "services.offers.spot_risk",
        "services.offers.models",
        "services.offers.providers",
    }, loaded


@contextlib.asynccontextmanager
async def started_with_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: str
) -> AsyncIterator[tuple[PrimeTrainApp, Pilot]]:
    """The parked app started with ``settings`` as its settings.toml, every pane mounted."""
    (tmp_path / "settings.toml").write_text(settings)
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    tui = parked_app()
    async with tui.run_test(size=(120, 40)) as pilot:
        await panes_mounted(pilot)
        yield tui, pilot


async def test_a_broken_offers_table_is_still_said_once_and_the_offers_pane_uses_the_defaults(
    monkeypatch, tmp_path
) -> None:
    """Read on first use, a settings.toml whose [offers] cannot be read is said as before (once, a warning
    naming the line and the fix) when the Offers pane is built, and the pane and the rentals use the defaults."""
    from app.pane_registry import OFFERS

    async with started_with_settings(monkeypatch, tmp_path, "[offers]\ncache_tll = 60\n") as (tui, pilot):
        assert tui.mounted(OFFERS).cache_ttl == 600.0
        assert tui.rentals.settings.cap_margin == 0.10
        await pilot.pause()
        warned = [n.message for n in tui._notifications if "offers use the defaults" in n.message]
        assert len(warned) == 1, warned
        assert "settings.toml, line 2" in warned[0] and "did you mean cache_ttl?" in warned[0], warned


async def test_the_offers_pane_gets_the_cache_ttl_of_settings_toml(monkeypatch, tmp_path) -> None:
    from app.pane_registry import OFFERS

    async with started_with_settings(monkeypatch, tmp_path, "[offers]\ncache_ttl = 60\n") as (tui, _):
        assert tui.mounted(OFFERS).cache_ttl == 60.0
        assert not [n for n in tui._notifications if "offers use the defaults" in n.message]
