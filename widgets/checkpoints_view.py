"""The Checkpoints pane's view: checkpoints on the pod and in the bucket, the run volume's disk usage
and the running transfer's progress. Plain data in (``CheckpointsModel``), no I/O.

The two tables sit side by side when the width holds them, one above the other when it does not; a
table that still does not fit drops its low-value columns first (age and sizes), so a header is never
cut to "s…". The pane's reason for an empty or missing part (no run, no bucket) comes first (``notice``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Label, Static

from services.models import CheckpointInfo
from widgets.bottleneck_view import bar
from widgets.columns import content_width, fit_columns

if TYPE_CHECKING:  # names for the annotations: the backup chain is not loaded with the first screen
    from services.backup.manifest import BucketCheckpoint, RunSource, TransferProgress
from widgets.format import NA, duration, set_label

GIB = 1024**3
TABLE_GAP = 4  # between the tables side by side
# kept longest first: which step, can it be resumed from, is it safe in the bucket; sizes and ages go first
POD_COLUMNS = (
    ("step", "step", 9),
    ("size", "size", 6),
    ("complete", "complete", 8),
    ("age", "age", 5),
    ("backed", "backed up", 8),
)
BUCKET_COLUMNS = (
    ("step", "step", 9),
    ("size", "size", 5),
    ("stored", "stored", 4),
    ("source", "source", 7),
    ("verified", "verified", 8),
)
WRAPPING = {"source", "verified"}  # free text: may wrap (at spaces), so they need only their longest word


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
    notice: str = ""  # the real reason a part is empty or missing (no run, no bucket) and what to do; first
    show_bucket: bool = True  # False: no bucket to show (not set up, or its listing failed: the notice says)
    show_pod: bool = True  # False: no run on the pod, so no table of its checkpoints
    backups: bool = True  # False: no bucket set up, so no "backed up" column


def whose(m: CheckpointsModel, c: BucketCheckpoint) -> str:
    """The bucket step's source: "this run", "run <id> on <pod>" (or "<pod>:<run dir>") or "unknown"."""
    if c.source is None:
        return "unknown"
    if m.source is not None and m.source.owns(c.source, c.step):
        return "this run"
    return f"run {c.source.run_id} on {c.source.pod}" if c.source.run_id else f"{c.source.pod}:{c.source.run_dir}"


def _pod_rows(m: CheckpointsModel) -> list[list[str | Text]]:
    rows: list[list[str | Text]] = []
    for c in reversed(m.pod_ckpts):
        age = duration(m.now - c.mtime) if c.mtime and m.now else NA
        backed = "verified" if c.step in m.backed_up else ("?" if m.bucket is None else "no")
        rows.append(
            [
                str(c.step),
                size(c.bytes),
                Text("yes", "green") if c.complete else Text("writing", "yellow"),
                age,
                Text(backed, "green" if backed == "verified" else "red" if backed == "no" else ""),
            ]
        )
    return rows


def _bucket_rows(m: CheckpointsModel) -> list[list[str | Text]]:
    rows: list[list[str | Text]] = []
    for c in reversed(m.bucket or ()):
        src = whose(m, c)
        rows.append(
            [
                str(c.step),
                size(c.bytes) if c.bytes else NA,
                size(c.stored_bytes),
                Text(src, "" if src == "this run" else "yellow"),
                Text("verified", "green") if c.verified else Text(c.problems[0] if c.problems else "no", "red"),
            ]
        )
    return rows


def _need(key: str, label: str, cells: list[str | Text]) -> int:
    if key in WRAPPING:
        words = [w for c in cells for w in str(c).split()]
        return max([len(label), *(min(len(w), 16) for w in words)])
    return content_width(label, cells)


def _table(
    title: str, columns: tuple[tuple[str, str, int], ...], rows: list[list[str | Text]], width: int | None
) -> tuple[Table, int]:
    """A table of the columns that fit ``width`` (all when None) and the width it needs."""
    keys = [key for key, _, _ in columns]
    labels = {key: label for key, label, _ in columns}
    priority = {key: p for key, _, p in columns}
    needs = {key: _need(key, labels[key], [r[i] for r in rows]) for i, key in enumerate(keys)}
    kept = fit_columns(keys, needs, priority, width if width is not None else 10**6, gap=3, edge=1)
    table = Table(title=title, title_justify="left", expand=False)
    for key in kept:
        table.add_column(
            labels[key],
            justify="right" if key in ("step", "size", "stored", "age") else "left",
            no_wrap=key not in WRAPPING,
        )
    for row in rows:
        table.add_row(*(row[keys.index(k)] for k in kept))
    return table, sum(needs[k] + 3 for k in kept) + 1


