"""A Slurm cluster in the Monitor pane: the user's jobs as a table, each running job's GPUs node by node
(with the prime-rl roles running there) and a line of node states.

It renders the :class:`services.slurm.models.ClusterView` a pod's snapshot carries (``snapshot.cluster``)
and redraws only when a new look arrived. Pure text helpers below (also used by the fleet view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Label, Static

from widgets.format import GIB, NA, clock_time, duration

# Slurm's models and health words only where a Slurm pod's look is drawn: every Monitor pane imports this
# module, and they cost ~7 ms of dataclass creation before the first screen of a pod that is not Slurm
if TYPE_CHECKING:
    from textual.widgets import DataTable

    from services.models import GpuSample
    from services.slurm.models import ClusterView, JobGpus, NodeGpus, SlurmJob, SlurmNode

NODES_SHOWN = 16  # a bigger cluster: the user's jobs' nodes and the troubled ones by name, the rest counted
OK_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
JOB_COLUMNS = (
    ("id", "Job"),
    ("name", "Name"),
    ("state", "State"),
    ("nodes", "Nodes"),
    ("time", "Elapsed / limit"),
    ("why", "Why"),
)
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
    """ "Nodes: n1 ok, n2 NOT RESPONDING" (troubles in red); a big cluster names the user's jobs' nodes and the
    troubled ones, and counts the rest."""
    if not view.nodes:
        return Text("")
    mine = {host for job in view.jobs if not job.finished for host in job.nodes}
    named = (
        list(view.nodes)
        if len(view.nodes) <= NODES_SHOWN
        else [n for n in view.nodes if n.name in mine or node_trouble(n)]
    )
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
    from services.slurm.health import ENDED, pending_reason

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
    # Text, not str: a DataTable reads a str cell as markup, and a job name is the user's or the cluster's text
    return (
        Text(job.id),
        Text(job.name or NA),
        Text(words(job.state), style=STATE_STYLE.get(job.state, "bold red")),
        Text(nodes),
        job_time(job),
        Text(job_why(job)),
    )


SHORT_ROLES = {"inference": "infer", "orchestrator": "orch", "trainer": "train"}


def gpus_figures(gpus: tuple[GpuSample, ...], lagging: bool = True) -> str:
    """ "2 GPUs 87% 122/159 GiB 75°C 1255 W": mean use (and, with ``lagging``, the lowest when one lags far
    behind), memory used / total, the hottest GPU and the power drawn, over the node's GPUs."""
    n = len(gpus)
    parts = [f"{n} GPU{'s' if n != 1 else ''}"]
    utils = [g.util for g in gpus if g.util is not None]
    if utils:
        mean = sum(utils) / len(utils)
        parts.append(f"{mean:.0f}%" + (f" (min {min(utils):.0f}%)" if lagging and mean - min(utils) >= 30 else ""))
    used = [g.mem_used for g in gpus if g.mem_used is not None]
    total = [g.mem_total for g in gpus if g.mem_total is not None]
    if used or total:
        parts.append(
            f"{sum(used) / GIB:.0f}/{sum(total) / GIB:.0f} GiB"
            if used and total
            else f"{sum(used) / GIB:.0f} GiB used"
            if used
            else f"{sum(total) / GIB:.0f} GiB"
        )
    temps = [g.temp_c for g in gpus if g.temp_c is not None]
    if temps:
        parts.append(f"{max(temps):.0f}°C")
    power = [g.power_w for g in gpus if g.power_w is not None]
    if power:
        parts.append(f"{sum(power):.0f} W")
    return " ".join(parts)


def node_line(node: NodeGpus, width: int | None = None) -> Text:
    """ "n1: trainer · 2 GPUs 87% 122/159 GiB 75°C 1255 W", or the node's error (the reason first). Where it
    would not fit ``width`` the lowest GPU's use is left out, then the roles are shortened ("orch", "train")."""
    if node.error:
        roles = ", ".join(node.roles)
        return Text(f"  {node.node} ({roles}): {node.error}" if roles else f"  {node.error}", style="yellow")
    variants = [
        (", ".join(node.roles), True),
        (", ".join(node.roles), False),
        ("+".join(SHORT_ROLES.get(r, r) for r in node.roles), False),
    ]
    for roles, lagging in variants:
        figures = gpus_figures(node.gpus, lagging)
        if width is None or len(f"  {node.node}: {roles} · {figures}") <= width:
            break
    out = Text(f"  {node.node}: ")
    if roles:
        out.append(roles, style="bold").append(" · ")
    return out.append(figures)


