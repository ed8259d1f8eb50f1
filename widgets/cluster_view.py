"""A Slurm cluster in the Monitor pane: the user's jobs as a table and a line of node states.

It renders the :class:`services.slurm.models.ClusterView` a pod's snapshot carries (``snapshot.cluster``)
and redraws only when a new look arrived. Pure text helpers below (also used by the fleet view).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label, Static

from services.slurm.health import ENDED, pending_reason
from services.slurm.models import ClusterView, SlurmJob, SlurmNode
from widgets.format import NA, clock_time, duration

NODES_SHOWN = 16  # a bigger cluster: the user's jobs' nodes and the troubled ones by name, the rest counted
OK_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
JOB_COLUMNS = (("id", "Job"), ("name", "Name"), ("state", "State"), ("nodes", "Nodes"),
               ("time", "Elapsed / limit"), ("why", "Why"))
STATE_STYLE = {"RUNNING": "green", "PENDING": "yellow", "COMPLETED": "", "CANCELLED": "dim"}


def words(state: str) -> str:
    """Slurm's ``NODE_FAIL`` as "node fail"."""
    return state.lower().replace("_", " ")


def node_trouble(node: SlurmNode) -> str:
    """What is wrong with a node in a word or two; "" when it is fine."""
    if not node.responding:
        return "DOWN" if node.base_state == "DOWN" and "NOT_RESPONDING" not in node.flags else "NOT RESPONDING"
    if any(flag.startswith("DRAIN") for flag in node.flags) or node.base_state.startswith("DRAIN"):
        return "drained"
    if node.base_state not in OK_STATES:
        return words(node.base_state)
    return ""


def nodes_text(view: ClusterView) -> Text:
    """"Nodes: n1 ok, n2 NOT RESPONDING" (troubles in red); a big cluster names the user's jobs' nodes and the
    troubled ones, and counts the rest."""
    if not view.nodes:
        return Text("")
    mine = {host for job in view.jobs if not job.finished for host in job.nodes}
    named = list(view.nodes) if len(view.nodes) <= NODES_SHOWN else [
        n for n in view.nodes if n.name in mine or node_trouble(n)]
    out = Text("Nodes: ")
    for i, node in enumerate(named):
        if i:
            out.append(", ")
        trouble = node_trouble(node)
        out.append(f"{node.name} ")
        out.append(trouble or "ok", style="bold red" if not node.responding else "yellow" if trouble else "green")
    rest = len(view.nodes) - len(named)  # none of them troubled: those are all named
    if rest:
        out.append(f"{', ' if named else ''}{rest} more ok")
    return out


def job_why(job: SlurmJob) -> str:
    """Why a job waits or how it ended, in words."""
    if job.pending:
        return pending_reason(job.reason)
    if job.state in ENDED:
        return ENDED[job.state][1]
    return ""


def job_time(job: SlurmJob) -> str:
    elapsed = "not started" if job.pending else NA if job.elapsed_s is None else duration(job.elapsed_s)
    limit = "no limit" if job.time_limit_s is None else duration(job.time_limit_s)
    return f"{elapsed} / {limit}"


def job_row(job: SlurmJob) -> tuple[str | Text, ...]:
    nodes = ", ".join(job.nodes) if job.nodes else (job.nodelist or ("—" if job.pending else NA))
    return (job.id, job.name or NA, Text(words(job.state), style=STATE_STYLE.get(job.state, "bold red")), nodes,
            job_time(job), job_why(job))


def empty_text(view: ClusterView, now: float) -> str:
    """What the view says instead of (or above) the table: the error first, else why there is nothing."""
    if view.error:
        since = f" (since {clock_time(view.error_at)})" if view.error_at is not None else ""
        old = (f" Jobs and nodes below are from {duration(now - view.checked_at)} ago."
               if view.checked_at is not None and (view.jobs or view.nodes) else "")
        return f"Slurm did not answer{since}: {view.error}.{old}"
    if view.checked_at is None:
        return "Asking Slurm for your jobs…"
    if not view.jobs:
        return "No Slurm jobs of yours on this cluster (none pending, running or ended in the last minutes)."
    return ""


def summary(view: ClusterView | None) -> str:
    """"3 jobs, 1 node down" for the fleet table ("" before the first look)."""
    if view is None:
        return ""
    if view.error:
        return "Slurm not answering"
    if view.checked_at is None:
        return ""
    jobs = sum(1 for j in view.jobs if not j.finished)
    down = sum(1 for n in view.nodes if not n.responding)
    text = f"{jobs} job{'s' if jobs != 1 else ''}"
    return text + (f", {down} node{'s' if down != 1 else ''} down" if down else "")


class ClusterPanel(Vertical):
    """The cluster part of the Monitor pane: a note (error / empty state), the jobs table, the nodes line."""

    DEFAULT_CSS = """
    ClusterPanel { height: auto; border-top: solid $panel; }
    ClusterPanel #cluster-note { color: $warning; width: 100%; }
    ClusterPanel #cluster-jobs { height: auto; max-height: 12; }
    ClusterPanel #cluster-nodes { width: 100%; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="cluster-note")
        table: DataTable = DataTable(id="cluster-jobs", cursor_type="none", zebra_stripes=True, show_cursor=False)
        for key, label in JOB_COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Label("", id="cluster-nodes")

    def on_mount(self) -> None:
        self._view: ClusterView | None = None
        self._note = None

    def show(self, view: ClusterView, now: float) -> None:
        note = empty_text(view, now)
        box = self.query_one("#cluster-note", Static)
        if note != self._note:
            self._note = note
            box.update(note)
            box.display = bool(note)
        if view is self._view:
            return
        self._view = view
        table = self.query_one("#cluster-jobs", DataTable)
        table.clear()
        for job in view.jobs:
            table.add_row(*job_row(job), key=job.id)
        table.display = bool(view.jobs)
        nodes = self.query_one("#cluster-nodes", Label)
        text = nodes_text(view)
        nodes.update(text)
        nodes.display = bool(text.plain)

    @property
    def rows(self) -> list[tuple[str, ...]]:
        """The jobs table as plain text, row by row (for tests and the help)."""
        table = self.query_one("#cluster-jobs", DataTable)
        return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
