"""Pilot tests of the app shell, driving the real PrimeTrainApp and the real MonitorService.

Pods that fail fast (an SSH pod on 127.0.0.1:1 is refused at once) stand in for unreachable
machines; the demo pod (a real probe subprocess with the fake nvidia-smi) stands in for a live one.
Only the host-key modal tests feed a hand-made snapshot, because reaching that state for real needs
an sshd (covered end to end in the services tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Button, Input, TabbedContent

from app.pane_registry import PANES
from app.screens.add_pod import AddPodScreen
from app.screens.confirm import ConfirmScreen
from app.screens.help import HelpScreen
from app.screens.host_key import HostKeyChangedScreen, HostKeyScreen
from app.settings import load_pods, save_pods
from app.tui import STYLES, PrimeTrainApp
from services.models import (
    Gap,
    GpuSample,
    HostKeyPrompt,
    HostSample,
    Pod,
    PodKind,
    PodSnapshot,
    PodState,
    PodStatus,
    Sample,
)
from services.monitor.worker import MonitorSettings
from tests.app.helpers import panes_mounted, wait_for
from widgets.format import GIB, series
from widgets.monitor_pane import MonitorPane
from widgets.monitor_rows import GpuRows, HostRow
from widgets.pod_list import PodList
from widgets.trend import bar_cells

SIZE = (140, 40)
FAST = MonitorSettings(interval=0.2, stale_after=2.0, backoff_max=30.0)


def make_app(pods: list[Pod], **kw) -> PrimeTrainApp:
    kw.setdefault("settings", FAST)
    app = PrimeTrainApp(pods, **kw)
    app.animation_level = "none"  # tab underline animations only slow the presses down
    return app


def refused(name: str = "gpu1", port: int = 1) -> Pod:
    """An SSH pod nobody listens for: the monitor reports it offline, connection refused."""
    return Pod(name=name, kind=PodKind.SSH, host="127.0.0.1", user="root", port=port, saved=True)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads the developer's ~/.ssh or writes their pods.toml."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    return home


@pytest.fixture
def pods_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "pods.toml"


def row_text(app: PrimeTrainApp, name: str) -> str:
    row = app.query_one(PodList).row(name)
    return row.text if row is not None else ""


def painted_segments(rows: GpuRows, y: int = 0) -> list:
    """GPU line ``y`` as the screen got it (through Textual's line cache: stale unless repainted)."""
    return list(rows.render_lines(Region(0, y, rows.size.width, 1))[0])


def painted(rows: GpuRows, y: int = 0) -> str:
    return "".join(segment.text for segment in painted_segments(rows, y))


def notes(app: PrimeTrainApp) -> list[tuple[str, str]]:
    return [(n.severity, n.message) for n in app._notifications]


class TestLayout:
    async def test_panes_keys_and_clicks(self) -> None:
        app = make_app([refused()])
        async with app.run_test(size=SIZE) as pilot:
            tabs = app.query_one(TabbedContent)
            assert tabs.active == "monitor"
            for number, pane in enumerate(PANES, 1):
                await pilot.press(str(number))
                assert tabs.active == pane
            await pilot.click("#--content-tab-offers")
            assert tabs.active == "offers"
            await pilot.click("#--content-tab-monitor")
            assert tabs.active == "monitor"
            assert app.title == "prime-train-tui"
            assert app.sub_title == ""  # no demo pod, no SIMULATED

    async def test_every_pane_is_built_and_shows_no_data_before_there_is_any(self) -> None:
        from app.panes.offers import OffersPane

        app = make_app([])
        async with app.run_test(size=SIZE) as pilot:
            await panes_mounted(pilot)  # the panes besides Monitor mount after the first screen
            for pane_id in ("config-pane", "offers-pane", "monitor-pane", "bottleneck-pane", "checkpoints-pane"):
                assert app.query(f"#{pane_id}"), pane_id
            assert app.query_one(OffersPane).ranked == []  # nothing fetched until `r`: no network at start
            pane = app.query_one(MonitorPane)
            assert "No pod selected" in str(app.query_one("#monitor-empty").render())
            assert pane.pod_name is None

    async def test_unreachable_pod_goes_offline_with_reason(self) -> None:
        app = make_app([refused()])
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "offline" in row_text(app, "gpu1"))
            text = row_text(app, "gpu1")
            assert "refused" in text and "retry in" in text
            assert text.count("retry in") == 1
            assert app.query_one(MonitorPane).pod_name == "gpu1"
            stats = str(app.query_one("#monitor-stats").render())
            assert "no sample yet" in stats and "0 samples" in stats
            await pilot.press("r")
            assert ("information", "Reconnecting gpu1…") in notes(app)


