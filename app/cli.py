"""The command line (docs/cli.md): the TUI by default, headless subcommands for scripts and CI.

Subcommands live in ``app/commands/`` (one module each, discovered here). Exit codes: 0 success,
1 the work failed (a pod could not be reached, authenticated or trusted, ...), 2 bad arguments or
unreadable input. Errors are one line on stderr plus a hint; ``--json`` output is one JSON document
(or, for a stream, one JSON object per line) on stdout.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import app.commands
from app.commands._support import EXIT_OK, fail, resolve_pod
from services.errors import AuditWriteError, PodSpecError, SettingsError
from services.models import Pod, PodKind

if TYPE_CHECKING:
    from app.tui import PrimeTrainApp


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; given the ``argv`` it will parse, only the subcommand named there (or,
    with ``-h``/``--help`` and no command, all of them) is imported: importing all eighteen command
    modules cost ~40 ms of every start of the TUI. The others are bare names, enough for the choice."""
    parser = argparse.ArgumentParser(
        prog="prime-train-tui",
        description="Terminal dashboard for prime-rl training runs on rented GPU pods.",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument(
        "--pod",
        action="append",
        default=[],
        metavar="POD",
        help="watch this pod too: a pods.toml name, an ssh alias, user@host[:port] or 'local' (repeatable)",
    )
    parser.add_argument("--demo", action="store_true", help="add an embedded SIMULATED pod (no pod, no keys needed)")
    parser.add_argument("--no-local", action="store_true", help="do not show this machine")
    parser.add_argument("--config", type=Path, metavar="FILE", help="a prime-rl TOML to open in the Config pane")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = _command_names()
    wanted = set(names) if argv is None else set(argv) & set(names)
    if argv is not None and not wanted and ("-h" in argv or "--help" in argv):
        wanted = set(names)  # the top-level help lists every command with its summary
    for name in names:
        if name in wanted:
            importlib.import_module(f"app.commands.{name}").register(sub)
        else:
            sub.add_parser(name)  # never chosen: a chosen command's name is in argv, so it was registered
    return parser


def _command_names() -> list[str]:
    """The subcommands: one module each in app/commands/ (files listed, nothing imported; pkgutil, which did
    this, is itself ~2 ms of every start)."""
    folder = Path(app.commands.__file__).parent
    return sorted({p.stem for p in folder.iterdir() if p.suffix in (".py", ".pyc") and not p.stem.startswith("_")})


# subcommands that read API keys or notify URLs and write plain text to stderr (watch logs JSON lines there:
# its own log is the place for this warning)
SECRET_USERS = {"offers", "rentals", "launch", "notify"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        if getattr(args, "func", None) is not None:
            if args.command in SECRET_USERS:
                from app.settings import secret_file_warnings

                for line in secret_file_warnings():
                    print(f"prime-train-tui: warning: {line}", file=sys.stderr)
            return int(args.func(args))
        return _run_tui(args)
    except KeyboardInterrupt:
        return 130
    except AuditWriteError as exc:  # what it records is not known to the app: never report success
        return fail(f"{exc}; {exc.hint}")
    except BrokenPipeError:  # `prime-train-tui status --json | head`: the reader left; no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def tui_pods(args: argparse.Namespace) -> tuple[list[Pod], list[str]]:
    """Pods for the TUI: demo (with --demo), pods.toml, --pod, local. Also returns warnings."""
    from app.settings import SavedPods, broken_pod_notes, load_pods
    from services.pod.specs import merge_pods

    warnings: list[str] = []
    try:
        saved = load_pods()
        warnings += broken_pod_notes(saved)
    except SettingsError as exc:
        saved = SavedPods([], {})
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
    try:
        app_ = tui_app(args)
        app_.run()
    finally:
        gc.enable()  # tui_app turned it off; the App turns it back on once its panes are up
    return app_.return_code or EXIT_OK


def tui_app(args: argparse.Namespace) -> PrimeTrainApp:
    """The TUI's App for these arguments, as `prime-train-tui` builds it. The garbage collector is off from
    here until the App has mounted its panes (PrimeTrainApp._settle_collector freezes what start-up made and
    turns it back on): start-up makes ~300k objects that live as long as the app, and the ~200 collections
    they triggered before the first paint found almost nothing and took ~45 ms of it."""
    gc.disable()
    pods, warnings = tui_pods(args)
    from app.settings import last_config, load_health_settings, secret_file_warnings
    from app.tui import PrimeTrainApp
    from services.monitor.worker import MonitorSettings

    warnings += secret_file_warnings()
    try:
        settings = MonitorSettings(health=load_health_settings())
    except SettingsError as exc:
        warnings.append(f"{exc} — the default alert thresholds apply")
        settings = MonitorSettings()
    return PrimeTrainApp(pods, settings=settings, notices=warnings, config_path=args.config or last_config())


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked: reading the installed package's metadata costs ~45 ms
    (importlib.metadata, email), paid on every start of the app when it was done building the parser."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help="show the program's version and exit"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {_version()}\n")  # on stdout, as argparse's own version action
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prime-train-tui")
    except PackageNotFoundError:
        return "0+unknown"


if __name__ == "__main__":
    raise SystemExit(main())
