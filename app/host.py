"""The App as its controllers see it (app/lifecycle_bg.py, app/auto_backup.py, app/demo.py, app/rentals.py):
:class:`AppHost`, what they may call — toasts, workers, screens, timers, the pods and the monitor to read — and
the messages they post to change the App's state, each carrying its data; the App handles them
(``PrimeTrainApp.on_*``)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from textual.message import Message
from textual.notifications import SeverityLevel

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.timer import Timer
    from textual.widget import Widget
    from textual.worker import Worker

    from app.frames import SnapshotFrames
    from app.pane_registry import Pane
    from app.tasks import Tasks
    from services.models import Pod, PodSnapshot
    from services.monitor.service import MonitorService
    from services.monitor.worker import MonitorSettings

R = TypeVar("R")
W = TypeVar("W", bound="Widget")


class RunStarted(Message):
    """A launch or resume is done (a dialog, the demo pod's start, auto-resume): the pod follows its run dir."""

    def __init__(self, pod: str, run_dir: str) -> None:
        super().__init__()
        self.pod = pod
        self.run_dir = run_dir

    @classmethod
    def of(cls, record: object) -> RunStarted | None:
        """From a launch's or resume's last event's data (a run record); None when it names no pod or run dir."""
        name = record.get("pod") if isinstance(record, dict) else None
        run_dir = record.get("run_dir") if isinstance(record, dict) else None
        if isinstance(name, str) and isinstance(run_dir, str) and run_dir:
            return cls(name, run_dir)
        return None


class DeadlineMoved(Message):
    """A rented pod's auto-terminate deadline moved (kept at start-up): the sidebar and pods.toml follow."""

    def __init__(self, name: str, deadline: float | None) -> None:
        super().__init__()
        self.name = name
        self.deadline = deadline


class PodRented(Message):
    """A pod rented here is up (now, or found again at start-up): into the sidebar and pods.toml, selected."""

    def __init__(self, pod: Pod) -> None:
        super().__init__()
        self.pod = pod


class PodTerminated(Message):
    """A rented pod was terminated (by the user, or at its deadline): it leaves the sidebar and pods.toml."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class PodLost(Message):
    """The provider reports a rented pod gone (a spot pod taken back): its run counts as interrupted at once."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class ConfigOffered(Message):
    """A config for the Config pane to open if it has none (the demo pod's)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


class RunInterrupted(Message):
    """The preemption tracker marked a run interrupted (its pod lost): a rented pod's rental records it."""

    def __init__(self, pod: str, run_id: str) -> None:
        super().__init__()
        self.pod, self.run_id = pod, run_id


class AppHost(Protocol):
    """What a controller may use of the App. State changes go through the messages above."""

    @property
    def pods(self) -> Mapping[str, Pod]: ...
    @property
    def snapshots(self) -> Mapping[str, PodSnapshot]: ...
    @property
    def monitor(self) -> MonitorService | None: ...
    @property
    def monitor_settings(self) -> MonitorSettings: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def tasks(self) -> Tasks: ...
    @property
    def frames(self) -> SnapshotFrames: ...  # its on_shown hooks: told of every snapshot put on screen

    def mounted(self, pane: Pane[W]) -> W | None: ...
    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...
    def run_worker(
        self,
        work: Coroutine[Any, Any, R],
        name: str | None = "",
        group: str = "default",
        description: str = "",
        exit_on_error: bool = True,
    ) -> Worker[R]: ...
    def push_screen(self, screen: Screen[R], callback: Callable[[R | None], None] | None = None) -> object: ...
    def set_interval(
        self, interval: float, callback: Callable[[], object] | None = None, *, name: str | None = None
    ) -> Timer: ...
    def call_after_refresh(self, callback: Callable[..., object], *args: Any, **kwargs: Any) -> bool: ...
    def post_message(self, message: Message) -> bool: ...
