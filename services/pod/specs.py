"""Turning what the user typed (``--pod``, the add-pod box, pods.toml) into :class:`Pod`s."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from services.errors import PodSpecError
from services.models import Pod, PodKind

# user@host:port, host:port, [v6]:port, [v6], a bare v6 (no port: its colons would be ambiguous), bare host
# or ssh alias; user part may hold dots/dashes. A v6 may carry a zone (fe80::1%eth0).
_SPEC = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9._][A-Za-z0-9._-]*)@)?"
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?)\]|(?P<host>[A-Za-z0-9_.-]+)"
    r"|(?P<bare6>[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?))"
    r"(?::(?P<port>\d{1,5}))?$"
)
# a DNS name (labels of letters, digits, '-' and '_', not starting or ending with '-') or an IPv4 address
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)(?:[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.)*"
    r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.?$"
)
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")


def _v6(text: str, spec: str) -> str:
    """An IPv6 literal written compressed (so one pod has one spelling), or PodSpecError."""
    try:
        return ipaddress.IPv6Address(text).compressed
    except ValueError:
        raise PodSpecError(f"not an IPv6 address in {spec[:80]!r}", hint="an IPv6 pod is user@[addr]:port") from None


def ssh_host(host: object) -> str:
    """An SSH host from outside (a provider's answer): a DNS name, an IPv4 address or an IPv6 address
    (brackets dropped, written compressed). Anything else — spaces, shell characters, a leading '-', an
    overlong name — is PodSpecError: it would be saved to pods.toml and connected to."""
    text = str(host).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text and re.fullmatch(r"[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?", text):
        return _v6(text, text)
    if _HOSTNAME.match(text):
        return text
    raise PodSpecError(
        f"not a usable SSH host: {text[:60]!r}{'…' if len(text) > 60 else ''}",
        hint="a DNS name, an IPv4 or an IPv6 address",
    )


def ssh_user(user: object) -> str:
    """An SSH user name from outside, or PodSpecError (the same letters pods.toml accepts in user@host)."""
    text = str(user).strip()
    if not _USER.match(text):
        raise PodSpecError(f"not a usable SSH user: {text[:40]!r}")
    return text


def ssh_target(user: str | None, host: str, port: int | None) -> str:
    """``user@host:port`` as parse_pod_spec reads it back (an IPv6 host in brackets)."""
    where = f"[{host}]" if ":" in host else host
    return f"{user + '@' if user else ''}{where}{f':{port}' if port else ''}"


def parse_pod_spec(spec: str, *, name: str | None = None) -> Pod:
    """``user@host[:port]``, ``host``/an ssh alias, ``local`` or ``demo`` → Pod.

    Anything that is not given stays unset so ``~/.ssh/config`` fills it in (an alias keeps its
    HostName/User/Port/IdentityFile)."""
    text = spec.strip()
    if not text:
        raise PodSpecError("empty pod", hint="type user@host[:port], an ssh alias, or 'local'")
    if text == "local":
        return Pod(name=name or "local", kind=PodKind.LOCAL)
    if text == "demo":
        return Pod(name=name or "demo", kind=PodKind.DEMO)
    m = _SPEC.match(text)
    if not m:
        raise PodSpecError(f"not a pod: {text!r}", hint="expected user@host[:port], an ssh alias, or 'local'")
    port = None
    if m["port"] is not None:
        port = int(m["port"])
        if not 0 < port < 65536:
            raise PodSpecError(f"port out of range in {text!r}", hint="ports are 1-65535")
    if m["bare6"] is not None:
        if port is not None:  # "::1:22" is itself an address: a port needs the brackets
            return Pod(name=name or text, kind=PodKind.SSH, host=_v6(f"{m['bare6']}:{m['port']}", text), user=m["user"])
        host = _v6(m["bare6"], text)
    else:
        host = _v6(m["v6"], text) if m["v6"] else m["host"]
    return Pod(name=name or text, kind=PodKind.SSH, host=host, user=m["user"], port=port)


# the keys of one [pods.NAME] table of pods.toml
POD_KEYS = (
    "target",
    "host",
    "user",
    "port",
    "run_dir",
    "price_per_hr",
    "probe_dir",
    "provider",
    "provider_id",
    "deadline",
    "kind",
)
# pods.toml's kind: what the host is. "pod" (the default) a machine that trains; "slurm" a Slurm cluster's
# login node, whose jobs and nodes are read through it (services/slurm)
POD_KINDS = ("pod", "slurm")


def pod_from_table(name: str, table: dict[str, Any]) -> Pod:
    """One ``[pods.NAME]`` table of pods.toml → Pod (raises PodSpecError with the pod's name)."""
    if not isinstance(table, dict):
        raise PodSpecError(f"pods.{name} must be a table")
    known = set(POD_KEYS)
    unknown = sorted(set(table) - known)
    if unknown:
        raise PodSpecError(
            f"pods.{name}: unknown key(s) {', '.join(unknown)}", hint=f"known keys: {', '.join(sorted(known))}"
        )
    if "target" in table:
        base = parse_pod_spec(str(table["target"]), name=name)
    else:
        base = parse_pod_spec(str(table.get("host") or name), name=name)
    user = table.get("user", base.user)
    port = table.get("port", base.port)
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
        raise PodSpecError(f"pods.{name}.port must be an integer 1-65535, got {port!r}")
    kind = table.get("kind", "pod")
    if kind not in POD_KINDS:
        raise PodSpecError(
            f"pods.{name}.kind must be one of {', '.join(map(repr, POD_KINDS))}, got {kind!r}",
            hint='"slurm" when the host is a Slurm cluster\'s login node',
        )
    if kind == "slurm" and base.kind is PodKind.DEMO:
        raise PodSpecError(f"pods.{name}: the simulated pod is not a Slurm cluster", hint='remove kind = "slurm"')
    price = table.get("price_per_hr")
    if price is not None and (not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0):
        raise PodSpecError(f"pods.{name}.price_per_hr must be a number ≥ 0, got {price!r}")
    return Pod(
        name=name,
        kind=base.kind,
        host=base.host,
        user=None if user is None else str(user),
        port=port,
        run_dir=_opt_str(table.get("run_dir")),
        price_per_hr=None if price is None else float(price),
        probe_dir=_opt_str(table.get("probe_dir")),
        provider=_opt_str(table.get("provider")),
        provider_id=_opt_str(table.get("provider_id")),
        deadline=_deadline(name, table.get("deadline")),
        saved=True,
        scheduler=None if kind == "pod" else kind,
    )


def _deadline(name: str, value: Any) -> float | None:
    """A TOML datetime (with offset) or an ISO string → epoch seconds."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise PodSpecError(f"pods.{name}.deadline is not a date-time: {value!r}") from None
    if not isinstance(value, datetime):
        raise PodSpecError(f"pods.{name}.deadline must be a date-time, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def pod_to_table(pod: Pod) -> dict[str, Any]:
    """Inverse of :func:`pod_from_table` (only what is set, so the file stays short)."""
    out: dict[str, Any] = {}
    if pod.kind is PodKind.SSH:
        out["host"] = pod.host
        if pod.user:
            out["user"] = pod.user
        if pod.port:
            out["port"] = pod.port
    else:
        out["target"] = pod.kind.value
    for key in ("run_dir", "price_per_hr", "probe_dir", "provider", "provider_id"):
        value = getattr(pod, key)
        if value is not None:
            out[key] = value
    if pod.scheduler is not None:
        out["kind"] = pod.scheduler
    if pod.deadline is not None:
        out["deadline"] = datetime.fromtimestamp(round(pod.deadline), tz=timezone.utc)
    return out


def merge_pods(*groups: Iterable[Pod]) -> list[Pod]:
    """Concatenate pod lists keeping the first pod of each name (pods.toml wins over --pod)."""
    seen: dict[str, Pod] = {}
    for group in groups:
        for pod in group:
            seen.setdefault(pod.name, pod)
    return list(seen.values())


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