def tables(m: CheckpointsModel, width: int) -> Table | Group | str:
    """Side by side when both fit ``width``, else one above the other, each fitted to ``width``."""
    shown = []
    if m.show_pod:
        columns = POD_COLUMNS if m.backups else POD_COLUMNS[:-1]
        rows = [row[: len(columns)] for row in _pod_rows(m)]
        shown.append(("On the pod", columns, rows))
    if m.show_bucket:
        title = "In the bucket" + (f" {m.bucket_status}" if m.bucket_status else "")
        shown.append((title, BUCKET_COLUMNS, _bucket_rows(m)))
    if not shown:
        return ""
    full = [_table(title, cols, rows, None) for title, cols, rows in shown]
    titles_fit = all(len(title) <= need for (title, _, _), (_, need) in zip(shown, full))
    if len(full) == 2 and titles_fit and sum(need for _, need in full) + TABLE_GAP <= width:
        grid = Table.grid(padding=(0, TABLE_GAP))
        grid.add_row(full[0][0], full[1][0])
        return grid
    fitted = [_table(title, cols, rows, width)[0] for title, cols, rows in shown]
    return Group(*(part for t in fitted for part in (t, Text(""))))


def disk_line(m: CheckpointsModel, width: int = 40) -> str:
    if not m.disk_total:
        return "run volume: N/A"
    ckpt = sum(c.bytes or 0 for c in m.pod_ckpts)
    used = m.disk_used or 0
    share = ckpt / m.disk_total
    other = max(0.0, used / m.disk_total - share)
    ck_cells = int(round(share * width))
    other_cells = int(round(other * width))
    drawn = "█" * ck_cells + "▓" * other_cells + "·" * max(0, width - ck_cells - other_cells)
    return (
        f"run volume [{drawn}] {size(used)} / {size(m.disk_total)} used · checkpoints {size(ckpt)} ({100 * share:.0f}%)"
    )


def transfer_line(p: TransferProgress | None, width: int = 30) -> str:
    if p is None:
        return ""
    share = p.done / p.total if p.total else 0.0
    eta = f" · ETA {duration(p.eta)}" if p.eta is not None and p.phase in ("upload", "download") else ""
    return (
        f"{p.action} step {p.step} · {p.phase} {bar(share, width)} {100 * share:3.0f}% · "
        f"{size(p.done)} / {size(p.total)} · {p.rate / 1e6:.1f} MB/s{eta}"
    )


class CheckpointsView(Widget):
    DEFAULT_CSS = """
    CheckpointsView { height: auto; }
    CheckpointsView > Vertical { height: auto; }
    CheckpointsView Label { width: 100%; }
    CheckpointsView #ck-title { text-style: bold; }
    CheckpointsView #ck-notice { color: $warning; margin-top: 1; }
    CheckpointsView #ck-transfer { color: $accent; margin-top: 1; }
    CheckpointsView #ck-message { color: $text-muted; }
    CheckpointsView #ck-tables { height: auto; margin-top: 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: object = None
        self._model: CheckpointsModel | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            for wid in ("ck-title", "ck-notice", "ck-disk", "ck-transfer", "ck-message"):
                yield Label("", id=wid, markup=False)  # file names, errors and "[backup]" are text, not markup
            yield Static("", id="ck-tables")

    def _width(self) -> int:
        return max(20, (self.size.width or self.app.size.width) - 2)  # 2: a vertical scrollbar, when it shows

    def on_resize(self, event: events.Resize) -> None:
        if self._model is not None:
            self.show(self._model)

    def show(self, m: CheckpointsModel) -> None:
        self._model = m
        width = self._width()
        narrow = width < 100
        set_label(self.query_one("#ck-title", Label), m.title)
        notice = self.query_one("#ck-notice", Label)
        set_label(notice, m.notice)
        notice.display = bool(m.notice)
        set_label(self.query_one("#ck-disk", Label), disk_line(m, 20 if narrow else 40))
        for wid, text in (
            ("#ck-transfer", transfer_line(m.transfer, 16 if narrow else 30)),
            ("#ck-message", m.message),
        ):
            label = self.query_one(wid, Label)
            set_label(label, text)
            label.display = bool(text)
        key = (
            m.pod_ckpts,
            m.bucket,
            m.bucket_status,
            m.source,
            m.backed_up,
            int(m.now) // 30,
            m.show_pod,
            m.show_bucket,
            m.backups,
            width,
        )
        if key != self._key:
            self._key = key
            self.query_one("#ck-tables", Static).update(tables(m, width))
