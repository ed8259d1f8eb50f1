"""``prime-train-tui probe POD [--once] [--json]``: the probe's samples from one pod, headless."""

from __future__ import annotations

import argparse
import asyncio
import sys

from app.commands._support import EXIT_OK, connected, fail, fail_error, fail_usage, pod_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "probe", help="samples from one pod (headless)", description="Stream the probe's samples from one pod."
    )
    p.add_argument("pod", metavar="POD")
    p.add_argument("--once", action="store_true", help="print one sample and exit")
    p.add_argument("--json", action="store_true", help="print the probe's JSON lines")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--run-dir", help="the run directory on the pod (logs, checkpoints)")
    p.add_argument(
        "--timeout", type=float, default=30.0, help="give up when no sample arrives within this many seconds"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_probe(args))


async def _probe(args: argparse.Namespace) -> int:
    """Print samples until --once is served or the probe ends (exit 1 with how it ended: streaming has no
    normal end). ``--timeout``: the longest wait for a VALID sample, from the start (connecting included)
    and after each one; lines that are not samples do not count as life."""
    from services.errors import PodSpecError, PrimeTrainError, SettingsError
    from services.models import Sample
    from services.monitor.lines import LineReader
    from services.monitor.worker import MonitorSettings

    try:
        pod = pod_arg(args)
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    probe_args = ["--interval", f"{args.interval:g}"]
    if args.once:
        probe_args.append("--once")
    if pod.run_dir:
        probe_args += ["--run-dir", pod.run_dir]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout
    malformed, phase = 0, "connecting"

    def left() -> float:
        return max(0.0, deadline - loop.time())

    try:
        async with connected(pod, demo=MonitorSettings(interval=args.interval), timeout=left()) as conn:
            phase = "starting the probe"
            stream = await asyncio.wait_for(conn.start_probe(probe_args), left())
            reader, printed, phase = LineReader(stream), 0, ""
            while True:
                line = await asyncio.wait_for(reader.readline(), left())
                if line == b"":
                    return await _ended(pod.name, stream, printed)
                try:
                    sample = Sample.from_line(line) if line is not None else None  # None: over the hard limit
                except PrimeTrainError:
                    sample = None
                if sample is None or line is None:
                    malformed += 1  # skipped, never fatal: only the time without a valid sample is
                    continue
                if args.json:
                    sys.stdout.write(_as_documented(line) + "\n")
                else:
                    _print_sample(pod, sample)
                sys.stdout.flush()
                printed += 1
                deadline, malformed = loop.time() + args.timeout, 0
                if args.once:
                    return EXIT_OK
    except PrimeTrainError as exc:
        return fail_error(exc)
    except asyncio.TimeoutError:
        why = [f"{malformed} malformed line{'s' if malformed != 1 else ''} skipped"] if malformed else []
        why += [f"still {phase}"] if phase else []
        return fail(
            f"no valid sample from {pod.name} within {args.timeout:g} s" + (f" ({', '.join(why)})" if why else "")
        )


async def _ended(name: str, stream, printed: int) -> int:
    """The probe's output ended: how (its exit, its last stderr line), as one line; always a failure
    (--once returns before)."""
    how = await stream.exit_reason(wait=15.0)  # the command ends anyway: its reason is what is left
    tail = [line.strip() for line in stream.stderr_tail().splitlines() if line.strip()]
    what = "stopped" if printed else "exited without a sample"
    return fail(f"the probe on {name} {what}" + (f" ({how})" if how else "") + (f": {tail[-1][:300]}" if tail else ""))


def _print_sample(pod, sample) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from services.text import plain
    from services.units import fmt_bytes, fmt_num

    def cell(value: object) -> Text:  # the pod's text (GPU names, its label): never markup
        return Text(plain(value, oneline=True))

    table = Table(title=cell(f"{pod.label} · {sample.source or 'no GPUs'}"), title_justify="left")
    for col in ("GPU", "name", "util %", "memory", "power W", "temp °C"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for g in sample.gpus:
        table.add_row(
            str(g.index),
            cell(g.name),
            fmt_num(g.util),
            f"{fmt_bytes(g.mem_used)} / {fmt_bytes(g.mem_total)}",
            fmt_num(g.power_w),
            fmt_num(g.temp_c),
        )
    h = sample.host
    console = Console()
    console.print(table)
    console.print(
        Text(
            f"host: CPU {fmt_num(h.cpu_pct)} %  RAM {fmt_bytes(h.mem_used)} / {fmt_bytes(h.mem_total)}  "
            f"disk {fmt_bytes(h.disk_used)} / {fmt_bytes(h.disk_total)}  "
            f"open files {h.nofile_soft or 'N/A'}"
        )
    )


def _as_documented(line: bytes) -> str:
    """A sample line as docs/json.md promises it: the probe sends its GPUs as one list per field (cheaper to
    parse per sample); ``probe --json`` prints one object per GPU, as it always has."""
    import json

    from services.models import gpu_rows

    obj = json.loads(line)
    gpus = obj.get("gpus")
    if isinstance(gpus, dict):
        obj["gpus"] = gpu_rows({k: v for k, v in gpus.items() if isinstance(v, list)})
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
