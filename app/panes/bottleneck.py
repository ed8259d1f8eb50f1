"""The Bottleneck pane: where the selected run's step time goes, live, plus an on-demand profile.

The App calls ``show(snapshot, now)`` for the selected pod while the tab is visible and ``clear()`` when
no pod is selected. The breakdown is recomputed only when the snapshot brought new metrics/console
lines (or every ``GPU_REFRESH`` s for the GPU evidence), never per frame.

``p`` starts a profile: it watches the next ``profile_steps`` steps of this pod and then shows their
report below the live view; ``e`` exports that report as Markdown into ``<data dir>/profiles`` (never the
directory the App was started in; a thread worker calls ``services.bottleneck.report.write_markdown``) and
the pane's status line says the whole path; the pane posts :class:`BottleneckPane.ProfileExported`.
``f`` goes from verdict to fix: the first recommendation that names a config key is applied to the file
open in the Config pane as an unsaved edit (validated live there, shown as a diff by its versions view),
and the Config pane is shown; with no config file open it says so in one line.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Label, Static
from textual.worker import Worker, WorkerState

from services.bottleneck.analysis import Breakdown, analyze_snapshot
from services.bottleneck.report import write_markdown
from services.models import PodSnapshot
from services.text import plain
from widgets.bottleneck_view import BottleneckView
from widgets.format import set_label

GPU_REFRESH = 10.0


def empty_reason(snapshot: PodSnapshot, breakdown: Breakdown, now: float) -> str:
    """Why there is no breakdown to show, the real reason first and what to do; "" when there is one (or
    a run whose first step timings are still to come: its own title says so)."""
    from services.models import PodState
    from widgets.pod_list import status_reason

    if breakdown.steps or breakdown.components:
        return ""
    name, state = snapshot.pod.name, snapshot.status.state
    if state is not PodState.ONLINE and snapshot.latest is None:
        why = status_reason(snapshot, now)
        return (
            f"{name} is {state.value}" + (f": {why}" if why else "") + ". The breakdown needs its run's "
            "step timings: it appears once the pod answers (r reconnects now)."
        )
    if snapshot.run is None and not snapshot.metrics:
        return (
            f"No run on {name} yet, so there is nothing to break down. Launch one (L) or pick a pod that "
            "is training ([ and ]); the breakdown starts with the run's first steps."
        )
    return ""


def export_folder() -> Path:
    """Where `e` writes a profile: the data dir's ``profiles`` (the same place whichever directory the App
    was started in)."""
    from app.settings import data_dir

    return data_dir() / "profiles"


class BottleneckPane(Widget, can_focus=True):
    BINDINGS = [
        Binding("p", "profile", "Profile steps", id="bottleneck.profile"),
        Binding("e", "export", "Export profile", id="bottleneck.export"),
        Binding("f", "fix", "Apply the fix", id="bottleneck.fix"),
        # a small terminal: the body scrolls from the keyboard too (hidden: they stay with the focus)
        Binding("down", "scroll_body('down')", "Scroll down", show=False),
        Binding("up", "scroll_body('up')", "Scroll up", show=False),
        Binding("pagedown", "scroll_body('page_down')", "Page down", show=False),
        Binding("pageup", "scroll_body('page_up')", "Page up", show=False),
    ]

    DEFAULT_CSS = """
    BottleneckPane { height: 1fr; }
    BottleneckPane #bn-empty { padding: 1 2; color: $text-muted; }
    BottleneckPane #bn-body { padding: 0 1; }
    BottleneckPane #bn-profile-status { width: 100%; margin-bottom: 1; color: $text-muted; }
    BottleneckPane #bn-reason { width: 100%; margin-bottom: 1; display: none; }
    BottleneckPane #bn-report { margin-top: 1; border-top: solid $primary; }
    """

    class ProfileExported(Message):
        """A profile report was written to ``path``."""

        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    def __init__(self, *, steps: int = 20, profile_steps: int = 10, export_dir: Path | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps = steps
        self.profile_steps = profile_steps
        self.export_dir = export_dir
        self.breakdown: Breakdown | None = None  # the live one, of the pod last shown
        self.report: Breakdown | None = None  # the finished profile
        self._key: object = None
        self._gpu_at = float("-inf")
        self._pod: str | None = None
        self._profile: tuple[str, int] | None = None  # (pod name, last step when `p` was pressed)
        self._report_pod = ""
        self._offered: tuple[bool, bool] = (False, False)  # (fix, export) as the footer last showed them

    def fix_offered(self) -> bool:
        """A recommendation of the shown breakdown (or the profile) changes a config key: `f` has a fix."""
        b = self.report or self.breakdown
        return b is not None and any(r.change is not None for r in b.recommendations)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "fix":
            return self.fix_offered()  # no fix: the footer and help do not offer one
        if action == "export":
            return True if self.report is not None else None  # dimmed until a profile is there
        return True

    def _bindings_changed(self) -> None:
        state = (self.fix_offered(), self.report is not None)
        if state != self._offered:
            self._offered = state
            self.refresh_bindings()

    def action_scroll_body(self, how: str) -> None:
        getattr(self.query_one("#bn-body", VerticalScroll), f"scroll_{how}")(animate=False)

    def compose(self) -> ComposeResult:
        yield Static("No pod selected. Press [b]a[/b] to add one.", id="bn-empty")
        with VerticalScroll(id="bn-body"):
            # first: why there is nothing to break down (no run, pod offline), in place of the rest
            yield Static("", id="bn-reason")
            # then the profiling progress: what the user just asked for (p), never below the fold
            yield Label("Press p to profile the next steps.", id="bn-profile-status")
            yield BottleneckView(id="bn-live")
            yield BottleneckView(id="bn-report")

    def on_mount(self) -> None:
        self.query_one("#bn-body").display = False
        self.query_one("#bn-report").display = False
        self._ready = True
        if self._early is not None:  # a snapshot came before the children existed
            self.show(*self._early)
            self._early = None

    # ------------------------------------------------------------------ fed by the App
    _ready = False
    _early: tuple[PodSnapshot, float] | None = None

    def clear(self) -> None:
        self._pod, self._key, self._early = None, None, None
        if not self._ready:
            return
        self.query_one("#bn-empty").display = True
        self.query_one("#bn-body").display = False

    def show(self, snapshot: PodSnapshot, now: float) -> None:
        if not self._ready:
            self._early = (snapshot, now)
            return
        self.query_one("#bn-empty").display = False
        self.query_one("#bn-body").display = True
        name = snapshot.pod.name
        console = 0 if snapshot.metrics else sum(len(s.log) for s in snapshot.history)
        # the pod's status too: a pod gone offline shows its reason at once, not GPU_REFRESH later
        key = (name, snapshot.status, snapshot.metrics_total, len(snapshot.metrics), console)
        if key == self._key and now - self._gpu_at < GPU_REFRESH:
            return
        self._key, self._gpu_at, self._pod = key, now, name
        self.breakdown = analyze_snapshot(snapshot, self.steps)
        title = f"{snapshot.pod.label}" + (" · SIMULATED" if snapshot.pod.simulated else "")
        reason = empty_reason(snapshot, self.breakdown, now)
        box = self.query_one("#bn-reason", Static)
        box.update(Content(plain(reason)))  # the pod's status reason: its text, never markup
        box.display = bool(reason)
        live = self.query_one("#bn-live", BottleneckView)
        live.display = not reason
        if self._profile is None:  # "Press p…" only where a profile can start; a running one keeps its line
            self.query_one("#bn-profile-status", Label).display = not reason
        live.show(self.breakdown, title)  # hidden under a reason, but never another pod's figures
        self._advance_profile(snapshot)
        self._bindings_changed()

    # ------------------------------------------------------------------ profile
    def action_profile(self) -> None:
        if self._pod is None or self.breakdown is None:
            self.notify("Select a pod with a running job first.", severity="warning")
            return
        if not self.breakdown.steps and self.breakdown.source == "none":
            self.notify(f"No step timings from {self._pod} yet: a profile needs a running job.", severity="warning")
            return
        self.query_one("#bn-profile-status", Label).display = True
        start = self.breakdown.last_step or 0
        self._profile = (self._pod, start)
        set_label(
            self.query_one("#bn-profile-status", Label),
            f"Profiling {self._pod}: 0/{self.profile_steps} steps after step {start}…",
        )

    def _advance_profile(self, snapshot: PodSnapshot) -> None:
        if self._profile is None or self._profile[0] != snapshot.pod.name or self.breakdown is None:
            return
        pod, start = self._profile
        done = max(0, (self.breakdown.last_step or 0) - start)
        status = self.query_one("#bn-profile-status", Label)
        if done < self.profile_steps:
            set_label(status, f"Profiling {pod}: {done}/{self.profile_steps} steps after step {start}…")
            return
        self._profile = None
        report = analyze_snapshot(snapshot, self.profile_steps, since_step=start, until_step=start + self.profile_steps)
        self.report, self._report_pod = report, snapshot.pod.label
        view = self.query_one("#bn-report", BottleneckView)
        view.display = True
        view.show(report, f"Profile of {snapshot.pod.label}")
        # the live breakdown above moves on; this line says which steps the profile below is of
        set_label(
            status,
            f"The profile below is of steps {report.first_step}–{report.last_step} (the live "
            "breakdown goes on above it): e exports it as Markdown, p takes a new one.",
        )

    def export_path(self) -> Path:
        report = self.report
        assert report is not None
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in self._report_pod.split(" ")[0])
        name = f"bottleneck-{safe}-steps-{report.first_step}-{report.last_step}.md"
        return (self.export_dir or export_folder()) / name

    def action_export(self) -> None:
        if self.report is None:
            self.notify("No profile yet: press p and wait for the steps.", severity="warning")
            return
        path = self.export_path()
        self.run_worker(
            partial(write_markdown, self.report, path, f"Bottleneck profile — {self._report_pod}"),
            thread=True,
            group="bottleneck-export",
            name="bottleneck-export",
        )

    # ------------------------------------------------------------------ f: verdict -> fix
    def action_fix(self) -> None:
        from app.panes.config import ConfigPane

        b = self.report or self.breakdown
        rec = next((r for r in b.recommendations if r.change is not None), None) if b is not None else None
        if rec is None or rec.change is None:
            self.notify("No recommendation here changes a config key.", severity="warning")
            return
        change = rec.change
        found = self.app.screen_stack[0].query(ConfigPane) if self.app.screen_stack else None
        config = found.first() if found else None
        if config is None or config.path is None or not config.is_mounted:
            self.notify(
                f"No config file is open: open the run's config in the Config pane to apply {change.describe()}.",
                severity="warning",
            )
            return
        current = _current_value(config.editor.text, change.path())
        value = change.resolve(None if current is _UNREADABLE else current)
        if current is _UNREADABLE or value is None:
            why = "does not parse" if current is _UNREADABLE else f"does not set {change.key}"
            self.notify(f"{config.path.name} {why}: set {change.describe()} by hand.", severity="warning")
            return
        from services.config.findings import Edit, Finding, Severity

        finding = Finding(
            id=f"bottleneck.{rec.id}",
            severity=Severity.INFO,
            line=0,
            column=0,
            message=rec.text,
            fix=change.describe(current) + (f" (was {current})" if current is not None else ""),
            path=change.key,
            edit=Edit("set", change.path(), value=value),
        )
        if config.apply_fix(finding) and hasattr(self.app, "action_show_pane"):
            self.app.action_show_pane("config")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "bottleneck-export" or event.state is not WorkerState.SUCCESS:
            return  # failures go to the App's worker error hub
        path = event.worker.result
        if path is None:
            return
        # the whole path, where the user looks (the status line stays; a toast goes)
        set_label(self.query_one("#bn-profile-status", Label), f"Profile written to {path} (p takes a new one).")
        self.notify(f"Profile written to {path}")
        self.post_message(self.ProfileExported(path))


_UNREADABLE = object()


def _current_value(text: str, path: tuple[str, ...]) -> object:
    """The value at ``path`` in TOML ``text`` (None: not set; _UNREADABLE: the text does not parse)."""
    import tomllib

    try:
        node: object = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return _UNREADABLE
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
