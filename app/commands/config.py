"""``prime-train-tui config save|list|diff|restore``: named versions of a config file.

config save FILE --name N [--notes T]   store the file's current text
config list FILE [--json]               the saved versions, oldest first
config diff FILE A [B] [--json]         changed keys between versions (B defaults to the file)
config restore FILE V                   write version V back (the current text is saved first)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.commands._support import EXIT_OK, EXIT_USAGE, fail


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "config",
        help="save, list, diff and restore versions of a config",
        description="Named versions of a prime-rl config, stored under the XDG data dir.",
    )
    act = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = act.add_parser("save", help="store the file's current text as a version")
    s.add_argument("file", type=Path)
    s.add_argument("--name", required=True)
    s.add_argument("--notes", default="")
    ls = act.add_parser("list", help="list saved versions")
    ls.add_argument("file", type=Path)
    ls.add_argument("--json", action="store_true")
    d = act.add_parser("diff", help="changed keys between two versions (or a version and the file)")
    d.add_argument("file", type=Path)
    d.add_argument("a", metavar="A")
    d.add_argument("b", metavar="B", nargs="?", help="default: the file as it is now")
    d.add_argument("--json", action="store_true")
    r = act.add_parser("restore", help="write a version back to the file (current text saved first)")
    r.add_argument("file", type=Path)
    r.add_argument("version")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.settings import data_dir
    from services.config import versions
    from services.config.findings import ConfigError
    from services.config.validate import read_config

    root = data_dir() / "versions"
    try:
        if args.action == "save":
            v = versions.save(args.file, root, args.name, args.notes)
            print(f"saved {args.file} as version {v.id}")
        elif args.action == "list":
            items = versions.list_versions(args.file, root)
            if args.json:
                sys.stdout.write(json.dumps({"file": str(args.file), "versions": [v.__dict__ for v in items]}) + "\n")
            else:
                _print_list(args.file, items)
        elif args.action == "diff":
            old = versions.text_of(args.file, root, args.a)
            new = versions.text_of(args.file, root, args.b) if args.b else read_config(args.file)
            changes = versions.diff(old, new)
            if args.json:
                doc = {
                    "file": str(args.file),
                    "a": args.a,
                    "b": args.b or "current",
                    "changes": [c.__dict__ for c in changes],
                }
                sys.stdout.write(json.dumps(doc, default=str) + "\n")
            else:
                _print_diff(args.a, args.b or "current", changes)
        elif args.action == "restore":
            v = versions.restore(args.file, root, args.version)
            print(f"restored {args.file} to {v.id}; the previous text is saved as 'before restore'")
    except ConfigError as exc:
        return fail(str(exc), exc.hint, EXIT_USAGE)
    return EXIT_OK


def _print_list(file: Path, items) -> None:
    import time

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"versions of {file}", title_justify="left")
    for col in ("id", "name", "saved", "lines", "notes"):
        table.add_column(col)
    for v in items:
        table.add_row(v.id, v.name, time.strftime("%Y-%m-%d %H:%M", time.localtime(v.created)), str(v.lines), v.notes)
    Console().print(table if items else f"no saved versions of {file}")


def _print_diff(a: str, b: str, changes) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if not changes:
        Console().print(f"{a} and {b} are the same")
        return
    table = Table(title=f"{a} → {b}", title_justify="left")
    table.add_column("key")
    table.add_column(a, style="red")
    table.add_column(b, style="green")
    for c in changes:
        table.add_row(
            escape(c.key),
            "" if c.kind == "added" else escape(repr(c.old)),
            "" if c.kind == "removed" else escape(repr(c.new)),
        )
    Console().print(table)
