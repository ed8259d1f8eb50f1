"""What a launch, kill, resume or cleanup says: its :class:`Event` stream (the front-ends render it by
kind) and its one error, :class:`LifecycleError`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from services.errors import PrimeTrainError
from services.lifecycle.preflight import Check


class LifecycleError(PrimeTrainError):
    """A launch/kill/resume/cleanup could not be done; the message says why."""


Action = Literal["launch", "kill", "resume", "cleanup"]
# check: one pre-flight check's result (``check`` set); step / progress: what is being done; warn: went on
# regardless; done: the action succeeded (always last; ``data`` its result); error: it failed (always last)
EventKind = Literal["check", "step", "progress", "warn", "done", "error"]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))


@dataclass(frozen=True)
class Event:
    action: Action
    kind: EventKind
    message: str
    progress: float | None = None  # 0..1 when known
    check: Check | None = None
    data: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:  # the front-ends render by kind: an unknown one would be lost
            raise ValueError(f"unknown event kind {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "kind": self.kind, "message": self.message}
        if self.progress is not None:
            out["progress"] = round(self.progress, 3)
        if self.check is not None:
            out["check"] = self.check.to_json()
        if self.data is not None:
            out["data"] = self.data
        return out


def with_hint(exc: PrimeTrainError) -> str:
    """The error's sentence with its hint, on one line."""
    hint = getattr(exc, "hint", "")
    return f"{exc} (hint: {hint})" if hint else str(exc)
