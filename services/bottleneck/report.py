"""Bottleneck reports: Markdown export, and reading a run's metrics, logs and episode timings through a
connection."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from services.bottleneck.analysis import Breakdown

if TYPE_CHECKING:
    from services.pod.connection import Connection


def to_markdown(b: Breakdown, title: str = "Bottleneck profile") -> str:
    lines = [f"# {title}", ""]
    if b.steps:
        lines.append(
            f"Steps {b.first_step}–{b.last_step} ({b.steps} steps), source: {b.source}; "
            f"mean trainer step {b.step_seconds or 0:.1f} s. {b.trend}".rstrip()
        )
    else:
        lines.append("No step timings yet.")
    lines += ["", f"**Diagnosis: {b.diagnosis.upper()}** (confidence: {b.confidence})", ""]
    lines += ["| Component | Time (%) | Seconds / step |", "|---|---:|---:|"]
    for c in b.components:
        name = ("↳ " if c.parent else "") + c.label + (" (orchestrator clock)" if c.timeline == "orchestrator" else "")
        lines.append(f"| {name} | {100 * c.share:.0f}% | {c.seconds:.2f} |")
    lines += ["", "## Evidence", ""] + [f"- {e}" for e in b.evidence]
    if b.tool_tail:
        lines += [
            "",
            "## Tool time per episode",
            "",
            "| Env | p50 (s) | p95 (s) | max (s) | Episodes | |",
            "|---|---:|---:|---:|---:|---|",
        ]
        lines += [
            f"| {t.label} | {t.p50:.1f} | {t.p95:.1f} | {t.max:.1f} | {t.episodes} | {'slow tail' if t.slow else ''} |"
            for t in b.tool_tail
        ]
    lines += ["", "## Recommendations", ""]
    lines += [f"- {r.text}" + (f" _(source: {r.source})_" if r.source else "") for r in b.recommendations] or ["- none"]
    if b.skipped:
        lines += ["", f"{b.skipped} garbled or partial lines were skipped."]
    return "\n".join(lines) + "\n"


def write_markdown(b: Breakdown, path: str | Path, title: str = "Bottleneck profile") -> Path:
    """Export a profile as Markdown (atomic write)."""
    from services.atomic import atomic_write_text

    p = Path(path).expanduser()
    atomic_write_text(p, to_markdown(b, title))
    return p


# ---------------------------------------------------------------------------------------- reading a run dir
_MARK = "@@ptt-profile "


def tail_command(run_dir: str, lines: int) -> str:
    """One shell command printing the tails of metrics.jsonl and the console logs, each after a marker
    line (one SSH exec instead of one per file)."""
    import shlex

    n = max(50, int(lines))
    q = shlex.quote(run_dir)
    return (
        f"cd {q} 2>/dev/null || {{ echo 'no such run dir: {run_dir}' >&2; exit 3; }}; "
        f"if [ -f metrics.jsonl ]; then echo '{_MARK}metrics'; tail -n {n} metrics.jsonl; echo; fi; "
        f'for f in logs/*.log logs/latest/*.log; do [ -f "$f" ] || continue; '
        f'echo "{_MARK}log $f"; tail -n {n * 4} "$f"; echo; done'
    )


def split_tail_output(text: str) -> tuple[list[str], list[str]]:
    """The output of :func:`tail_command` -> (metrics lines, console lines as "<stem>: <line>")."""
    metrics: list[str] = []
    console: list[str] = []
    target: list[str] | None = None
    stem = ""
    for line in text.splitlines():
        if line.startswith(_MARK):
            what = line[len(_MARK) :]
            if what == "metrics":
                target = metrics
            else:
                target, stem = console, Path(what.split(" ", 1)[-1]).stem
            continue
        if target is None or not line.strip():
            continue
        target.append(line if target is metrics else f"{stem}: {line}")
    return metrics, console


async def read_run(conn: Connection, run_dir: str, steps: int, timeout: float = 30.0) -> tuple[list[str], list[str]]:
    """Fetch the last lines of a run's metrics.jsonl and console logs through a connection's ``run``
    (SSHConnection or LocalConnection). Raises ``services.errors.PrimeTrainError`` subclasses."""
    from services.errors import ProbeError

    rc, out, err = await conn.run(tail_command(run_dir, steps * 20), timeout)
    if rc != 0:
        raise ProbeError(err.strip().splitlines()[-1] if err.strip() else f"reading {run_dir} failed (exit {rc})")
    return split_tail_output(out)


async def read_episodes(conn: Connection, run_dir: str, timeout: float = 30.0) -> list:
    """The per-trace timings of the run's newest traces.jsonl files (prime-rl's rollouts/step_N): one
    ``--once`` sample of the probe on the pod, which extracts them there (the traces never leave the
    pod); its "traces" field as :class:`~services.monitor.metrics.EpisodeTiming`. Raises
    ``services.errors.PrimeTrainError`` subclasses or asyncio.TimeoutError."""
    import asyncio
    import json

    from services.errors import ProbeError
    from services.monitor.metrics import episode_timings

    stream = await asyncio.wait_for(conn.start_probe(["--once", "--backend", "none", "--run-dir", run_dir]), timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            line = await asyncio.wait_for(stream.readline(), max(0.1, deadline - loop.time()))
            if not line:
                raise ProbeError("the probe exited without a sample: " + stream.stderr_tail().strip()[-200:])
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                continue  # not a sample (a shell's start-up line)
            if isinstance(obj, dict) and "t" in obj:
                return episode_timings(obj.get("traces"))
    finally:
        await stream.close()
