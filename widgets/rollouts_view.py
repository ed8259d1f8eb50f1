"""The Rollouts pane drawn: an episode's row, a step's reward distribution, the per-step means, and one
episode as lines (its turns, tool calls, rewards, timings), long texts folded. Plain data in, Content out:
the text is the model's, never read as markup."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.content import Content

if TYPE_CHECKING:
    from services.monitor.rollouts import EpisodeSummary, EpisodeView

BLOCKS = "▁▂▃▄▅▆▇█"
FOLD_LINES = 6  # lines of a folded text
SORTS = ("file", "reward ↑", "reward ↓", "tool time ↓")


def fmt(v: float | None, digits: int = 3) -> str:
    return "N/A" if v is None else f"{v:.{digits}g}"


def histogram(values: Sequence[float], bins: int = 10) -> tuple[str, float, float]:
    """A sparkline of ``values``' distribution over ``bins`` equal bins between their min and max: (bars,
    low, high); ("", 0, 0) without values."""
    if not values:
        return "", 0.0, 0.0
    lo, hi = min(values), max(values)
    counts = [0] * bins
    for v in values:
        i = bins - 1 if hi == lo else min(bins - 1, int((v - lo) / (hi - lo) * bins))
        counts[i] += 1
    top = max(counts)
    return "".join(" " if c == 0 else BLOCKS[min(7, (c * 8 - 1) // top)] for c in counts), lo, hi


def trend(values: Sequence[float | None]) -> str:
    """One block per value (None blank) on the values' own min-max scale."""
    real = [v for v in values if v is not None]
    if not real:
        return ""
    lo, hi = min(real), max(real)
    return "".join(
        " " if v is None else BLOCKS[0 if hi == lo else min(7, int((v - lo) / (hi - lo) * 7.999))] for v in values
    )


def sort_key(sort: str) -> Callable[[EpisodeSummary], tuple[bool, float]] | None:
    if sort == "reward ↑":
        return lambda e: (e.reward is None, e.reward or 0.0)
    if sort == "reward ↓":
        return lambda e: (e.reward is None, -(e.reward or 0.0))
    if sort == "tool time ↓":
        return lambda e: (e.tool_s is None, -(e.tool_s or 0.0))
    return None


def row(e: EpisodeSummary) -> tuple[Text, ...]:
    """An episode's cells: id, env, reward, turns, tokens out, tool calls, tool seconds, flags, error or match."""
    flags = ("T" if e.truncated else "") + ("E" if (e.error or not e.ok) else "") + ("L" if e.too_large else "")
    note = e.snippet if e.snippet else (e.error or "")
    return (
        Text(e.id),
        Text(e.env or "N/A"),
        Text(fmt(e.reward), justify="right"),
        Text(str(e.turns), justify="right"),
        Text(str(e.tokens_out), justify="right"),
        Text(str(e.tool_calls), justify="right"),
        Text(fmt(e.tool_s), justify="right"),
        Text(flags, style="bold red" if "E" in flags else "yellow"),
        Text(note[:200]),
    )


COLUMNS = ("episode", "env", "reward", "turns", "tok", "tools", "tool s", "", "error / match")


def _fold(text: str, folded: bool) -> tuple[str, int]:
    lines = text.splitlines() or [""]
    if not folded or len(lines) <= FOLD_LINES:
        return "\n".join(lines), 0
    return "\n".join(lines[:FOLD_LINES]), len(lines) - FOLD_LINES


def episode_blocks(view: EpisodeView, folded: bool = True) -> list[tuple[str, Content]]:
    """The episode as (search text, Content) blocks, top to bottom: the header, the task, every turn (its
    tool calls under it), then each trace's rewards, timings and errors."""
    s = view.summary
    out: list[tuple[str, Content]] = []

    def add(text: str, style: str = "") -> None:
        out.append((text, Content.styled(text, style) if style else Content(text)))

    parts = ", ".join(f"{k} {fmt(v)}" for k, v in s.rewards.items())
    head = f"Episode {s.id} · step {s.step} ({s.kind}/{s.subset}) · env {s.env or 'N/A'}"
    rest = (
        f"reward {fmt(s.reward)}" + (f" ({parts})" if parts else "") + f" · turns {s.turns} · tokens "
        f"{s.tokens_in} in / {s.tokens_out} out · tools {s.tool_calls}"
        + (" · TRUNCATED" if s.truncated else "")
        + f"\ntime: tools {fmt(s.tool_s)} s · model {fmt(s.model_s)} s · total {fmt(s.total_s)} s · stop "
        f"{s.stop or 'N/A'}" + (f" · {view.cuts} texts cut" if view.cuts else "")
    )
    out.append((head + "\n" + rest, Content.assemble((head, "bold"), "\n" + rest)))
    for e in view.errors:
        add(f"error: {e}", "bold red")
    if view.task:
        body, more = _fold(view.task, folded)
        add("task\n" + body + (f"\n… {more} more lines (z unfolds)" if more else ""), "dim")
    for t in view.traces:
        if len(view.traces) > 1:
            add(f"── trace {t.agent} ──", "bold")
        for u in t.turns:
            who = u.role + (f" ({u.name})" if u.name else "") + (" · sampled" if u.sampled else "")
            style = {"assistant": "bold green", "user": "bold cyan", "tool": "bold magenta", "system": "bold"}.get(
                u.role, "bold"
            )
            body, more = _fold(u.content, folded)
            text = f"▌ {who}\n{body}" + (f"\n… {more} more lines (z unfolds)" if more else "")
            out.append((text, Content.assemble((f"▌ {who}", style), "\n" + text.split("\n", 1)[1])))
            if u.reasoning:
                body, more = _fold(u.reasoning, folded)
                add("  reasoning: " + body + (f"\n… {more} more lines (z unfolds)" if more else ""), "italic dim")
            for c in u.tool_calls:
                body, more = _fold(c["arguments"], folded)
                add(f"  → {c['name']}({body})" + (f"\n… {more} more lines (z unfolds)" if more else ""), "yellow")
        rewards = ", ".join(f"{n} {fmt(sc)}×{fmt(w)}" for n, sc, w in t.rewards)
        add(
            f"rewards: {rewards or 'N/A'} · tool {fmt(t.timing.get('tool'))} s · model "
            f"{fmt(t.timing.get('model'))} s · stop {t.stop or 'N/A'}",
            "bold",
        )
        for e in t.errors:
            add(f"error: {e}", "bold red")
    return out
