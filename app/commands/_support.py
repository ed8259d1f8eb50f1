"""What the subcommands share: resolving POD arguments and failing with one clear line."""

from __future__ import annotations

import sys

from services.models import Pod

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def resolve_pod(spec: str, saved: list[Pod] | None = None) -> Pod:
    """A pods.toml name first, then ``local``/``demo``/an ssh alias/``user@host[:port]``."""
    if saved is None:
        from app.settings import load_pods

        saved = load_pods()
    for pod in saved:
        if pod.name == spec:
            return pod
    from services.pods import parse_pod_spec

    return parse_pod_spec(spec)


def fail(message: str, hint: str = "", code: int = EXIT_FAIL) -> int:
    print(f"prime-train-tui: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    return code
