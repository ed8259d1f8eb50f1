"""Push notifications: the ``[notify]`` table of settings.toml and the apprise senders.

::

    [notify]
    urls = ["ntfy://my-topic", "slack://T000/B000/XXXX", "json://alerts.example:8080/hook"]
    min_severity = "warning"      # info | warning | critical: below it nothing is pushed
    quiet_hours = "22:00-07:00"   # local time: only critical alerts open out loud then
    min_interval_s = 1800         # at most one "opened" per pod and rule per this long
    resolve_after_s = 120         # an alert must stay clear this long before "resolved"

One URL syntax for Slack, Discord, Telegram, ntfy, email, plain JSON webhooks... (apprise). The URLs carry
tokens: they are secrets. Nothing here prints, logs or stores one: they are shown masked (``slack://***``),
errors about them name their position, apprise's own logger is silenced (it may name hosts and tokens),
and apprise keeps no persistent store on disk. ``$PRIME_TRAIN_TUI_NOTIFY`` (URLs separated by spaces or
commas) adds URLs without writing them into a file or onto a command line (``ps`` shows those).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.errors import PrimeTrainError, SettingsError
from services.models import Severity
from services.tomlfile import TomlFile, show_value
from services.watch.threads import Message, Policy, QuietHours

ENV_URLS = "PRIME_TRAIN_TUI_NOTIFY"
NOTIFY_KEYS: dict[str, Any] = {"urls": None, "min_severity": str, "quiet_hours": str, "min_interval_s": float,
                               "resolve_after_s": float}  # urls: checked here, never echoed
WIKI = "https://github.com/caronc/apprise/wiki"
log = logging.getLogger(__name__)


def mask_url(url: str) -> str:
    """``slack://T000/B000/XXX`` → ``slack://***``: the service shows, nothing of its address or token."""
    scheme, sep, _ = str(url).partition("://")
    return f"{scheme}://***" if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,15}", scheme) else "***"


def secret_parts(urls: Iterable[str]) -> list[str]:
    """What of each URL must never reach a log line: the URL, its address, and each long piece of it."""
    out: set[str] = set()
    for url in urls:
        url = str(url)
        out.add(url)
        rest = url.partition("://")[2]
        if rest:
            out.add(rest)
        for piece in re.split(r"[/:@?&=#,]+", rest):
            if len(piece) >= 8 and not re.fullmatch(r"[\d.]+", piece):
                out.add(piece)
    return sorted((s for s in out if s), key=len, reverse=True)


@dataclass(frozen=True)
class NotifySettings:
    urls: tuple[str, ...] = field(default=(), repr=False)
    min_severity: Severity = Severity.WARNING
    quiet_hours: QuietHours | None = None
    min_interval_s: float = 1800.0
    resolve_after_s: float = 120.0

    def __repr__(self) -> str:  # never the URLs
        return (f"NotifySettings(urls={[mask_url(u) for u in self.urls]}, min_severity={self.min_severity.value}, "
                f"quiet_hours={self.quiet_hours}, min_interval_s={self.min_interval_s:g}, "
                f"resolve_after_s={self.resolve_after_s:g})")

    def policy(self) -> Policy:
        return Policy(self.min_severity, self.min_interval_s, self.resolve_after_s, self.quiet_hours)

    def with_urls(self, extra: Iterable[str]) -> "NotifySettings":
        urls = list(self.urls)
        for u in extra:
            if u and u not in urls:
                urls.append(u)
        return NotifySettings(tuple(urls), self.min_severity, self.quiet_hours, self.min_interval_s,
                              self.resolve_after_s)

    @property
    def masked(self) -> list[str]:
        return [mask_url(u) for u in self.urls]


def env_urls(env: Mapping[str, str] = os.environ) -> list[str]:
    return [u for u in re.split(r"[\s,]+", env.get(ENV_URLS, "")) if u]


