"""``prime-train-tui rollouts POD [--step N] [--eval] [--env E] [--errors] [--truncated] [--grep RE] [--limit N]
[--json]``: a step's episodes, one line each; ``--episode ID``: one episode's turns, tool calls, rewards and
timings; ``--export FILE``: the episode (or the step) written to FILE (``.jsonl``: JSON lines, else Markdown).

The run's ``rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl`` are read on the pod
(services/pod/agent/rollouts.py); only the summaries come back for a list, and an episode's text only with
``--episode``/``--export``, each text cut at ``--max-text`` characters with a marker. ``--json`` prints one
document (docs/json.md#rollouts---json). Exit 0, 1 when the pod has no such episodes (or on errors), 2 on
usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json

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
    say,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollouts",
        help="a run's episodes (rollouts) on the pod",
        description="List a step's episodes, or show one, read where prime-rl writes them.",
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("--run-dir", help="the run directory on the pod (default: the pod's run_dir)")
    p.add_argument("--step", type=int, help="the step (default: the newest with episodes)")
    p.add_argument("--eval", action="store_true", help="the eval episodes instead of the train ones")
    p.add_argument("--subset", choices=("all", "effective"), help="default: all, else effective")
    p.add_argument("--env", help="only this env's episodes")
    p.add_argument("--errors", action="store_true", help="only episodes with an error")
    p.add_argument("--truncated", action="store_true", help="only truncated episodes")
    p.add_argument("--grep", metavar="REGEX", help="only episodes whose text matches (searched on the pod)")
    p.add_argument("-i", "--ignore-case", action="store_true", help="--grep ignores case")
    p.add_argument("--limit", type=int, default=256, help="at most this many (the newest; default 256)")
    p.add_argument("--episode", metavar="ID", help="show this episode: its turns, tool calls, rewards, timings")
    p.add_argument("--max-text", type=int, default=16384, help="characters of one text of an episode (default 16384)")
    p.add_argument(
        "--export",
        metavar="FILE",
        help="write the episode (or the step's episodes) to FILE (.jsonl: JSON lines, else Markdown)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 2000:
        return fail("--limit must be between 1 and 2000", code=EXIT_USAGE)
    if args.max_text < 100:
        return fail("--max-text must be at least 100", code=EXIT_USAGE)
    if args.step is not None and args.step < 0:
        return fail("--step must be 0 or more", code=EXIT_USAGE)
    return asyncio.run(_rollouts(args))


async def _rollouts(args: argparse.Namespace) -> int:
    from services.errors import PodSpecError, PrimeTrainError, SettingsError
    from services.monitor.rollouts import Filters, RolloutReader, export

    try:
        pod = pod_arg(args)
        run_dir = need_run_dir(pod, "pass --run-dir DIR (the prime-rl output dir)")
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    kind = "eval" if args.eval else "train"
    try:
        if pod.simulated and not args.run_dir:
            from app.demo import ensure_run, note

            note(await ensure_run(pod))
        async with connected(pod) as conn:
            reader = RolloutReader(conn, run_dir, keep=False)  # one request: no reader process kept
            if args.episode:
                view = await reader.episode(args.episode, args.step, kind, args.subset, max_text=args.max_text)
                if args.export:
                    path, _n = export([view], args.export)
                    say(f"wrote episode {view.summary.id} to {path}")
                if args.json:
                    print(json.dumps(view.to_json(), indent=2, ensure_ascii=False))
                elif not args.export:
                    _print_episode(view)
                return EXIT_OK
            if args.export:
                views = await reader.dump(args.step, kind, args.subset, limit=args.limit, max_text=args.max_text)
                path, n = export(views, args.export)
                say(f"wrote {n} episodes to {path}")
                return EXIT_OK
            listing = await reader.list_step(
                Filters(
                    step=args.step,
                    kind=kind,
                    subset=args.subset,
                    env=args.env,
                    errors=args.errors,
                    truncated=args.truncated,
                    limit=args.limit,
                    grep=args.grep,
                    ignore_case=args.ignore_case,
                )
            )
    except PrimeTrainError as exc:
        return fail_error(exc)
    except asyncio.TimeoutError:
        return fail(f"reading the episodes on {pod.name} timed out")
    except OSError as exc:
        return fail(f"cannot write {args.export}: {exc.strerror or exc}")
    if args.json:
        print(json.dumps(listing.to_json(), indent=2, ensure_ascii=False))
    else:
        _print_list(listing)
    return EXIT_OK if listing.episodes else EXIT_FAIL


def _print_list(listing) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from services.monitor.rollouts import fmt

    t = Table(
        title=Text(
            f"step {listing.step} · {listing.kind}/{listing.subset} · {listing.matched} of "
            f"{listing.total} episodes" + (" · last line still being written" if listing.partial else "")
        ),
        title_justify="left",
    )
    for name in ("episode", "env", "reward", "turns", "tokens", "tools", "tool s", "", "error / match"):
        t.add_column(name, justify="right" if name in ("reward", "turns", "tokens", "tools", "tool s") else "left")
    for e in listing.episodes:
        flags = ("T" if e.truncated else "") + ("E" if not e.ok or e.error else "")
        t.add_row(
            Text(e.id),
            Text(e.env or "N/A"),
            fmt(e.reward),
            str(e.turns),
            str(e.tokens_out),
            str(e.tool_calls),
            fmt(e.tool_s),
            flags,
            Text((e.snippet or e.error or "")[:80]),
        )
    Console().print(t)


def _print_episode(view) -> None:
    from services.monitor.rollouts import episode_markdown

    say(episode_markdown(view))