class TestAddRemove:
    async def add(self, pilot: Pilot, spec: str) -> None:
        await pilot.press("a")
        assert isinstance(pilot.app.screen, AddPodScreen)
        assert isinstance(pilot.app.focused, Input)
        await pilot.press(*spec, "enter")
        await pilot.pause()

    async def test_add_pod_shows_in_sidebar_and_pods_toml(self, pods_path: Path) -> None:
        app = make_app([], pods_path=pods_path)
        async with app.run_test(size=SIZE) as pilot:
            await self.add(pilot, "root@127.0.0.1:1")
            assert app.query_one(PodList).names == ["root@127.0.0.1:1"]
            await app.workers.wait_for_complete()
            saved = load_pods(pods_path)
            assert [(p.name, p.host, p.user, p.port) for p in saved] == [("root@127.0.0.1:1", "127.0.0.1", "root", 1)]
            await wait_for(pilot, lambda: "offline" in row_text(app, "root@127.0.0.1:1"))
            assert app.selected == "root@127.0.0.1:1"

    async def test_default_pods_file_comes_from_the_config_dir(self, tmp_path: Path) -> None:
        app = make_app([])
        async with app.run_test(size=SIZE) as pilot:
            await self.add(pilot, "root@127.0.0.1:1")
            await app.workers.wait_for_complete()
        assert [p.name for p in load_pods(tmp_path / "config" / "pods.toml")] == ["root@127.0.0.1:1"]

    async def test_duplicate_and_invalid_specs_are_refused(self, pods_path: Path) -> None:
        save_pods([refused("root@127.0.0.1:1")], pods_path)
        app = make_app(load_pods(pods_path), pods_path=pods_path)
        async with app.run_test(size=SIZE) as pilot:
            await self.add(pilot, "root@127.0.0.1:1")
            assert app.query_one(PodList).names == ["root@127.0.0.1:1"]
            assert any(sev == "error" and "already" in msg for sev, msg in notes(app))
            await self.add(pilot, "not a pod!")
            assert any(sev == "error" and "not a pod" in msg for sev, msg in notes(app))
            await pilot.press("a", "escape")
            assert not isinstance(app.screen, AddPodScreen)
            assert app.query_one(PodList).names == ["root@127.0.0.1:1"]
        assert [p.name for p in load_pods(pods_path)] == ["root@127.0.0.1:1"]

    async def test_local_pods_are_not_saved(self, pods_path: Path) -> None:
        app = make_app([], pods_path=pods_path)
        async with app.run_test(size=SIZE) as pilot:
            await self.add(pilot, "local")
            assert app.query_one(PodList).names == ["local"]
            await app.workers.wait_for_complete()
        assert not pods_path.exists()

    async def test_remove_with_confirm(self, pods_path: Path) -> None:
        save_pods([refused("a1"), refused("b2")], pods_path)
        app = make_app(load_pods(pods_path), pods_path=pods_path)
        async with app.run_test(size=SIZE) as pilot:
            assert app.selected == "a1"
            await pilot.press("d")
            assert isinstance(app.screen, ConfirmScreen)
            assert "Remove pod a1?" in app.screen.question and "pods.toml" in app.screen.question
            await pilot.press("y")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.query_one(PodList).names == ["b2"]
            assert app.selected == "b2"
            assert app.monitor is not None and app.monitor.names() == ["b2"]
            assert [p.name for p in load_pods(pods_path)] == ["b2"]
            assert pods_path.with_name("pods.toml.bak").exists() or any(
                p.name.endswith(".bak") for p in pods_path.parent.iterdir()
            )

    async def test_remove_refused_or_cancelled_keeps_pod(self, pods_path: Path) -> None:
        save_pods([refused("a1")], pods_path)
        app = make_app(load_pods(pods_path), pods_path=pods_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("d")
            assert isinstance(app.focused, Button) and app.focused.id == "no"
            await pilot.press("n")
            await pilot.press("d", "escape")
            await pilot.press("d", "enter")  # enter presses the focused, safe "No"
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen)
            assert app.query_one(PodList).names == ["a1"]
            assert app.monitor is not None and app.monitor.names() == ["a1"]
        assert [p.name for p in load_pods(pods_path)] == ["a1"]

    async def test_last_pod_removed_leaves_a_plain_empty_state(self) -> None:
        app = make_app([refused("only")])
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("d", "y")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.query_one(PodList).names == []
            assert app.query_one(MonitorPane).pod_name is None
            assert app.query_one("#monitor-empty").display
            await pilot.press("d", "r")  # nothing selected: both do nothing, and say nothing
            assert not isinstance(app.screen, ConfirmScreen)

    async def test_failed_save_is_a_notification_not_a_crash(self, tmp_path: Path) -> None:
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("")
        app = make_app([], pods_path=blocker / "pods.toml")
        async with app.run_test(size=SIZE) as pilot:
            await self.add(pilot, "root@127.0.0.1:1")
            await wait_for(pilot, lambda: any(sev == "error" for sev, _ in notes(app)))
            assert app.is_running
            assert app.query_one(PodList).names == ["root@127.0.0.1:1"]


