"""One request with retries: 429 and 5xx (and transport errors) are retried with exponential backoff
and full jitter; Vast sends no Retry-After and often a plain-text 429 body, so bodies are never assumed
to be JSON. Anything else that is not 2xx raises :class:`ProviderFailure` with the provider's reason.

A rejected key is told apart from a missing pod: Vast answers a bad key with **404** "Invalid user key",
so a 404 only means "no such instance" when its body is not about the key (401/403 never do)."""

from __future__ import annotations

import asyncio
import functools
import platform
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.offers.models import ProviderFailure, UnexpectedAnswer, error_message
from services.offers.payload import MAX_BODY, TooDeep, loads

# Loaded with the first request: the provider modules stay light to import (the Offers pane's keys line).
if TYPE_CHECKING:
    import httpx

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # total tries
    base: float = 0.5  # seconds; try n waits uniform(0, base·2ⁿ) (capped), "full jitter"
    cap: float = 8.0
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep

    def delay(self, attempt: int) -> float:
        return random.uniform(0.5, 1.0) * min(self.cap, self.base * 2**attempt)


async def request_json(
    client: httpx.AsyncClient, method: str, url: str, *, api_key: str, retry: RetryPolicy | None = None, **kwargs: Any
) -> Any:
    """The decoded JSON of a 2xx answer. The body is streamed and never held past :data:`MAX_BODY`
    (a Content-Length over it is refused unread); its nesting is measured before json parses it. Either
    garbage is :class:`UnexpectedAnswer` ("over 20 MB", "nested too deep"): one provider's error line."""
    import httpx

    retry = retry or RetryPolicy()
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": user_agent(),
        **kwargs.pop("headers", {}),
    }
    last = ""
    for attempt in range(retry.attempts):
        try:
            async with client.stream(method, url, headers=headers, follow_redirects=True, **kwargs) as resp:
                code = resp.status_code
                if 200 <= code < 300:
                    return _decode(await _body(resp, MAX_BODY), code)
                text = (await _body(resp, MAX_ERROR_BODY, cut=True) or b"").decode("utf-8", "replace")
        except httpx.TimeoutException:
            last, status = "timed out", None
        except httpx.TransportError as exc:
            last, status = f"connection failed: {type(exc).__name__}", None
        else:
            status = code
            last = error_message(code, text)
            if code not in RETRY_STATUS:
                auth = is_auth_error(code, text)
                raise ProviderFailure(_hint(code, last, auth), code, auth=auth)
        if attempt + 1 < retry.attempts:
            await retry.sleep(retry.delay(attempt))
    raise ProviderFailure(f"{last} (after {retry.attempts} tries)", status, uncertain=True)


@functools.cache
def user_agent() -> str:
    """``prime-train-tui/<version> python/<version>``: the providers' own CLIs name themselves this way, so a
    provider can tell this product's requests apart (and reach its users about them). Looked up once: the
    package metadata costs ~45 ms."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("prime-train-tui")
    except PackageNotFoundError:
        mine = "0+unknown"
    return f"prime-train-tui/{mine} python/{platform.python_version()}"


MAX_ERROR_BODY = 64 * 1024  # an error answer is read this far: its first line or JSON message is all we show


async def _body(resp: httpx.Response, cap: int, *, cut: bool = False) -> bytes | None:
    """At most ``cap`` bytes of the body (decompressed), read as a stream: None when it is longer (or
    says so in Content-Length) — the rest is never read; with ``cut`` the first ``cap`` bytes instead."""
    length = resp.headers.get("content-length", "")
    if not cut and length.isdigit() and int(length) > cap:
        return None
    buf = bytearray()
    async for chunk in resp.aiter_bytes():
        buf += chunk
        if len(buf) > cap:
            return bytes(buf[:cap]) if cut else None
    return bytes(buf)


def _decode(body: bytes | None, status: int) -> Any:
    """A 2xx answer's JSON; garbage raises, marked ``uncertain`` (a create answered this way may have
    started a pod)."""
    if body is None:
        raise UnexpectedAnswer("", f"over {MAX_BODY // 2**20} MB", status, uncertain=True)
    try:
        return loads(body)
    except TooDeep:
        raise UnexpectedAnswer("", "nested too deep", status, uncertain=True) from None
    except ValueError:  # json.JSONDecodeError, UnicodeDecodeError, a 5000-digit number
        raise ProviderFailure(f"HTTP {status}: invalid JSON in the answer", status, uncertain=True) from None


_AUTH_WORDS = (
    "invalid user key",
    "invalid_user_key",
    "invalid api key",
    "invalid-api-key",
    "invalid_api_key",
    "api key was invalid",
    "not authenticated",
    "unauthorized",
    "unauthorised",
    "authorization failed",
    "authentication",
    "invalid token",
    "forbidden",
)


def is_auth_error(status: int, body: str) -> bool:
    """401/403, or a 404 whose body is about the key (Vast: 404 "Invalid user key")."""
    if status in (401, 403):
        return True
    low = body.lower()
    return status == 404 and any(w in low for w in _AUTH_WORDS)


NOT_FOUND: Any = object()  # request_unless_gone's answer for a 404 about the instance (not about the key)


async def request_unless_gone(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> Any:
    """request_json about one instance; a 404 that is not a key error answers :data:`NOT_FOUND`."""
    try:
        return await request_json(client, method, url, **kwargs)
    except ProviderFailure as exc:
        if exc.status == 404 and not exc.auth:
            return NOT_FOUND
        raise


def _hint(status: int, message: str, auth: bool = False) -> str:
    if auth and status != 403:
        return f"{message} — check the API key"
    if status == 402:
        return f"{message} — add funds to the account"
    return message
