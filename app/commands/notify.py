"""``prime-train-tui notify [--test] [--notify URL ...] [--json]``: the push notification targets (masked) and
policy from ``[notify]`` in settings.toml, ``$PRIME_TRAIN_TUI_NOTIFY`` and ``--notify``; ``--test`` sends
a test message to each. URLs are secrets: only their service is shown (``slack://***``). Exit 0 when
every target took the test message, 1 when one did not, 2 on bad settings or no URL."""

from __future__ import annotations

import argparse
import json
import time

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail, fail_usage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "notify",
        help="push notification targets; --test sends a test message",
        description="The [notify] targets (masked) and policy; --test sends a test message.",
    )
    p.add_argument("--test", action="store_true", help="send a test message to every target")
    p.add_argument("--notify", action="append", default=[], metavar="URL", help="another apprise URL (repeatable)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.commands.watch import load_notify
    from services.errors import PrimeTrainError, SettingsError
    from services.watch.notify import Notifier, hello_message

    try:
        settings = load_notify(args.notify)
        notifier = Notifier(settings.urls)
    except SettingsError as exc:
        return fail_usage(exc)
    except PrimeTrainError as exc:
        return fail(str(exc), exc.hint)
    if not settings.urls:
        return fail(
            "no notification URLs",
            "add urls to [notify] in settings.toml, set $PRIME_TRAIN_TUI_NOTIFY or "
            "give --notify URL (apprise syntax: ntfy://topic, slack://..., json://host/path)",
            EXIT_USAGE,
        )
    policy = {
        "min_severity": settings.min_severity.value,
        "quiet_hours": None if settings.quiet_hours is None else str(settings.quiet_hours),
        "min_interval_s": settings.min_interval_s,
        "resolve_after_s": settings.resolve_after_s,
    }
    if not args.test:
        if args.json:
            print(json.dumps({"targets": settings.masked, **policy}, indent=2))
        else:
            for target in settings.masked:
                print(target)
            print(", ".join(f"{k} {v}" for k, v in policy.items()))
        return EXIT_OK
    results = notifier.send(hello_message(time.strftime("%Y-%m-%d %H:%M:%S")))
    if args.json:
        print(json.dumps({"targets": [{"target": t, "sent": ok} for t, ok in results]}, indent=2))
    else:
        for target, ok in results:
            print(f"{target}: {'sent' if ok else 'FAILED'}")
    if all(ok for _, ok in results):
        return EXIT_OK
    return fail(
        f"{sum(1 for _, ok in results if not ok)} of {len(results)} target(s) did not take the test message",
        "check each URL against https://github.com/caronc/apprise/wiki and that the service is reachable",
        EXIT_FAIL,
    )
