"""The run's command line: its template filled in, the secrets it takes from this machine's environment,
and their values hidden from every message."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable


def hide_values(text: str, values: Iterable[str]) -> str:
    for v in sorted((v for v in values if v and len(v) >= 4), key=len, reverse=True):
        text = text.replace(v, "****")
    return text


def collect_secrets(names: Iterable[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {n: env[n] for n in names if env.get(n)}


def render(template: str, **values: str | int) -> str:
    """Fill ``{config}``/``{run_dir}``/``{step}`` (shell-quoted); other braces are left alone."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", shlex.quote(str(value)) if key != "step" else str(int(value)))
    return out