class TestHelpAndPalette:
    async def test_help_is_generated_from_the_live_bindings(self) -> None:
        app = make_app([refused()])
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = app.screen.text
            for binding in PrimeTrainApp.BINDINGS:
                assert binding.description in text  # type: ignore[union-attr]
            assert "Add pod" in text and "Cursor down" in text  # the focused PodList's keys too
            await pilot.press("escape")
            app.set_keymap({"add_pod": "plus"})
            await pilot.press("question_mark")
            rows = {r.description: r.key for r in app.screen.rows}
            assert rows["Add pod"] == "+"
            await pilot.press("escape", "plus")
            assert isinstance(app.screen, AddPodScreen)

    async def test_palette_offers_only_what_is_valid_now(self) -> None:
        app = make_app([])
        async with app.run_test(size=SIZE) as pilot:
            titles = [t for t, _, _ in app.palette_commands()]
            assert "Pod: add" in titles and "Show help" in titles
            assert not any(t.endswith((": remove from the list", ": reconnect", ": kill run")) for t in titles)
            assert "Go to: Offers" in titles and "Go to: Monitor" not in titles
            await pilot.press("ctrl+p")
            await pilot.press(*"Pod: add")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, AddPodScreen))
            await pilot.press(*"root@127.0.0.1:1", "enter")
            await pilot.pause()
            titles = [t for t, _, _ in app.palette_commands()]
            assert "root@127.0.0.1:1: remove from the list" in titles
            assert "root@127.0.0.1:1: reconnect" in titles
            assert "root@127.0.0.1:1: kill run" in titles


def hostkey_snapshot(pod: Pod, *, changed: bool, fingerprint: str = "SHA256:abcDEF123") -> PodSnapshot:
    prompt = HostKeyPrompt(
        host="127.0.0.1",
        port=2222,
        key_type="ssh-ed25519",
        fingerprint=fingerprint,
        key_line="[127.0.0.1]:2222 ssh-ed25519 AAAA...",
        known_hosts_file="/home/u/.ssh/known_hosts",
        changed=changed,
    )
    state = PodState.HOSTKEY_CHANGED if changed else PodState.HOSTKEY_UNKNOWN
    return PodSnapshot(pod=pod, status=PodStatus(state, "host key not trusted", host_key=prompt))


