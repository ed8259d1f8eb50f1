"""The Rollouts pane: the selected pod's run's episodes, a step at a time, and one episode opened.

The list is the newest step's episodes (``services.monitor.rollouts.RolloutReader.list``: read on the pod, only
the summaries come back), loaded when the pod or its run changes and on ``g``; ``,``/``.`` go to the older /
newer step. Filters (errors ``e``, truncated ``u``, an env ``v``, a reward bound ``b``) and sorting (``s``) act
on the loaded list; ``/`` searches the step's text on the pod (a regex; only the matching episodes' summaries
come back). ``enter`` opens an episode (its text fetched then, bounded), where ``z`` unfolds long texts, ``/``
finds within it (``n`` the next match) and ``escape`` goes back. ``x`` exports the open episode, or the step,
to a file the user names. Each pod's connection is opened by a worker and kept while the pane lives.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widget import Widget
from textual.widgets import DataTable, Input, Static

from services.models import PodSnapshot
from services.monitor.rollouts import EpisodeSummary, EpisodeView, Filters, StepListing
from services.text import plain
from widgets.rollouts_view import COLUMNS, SORTS, episode_blocks, fmt, histogram, row, sort_key, trend

REFRESH = 10.0  # seconds between reads of the newest step while it shows


class RolloutsPane(Widget):
    # The footer shows what the keys do where the user is: the list's keys over the list, the episode's keys
    # over an open episode (check_action hides the others; a key bound twice runs its first allowed binding).
    BINDINGS = [
        Binding("enter", "open", "Open episode", id="rollouts.open", show=False),
        Binding("escape", "back", "Back", id="rollouts.back", key_display="esc"),
        Binding("slash", "search", "Search", id="rollouts.search", key_display="/"),
        Binding("slash", "find", "Find", id="rollouts.find", key_display="/"),
        Binding("e", "flip('errors')", "Errors only", id="rollouts.errors"),
        Binding("u", "flip('truncated')", "Truncated only", id="rollouts.truncated", show=False),
        Binding("v", "env", "Env", id="rollouts.env", show=False),
        Binding("b", "reward", "Reward bound", id="rollouts.reward", show=False),
        Binding("s", "sort", "Sort", id="rollouts.sort"),
        Binding("t", "kind", "Train/eval", id="rollouts.kind", show=False),
        Binding("comma", "step(-1)", "Older step", id="rollouts.older", key_display=","),
        Binding("full_stop", "step(1)", "Newer step", id="rollouts.newer", key_display="."),
        Binding("g", "reload", "Reload", id="rollouts.reload", show=False),
        Binding("n", "next_match", "Next match", id="rollouts.next"),
        Binding("z", "fold", "Fold/unfold", id="rollouts.fold"),
        Binding("x", "export", "Export", id="rollouts.export", show=False),
        Binding("x", "export_episode", "Export", id="rollouts.export-episode"),
    ]
    EPISODE_ACTIONS = frozenset({"back", "find", "next_match", "fold", "export_episode"})
    LIST_ACTIONS = frozenset({"open", "search", "flip", "env", "reward", "sort", "step", "reload", "export", "kind"})

    DEFAULT_CSS = """
    RolloutsPane { height: 1fr; }
    RolloutsPane #ro-title { height: 1; padding: 0 1; text-style: bold; }
    RolloutsPane #ro-dist { height: 1; padding: 0 1; color: $text-muted; }
    RolloutsPane #ro-table { height: 1fr; }
    RolloutsPane #ro-episode { height: 1fr; display: none; padding: 0 1; }
    RolloutsPane #ro-episode Static { margin-bottom: 1; }
    RolloutsPane #ro-episode Static.-hit { background: $warning 30%; }
    RolloutsPane #ro-input { display: none; }
    RolloutsPane #ro-status { height: 1; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot: PodSnapshot | None = None
        self.listing: StepListing | None = None
        self.view: EpisodeView | None = None
        self.grep: str | None = None
        self.errors = self.truncated = False
        self.kind = "train"  # the episodes listed: the training rollouts or the evals' (t)
        self.env: str | None = None
        self.reward_bound: tuple[str, float] | None = None  # ("<", 0.5)
        self.sort = SORTS[0]
        self.folded = True
        self.means: dict[tuple[str, str, int], float | None] = {}  # (pod, run, step) -> mean reward
        self.shown: list[EpisodeSummary] = []
        self.hits: list[int] = []
        self.hit = -1
        self._key: tuple[str, str] | None = None  # (pod, run dir) listed
        self._conns: dict[str, Any] = {}
        self._mode = ""  # what the input line asks: search, find, export, reward
        self.loading = False
        self._following = True  # the newest step is shown: it is read again every REFRESH s
        self._loaded_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static("No pod selected.", id="ro-title", markup=False)
        yield Static("", id="ro-dist", markup=False)
        table: DataTable[Any] = DataTable(id="ro-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield VerticalScroll(id="ro-episode")
        yield Input(id="ro-input")
        yield Static("", id="ro-status", markup=False)

    def on_mount(self) -> None:
        self.query_one("#ro-table", DataTable).add_columns(*COLUMNS)
        if self.snapshot is not None:
            self.show(self.snapshot, 0.0)

    async def on_unmount(self) -> None:
        from services.monitor.rollouts import stop_reader

        for conn in list(self._conns.values()):
            await stop_reader(conn)
            with contextlib.suppress(Exception):
                await conn.close()
        self._conns.clear()

    # ------------------------------------------------------------------ fed by the App
    def clear(self) -> None:
        self.snapshot = None
        if self.is_mounted:
            self._say_title("No pod selected.")

    def show(self, snapshot: PodSnapshot, now: float) -> None:
        self.snapshot = snapshot
        if not self.is_mounted:
            return
        run_dir = snapshot.pod.run_dir
        key = (snapshot.pod.name, run_dir or "")
        if key == self._key:
            if (
                self._following
                and self.view is None
                and not self.grep
                and not self.loading
                and not self._mode
                and now - self._loaded_at > REFRESH
            ):
                self._loaded_at = now
                self._load(None)  # the newest step, as it grows and new steps come
            return
        self._key, self._loaded_at = key, now
        self.listing, self.view, self.grep = None, None, None
        self.refresh_bindings()  # the footer: the list's keys or the episode's
        if not run_dir:
            self._say_title(f"No run on {snapshot.pod.name} yet: its episodes show here once one runs.")
            self._fill()
            return
        self._load(None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.EPISODE_ACTIONS:
            return self.view is not None or (action == "back" and bool(self.grep))
        if action in self.LIST_ACTIONS:
            return self.view is None
        return True

    # ------------------------------------------------------------------ loading
    def _say_title(self, text: str) -> None:
        self.query_one("#ro-title", Static).update(Content(plain(text, oneline=True)))

    def _status(self, text: str) -> None:
        self.query_one("#ro-status", Static).update(Content(plain(text, oneline=True)))

    async def _conn(self, pod: Any) -> Any:
        conn = self._conns.get(pod.name)
        if conn is None or conn.pod != pod:
            from services.connect import open_connection

            conn = open_connection(pod)
            await conn.connect()
            self._conns[pod.name] = conn
        return conn

    async def _drop(self, name: str) -> None:
        conn = self._conns.pop(name, None)
        if conn is not None:
            from services.monitor.rollouts import stop_reader

            await stop_reader(conn)
            with contextlib.suppress(Exception):
                await conn.close()

    def _load(self, step: int | None) -> None:
        snap = self.snapshot
        if snap is None or not snap.pod.run_dir:
            return
        self.loading = True
        self._following = step is None or bool(self.listing and self.listing.steps and step >= self.listing.steps[-1])
        self._status(f"reading step {step if step is not None else '(newest)'} on {snap.pod.name}…")
        self.run_worker(self._list(snap.pod, step, self.grep, self.kind), group="rollouts-list", exclusive=True)

    async def _list(self, pod: Any, step: int | None, grep: str | None, kind: str = "train") -> None:
        from services.errors import PrimeTrainError
        from services.monitor.rollouts import RolloutReader

        try:
            conn = await self._conn(pod)
            listing = await RolloutReader(conn, pod.run_dir).list_step(
                Filters(step=step, kind=kind, grep=grep, ignore_case=True)
            )
        except (PrimeTrainError, OSError, TimeoutError) as exc:
            await self._drop(pod.name)
            self.loading = False
            if self.snapshot is not None and self.snapshot.pod.name == pod.name:
                if self.listing is None:  # else the list shown stays, the reason below it
                    self._fill()
                    self._say_title(f"{pod.name}: no episodes to show")
                self._status(str(exc))
            return
        self.loading = False
        if self.snapshot is None or self.snapshot.pod.name != pod.name:
            return
        self.listing = listing
        if not grep:
            rewards = [e.reward for e in listing.episodes if e.reward is not None]
            self.means[(pod.name, pod.run_dir, listing.step)] = sum(rewards) / len(rewards) if rewards else None
        self._fill()
        self._status(
            "enter opens · / searches the step on the pod · , . older/newer step · e u v b s filter/sort"
            if not grep
            else f"search {grep!r}: {listing.matched} episodes match · g clears"
        )

    # ------------------------------------------------------------------ the list
    def _visible(self) -> list[EpisodeSummary]:
        eps = list(self.listing.episodes) if self.listing else []
        if self.errors:
            eps = [e for e in eps if e.error or not e.ok]
        if self.truncated:
            eps = [e for e in eps if e.truncated]
        if self.env:
            eps = [e for e in eps if e.env == self.env]
        if self.reward_bound:
            op, v = self.reward_bound
            eps = [e for e in eps if e.reward is not None and (e.reward < v if op == "<" else e.reward > v)]
        key = sort_key(self.sort)
        return sorted(eps, key=key) if key else eps

    def _fill(self) -> None:
        table = self.query_one("#ro-table", DataTable)
        was = self.shown[table.cursor_row].id if self.shown and 0 <= table.cursor_row < len(self.shown) else None
        table.clear()
        self.shown = self._visible()
        for e in self.shown:
            table.add_row(*row(e))
        ids = [e.id for e in self.shown]
        if was in ids:  # the cursor stays on its episode through a reload or a new sort
            table.move_cursor(row=ids.index(was), animate=False)
        lst, snap = self.listing, self.snapshot
        if lst is None or snap is None:
            self.query_one("#ro-dist", Static).update("")
            return
        filters = [f for f, on in (("errors", self.errors), ("truncated", self.truncated)) if on]
        filters += [f"env {self.env}"] if self.env else []
        filters += [f"reward {self.reward_bound[0]} {self.reward_bound[1]:g}"] if self.reward_bound else []
        filters += [f"search {self.grep!r}"] if self.grep else []
        self._say_title(
            f"{snap.pod.label} · step {lst.step} ({lst.kind}/{lst.subset}) · {len(self.shown)} of "
            f"{lst.total} episodes"
            + (f" · {', '.join(filters)}" if filters else "")
            + (f" · sort {self.sort}" if self.sort != SORTS[0] else "")
            + (" · writing" if lst.partial else "")
        )
        bars, lo, hi = histogram([e.reward for e in self.shown if e.reward is not None])
        steps = lst.steps[-12:]
        means = trend([self.means.get((snap.pod.name, snap.pod.run_dir or "", s)) for s in steps])
        self.query_one("#ro-dist", Static).update(
            Content(
                (f"reward {fmt(lo)} {bars} {fmt(hi)}" if bars else "no rewards")
                + (f" · mean by step {steps[0]}–{steps[-1]} {means}" if means.strip() and len(steps) > 1 else "")
            )
        )

    def action_flip(self, what: str) -> None:
        setattr(self, what, not getattr(self, what))
        self._fill()

    def action_env(self) -> None:
        envs = sorted({e.env for e in (self.listing.episodes if self.listing else ()) if e.env})
        cycle = [None, *envs]
        self.env = cycle[(cycle.index(self.env) + 1) % len(cycle)] if self.env in cycle else None
        self._fill()

    def action_kind(self) -> None:
        """Train or eval episodes (prime-rl writes both under rollouts/step_N/): the newest step of the other."""
        self.kind = "eval" if self.kind == "train" else "train"
        self.listing = None
        self._load(None)

    def action_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self._fill()

    def action_step(self, delta: int) -> None:
        lst = self.listing
        if lst is None or not lst.steps or self.view is not None:
            return
        older = [s for s in lst.steps if s < lst.step]
        newer = [s for s in lst.steps if s > lst.step]
        target = (older[-1] if older else None) if delta < 0 else (newer[0] if newer else None)
        if target is None:
            self._status("no older step with episodes" if delta < 0 else "this is the newest step")
            return
        self._load(target)

    def action_reload(self) -> None:
        self.grep = None
        self.refresh_bindings()  # the footer: the list's keys or the episode's
        self._load(self.listing.step if self.listing else None)

    # ------------------------------------------------------------------ the input line
    def _ask(self, mode: str, placeholder: str, value: str = "") -> None:
        self._mode = mode
        box = self.query_one("#ro-input", Input)
        box.placeholder, box.value, box.display = placeholder, value, True
        box.focus()

    def action_find(self) -> None:
        if self.view is not None:
            self._ask("find", "find in this episode (a regex; enter)")

    def action_search(self) -> None:
        if self.view is not None:
            self.action_find()
        elif self.listing is not None:
            self._ask("search", f"search step {self.listing.step} on the pod (a regex, any case; enter)")

    def action_reward(self) -> None:
        self._ask("reward", "reward bound: <0.5 or >0.8 (empty: none)")

    def action_export(self) -> None:
        snap = self.snapshot
        if snap is None or self.listing is None:
            return
        what = f"episode-{self.view.summary.id}" if self.view else f"step-{self.listing.step}"
        self._ask("export", "write to (.md Markdown, .jsonl JSON lines)", f"~/{snap.pod.name}-{what}.md")

    def action_export_episode(self) -> None:
        self.action_export()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        box = self.query_one("#ro-input", Input)
        box.display = False
        value, mode = event.value.strip(), self._mode
        self._mode = ""
        self._focus_body()
        if mode == "search":
            if value:
                try:
                    re.compile(value)
                except re.error as exc:
                    self._status(f"not a regular expression: {exc}")
                    return
            self.grep = value or None
            self.refresh_bindings()  # the footer: the list's keys or the episode's
            self._load(self.listing.step if self.listing else None)
        elif mode == "reward":
            m = re.fullmatch(r"([<>])\s*(-?[0-9.]+)", value)
            if value and m is None:
                self._status("a reward bound reads <0.5 or >0.8")
                return
            self.reward_bound = (m.group(1), float(m.group(2))) if m else None
            self._fill()
        elif mode == "find":
            self._find(value)
        elif mode == "export" and value:
            self._export(value)

    def on_key(self, event: Any) -> None:
        if event.key == "escape" and self._mode:
            event.stop()
            self._mode = ""
            self.query_one("#ro-input", Input).display = False
            self._focus_body()

    def _focus_body(self) -> None:
        (self.query_one("#ro-episode") if self.view is not None else self.query_one("#ro-table")).focus()

    # ------------------------------------------------------------------ one episode
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        snap = self.snapshot
        table = self.query_one("#ro-table", DataTable)
        if snap is None or self.view is not None or not self.shown or not 0 <= table.cursor_row < len(self.shown):
            return
        e = self.shown[table.cursor_row]
        self._status(f"reading episode {e.id}…")
        self.run_worker(self._episode(snap.pod, e), group="rollouts-episode", exclusive=True)

    async def _episode(self, pod: Any, e: EpisodeSummary) -> None:
        from services.errors import PrimeTrainError
        from services.monitor.rollouts import RolloutReader

        try:
            conn = await self._conn(pod)
            view = await RolloutReader(conn, pod.run_dir).episode(e.id, e.step, e.kind, e.subset, offset=e.offset)
        except (PrimeTrainError, OSError, TimeoutError) as exc:
            await self._drop(pod.name)
            self._status(str(exc))
            return
        self.view = view
        self.refresh_bindings()  # the footer: the list's keys or the episode's
        await self._draw_episode()
        self.query_one("#ro-table").display = False
        body = self.query_one("#ro-episode", VerticalScroll)
        body.display = True
        body.focus()
        self._status("escape back · / finds · n next match · z unfolds · x exports")

    async def _draw_episode(self) -> None:
        body = self.query_one("#ro-episode", VerticalScroll)
        await body.remove_children()
        if self.view is None:
            return
        self.blocks = episode_blocks(self.view, self.folded)
        await body.mount_all([Static(c, markup=False) for _t, c in self.blocks])
        self.hits, self.hit = [], -1

    def action_fold(self) -> None:
        if self.view is not None:
            self.folded = not self.folded
            self.run_worker(self._draw_episode(), group="rollouts-draw", exclusive=True)

    def _find(self, pattern: str) -> None:
        if self.view is None or not pattern:
            return
        try:
            rx = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            self._status(f"not a regular expression: {exc}")
            return
        if self.folded:  # a match in a folded part must show
            self.folded = False
            self.blocks = episode_blocks(self.view, False)
            body = self.query_one("#ro-episode", VerticalScroll)
            for w, (_t, c) in zip(body.query(Static), self.blocks):
                w.update(c)
        self.hits = [i for i, (text, _c) in enumerate(self.blocks) if rx.search(text)]
        self.hit = -1
        if not self.hits:
            self._status(f"no match for {pattern!r}")
            return
        self.action_next_match()

    def action_next_match(self) -> None:
        if not self.hits:
            return
        statics = list(self.query_one("#ro-episode", VerticalScroll).query(Static))
        for w in statics:
            w.remove_class("-hit")
        self.hit = (self.hit + 1) % len(self.hits)
        target = statics[self.hits[self.hit]]
        target.add_class("-hit")
        target.scroll_visible(animate=False, top=True)
        self._status(f"match {self.hit + 1} of {len(self.hits)} · n next")

    def action_back(self) -> None:
        if self.view is None:
            if self.grep:
                self.action_reload()
            return
        self.view = None
        self.refresh_bindings()  # the footer: the list's keys or the episode's
        self.query_one("#ro-episode").display = False
        table = self.query_one("#ro-table", DataTable)
        table.display = True
        table.focus()
        self._status("enter opens · / searches the step on the pod · , . older/newer step · e u v b s filter/sort")

    def _export(self, path: str) -> None:
        snap, lst = self.snapshot, self.listing
        if snap is None or lst is None:
            return
        self.run_worker(self._write(snap.pod, lst, self.view, path), group="rollouts-export")

    async def _write(self, pod: Any, lst: StepListing, view: EpisodeView | None, path: str) -> None:
        import asyncio

        from services.errors import PrimeTrainError
        from services.monitor.rollouts import RolloutReader, export

        try:
            views = (
                [view]
                if view is not None
                else await RolloutReader(await self._conn(pod), pod.run_dir).dump(lst.step, lst.kind, lst.subset)
            )
            where, n = await asyncio.to_thread(export, views, path)
        except (PrimeTrainError, OSError) as exc:
            self._status(f"not exported: {getattr(exc, 'strerror', None) or exc}")
            return
        self._status(f"wrote {n} episode{'s' if n != 1 else ''} to {where}")
        self.app.notify(f"wrote {n} episode{'s' if n != 1 else ''} to {where}", title="Rollouts")

    blocks: list[tuple[str, Content]] = []