def notify_settings(doc: TomlFile, env: Mapping[str, str] = os.environ) -> NotifySettings:
    """``[notify]`` of settings.toml (under its one error policy), plus ``$PRIME_TRAIN_TUI_NOTIFY``'s URLs."""
    table = doc.table("notify", kinds=NOTIFY_KEYS)
    urls = table.get("urls", [])
    if not isinstance(urls, list):
        raise doc.fail("notify.urls must be an array of URL strings (its value is not shown: URLs are secrets)",
                       "notify", "urls")
    for i, url in enumerate(urls):
        if not isinstance(url, str) or "://" not in url:
            raise doc.fail(f"notify.urls[{i}] is not a notification URL like \"ntfy://topic\" (not shown: "
                           "URLs are secrets)", "notify", "urls", hint=f"each service's URL: {WIKI}")
    kw: dict[str, Any] = {"urls": tuple(urls)}
    if "min_severity" in table:
        try:
            kw["min_severity"] = Severity(table["min_severity"])
        except ValueError:
            raise doc.fail(f"notify.min_severity must be info, warning or critical, not "
                           f"{show_value(table['min_severity'])}", "notify", "min_severity") from None
    if "quiet_hours" in table:
        try:
            kw["quiet_hours"] = QuietHours.parse(table["quiet_hours"])
        except ValueError as exc:
            raise doc.fail(f"notify.{exc}", "notify", "quiet_hours") from None
    for key in ("min_interval_s", "resolve_after_s"):
        if key in table:
            if table[key] < 0:
                raise doc.fail(f"notify.{key} must be a number ≥ 0, got {show_value(table[key])}", "notify", key)
            kw[key] = float(table[key])
    return NotifySettings(**kw).with_urls(env_urls(env))


def _apprise() -> Any:
    try:
        import apprise
    except ImportError:
        raise PrimeTrainError("push notifications need apprise, which is not installed",
                              hint="pip install 'prime-train-tui[watch]'") from None
    quiet = logging.getLogger("apprise")  # it may name a URL's host or token: never in our logs
    quiet.setLevel(logging.CRITICAL + 1)
    quiet.propagate = False
    return apprise


_TYPES = {Severity.CRITICAL: "failure", Severity.WARNING: "warning", Severity.INFO: "info"}


class Notifier:
    """One apprise sender per URL (so a failure is reported for that URL alone, masked). ``send`` blocks
    (HTTP): call it in a thread."""

    def __init__(self, urls: Iterable[str]) -> None:
        urls = list(urls)
        self.targets: list[tuple[str, Any]] = []
        if not urls:
            return
        apprise = _apprise()
        for i, url in enumerate(urls, 1):
            sender = apprise.Apprise(asset=apprise.AppriseAsset(storage_mode="memory"))
            try:
                ok = sender.add(url)
            except Exception:  # noqa: BLE001 - a URL apprise chokes on is a bad URL, whatever it raised
                ok = False
            if not ok:
                raise SettingsError(f"notification URL #{i} ({mask_url(url)}) is not one apprise understands",
                                    hint=f"check it against {WIKI} (the URL itself is not shown: it is a secret)")
            self.targets.append((mask_url(url), sender))

    def __bool__(self) -> bool:
        return bool(self.targets)

    def send(self, message: Message) -> list[tuple[str, bool]]:
        """Push one message to every URL: [(masked URL, delivered)]; never raises."""
        out = []
        kind = "success" if message.kind == "resolved" else _TYPES.get(message.severity, "info")
        for masked, sender in self.targets:
            try:
                ok = bool(sender.notify(body=message.body, title=message.title, notify_type=kind))
            except Exception:  # noqa: BLE001 - a broken service never stops the watcher
                ok = False
            out.append((masked, ok))
        return out


def hello_message(now_text: str) -> Message:
    return Message("test", "[TEST] prime-train-tui notifications work",
                   f"A test message from prime-train-tui ({now_text}). Alerts will arrive like this one: "
                   "opened, escalated, resolved, with the pod, run, step, the evidence and the fix.",
                   Severity.INFO)
