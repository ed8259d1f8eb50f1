"""The demo pod in the app and the CLI: its sandbox under the data dir, its lifecycle settings, its run.

The sandbox (``services.demo.pod.DemoPod``) is ``<data dir>/demo-pod``: one fixed place, so that a headless
``kill demo`` reaches the run a running TUI owns. A demo pod carries it (its run_dir and probe_dir are in it,
see :func:`sandboxed`); every lifecycle action on it runs through ``services.lifecycle`` with the
settings of :func:`demo_lifecycle_settings` and a connection confined to the sandbox (``services.connect``, given
:func:`demo_inputs`), never on this
machine's own files or processes.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.connect import open_connection
from services.demo.pod import DemoPod, sandbox_paths, sandbox_root
from services.models import Pod, PodSnapshot

if TYPE_CHECKING:
    from app.host import AppHost
    from services.lifecycle.preflight import LifecycleSettings
    from services.monitor.worker import MonitorSettings

LAUNCH_WAIT = 5.0  # the TUI launches the demo run at the latest this many seconds after the demo pod is watched
HEAD_START = 20  # a run a headless command starts has this many steps at once (status and profile read them)


def demo_root() -> Path:
    from app.settings import data_dir

    return data_dir() / "demo-pod"


def sandboxed(pod: Pod, root: Path | None = None) -> Pod:
    """A demo pod that uses the sandbox (its run dir, and the lifecycle helper's state dir as probe_dir);
    any other pod, or one that carries a sandbox already, as it is."""
    if not pod.simulated or sandbox_root(pod) is not None:
        return pod
    return replace(pod, **sandbox_paths(root or demo_root()))


def demo_sandbox(pod: Pod, monitor: MonitorSettings | None = None) -> DemoPod:
    """The pod's sandbox with the options saved in it, else the monitor settings' demo values."""
    from services.monitor.worker import MonitorSettings

    root = sandbox_root(sandboxed(pod))
    assert root is not None
    return DemoPod.at(root, **asdict((monitor or MonitorSettings()).demo_options()))


def demo_lifecycle_settings(pod: Pod, head_start: int = 0, monitor: MonitorSettings | None = None) -> LifecycleSettings:
    """The demo pod's lifecycle settings (services.demo's plain overrides), its run records under the data
    dir like any run's. The one builder for the TUI and the headless commands."""
    from app.settings import data_dir
    from services.lifecycle.preflight import LifecycleSettings

    return LifecycleSettings(**demo_sandbox(pod, monitor).lifecycle_overrides(head_start), runs_dir=data_dir() / "runs")


def for_lifecycle(pod: Pod) -> tuple[Pod, LifecycleSettings | None]:
    """A pod about to be launched, killed, resumed or cleaned: the demo pod in its sandbox with the demo's
    own lifecycle settings; any other pod as it is, with None (the user's settings apply)."""
    if not getattr(pod, "simulated", False):
        return pod, None
    pod = sandboxed(pod)
    return pod, demo_lifecycle_settings(pod)


def demo_inputs(pod: Pod, monitor: MonitorSettings | None = None) -> dict[str, Any]:
    """What ``services.connect.open_connection`` takes from the app for the demo pod: the sandbox (a pod that
    carries none is put in it) and the demo options (the monitor settings' values); nothing for other pods."""
    if not pod.simulated:
        return {}
    from services.monitor.worker import MonitorSettings

    return {"sandbox": demo_root(), "demo": (monitor or MonitorSettings()).demo_options()}


def start_fresh(pod: Pod, monitor: MonitorSettings | None = None) -> DemoPod:
    """The TUI's start: a trainer a crashed TUI left in the sandbox is killed, run/ and state/ cleared, the
    options saved, this process the demo's owner. Raises ConnectError when the directory is not a sandbox
    (it is then left alone)."""
    from services.monitor.worker import MonitorSettings

    root = sandbox_root(sandboxed(pod))
    assert root is not None
    demo = DemoPod(root=root, **asdict((monitor or MonitorSettings()).demo_options()))
    demo.prepare(fresh=True)
    demo.claim()  # its runs stop by themselves should this process end without stopping them
    return demo


