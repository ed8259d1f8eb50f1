"""Where the providers' API keys and base URLs come from, in order:

1. the environment: ``PRIME_API_KEY``, ``VAST_API_KEY``, ``LAMBDA_API_KEY``, ``RUNPOD_API_KEY`` (URLs:
   ``PRIME_TRAIN_TUI_{PRIME,VAST,LAMBDA,RUNPOD}_URL``);
2. the files the providers' own CLIs write: ``~/.prime/config.json`` (``api_key``), vast's
   ``~/.config/vastai/vast_api_key`` or the legacy ``~/.vast_api_key`` (none for RunPod: its CLI's
   config file's format is not known to us, so it is not read);
3. the ``[offers]`` table of settings.toml (``keys.<provider>``, ``<provider>_url``).

A key is only ever shown masked (:func:`mask`), with where it came from.

Prime Intellect's team, as its CLI and SkyPilot take it: ``PRIME_TEAM_ID``, else ``team_id`` of
``~/.prime/config.json`` (:func:`find_teams`); a pod is then created for that team (the create body's
``team.teamId``) and billed to it, not to the user's personal account."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from services.offers.payload import loads
from services.offers.providers import PROVIDERS
from services.offers.settings import OfferSettings


@dataclass(frozen=True)
class KeySource:
    key: str
    source: str  # "PRIME_API_KEY", "~/.prime/config.json", "settings.toml"

    def __repr__(self) -> str:  # never the key itself, not even in a traceback
        return f"KeySource({masked_key(self.key)!r}, {self.source!r})"

    @property
    def masked(self) -> str:
        return f"{masked_key(self.key)} ({self.source})"


def masked_key(key: str) -> str:
    return "****" if len(key) < 12 else f"{key[:3]}…{key[-2:]}"


def _read_key_file(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text.splitlines()[0].strip() if text else None


def _prime_config(home: Path, field: str = "api_key") -> str | None:
    try:
        data = loads((home / ".prime" / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get(field) if isinstance(data, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


def find_teams(env: Mapping[str, str] | None = None, home: Path | None = None) -> dict[str, str]:
    """provider -> the team its pods are created for: Prime Intellect's ``PRIME_TEAM_ID``, else ``team_id`` of
    ``~/.prime/config.json``; none: the user's own account."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or "~").expanduser() if home is None else home
    team = env.get("PRIME_TEAM_ID", "").strip() or _prime_config(home, "team_id")
    return {"primeintellect": team} if team else {}


def find_keys(
    env: Mapping[str, str] | None = None, home: Path | None = None, settings: OfferSettings | None = None
) -> dict[str, KeySource]:
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or "~").expanduser() if home is None else home
    table = settings.keys if settings is not None else {}
    out: dict[str, KeySource] = {}
    for name, p in PROVIDERS.items():
        if env.get(p.key_env, "").strip():
            out[name] = KeySource(env[p.key_env].strip(), p.key_env)
            continue
        if name == "primeintellect" and (key := _prime_config(home)):
            out[name] = KeySource(key, "~/.prime/config.json")
            continue
        if name == "vast":
            for rel in (".config/vastai/vast_api_key", ".vast_api_key"):
                if key := _read_key_file(home / rel):
                    out[name] = KeySource(key, f"~/{rel}")
                    break
            if name in out:
                continue
        value = table.get(name)
        if value and value.strip():
            out[name] = KeySource(value.strip(), "settings.toml")
    return out


def find_urls(env: Mapping[str, str] | None = None, settings: OfferSettings | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    set_here = settings.urls if settings is not None else {}
    urls = {}
    for name, p in PROVIDERS.items():
        value = env.get(p.url_env) or set_here.get(name)
        urls[name] = str(value).rstrip("/") if value else p.module.DEFAULT_URL
    return urls


def how_to_set(provider: str) -> str:
    p = PROVIDERS[provider]
    extra = {"primeintellect": " or run `prime login`", "vast": " or run `vastai set api-key`"}.get(provider, "")
    return f"no API key: set {p.key_env}{extra}, or keys.{provider} in [offers] of settings.toml"
