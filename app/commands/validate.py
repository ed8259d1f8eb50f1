"""``prime-train-tui validate FILE [--kind K] [--preset P --gpus N] [--json]``: lint a prime-rl config.

Exit 0 when there is no error (warnings allowed), 1 when there are errors, 2 when the file cannot be
read. Works as a pre-commit hook (see .pre-commit-hooks.yaml): several files may be given.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail

KINDS = ("rl", "trainer", "orchestrator", "inference", "sft", "evals")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a prime-rl TOML config",
        description="Check a prime-rl TOML config: syntax, schema, renamed keys, the "
        "start-up cross-checks, known gotchas, memory fit and secrets.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--kind", choices=KINDS, help="the entry point (default: detected from the file)")
    p.add_argument("--preset", help="hardware preset for the memory fit (e.g. h100-80gb)")
    p.add_argument("--gpus", type=int, help="GPUs on the pod (for the memory fit)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.config.findings import ConfigError
    from services.config.schema import prime_rl_source
    from services.config.validate import validate_file

    if args.gpus is not None and args.gpus < 1:
        return fail("--gpus must be at least 1", code=EXIT_USAGE)
    reports = []
    worst = EXIT_OK
    for name in args.files:
        try:
            report = validate_file(name, kind=args.kind, preset=args.preset, gpus=args.gpus)
        except (ConfigError, RecursionError) as exc:  # RecursionError: a nesting no check foresaw, one line too
            if isinstance(exc, RecursionError):
                exc = ConfigError(f"{name}: nested too deeply: not a prime-rl config")
            if args.json:
                reports.append({"file": name, "error": str(exc)})
            else:
                fail(str(exc), exc.hint, EXIT_USAGE)
            worst = EXIT_USAGE
            continue
        reports.append(report.to_json(name))
        if report.errors and worst == EXIT_OK:
            worst = EXIT_FAIL
        if not args.json:
            _print(name, report)
    source = prime_rl_source()
    if args.json:
        doc: dict[str, Any] = dict(reports[0]) if len(reports) == 1 else {"files": reports}
        doc["prime_rl"] = source.to_json() if source else None
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif source:
        from rich.console import Console

        Console(highlight=False, soft_wrap=True).print(f"[dim]Checked against {source.describe()}.[/]")
    return worst


def _print(name: str, report) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)  # one finding per line, for grep and editors
    colours = {"error": "red", "warning": "yellow", "info": "blue"}
    for f in report.findings:
        sev = f.severity.value
        console.print(
            f"{escape(name)}:{f.line}:{f.column}: [{colours[sev]}]{sev}[/] [dim]{f.id}[/] {escape(f.message)}"
        )
        if f.fix:
            console.print(f"    [dim]fix:[/] {escape(f.fix)}")
    summary = f"{report.errors} error(s), {report.warnings} warning(s) — {report.kind} config"
    console.print(f"[{'red' if report.errors else 'green'}]{escape(name)}: {summary}[/]")
