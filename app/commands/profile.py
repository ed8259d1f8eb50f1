"""``prime-train-tui profile POD [--run-dir DIR] [--steps N] [--follow] [--json]``: where step time goes.

Reads the tails of ``<run dir>/metrics.jsonl`` and the console logs with one command on the pod (SSH
exec, or ``sh -c`` for ``local``), breaks the last N steps down by component and prints the diagnosis
and recommendations. ``--follow`` waits until N steps newer than the latest one at start are logged
and reports those. Exit 0 with a profile, 1 when no step timings were found (or on errors), 2 on usage.

``--json`` prints one document: ``{"steps", "first_step", "last_step", "step_seconds",
"components": [{"name", "label", "seconds", "share", "parent", "timeline"}], "diagnosis",
"confidence", "evidence", "recommendations", "recommendation_ids", "changes", "inference", "rollout", "gpu",
"tool_tail", "trend", "source", "skipped_lines"}`` (docs/json.md). ``tool_tail``: tool seconds per episode
per env (p50/p95/max) from the run's newest traces.jsonl files, which the probe reads on the pod (one
``--once`` sample); [] when the run writes none or the probe cannot run there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from app.commands._support import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    connected,
    fail,
    fail_error,
    fail_usage,
    need_run_dir,
    pod_arg,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="bottleneck breakdown of a run's last steps",
        description="Break a run's step time down by component and say what limits it.",
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("--run-dir", help="the run directory on the pod (default: the pod's run_dir)")
    p.add_argument("--steps", type=int, default=20, help="how many of the last steps to profile (default 20)")
    p.add_argument("--follow", action="store_true", help="wait for N new steps instead of using logged ones")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown to FILE")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between reads with --follow")
    p.add_argument("--timeout", type=float, default=600.0, help="give up following after this many seconds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.steps < 1:
        return fail("--steps must be at least 1", code=EXIT_USAGE)
    return asyncio.run(_profile(args))


async def _profile(args: argparse.Namespace) -> int:
    from services.bottleneck.analysis import analyze
    from services.bottleneck.report import read_episodes, read_run, write_markdown
    from services.errors import PodSpecError, PrimeTrainError, SettingsError
    from services.monitor.metrics import parse_run

    try:
        pod = pod_arg(args)
        run_dir = need_run_dir(pod, "pass --run-dir DIR (the prime-rl output dir)")
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    try:
        if pod.simulated and not args.run_dir:  # its run: the TUI's, or one started now in its sandbox
            from app.demo import ensure_run, note

            note(await ensure_run(pod))
        async with connected(pod) as conn:
            metrics, console = await read_run(conn, run_dir, args.steps)
            parsed = parse_run(metrics, console)
            if args.follow:
                start = max(parsed.steps, default=0)
                deadline = time.monotonic() + args.timeout
                while True:
                    fresh = [n for n in parsed.steps if n > start]
                    if len(fresh) >= args.steps:
                        break
                    if time.monotonic() > deadline:
                        return fail(f"only {len(fresh)} new steps within {args.timeout:g} s")
                    if not args.json:
                        print(f"waiting for steps: {len(fresh)}/{args.steps} after step {start}", file=sys.stderr)
                    await asyncio.sleep(args.poll)
                    metrics, console = await read_run(conn, run_dir, args.steps)
                    parsed = parse_run(metrics, console)
                parsed.steps = {n: s for n, s in parsed.steps.items() if start < n <= start + args.steps}
            try:  # the episodes' tool times: extra evidence, never a reason to fail the profile
                episodes = await read_episodes(conn, run_dir)
            except (PrimeTrainError, asyncio.TimeoutError, OSError):
                episodes = []
            breakdown = analyze(
                parsed, args.steps, episodes=episodes, until_step=start + args.steps if args.follow else None
            )
    except PrimeTrainError as exc:
        return fail_error(exc)
    except asyncio.TimeoutError:
        return fail(f"reading {run_dir} on {pod.name} timed out")

    if args.markdown:
        write_markdown(breakdown, args.markdown, f"Bottleneck profile — {pod.label}")
    if args.json:
        print(json.dumps(breakdown.to_json(), indent=2))
    else:
        _print(pod, breakdown)
    if not breakdown.steps:
        if not args.json:
            return fail(
                f"no step timings in {pod.run_dir}",
                "is prime-rl writing metrics.jsonl (the file monitor) or logs/*.log there?",
            )
        return EXIT_FAIL
    return EXIT_OK


def _print(pod, b) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not b.steps:
        return
    table = Table(
        title=f"Bottleneck analysis · {pod.label} · steps {b.first_step}–{b.last_step} ({b.source})",
        title_justify="left",
    )
    table.add_column("Component")
    table.add_column("Time (%)", justify="right")
    table.add_column("s / step", justify="right")
    table.add_column("")
    top = max((c.share for c in b.components if c.parent is None and c.timeline == "trainer"), default=0)
    for c in b.components:
        name = ("  ↳ " if c.parent else "") + c.label
        if c.timeline == "orchestrator":
            name += " (orch. clock)"
        bar = "█" * int(round(c.share * 20))
        flag = "⚠ BOTTLENECK" if c.parent is None and c.timeline == "trainer" and c.share == top and top >= 0.4 else ""
        table.add_row(escape(name), f"{100 * c.share:.0f}%", f"{c.seconds:.1f}", f"{bar} {flag}".strip())
    console.print(table)
    console.print(
        f"[b]DIAGNOSIS:[/b] {b.diagnosis.upper()} (confidence {b.confidence})" + (f" · {b.trend}" if b.trend else "")
    )
    for e in b.evidence:
        console.print(f"  · {escape(e)}")
    if b.tool_tail:
        tails = Table(title="Tool time per episode (traces.jsonl)", title_justify="left")
        for name in ("Env", "p50 (s)", "p95 (s)", "max (s)", "Episodes", ""):
            tails.add_column(name, justify="left" if name in ("Env", "") else "right")
        for t in b.tool_tail:
            tails.add_row(
                escape(t.label),
                f"{t.p50:.1f}",
                f"{t.p95:.1f}",
                f"{t.max:.1f}",
                str(t.episodes),
                "⚠ SLOW TAIL" if t.slow else "",
            )
        console.print(tails)
    for r in b.recommendations:
        console.print(f"[b]RECOMMENDATION:[/b] {escape(r.text)}")
        if r.change is not None:
            console.print(f"  [b]config:[/b] {escape(r.change.describe())}")
    if b.skipped:
        console.print(f"[dim]{b.skipped} garbled or partial lines skipped[/dim]")
