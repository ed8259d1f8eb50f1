"""``prime-train-tui probe POD [--once] [--json]``: the probe's samples from one pod, headless."""

from __future__ import annotations

import argparse
import asyncio
import sys

from app.commands._support import EXIT_OK, connected, fail, fail_error, fail_usage, pod_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="samples from one pod (headless)",
                       description="Stream the probe's samples from one pod.")
    p.add_argument("pod", metavar="POD")
    p.add_argument("--once", action="store_true", help="print one sample and exit")
    p.add_argument("--json", action="store_true", help="print the probe's JSON lines")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--run-dir", help="the run directory on the pod (logs, checkpoints)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="give up when no sample arrives within this many seconds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_probe(args))


async def _probe(args: argparse.Namespace) -> int:
    from services.errors import PodSpecError, PrimeTrainError, SettingsError
    from services.models import Sample
    from services.monitor.service import MonitorSettings

    try:
        pod = pod_arg(args)
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    probe_args = ["--interval", f"{args.interval:g}"]
    if args.once:
        probe_args.append("--once")
    if pod.run_dir:
        probe_args += ["--run-dir", pod.run_dir]
    try:
        async with connected(pod, demo=MonitorSettings(interval=args.interval)) as conn:
            stream = await conn.start_probe(probe_args)
            printed = 0
            while True:
                line = await asyncio.wait_for(stream.readline(), args.timeout)
                if not line:
                    if printed:
                        return EXIT_OK
                    tail = stream.stderr_tail().strip()
                    return fail("the probe exited without a sample" + (f": {tail}" if tail else ""))
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
    except PrimeTrainError as exc:
        return fail_error(exc)
    except asyncio.TimeoutError:
        return fail(f"no sample from {pod.name} within {args.timeout:g} s")


def _print_sample(pod, sample) -> None:
    from rich.console import Console
    from rich.table import Table

    from services.units import fmt_bytes, fmt_num

    table = Table(title=f"{pod.label} · {sample.source or 'no GPUs'}", title_justify="left")
    for col in ("GPU", "name", "util %", "memory", "power W", "temp °C"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for g in sample.gpus:
        table.add_row(str(g.index), g.name, fmt_num(g.util),
                      f"{fmt_bytes(g.mem_used)} / {fmt_bytes(g.mem_total)}",
                      fmt_num(g.power_w), fmt_num(g.temp_c))
    h = sample.host
    console = Console()
    console.print(table)
    console.print(
        f"host: CPU {fmt_num(h.cpu_pct)} %  RAM {fmt_bytes(h.mem_used)} / {fmt_bytes(h.mem_total)}  "
        f"disk {fmt_bytes(h.disk_used)} / {fmt_bytes(h.disk_total)}  "
        f"open files {h.nofile_soft or 'N/A'}"
    )
