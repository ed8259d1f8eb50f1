"""The providers we read offers from: each one's module, base-URL variable and API-key variable."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from services.offers import lambda_, primeintellect, runpod, vast


@dataclass(frozen=True)
class Provider:
    name: str
    module: ModuleType
    url_env: str
    key_env: str


PROVIDERS: dict[str, Provider] = {
    "primeintellect": Provider("primeintellect", primeintellect, "PRIME_TRAIN_TUI_PRIME_URL", "PRIME_API_KEY"),
    "vast": Provider("vast", vast, "PRIME_TRAIN_TUI_VAST_URL", "VAST_API_KEY"),
    "lambda": Provider("lambda", lambda_, "PRIME_TRAIN_TUI_LAMBDA_URL", "LAMBDA_API_KEY"),
    "runpod": Provider("runpod", runpod, "PRIME_TRAIN_TUI_RUNPOD_URL", "RUNPOD_API_KEY"),
}


def base_urls(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {n: env.get(p.url_env) or p.module.DEFAULT_URL for n, p in PROVIDERS.items()}
