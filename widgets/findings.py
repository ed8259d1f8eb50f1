"""The Config pane's findings list: severity, line:column, message and suggested fix of each finding.

A view only: it is handed findings and posts :class:`FindingsList.Jump` (Enter) and
:class:`FindingsList.ApplyFix` (``f``); the pane controller does the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from services.config.findings import Finding, Severity

GLYPH = {Severity.ERROR: ("✖", "bold red"), Severity.WARNING: ("▲", "bold yellow"), Severity.INFO: ("●", "cyan")}


def finding_text(f: Finding) -> Text:
    glyph, style = GLYPH[f.severity]
    text = Text.assemble(
        (f"{glyph} ", style), (f"{f.line}:{f.column} ", "bold"), (f.message, ""), (f"  [{f.id}]", "dim")
    )
    if f.fix:
        text.append("\n   fix: ", style="dim")
        text.append(f.fix + (" (f)" if f.edit is not None else ""), style="green" if f.edit else "dim")
    return text


def summary_text(findings: Sequence[Finding], kind: str) -> str:
    errors = sum(f.severity is Severity.ERROR for f in findings)
    warnings = sum(f.severity is Severity.WARNING for f in findings)
    if not findings:
        return f"✔ no findings · {kind} config"
    return f"{errors} error(s) · {warnings} warning(s) · {kind} config"


class FindingsList(OptionList):
    """One option per finding; Enter jumps to it, ``f`` applies its fix."""

    BINDINGS = [
        Binding("f", "apply_fix", "Apply fix", id="config.apply_fix"),
        Binding("enter", "select", "Go to its line", id="config.jump"),
    ]

    DEFAULT_CSS = """
    FindingsList { height: 1fr; border: none; }
    """

    class Jump(Message):
        def __init__(self, finding: Finding) -> None:
            super().__init__()
            self.finding = finding

    class ApplyFix(Message):
        def __init__(self, finding: Finding) -> None:
            super().__init__()
            self.finding = finding

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.findings: tuple[Finding, ...] = ()

    def show(self, findings: Sequence[Finding]) -> None:
        findings = tuple(findings)
        if findings == self.findings:
            return
        keep = self.highlighted
        self.findings = findings
        self.clear_options()
        self.add_options([Option(finding_text(f), id=f"finding-{i}") for i, f in enumerate(findings)])
        if findings:
            self.highlighted = min(keep or 0, len(findings) - 1)

    @property
    def current(self) -> Finding | None:
        if self.highlighted is None or not (0 <= self.highlighted < len(self.findings)):
            return None
        return self.findings[self.highlighted]

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if 0 <= event.option_index < len(self.findings):
            self.post_message(self.Jump(self.findings[event.option_index]))

    def action_apply_fix(self) -> None:
        if self.current is not None:
            self.post_message(self.ApplyFix(self.current))
