"""prime-rl's own verdict on a config, by the version installed on the pod (issue 16).

Pre-flight runs the launch command with ``--dry-run`` on the pod (prime-rl "only validates and dumps resolved
configs"; the helper does it, ``pod/agent/actions.py``) and sends back the end of its output. Here that output
is read: pydantic's validation errors (``N validation error(s) for RLConfig``, then per error a location line
``trainer.model.lora.rank`` and an indented message ``Input should be greater than 0 [type=..., ...]``) are
mapped back to the lines of the user's file; anything else (a crash, an unknown flag) is reported by its last
line.

``wanted`` decides whether to run it: ``auto`` runs it for prime-rl's own entry points only, recognised by
their config-file argument ``@ file`` (pydantic-config's syntax): another trainer given ``--dry-run`` might
just start training.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

NAME = "prime-rl accepts the config"
_HEADER = re.compile(r"^\s*(\d+) validation errors? for (\w+)")
_TYPE_SUFFIX = re.compile(r"\s*\[type=[^\]]*\]\s*$")
_LOC = re.compile(r"^[A-Za-z_][\w\-]*(?:\.[\w\-\[\]'\"=, ]+)*$")


@dataclass(frozen=True)
class DryRunError:
    loc: str  # dotted, as pydantic prints it ("" for an error of the whole config)
    message: str
    line: int | None = None  # in the user's file


def wanted(mode: str, command: str) -> bool:
    """Whether pre-flight runs the dry run for this launch command (``mode``: auto | on | off)."""
    if mode == "off":
        return False
    if mode == "on":
        return True
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return "@" in words or any(w.startswith("@") and len(w) > 1 for w in words)


def parse(output: list[str]) -> list[DryRunError]:
    """pydantic's validation errors in the dry run's output (every block of them), in order."""
    errors: list[DryRunError] = []
    in_block, loc = False, None
    for raw in output:
        line = raw.rstrip()
        if _HEADER.match(line):
            in_block, loc = True, None
            continue
        if not in_block:
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if indent == 0:
            if _LOC.match(text):
                loc = text
                continue
            in_block = False  # the block ended (a traceback line, a log line)
            continue
        if text.startswith("For further information"):
            continue
        if indent <= 2 or loc is None:
            errors.append(DryRunError(loc or "", _TYPE_SUFFIX.sub("", text)))
            loc = None
    return errors


def _path(loc: str) -> tuple:
    parts: list = []
    for part in loc.split("."):
        parts.append(int(part) if part.isdigit() else part)
    return tuple(parts)


def locate(errors: list[DryRunError], config_text: str) -> list[DryRunError]:
    """Each error with the line of its key in the user's file (the nearest key the file has: a union's tag
    or a missing field points at its table)."""
    from services.config.positions import key_positions, position

    try:
        positions = key_positions(config_text)
    except Exception:  # noqa: BLE001 - an unreadable file: the errors without lines
        return errors
    out = []
    for e in errors:
        line = None
        if e.loc:
            found = position(positions, _path(e.loc))
            line = found[0] if found != (1, 1) or _path(e.loc)[:1] in positions else None
        out.append(DryRunError(e.loc, e.message, line))
    return out


def verdict(code: int | None, output: list[str], errors: list[DryRunError], config_text: str | None) -> tuple[str, str]:
    """(detail, fix) of a dry run that refused the config (``errors``: :func:`parse` of its output)."""
    if errors:
        if config_text is not None:
            errors = locate(errors, config_text)
        shown = []
        for e in errors[:3]:
            where = f"line {e.line}: " if e.line else ""
            shown.append(f"{where}{e.loc + ': ' if e.loc else ''}{e.message}")
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        n = len(errors)
        return (
            f"prime-rl on the pod rejects {n} setting{'s' if n != 1 else ''}: " + "; ".join(shown) + more,
            "correct the setting(s) prime-rl names in the config: the version installed on the pod decides",
        )
    last = next((ln.strip() for ln in reversed(output) if ln.strip()), "")
    return (
        f"prime-rl's dry run exited with code {code}" + (f": {last[:300]}" if last else " and printed nothing"),
        "read the dry run's output on the pod (the launch command with --dry-run), or turn the check off "
        'with [lifecycle] dry_run = "off"',
    )
