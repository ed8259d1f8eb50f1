"""``prime-train-tui watch [POD ...] [--notify URL ...] [--metrics-port N] [--once] [--json]``: keep watching
with the laptop closed.

The TUI's monitor and health rules for every pod (the POD arguments, else every pod in pods.toml), the
rentals' deadlines, push messages through apprise (``[notify]`` in settings.toml, ``$PRIME_TRAIN_TUI_NOTIFY``,
``--notify``), a Prometheus exporter on 127.0.0.1 (``--metrics-port``), a state file in the data dir the TUI
reads at start, and what the TUI runs in the background: auto-backup, preemption tracking with the opt-in
auto-resume, the cleanup daemons (deleting only with ``[watch] cleanup = true``) — as a long-running process
(services/watch/; docs/watch.md runs it under systemd --user, in tmux or on a small always-on box). One
watcher per data dir: a second one says who holds it and exits 2. Logs are JSON lines on stderr
(notification URLs never in them); ``--json`` also prints each event as a JSON line on stdout. SIGTERM or
ctrl+c stops it cleanly within a few seconds whatever a notification service does (pushes not delivered by
then wait in the outbox for the next watcher), exit 0.

``--once``: one sample of every pod through the same rules, a JSON summary on stdout, nothing pushed, no
state written, nothing acted on (no backup, resume or cleanup); exit 0 when every pod was reached, 1
otherwise. Exit 2 on bad arguments or settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail, fail_usage, resolve_pod


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="keep watching without the TUI: push alerts, Prometheus metrics, deadlines",
        description="The TUI's monitor, health rules and rental deadlines as a long-running "
        "process, with push notifications and a Prometheus exporter.",
    )
    p.add_argument("pods", nargs="*", metavar="POD", help="pods (default: every pod in pods.toml)")
    p.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="also push to this apprise URL (repeatable; a command line shows in ps: prefer [notify] "
        "urls in settings.toml or $PRIME_TRAIN_TUI_NOTIFY)",
    )
    p.add_argument("--metrics-port", type=int, metavar="N", help="serve Prometheus metrics on ADDR:N/metrics")
    p.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="address of the metrics server (default 127.0.0.1: the metrics name your pods; any other "
        "address is served with a warning)",
    )
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    p.add_argument(
        "--offline-after",
        type=float,
        default=300.0,
        metavar="S",
        help="a pod without samples this long is an alert of its own (default 300)",
    )
    p.add_argument("--once", action="store_true", help="one sample of every pod, a JSON summary, exit")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="--once: seconds to reach the pods")
    p.add_argument("--json", action="store_true", help="print each event as a JSON line on stdout")
    p.set_defaults(func=run)


def load_notify(extra: list[str]) -> Any:
    """``[notify]`` of settings.toml, ``$PRIME_TRAIN_TUI_NOTIFY`` and ``extra`` URLs (SettingsError if broken)."""
    from app.settings import settings_doc
    from services.watch.notify import notify_settings

    return notify_settings(settings_doc()).with_urls(extra)


def load_watch_options() -> dict[str, Any]:
    """``[watch]`` of settings.toml (``terminate_over_budget``, ``terminate_idle`` and ``cleanup``, default false),
    backup.toml (auto-backup, the final backup before a budget or idle termination, the bucket cleanup checks)
    and ``[lifecycle]`` (preempt_after_minutes; auto_resume, opt-in, and how a resume runs; cleanup_pods and the
    daemons' rules). SettingsError when one is broken."""
    from app.settings import load_backup_toml, load_lifecycle_settings, load_watch_table

    table = load_watch_table()
    lifecycle = load_lifecycle_settings()
    return {
        "terminate_over_budget": table["terminate_over_budget"],
        "terminate_idle": table["terminate_idle"],
        "cleanup": table["cleanup"],
        "sweep_minutes": table["sweep_minutes"],
        "backup": load_backup_toml(),  # also auto_backup, as in the TUI
        "preempt_after_s": lifecycle.preempt_after_minutes * 60.0,
        "lifecycle": lifecycle,
    }


def _pods(specs: list[str]) -> tuple[list, list[str]]:
    """The pods to watch, and one line per pods.toml entry left out (broken)."""
    from app.settings import broken_pod_notes, load_pods

    pods = [resolve_pod(spec) for spec in specs] if specs else load_pods()
    unique: dict[str, Any] = {}
    for pod in pods:
        unique.setdefault(pod.name, pod)
    return list(unique.values()), broken_pod_notes(pods)


def run(args: argparse.Namespace) -> int:
    from app.settings import data_dir, load_health_settings
    from services.errors import PodSpecError, PrimeTrainError, SettingsError
    from services.monitor.worker import MonitorSettings
    from services.watch.watcher import WatchOptions

    if not args.interval > 0 or not args.timeout > 0 or not args.offline_after >= 0:
        return fail("--interval and --timeout must be positive, --offline-after at least 0", code=EXIT_USAGE)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        return fail(f"--metrics-port must be a port number (0-65535), not {args.metrics_port}", code=EXIT_USAGE)
    try:
        pods, left_out = _pods(args.pods)
        health = load_health_settings()
        notify = load_notify(args.notify) if not args.once else None
        watch_options = load_watch_options()
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    if not pods:
        return fail("no pods to watch", "name one (watch POD) or add pods to pods.toml", EXIT_USAGE)
    settings = MonitorSettings(health=health, interval=args.interval)
    from app.settings import secret_file_warnings

    options = WatchOptions(
        data_dir(),
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        notices=tuple(secret_file_warnings() + left_out),
        offline_after_s=args.offline_after,
        tick_s=min(1.0, args.interval),
        **watch_options,
        **({"notify": notify} if notify is not None else {}),
    )
    if args.once:
        return _once(pods, options, settings, args.timeout)
    try:
        return _watch(pods, options, settings, args.json)
    except SettingsError as exc:
        return fail_usage(exc)
    except PrimeTrainError as exc:
        return fail(str(exc), exc.hint)


def _once(pods: list, options: Any, settings: Any, timeout: float) -> int:
    from services.watch.watcher import Watcher

    summary = asyncio.run(Watcher(pods, options, monitor_settings=settings).once(timeout))
    print(json.dumps(summary, indent=2, default=str))
    return EXIT_OK if summary["reached"] == len(summary["pods"]) else EXIT_FAIL


def _providers() -> Any:
    from app.commands.rentals import providers_from_settings

    return providers_from_settings()


def _watch(pods: list, options: Any, settings: Any, as_json: bool) -> int:
    from services.watch import jsonlog
    from services.watch.lock import WatcherRunning, WatchLock
    from services.watch.notify import secret_parts
    from services.watch.watcher import Watcher

    formatter = jsonlog.JsonFormatter(secret_parts(options.notify.urls))
    watcher = Watcher(
        pods, options, monitor_settings=settings, providers=_providers, out=_printer(as_json, formatter)
    )  # a bad URL is a SettingsError here, before anything runs
    lock = WatchLock(options.data_dir)
    try:
        lock.acquire()
    except WatcherRunning as exc:
        return fail(str(exc), exc.hint, EXIT_USAGE)
    handler = jsonlog.setup(sys.stderr, secrets=formatter.secrets)
    try:
        asyncio.run(_serve(watcher))
    finally:
        lock.release()
        import logging

        logging.getLogger().removeHandler(handler)
    return EXIT_OK


async def _serve(watcher: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests), or no signals
            pass
    await watcher.run(stop)


def _printer(as_json: bool, formatter: Any):
    """Each event on stdout: a JSON line (--json) or a short line for a person in tmux; secrets scrubbed."""

    def out(ev: dict[str, Any]) -> None:
        if as_json:
            text = json.dumps(ev, default=str, ensure_ascii=False)
        else:
            import time

            rest = " ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "event") and v not in (None, "", []))
            text = f"{time.strftime('%H:%M:%S', time.localtime(ev['t']))} {ev['event']}  {rest}"
        print(formatter.scrub(text), flush=True)

    return out
