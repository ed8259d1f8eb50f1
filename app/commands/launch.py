"""``prime-train-tui launch POD CONFIG``: pre-flight, upload, start detached (tmux or setsid+nohup).

Also the helpers kill/resume/cleanup share: connecting, printing events, confirming.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail, resolve_pod, say

if TYPE_CHECKING:
    from services.lifecycle.events import Event
    from services.lifecycle.preflight import LifecycleSettings
    from services.pod.connection import Connection


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launch",
        help="start a training run on a pod (pre-flight first)",
        description="Pre-flight checks, upload CONFIG, start the run detached on POD.",
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("config", metavar="CONFIG", help="the prime-rl TOML config to upload")
    p.add_argument(
        "--command", dest="template", help="launch command template ({config}, {run_dir}); default from settings"
    )
    p.add_argument("--run-dir", help="run directory on the pod (default: the pod's run_dir)")
    p.add_argument("--force", action="store_true", help="start even when a pre-flight check fails")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if not Path(args.config).is_file():
        return fail(f"config not found: {args.config}", code=EXIT_USAGE)

    async def before(conn: Connection, settings: LifecycleSettings, doc: dict[str, Any]) -> int | None:
        from services.lifecycle.targets import target_for

        plan = target_for(conn.pod).plan_launch(conn.pod, Path(args.config), args.run_dir, settings, args.template)
        doc["target"] = plan.doc
        if not args.json:
            for line in plan.lines:
                say(line)
        return None

    async def go(conn: Connection, settings: LifecycleSettings) -> AsyncIterator[Event]:
        from services.lifecycle.targets import target_for

        async for ev in target_for(conn.pod).launch(
            conn, Path(args.config), settings=settings, command=args.template, run_dir=args.run_dir, force=args.force
        ):
            yield ev

    return drive(args, "launch", go, before)


# ----------------------------------------------------------------------------- shared


def setup(args: argparse.Namespace) -> tuple[Any, Any] | int:
    from services.errors import PodSpecError, SettingsError

    try:
        from app.settings import load_lifecycle_settings

        pod = resolve_pod(args.pod)
        settings = load_lifecycle_settings()
    except (SettingsError, PodSpecError) as exc:
        return fail(str(exc), exc.hint, EXIT_USAGE)
    from app.demo import for_lifecycle

    pod, own = for_lifecycle(pod)  # the demo pod: its sandbox, with the demo's own settings
    return pod, own if own is not None else settings


def drive(
    args: argparse.Namespace,
    action: str,
    body: Callable[[Connection, LifecycleSettings], AsyncIterator[Event]],
    before: Callable[[Connection, LifecycleSettings, dict[str, Any]], Awaitable[int | None]] | None = None,
) -> int:
    """Connect, optionally plan/confirm (``before`` returns an exit code to stop, or None), then print
    the events of ``body``. Exit 0 on a ``done`` event, 1 with the reason otherwise."""
    got = setup(args)
    if isinstance(got, int):
        return got
    pod, settings = got
    return asyncio.run(_drive(args, action, pod, settings, body, before))


async def _drive(args, action, pod, settings, body, before) -> int:
    from app.demo import demo_inputs
    from services.connect import open_connection
    from services.errors import HostKeyError, PrimeTrainError

    conn = open_connection(pod, **demo_inputs(pod))  # the demo pod: confined to its sandbox
    events: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"action": action, "pod": pod.name, "ok": False, "events": events}
    try:
        await conn.connect()
        if before is not None:
            stop = await before(conn, settings, doc)
            if stop is not None:
                if args.json:
                    doc["ok"] = stop == EXIT_OK
                    say(json.dumps(doc, indent=1))
                return stop
        last = None
        async for ev in body(conn, settings):
            last = ev
            events.append(ev.to_json())
            if not args.json:
                print_event(ev, pod.name)
        ok = last is not None and last.kind == "done"
        doc["ok"] = ok
        if last is not None and last.data is not None:
            doc["result"] = last.data
        if args.json:
            say(json.dumps(doc, indent=1))
        if not ok:
            return fail(last.message if last is not None else f"{action} produced nothing", code=EXIT_FAIL)
        return EXIT_OK
    except HostKeyError as exc:
        return fail(str(exc), exc.hint or "headless mode never trusts a new host key")
    except PrimeTrainError as exc:
        return fail(str(exc), exc.hint)
    finally:
        await conn.close()


def print_event(ev: Event, pod: str = "POD") -> None:
    if ev.check is not None:
        c = ev.check
        line = f"  {c.mark} {c.name}" + (f" — {c.detail}" if c.detail else "")
        say(line)
        if c.status == "fail" and c.fix:
            say(f"      fix: {c.fix_for('cli', pod)}")
    elif ev.kind == "error":
        pass  # printed once by fail()
    elif ev.kind == "warn":
        say(f"  ! {ev.message}")
    elif ev.kind == "done":
        say(f"✓ {ev.message}")
    else:
        pct = f"[{ev.progress * 100:3.0f}%] " if ev.progress is not None else ""
        say(f"{pct}{ev.message}")
    sys.stdout.flush()


def confirm(args: argparse.Namespace, question: str) -> int | None:
    """None = go on. Destructive actions need --yes when stdin is not a terminal."""
    if getattr(args, "yes", False):
        return None
    if not sys.stdin.isatty():
        return fail("refusing without --yes (stdin is not a terminal)", "add --yes to confirm", EXIT_USAGE)
    try:
        answer = input(f"{question} [y/N] ").strip().lower()
    except EOFError:
        answer = ""
    if answer in ("y", "yes"):
        return None
    return fail("cancelled", code=EXIT_FAIL)