async def ensure_run(pod: Pod, *, head_start: int = HEAD_START, wait: float = 10.0) -> str:
    """Headless ``status``/``profile``: the demo's active run, else one started through the lifecycle (with a
    head start, so that there are steps to read) and left running. Returns "" or the note saying it started
    one. Raises PrimeTrainError when it cannot."""
    from services.lifecycle.actions import launch, plan_kill
    from services.lifecycle.events import LifecycleError

    pod = sandboxed(pod)
    settings = demo_lifecycle_settings(pod, head_start)
    demo = demo_sandbox(pod)
    conn = open_connection(pod, **demo_inputs(pod))
    try:
        await conn.connect()
        if await plan_kill(conn) is not None:
            return ""
        last = None
        async for ev in launch(conn, demo.config, settings=settings):
            last = ev
        if last is None or last.kind != "done":
            raise LifecycleError(f"the demo run did not start: {last.message if last else 'no answer'}")
    finally:
        await conn.close()
    log = demo.run_dir / "logs" / "trainer.log"  # prime-rl's "Step N" lines, or the plain script's "step N"
    loop = asyncio.get_running_loop()
    end = loop.time() + wait
    while loop.time() < end and "step " not in _read(log).lower():
        await asyncio.sleep(0.05)
    return (
        f"started the demo run in {demo.root} (SIMULATED; it keeps running: prime-train-tui kill demo --yes stops it)"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def note(text: str) -> None:
    if text:
        print(f"prime-train-tui: {text}", file=sys.stderr)


# ------------------------------------------------------------------------------------ the TUI


class DemoInApp:
    """The demo pod in a running App: its sandbox started fresh, its run launched as an app task ("launch
    on demo", in the task list), and that run stopped when the demo pod is removed or the App ends."""

    def __init__(self, app: AppHost) -> None:
        self.app = app
        self.workers: dict[str, Any] = {}

    def start(self, pod: Pod) -> Pod:
        from services.errors import PrimeTrainError

        pod = sandboxed(pod)
        try:
            demo = start_fresh(pod, self.app.monitor_settings)
        except PrimeTrainError as err:  # not a sandbox: the monitor shows the pod offline with the reason
            self.app.notify(
                f"{err}" + (f"\n{err.hint}" if err.hint else ""), severity="error", title="Demo pod", timeout=15
            )
            return pod
        from app.host import ConfigOffered

        self.app.post_message(ConfigOffered(demo.config))  # the Config pane shows it when it has no config
        self.workers[pod.name] = self.app.run_worker(
            self._hold(pod, demo), name=f"demo pod {pod.name}", group="demo-pod", exit_on_error=False
        )
        return pod

    def stop(self, name: str) -> None:
        worker = self.workers.pop(name, None)
        if worker is not None:
            worker.cancel()

    async def _hold(self, pod: Pod, demo: DemoPod) -> None:
        """Lives as long as the demo pod: launches its run once the pod's first sample is on screen; its end (the
        pod removed, the App quitting) stops the run."""
        import signal

        try:
            await self._first_sample_shown(pod.name)
            self.app.call_after_refresh(self._launch, pod, demo)  # after the frame that shows it
            await asyncio.Event().wait()
        finally:
            demo.stop_runs(signal.SIGTERM)
            demo.release()

    async def _first_sample_shown(self, name: str) -> None:
        """Until the demo pod's first sample is on screen (its GPUs: what the user waits for at start), the
        monitor gave up on it for now, or LAUNCH_WAIT passed. The launch's processes (pre-flight, the helper,
        the trainer's start) would otherwise share the CPU with the probe's and the fake nvidia-smi's first
        start: launched at the first paint, the GPUs reached the screen ~0.4 s later on two cores at load ~13.
        Told by the frames (on_shown), not found by polling: the launch starts with the frame that shows it."""
        from services.models import PodState

        def answered(snap: PodSnapshot | None) -> bool:
            return snap is not None and (
                snap.latest is not None or snap.status.state not in (PodState.CONNECTING, PodState.ONLINE)
            )

        if answered(self.app.snapshots.get(name)):
            return
        shown = asyncio.Event()

        def told(snap: PodSnapshot) -> None:
            if snap.pod.name == name and answered(snap):
                shown.set()

        hooks = self.app.frames.on_shown
        hooks.append(told)
        try:
            await asyncio.wait_for(shown.wait(), LAUNCH_WAIT)
        except asyncio.TimeoutError:
            pass
        finally:
            if told in hooks:
                hooks.remove(told)

    def _launch(self, pod: Pod, demo: DemoPod) -> None:
        from app.host import RunStarted
        from services.lifecycle.actions import launch

        tasks, monitor = self.app.tasks, self.app.monitor_settings
        settings = demo_lifecycle_settings(pod, monitor=monitor)

        async def events() -> Any:
            conn = open_connection(pod, **demo_inputs(pod, monitor))
            try:
                await conn.connect()
                async for ev in launch(conn, demo.config, settings=settings):
                    if ev.kind == "done" and (started := RunStarted.of(ev.data)) is not None:
                        self.app.post_message(started)  # the monitor follows the run
                    yield ev
            finally:
                await conn.close()

        def told(task: Any, ev: Any) -> None:  # a listener: the app's generic "Done" toast stays away
            if task.running:
                return
            result = task.result
            if isinstance(result, Exception) or getattr(result, "kind", "") == "error":
                self.app.notify(
                    f"{getattr(result, 'message', result)}",
                    severity="error",
                    title="The demo run did not start",
                    timeout=15,
                )

        try:
            tasks.start_events(pod.name, "launch", events, told)
        except Exception as err:  # noqa: BLE001 - app.tasks.Busy: another action runs on the pod already
            self.app.notify(f"{err}", severity="warning", title="The demo run was not started")
