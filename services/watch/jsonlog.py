"""The watcher's logs: one JSON object per line on stderr, secrets redacted.

``{"ts": "2025-01-31T14:02:10.123Z", "level": "info", "logger": "services.watch", "msg": "alert opened",
"pod": "p1", "rule": "no-progress", ...}`` — the keys given as ``extra={"fields": {...}}`` are merged in.
Every line is scrubbed of the secrets it was given (the notification URLs and their long pieces) before
it is written, whatever logged it; an exception's traceback is kept to its last line."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

REDACTED = "***"


class JsonFormatter(logging.Formatter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for s in self.secrets:
            if s in text:
                text = text.replace(s, REDACTED)
        return text

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        out: dict[str, Any] = {"ts": ts, "level": record.levelname.lower(), "logger": record.name}
        try:
            out["msg"] = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not lose the line
            out["msg"] = str(record.msg)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for k, v in fields.items():
                out.setdefault(str(k), v)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            out["error"] = f"{type(exc).__name__}: {exc}"[:500]
        return self.scrub(json.dumps(out, default=str, ensure_ascii=False))


def setup(stream: IO[str] | None = None, *, secrets: Iterable[str] = (), level: int = logging.INFO) -> logging.Handler:
    """Route every logger to JSON lines on ``stream`` (stderr). Returns the handler (to remove it again)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_ptt_json", False):
            root.removeHandler(old)
    handler._ptt_json = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("asyncssh", "urllib3", "botocore", "boto3"):  # their INFO is a line per channel / request
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler


def event(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