def gpus_text(view: ClusterView, width: int | None = None) -> Text:
    """Each running job's GPUs, a header line per job and a line per node, fitted to ``width`` where it can
    be ("" with no running job)."""
    out = Text()  # a line too long for the pane (a long error) wraps: its reason is read whole
    for job in view.jobs:
        if job.state != "RUNNING" or not job.nodes:
            continue
        got: JobGpus | None = view.gpus_of(job.id)
        if out:
            out.append("\n")
        if got is None:
            out.append(f"Job {job.id}: reading its nodes' GPUs…", style="dim")
        elif got.error:
            out.append(f"Job {job.id}: GPUs not read: {got.error}", style="yellow")
        else:
            out.append(f"Job {job.id} GPUs" + (f" ({job.name})" if job.name else "") + ":")
            for node in got.nodes:
                out.append("\n").append_text(node_line(node, width))
    return out


def empty_text(view: ClusterView, now: float) -> str:
    """What the view says instead of (or above) the table: the error first, else why there is nothing."""
    if view.error:
        since = f" (since {clock_time(view.error_at)})" if view.error_at is not None else ""
        old = (
            f" Jobs and nodes below are from {duration(now - view.checked_at)} ago."
            if view.checked_at is not None and (view.jobs or view.nodes)
            else ""
        )
        return f"Slurm did not answer{since}: {view.error}.{old}"
    if view.checked_at is None:
        return "Asking Slurm for your jobs…"
    if not view.jobs:
        return "No Slurm jobs of yours on this cluster (none pending, running or ended in the last minutes)."
    return ""


def job_utils(view: ClusterView | None) -> list[float]:
    """The utilisation of every GPU read on the nodes of the cluster's running jobs (for the fleet table)."""
    if view is None:
        return []
    return [g.util for job in view.gpus for node in job.nodes for g in node.gpus if g.util is not None]


def summary(view: ClusterView | None) -> str:
    """ "3 jobs, 1 node down" for the fleet table ("" before the first look)."""
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
    ClusterPanel #cluster-gpus { width: 100%; height: auto; max-height: 18; }
    ClusterPanel #cluster-nodes { width: 100%; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="cluster-note")
        yield Static("", id="cluster-gpus")
        yield Label("", id="cluster-nodes")

    def on_mount(self) -> None:
        self._view: ClusterView | None = None
        self._note: str | None = None
        self._jobs: DataTable | None = None

    def _table(self) -> DataTable:
        """The jobs table, made for the first cluster shown: the panel sits hidden in every Monitor pane, and a
        DataTable (its module, its CSS, its scrollbars) was ~4 ms of every start for pods that have no cluster."""
        if self._jobs is None:
            from textual.widgets import DataTable

            table: DataTable = DataTable(id="cluster-jobs", cursor_type="none", zebra_stripes=True, show_cursor=False)
            for key, label in JOB_COLUMNS:
                table.add_column(label, key=key)
            self.mount(table, after="#cluster-note")
            self._jobs = table
        return self._jobs

    def show(self, view: ClusterView, now: float) -> None:
        note = empty_text(view, now)
        box = self.query_one("#cluster-note", Static)
        if note != self._note:
            self._note = note
            box.update(Content(note))  # Slurm's error, never markup
            box.display = bool(note)
        if view is self._view:
            return
        self._view = view
        table = self._table()
        table.clear()
        for job in view.jobs:
            table.add_row(*job_row(job), key=job.id)
        table.display = bool(view.jobs)
        self._show_gpus()
        nodes = self.query_one("#cluster-nodes", Label)
        text = nodes_text(view)
        nodes.update(text)
        nodes.display = bool(text.plain)

    def _show_gpus(self) -> None:
        box = self.query_one("#cluster-gpus", Static)
        if self._view is None:
            return
        width = box.content_region.width or self.content_region.width or None
        lines = gpus_text(self._view, width)
        box.update(lines)
        box.display = bool(lines.plain)

    def on_resize(self) -> None:
        self._show_gpus()

    @property
    def rows(self) -> list[tuple[str, ...]]:
        """The jobs table as plain text, row by row (for tests and the help)."""
        table = self._jobs
        return [] if table is None else [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