class TestHostKeyModals:
    async def test_unknown_key_is_asked_once_and_trusted_only_on_yes(self) -> None:
        pod = refused()
        app = make_app([pod])
        async with app.run_test(size=SIZE) as pilot:
            trusted: list[str] = []
            await app.monitor.remove(pod.name)  # only the injected snapshots speak for this pod now
            app.monitor.trust_host_key = trusted.append  # type: ignore[union-attr,method-assign]
            snap = hostkey_snapshot(pod, changed=False)
            app.on_snapshot(snap)
            await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen) and isinstance(app.focused, Button))
            screen = app.screen
            shown = str(screen.query_one(".dialog-question").render())
            assert "127.0.0.1:2222" in shown and "ssh-ed25519" in shown
            assert "SHA256:abcDEF123" in shown and "/home/u/.ssh/known_hosts" in shown
            assert isinstance(app.focused, Button) and app.focused.id == "cancel"
            await pilot.press("enter")  # the default is Cancel
            await wait_for(pilot, lambda: not isinstance(app.screen, HostKeyScreen))
            assert trusted == []
            app.on_snapshot(snap)  # the same key again: not asked twice
            await pilot.pause()
            assert not isinstance(app.screen, HostKeyScreen)
            app.on_snapshot(hostkey_snapshot(pod, changed=False, fingerprint="SHA256:other"))
            await wait_for(
                pilot,
                lambda: (
                    isinstance(app.screen, HostKeyScreen)
                    and app.screen.query("#trust")
                    and app.screen.query_one("#trust").region.area > 0
                ),
            )  # laid out, so clickable
            await pilot.click("#trust")
            await wait_for(pilot, lambda: trusted)
            assert trusted == ["gpu1"]
            assert "host key unknown" in row_text(app, "gpu1")

    async def test_changed_key_warns_and_cannot_be_trusted(self) -> None:
        pod = refused()
        app = make_app([pod])
        async with app.run_test(size=SIZE) as pilot:
            await app.monitor.remove(pod.name)  # only the injected snapshot speaks for this pod now
            app.on_snapshot(hostkey_snapshot(pod, changed=True))
            await wait_for(
                pilot, lambda: isinstance(app.screen, HostKeyChangedScreen) and app.screen.query(".dialog-question")
            )
            screen = app.screen
            assert not screen.query("#trust")
            text = " ".join(str(s.render()) for s in screen.query(".dialog-question"))
            assert "man-in-the-middle" in text
            assert "ssh-keygen -f '/home/u/.ssh/known_hosts' -R '[127.0.0.1]:2222'" in text
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, HostKeyChangedScreen))
            app.on_snapshot(hostkey_snapshot(pod, changed=True))
            await pilot.pause()
            assert not isinstance(app.screen, HostKeyChangedScreen)
            assert "host key changed" in row_text(app, "gpu1")


class TestDemoPod:
    async def test_demo_pod_streams_into_the_monitor_pane(self) -> None:
        demo = Pod(name="demo", kind=PodKind.DEMO)
        settings = MonitorSettings(interval=0.2, demo_max_ticks=20)
        app = make_app([demo, refused()], settings=settings)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.snapshots.get("demo") and app.snapshots["demo"].samples_total >= 3)
            await pilot.pause(0.1)
            assert app.sub_title == "SIMULATED"
            assert "SIMULATED" in row_text(app, "demo") and "online" in row_text(app, "demo")
            table = app.query_one(GpuRows)
            rows = table.lines
            assert len(rows) == settings.demo_gpus and table.size.height == settings.demo_gpus
            util = rows[0].data("util")
            assert util and len(util) >= 3 and rows[0].high("util") == 100.0
            latest = app.snapshots["demo"].latest
            assert latest is not None
            gpu0 = latest.gpus[0]
            await wait_for(
                pilot,
                lambda: (
                    rows[0].figures["util"]
                    == ("N/A" if (gpu := app.snapshots["demo"].latest.gpus[0]).util is None else f"{gpu.util:.0f} %")
                ),
            )
            assert gpu0.name and rows[0].figures["util"] in painted(table)
            assert "source nvidia-smi" in str(app.query_one("#monitor-stats").render())
            # Selecting the other pod re-renders the pane for it; going back shows the GPUs again.
            await pilot.press("down")
            await wait_for(pilot, lambda: app.query_one(MonitorPane).pod_name == "gpu1")
            await pilot.press("up")
            await wait_for(pilot, lambda: app.query_one(MonitorPane).pod_name == "demo")


