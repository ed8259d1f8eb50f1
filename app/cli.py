"""The command line (DESIGN.md §2): the TUI by default, headless subcommands for scripts and CI.

Exit codes: 0 success, 1 the pod could not be reached / authenticated / trusted, 2 bad arguments or
unreadable settings. Errors are one line on stderr plus a hint; --json output is one JSON document
(or, for a stream, one JSON object per line) on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Sequence

from services.errors import HostKeyError, PodSpecError, PrimeTrainError, SettingsError
from services.models import Pod, PodKind, Sample

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prime-train-tui",
        description="Terminal dashboard for prime-rl training runs on rented GPU pods.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--pod", action="append", default=[], metavar="POD",
                        help="watch this pod too: a pods.toml name, an ssh alias, user@host[:port] "
                             "or 'local' (repeatable)")
    parser.add_argument("--demo", action="store_true",
                        help="add an embedded SIMULATED pod (no pod, no keys needed)")
    parser.add_argument("--no-local", action="store_true", help="do not show this machine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    probe = sub.add_parser("probe", help="samples from one pod (headless)",
                           description="Stream the probe's samples from one pod.")
    probe.add_argument("pod", metavar="POD")
    probe.add_argument("--once", action="store_true", help="print one sample and exit")
    probe.add_argument("--json", action="store_true", help="print the probe's JSON lines")
    probe.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    probe.add_argument("--run-dir", help="the run directory on the pod (logs, checkpoints)")
    probe.add_argument("--timeout", type=float, default=30.0,
                       help="give up when no sample arrives within this many seconds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "probe":
            return asyncio.run(_probe(args))
        return _run_tui(args)
    except KeyboardInterrupt:
        return 130


# ---------------------------------------------------------------- resolving pods


def resolve_pod(spec: str, saved: list[Pod] | None = None) -> Pod:
    """A pods.toml name first, then ``local``/``demo``/alias/``user@host[:port]``."""
    if saved is None:
        from app.settings import load_pods

        saved = load_pods()
    for pod in saved:
        if pod.name == spec:
            return pod
    return _parse(spec)


def _parse(spec: str) -> Pod:
    from services.pods import parse_pod_spec

    return parse_pod_spec(spec)


def _fail(message: str, hint: str = "", code: int = EXIT_FAIL) -> int:
    print(f"prime-train-tui: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    return code


# ---------------------------------------------------------------- probe


async def _probe(args: argparse.Namespace) -> int:
    from services.monitor import MonitorSettings
    from services.ssh import LocalConnection, SSHConnection

    try:
        pod = resolve_pod(args.pod)
    except (SettingsError, PodSpecError) as exc:
        return _fail(str(exc), exc.hint, EXIT_USAGE)
    if args.run_dir:
        pod = Pod(**{**pod.__dict__, "run_dir": args.run_dir})
    if pod.kind is PodKind.SSH:
        conn = SSHConnection(pod)
    elif pod.kind is PodKind.DEMO:
        from services.demo.connection import DemoConnection

        conn = DemoConnection(pod, MonitorSettings(interval=args.interval))
    else:
        conn = LocalConnection(pod)

    probe_args = ["--interval", f"{args.interval:g}"]
    if args.once:
        probe_args.append("--once")
    if pod.run_dir:
        probe_args += ["--run-dir", pod.run_dir]
    try:
        await conn.connect()
        stream = await conn.start_probe(probe_args)
        printed = 0
        while True:
            line = await asyncio.wait_for(stream.readline(), args.timeout)
            if not line:
                if printed:
                    return EXIT_OK
                tail = stream.stderr_tail().strip()
                return _fail("the probe exited without a sample" + (f": {tail}" if tail else ""))
            try:
                sample = Sample.from_line(line)
            except PrimeTrainError:
                continue  # malformed lines are skipped, never fatal
            if args.json:
                sys.stdout.write(line.decode("utf-8", "replace").rstrip("\n") + "\n")
            else:
                _print_sample(pod, sample)
            sys.stdout.flush()
            printed += 1
            if args.once:
                return EXIT_OK
    except HostKeyError as exc:
        return _fail(str(exc), exc.hint or "headless mode never trusts a new host key")
    except PrimeTrainError as exc:
        return _fail(str(exc), exc.hint)
    except asyncio.TimeoutError:
        return _fail(f"no sample from {pod.name} within {args.timeout:g} s")
    finally:
        await conn.close()


def _print_sample(pod: Pod, sample: Sample) -> None:
    from rich.console import Console
    from rich.table import Table

    from services.units import fmt_bytes, fmt_num

    table = Table(title=f"{pod.label} · {sample.source or 'no GPUs'}", title_justify="left")
    for col in ("GPU", "name", "util %", "memory", "power W", "temp °C"):
        table.add_column(col, justify="right" if col not in ("name",) else "left")
    for g in sample.gpus:
        table.add_row(str(g.index), g.name, fmt_num(g.util), f"{fmt_bytes(g.mem_used)} / {fmt_bytes(g.mem_total)}",
                      fmt_num(g.power_w), fmt_num(g.temp_c))
    h = sample.host
    console = Console()
    console.print(table)
    console.print(
        f"host: CPU {fmt_num(h.cpu_pct)} %  RAM {fmt_bytes(h.mem_used)} / {fmt_bytes(h.mem_total)}  "
        f"disk {fmt_bytes(h.disk_used)} / {fmt_bytes(h.disk_total)}  open files {h.nofile_soft or 'N/A'}"
    )


# ---------------------------------------------------------------- the TUI


def tui_pods(args: argparse.Namespace) -> tuple[list[Pod], list[str]]:
    """Pods for the TUI: demo (with --demo), pods.toml, --pod, local. Also returns warnings."""
    from app.settings import load_pods
    from services.pods import merge_pods

    warnings: list[str] = []
    try:
        saved = load_pods()
    except SettingsError as exc:
        saved = []
        warnings.append(f"{exc} {exc.hint}".strip())
    extra: list[Pod] = []
    for spec in args.pod:
        try:
            extra.append(resolve_pod(spec, saved))
        except PodSpecError as exc:
            warnings.append(f"--pod {spec}: {exc}")
    demo = [Pod(name="demo", kind=PodKind.DEMO)] if args.demo else []
    local = [] if args.no_local else [Pod(name="local", kind=PodKind.LOCAL)]
    return merge_pods(demo, saved, extra, local), warnings


def _run_tui(args: argparse.Namespace) -> int:
    pods, warnings = tui_pods(args)
    from app.tui import PrimeTrainApp

    app = PrimeTrainApp(pods, notices=warnings)
    app.run()
    return app.return_code or EXIT_OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prime-train-tui")
    except PackageNotFoundError:
        return "0+unknown"


if __name__ == "__main__":
    raise SystemExit(main())
