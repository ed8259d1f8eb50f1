"""Push notifications: the ``[notify]`` table of settings.toml and the apprise senders.

::

    [notify]
    urls = ["ntfy://my-topic", "slack://T000/B000/XXXX", "json://alerts.example:8080/hook"]
    min_severity = "warning"      # info | warning | critical: below it nothing is pushed
    quiet_hours = "22:00-07:00"   # local time: only critical alerts open out loud then
    min_interval_s = 1800         # at most one "opened" per pod and rule per this long
    resolve_after_s = 120         # an alert must stay clear this long before "resolved"
    timeout_s = 20                # one push to one target: its total time, connect to last byte
    retry_for_s = 21600           # a push that failed is retried (services/watch/outbox.py) this long

One URL syntax for Slack, Discord, Telegram, ntfy, email, plain JSON webhooks... (apprise). The URLs carry
tokens: they are secrets. Nothing here prints, logs or stores one: they are shown masked (``slack://***``),
errors about them name their position, apprise's own logger is silenced (it may name hosts and tokens),
and apprise keeps no persistent store on disk. ``$PRIME_TRAIN_TUI_NOTIFY`` (URLs separated by spaces or
commas) adds URLs without writing them into a file or onto a command line (``ps`` shows those).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from services.errors import PrimeTrainError, SettingsError
from services.models import Severity
from services.tomlfile import TomlFile, show_value
from services.watch.threads import Message, Policy, QuietHours

ENV_URLS = "PRIME_TRAIN_TUI_NOTIFY"
NOTIFY_KEYS: dict[str, Any] = {
    "urls": None,
    "min_severity": str,
    "quiet_hours": str,
    "min_interval_s": float,
    "resolve_after_s": float,
    "timeout_s": float,
    "retry_for_s": float,
}  # urls: checked here, never echoed
TIMEOUT_S = 20.0
RETRY_FOR_S = 6 * 3600.0
STUCK_MAX = 2  # sends abandoned at their deadline but still running, per target: no more are started
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
    timeout_s: float = TIMEOUT_S
    retry_for_s: float = RETRY_FOR_S

    def __repr__(self) -> str:  # never the URLs
        return (
            f"NotifySettings(urls={[mask_url(u) for u in self.urls]}, min_severity={self.min_severity.value}, "
            f"quiet_hours={self.quiet_hours}, min_interval_s={self.min_interval_s:g}, "
            f"resolve_after_s={self.resolve_after_s:g}, timeout_s={self.timeout_s:g}, "
            f"retry_for_s={self.retry_for_s:g})"
        )

    def policy(self) -> Policy:
        return Policy(self.min_severity, self.min_interval_s, self.resolve_after_s, self.quiet_hours)

    def with_urls(self, extra: Iterable[str]) -> NotifySettings:
        urls = list(self.urls)
        for u in extra:
            if u and u not in urls:
                urls.append(u)
        return replace(self, urls=tuple(urls))

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
        raise doc.fail(
            "notify.urls must be an array of URL strings (its value is not shown: URLs are secrets)", "notify", "urls"
        )
    for i, url in enumerate(urls):
        if not isinstance(url, str) or "://" not in url:
            raise doc.fail(
                f'notify.urls[{i}] is not a notification URL like "ntfy://topic" (not shown: URLs are secrets)',
                "notify",
                "urls",
                hint=f"each service's URL: {WIKI}",
            )
    kw: dict[str, Any] = {"urls": tuple(urls)}
    if "min_severity" in table:
        try:
            kw["min_severity"] = Severity(table["min_severity"])
        except ValueError:
            raise doc.fail(
                f"notify.min_severity must be info, warning or critical, not {show_value(table['min_severity'])}",
                "notify",
                "min_severity",
            ) from None
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
    for key in ("timeout_s", "retry_for_s"):
        if key in table:
            if not table[key] > 0 or table[key] > 7 * 86400:
                raise doc.fail(
                    f"notify.{key} must be a number of seconds > 0 (at most a week), got {show_value(table[key])}",
                    "notify",
                    key,
                )
            kw[key] = float(table[key])
    return NotifySettings(**kw).with_urls(env_urls(env))


def _apprise() -> Any:
    try:
        import apprise
    except ImportError:
        raise PrimeTrainError(
            "push notifications need apprise, which is not installed", hint="pip install 'prime-train-tui[watch]'"
        ) from None
    quiet = logging.getLogger("apprise")  # it may name a URL's host or token: never in our logs
    quiet.setLevel(logging.CRITICAL + 1)
    quiet.propagate = False
    return apprise


_TYPES = {Severity.CRITICAL: "failure", Severity.WARNING: "warning", Severity.INFO: "info"}


def target_key(url: str) -> str:
    """How the outbox names a target without storing its URL: a short hash of it (not reversible for a URL that
    carries a token; the same URL gives the same key in the next watcher, so a retry finds its target)."""
    return hashlib.sha256(("prime-train-tui notify\0" + str(url)).encode()).hexdigest()[:16]


class Target:
    """One URL's apprise sender. ``start`` runs one push in a daemon thread of its own: the caller waits for it
    up to a deadline and then abandons it (a service that trickles its answer byte by byte defeats apprise's
    connect/read timeouts, so only a thread left behind bounds the total time; never joined, it cannot hold
    the process at exit)."""

    def __init__(self, number: int, url: str, sender: Any) -> None:
        self.number, self.shown, self.key = number, mask_url(url), target_key(url)
        self._sender = sender
        self._lock = threading.Lock()
        self.running = 0  # sends in flight, abandoned ones included

    @property
    def name(self) -> str:
        """ "#2 json://***": its position in the settings and its service, nothing of its address."""
        return f"#{self.number} {self.shown}"

    def send(self, message: Message) -> tuple[bool, str]:
        """One push, blocking: (delivered, why not); never raises."""
        kind = "success" if message.kind == "resolved" else _TYPES.get(message.severity, "info")
        try:
            ok = bool(self._sender.notify(body=message.body, title=message.title, notify_type=kind))
        except Exception as exc:  # noqa: BLE001 - a broken service never stops the watcher
            return False, f"the push failed ({type(exc).__name__})"
        return ok, "" if ok else "the service refused it or could not be reached"

    def start(self, message: Message, done: Callable[[bool, str], None]) -> bool:
        """Push in a daemon thread; ``done(delivered, why)`` is called from it when it ends. False (nothing
        started) while ``STUCK_MAX`` earlier sends to this target are still running."""
        with self._lock:
            if self.running >= STUCK_MAX:
                return False
            self.running += 1

        def run() -> None:
            try:
                result = self.send(message)
            finally:
                with self._lock:
                    self.running -= 1
            try:
                done(*result)
            except Exception:  # noqa: BLE001 - the waiter is gone (its loop closed at exit)
                pass

        threading.Thread(target=run, name=f"notify {self.name}", daemon=True).start()
        return True


class Notifier:
    """One apprise sender per URL (so a failure is reported for that URL alone, masked), each push bounded by
    ``timeout_s`` of total time."""

    def __init__(self, urls: Iterable[str], timeout_s: float = TIMEOUT_S) -> None:
        urls = list(urls)
        self.timeout_s = timeout_s
        self.targets: list[Target] = []
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
                raise SettingsError(
                    f"notification URL #{i} ({mask_url(url)}) is not one apprise understands",
                    hint=f"check it against {WIKI} (the URL itself is not shown: it is a secret)",
                )
            # the service itself, not the Apprise wrapper: that one runs the push in a process-wide thread pool
            # whose threads Python joins at exit, so a push stuck there held the watcher's exit
            self.targets.append(Target(i, url, sender[0]))

    def __bool__(self) -> bool:
        return bool(self.targets)

    def send(self, message: Message) -> list[tuple[str, bool]]:
        """Push one message to every URL at once, blocking at most ``timeout_s``: [(masked URL, delivered)]
        (a target still busy at the deadline counts as not delivered); never raises."""
        results: dict[int, bool] = {}
        finished = threading.Condition()

        def done_for(i: int) -> Callable[[bool, str], None]:
            def done(ok: bool, _why: str) -> None:
                with finished:
                    results[i] = ok
                    finished.notify_all()

            return done

        started = [t.start(message, done_for(i)) for i, t in enumerate(self.targets)]
        end = time.monotonic() + self.timeout_s
        with finished:
            while len(results) < sum(started) and (left := end - time.monotonic()) > 0:
                finished.wait(left)
            return [(t.shown, results.get(i, False)) for i, t in enumerate(self.targets)]


def hello_message(now_text: str) -> Message:
    return Message(
        "test",
        "[TEST] prime-train-tui notifications work",
        f"A test message from prime-train-tui ({now_text}). Alerts will arrive like this one: "
        "opened, escalated, resolved, with the pod, run, step, the evidence and the fix.",
        Severity.INFO,
    )