class TestMonitorPaneRendering:
    """The pane on its own, fed plain data: N/A is never 0, gaps are spelled out, thresholds colour."""

    def sample(self, t: float, *, power: float | None, temp: float | None) -> Sample:
        gpu = GpuSample(0, "H100", util=50.0, mem_used=40 * GIB, mem_total=80 * GIB, power_w=power, temp_c=temp)
        host = HostSample(cpu_pct=None, mem_used=None, mem_total=None, disk_used=95 * GIB, disk_total=100 * GIB)
        return Sample(t=t, gpus=(gpu,), host=host, source="nvml")

    async def test_na_gaps_and_thresholds(self) -> None:
        class PaneApp(App[None]):
            CSS_PATH = STYLES

            def compose(self) -> ComposeResult:
                yield MonitorPane()

        history = (
            self.sample(100.0, power=300.0, temp=70.0),
            self.sample(101.0, power=310.0, temp=71.0),
            self.sample(102.0, power=320.0, temp=72.0),
            self.sample(120.0, power=None, temp=90.0),  # 17 missing seconds
        )
        snap = PodSnapshot(
            pod=refused(),
            status=PodStatus(PodState.ONLINE, "via nvml"),
            history=history,
            gaps=(Gap(start=1_000.0, end=1_012.0),),
            samples_total=4,
            malformed_total=2,
            last_received=1_030.0,
        )
        async with PaneApp().run_test(size=SIZE) as pilot:
            pane = pilot.app.query_one(MonitorPane)
            pane.show(snap, now=1_033.0)

            table = pane.query_one(GpuRows)
            await wait_for(pilot, lambda: table.lines and table.size.width)
            row = table.lines[0]
            text = lambda sel: str(pane.query_one(sel).render())  # noqa: E731
            assert row.figures["power"] == "N/A"
            assert row.figures["mem"] == "40.0/80.0 GiB"
            assert row.levels["temp"] == "critical"
            line = painted_segments(table)
            temp = next(seg for seg in line if seg.text == "90 °C")  # drawn bold in the error colour
            assert temp.style.bold and temp.style.color != next(seg for seg in line if seg.text == "N/A").style.color
            assert "40.0/80.0 GiB" in painted(table) and "N/A" in painted(table)
            host = pane.query_one(HostRow)
            assert host.parts[0] == ("CPU N/A", "") and host.parts[2][1] == "critical"
            assert "CPU N/A" in " ".join(s.text for y in range(host.size.height) for s in host.render_line(y))
            assert "last sample 3 s ago" in text("#monitor-stats")
            assert "2 malformed" in text("#monitor-stats") and "source nvml" in text("#monitor-stats")
            assert "gap 12 s at" in text("#monitor-gaps") and "blank in the graphs" in text("#monitor-gaps")
            assert list(row.data("power")) == [300.0, 310.0, 320.0] + [None] * 17 + [None]
            assert row.high("power") == 320.0
            graph = table.column("graph", "power")
            assert graph is not None and graph.width >= 21, table.columns()
            drawn = painted(table)[graph.x : graph.x + graph.width]
            assert drawn.strip() == "███" and drawn.endswith(" " * 18)  # the gap and N/A stay blank

    def test_series_keeps_the_last_samples(self) -> None:
        history = [self.sample(float(t), power=float(t), temp=None) for t in range(300)]
        values = series(history, lambda s: s.gpus[0].power_w, limit=120)
        assert values == [float(t) for t in range(180, 300)]
        assert series(history, lambda s: s.gpus[0].temp_c, limit=5) == [None] * 5
        assert series([], lambda s: 1.0) == []


def test_trend_uses_a_fixed_scale_and_blanks_for_missing_values():
    # 87 → 92 % is a small change on 0-100, not a full swing as with min/max scaling
    assert bar_cells([87.0, 92.0], 0, 100, 2) == "▇█"
    assert bar_cells([0.0, 50.0, 100.0, None, 120.0, -5.0], 0, 100, 6) == "▁▅█ █▁"
    assert bar_cells([10.0], 0, 100, 4) == "   ▁"  # right-aligned: newest at the right edge
    assert bar_cells([1.0, 2.0, 3.0], 0, 0, 3) == "   "  # no scale yet: nothing drawn, no crash
