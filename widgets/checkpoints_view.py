"""The Checkpoints pane's view: checkpoints on the pod and in the bucket, the run volume's disk usage
and the running transfer's progress. Plain data in (``CheckpointsModel``), no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Label, Static

from services.backup.manifest import TransferProgress
from services.backup.manifest import BucketCheckpoint, RunSource
from services.models import CheckpointInfo
from widgets.bottleneck_view import bar
from widgets.format import NA, duration, set_label

GIB = 1024**3


def size(value: int | None) -> str:
    if value is None:
        return NA
    if value >= GIB:
        return f"{value / GIB:.1f} GiB"
    return f"{value / 1024**2:.1f} MiB" if value >= 1024**2 else f"{value / 1024:.0f} KiB"


@dataclass(frozen=True)
class CheckpointsModel:
    title: str
    pod_ckpts: tuple[CheckpointInfo, ...] = ()
    bucket: tuple[BucketCheckpoint, ...] | None = None  # None: not listed (yet)
    bucket_status: str = ""  # "s3://b/prefix/", an error, "listing…"
    disk_used: int | None = None
    disk_total: int | None = None
    now: float = 0.0  # pod clock, for ages
    transfer: TransferProgress | None = None
    message: str = ""  # last result or error, one line
    source: RunSource | None = None  # the run on the pod (None: not known: no backup is "this run's")
    # the pod's steps with a verified backup of THAT checkpoint by this run (the pane decides; another
    # run's backup of the same step under a shared prefix never counts)
    backed_up: frozenset[int] = frozenset()


def whose(m: CheckpointsModel, c: BucketCheckpoint) -> str:
    """The bucket step's source: "this run", "run <id> on <pod>" (or "<pod>:<run dir>") or "unknown"."""
    if c.source is None:
        return "unknown"
    if m.source is not None and m.source.owns(c.source, c.step):
        return "this run"
    return f"run {c.source.run_id} on {c.source.pod}" if c.source.run_id else f"{c.source.pod}:{c.source.run_dir}"


def pod_table(m: CheckpointsModel) -> Table:
    verified = m.backed_up
    table = Table(title="On the pod", title_justify="left", expand=False)
    for col in ("step", "size", "complete", "age", "backed up"):
        table.add_column(col, justify="right" if col in ("step", "size", "age") else "left")
    for c in reversed(m.pod_ckpts):
        age = duration(m.now - c.mtime) if c.mtime and m.now else NA
        backed = "verified" if c.step in verified else ("?" if m.bucket is None else "no")
        table.add_row(str(c.step), size(c.bytes), Text("yes", "green") if c.complete else Text("writing", "yellow"),
                      age, Text(backed, "green" if backed == "verified" else "red" if backed == "no" else ""))
    return table


def bucket_table(m: CheckpointsModel) -> Table:
    table = Table(title=f"In the bucket {m.bucket_status}".rstrip(), title_justify="left", expand=False)
    for col in ("step", "size", "stored", "source", "verified"):
        table.add_column(col, justify="right" if col not in ("source", "verified") else "left")
    for c in reversed(m.bucket or ()):
        src = whose(m, c)
        table.add_row(str(c.step), size(c.bytes) if c.bytes else NA, size(c.stored_bytes),
                      Text(src, "" if src == "this run" else "yellow"),
                      Text("verified", "green") if c.verified else
                      Text(c.problems[0] if c.problems else "no", "red"))
    return table


def disk_line(m: CheckpointsModel) -> str:
    if not m.disk_total:
        return "run volume: N/A"
    ckpt = sum(c.bytes or 0 for c in m.pod_ckpts)
    used = m.disk_used or 0
    share = ckpt / m.disk_total
    other = max(0.0, used / m.disk_total - share)
    width = 40
    ck_cells = int(round(share * width))
    other_cells = int(round(other * width))
    drawn = "█" * ck_cells + "▓" * other_cells + "·" * max(0, width - ck_cells - other_cells)
    return (f"run volume [{drawn}] {size(used)} / {size(m.disk_total)} used · "
            f"checkpoints {size(ckpt)} ({100 * share:.0f}%)")


def transfer_line(p: TransferProgress | None) -> str:
    if p is None:
        return ""
    share = p.done / p.total if p.total else 0.0
    eta = f" · ETA {duration(p.eta)}" if p.eta is not None and p.phase in ("upload", "download") else ""
    return (f"{p.action} step {p.step} · {p.phase} {bar(share, 30)} {100 * share:3.0f}% · "
            f"{size(p.done)} / {size(p.total)} · {p.rate / 1e6:.1f} MB/s{eta}")


class CheckpointsView(Widget):
    DEFAULT_CSS = """
    CheckpointsView { height: auto; }
    CheckpointsView #ck-title { text-style: bold; }
    CheckpointsView #ck-transfer { color: $accent; margin-top: 1; }
    CheckpointsView #ck-message { color: $text-muted; }
    CheckpointsView #ck-tables { height: auto; margin-top: 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: object = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("", id="ck-title")
            yield Label("", id="ck-disk")
            yield Label("", id="ck-transfer")
            yield Label("", id="ck-message")
            yield Static("", id="ck-tables")

    def show(self, m: CheckpointsModel) -> None:
        set_label(self.query_one("#ck-title", Label), m.title)
        set_label(self.query_one("#ck-disk", Label), disk_line(m))
        set_label(self.query_one("#ck-transfer", Label), transfer_line(m.transfer))
        set_label(self.query_one("#ck-message", Label), m.message)
        key = (m.pod_ckpts, m.bucket, m.bucket_status, m.source, m.backed_up, int(m.now) // 30)
        if key != self._key:
            self._key = key
            grid = Table.grid(padding=(0, 4))
            grid.add_row(pod_table(m), bucket_table(m))
            self.query_one("#ck-tables", Static).update(grid)
