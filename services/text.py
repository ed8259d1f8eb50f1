"""Text from outside (a pod, a log, a provider, Slurm, a model, an exception) made safe to show.

``plain`` is the one function every such string goes through before a terminal, a toast, a table cell or a
push message sees it. It removes what a terminal would act on instead of print: escape sequences (CSI such
as ``ESC[2J``; OSC such as a window title, an OSC 8 link or an OSC 52 clipboard write; DCS, SOS, PM, APC
strings; two-byte escapes), the C0 controls but tab and newline, DEL, the C1 controls (``0x80``-``0x9f``,
which some terminals read as escapes of their own) and the Unicode controls that reorder or hide what is
shown (bidirectional overrides and isolates). A colour code in a log line goes with its sequence, so a
coloured line reads as its words.

It does not make text safe from markup: a string is only read as markup where the code asks for it, so the
UI shows outside text as ``Content``/``Text`` objects or with ``markup=False``; never format it into a markup
string."""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")

# A whole escape sequence, matched before the lone controls are removed, so none of its printable bytes is
# left behind: CSI (ESC [ or the C1 CSI), parameters, intermediates and a final byte; OSC/DCS/SOS/PM/APC
# strings up to their terminator (BEL, ST as ESC \ or the C1 ST) or, unterminated, to the end of the text
# (a terminal would swallow that much); then any other two-byte escape (ESC and one character).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?",
    re.DOTALL,
)
# what is left: C0 but tab and newline, DEL, C1, and the bidirectional controls (LRE..RLO, LRI..PDI, and the
# marks a terminal does not print): removed
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_BREAKS = re.compile(r"[\t\n]+")


def plain(text: object, *, oneline: bool = False) -> str:
    """``text`` (anything: it is ``str()``-ed) with no escape sequence or control character a terminal would
    act on. ``oneline`` also turns tabs and line breaks into single spaces, for a label or a table cell."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case: nothing to remove (tab and newline are not printable)
        return s.strip() if oneline else s
    s = _CONTROL.sub("", _SEQUENCE.sub("", s.replace("\r\n", "\n").replace("\r", "\n")))
    return _BREAKS.sub(" ", s).strip() if oneline else s


def plain_fields(obj: T) -> T:
    """``obj`` with every text in it made ``plain`` (one line each), through dataclasses (rebuilt with
    ``replace``), tuples, lists and dicts: for a structure read whole from outside (a Slurm cluster's jobs
    and nodes). Enum members and anything else are kept as they are; what needed nothing is returned as is."""
    if isinstance(obj, str):
        return obj if isinstance(obj, Enum) else plain(obj, oneline=True)  # type: ignore[return-value]
    if is_dataclass(obj) and not isinstance(obj, type):
        changed: dict[str, Any] = {}
        for f in fields(obj):
            if f.init:
                value = getattr(obj, f.name)
                new = plain_fields(value)
                if new is not value and new != value:
                    changed[f.name] = new
        return replace(obj, **changed) if changed else obj
    if isinstance(obj, (tuple, list)) and not hasattr(obj, "_fields"):  # a named tuple is kept
        items = [plain_fields(x) for x in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
    if isinstance(obj, dict):
        return {plain_fields(k): plain_fields(v) for k, v in obj.items()}  # type: ignore[return-value]
    return obj
