"""Which credentials a config's run needs on its pod: W&B logging needs WANDB_API_KEY, a gated model
needs HF_TOKEN (issue 32, item 9). A run that lacks one fails at its first W&B log call (or waits on
wandb's login prompt), or at the model download. Known only from the file and models.toml: no network.
"""

from __future__ import annotations

from typing import Any

from services.config.findings import as_table

WANDB_ENV = "WANDB_API_KEY"
HF_ENV = "HF_TOKEN"
# where a config turns W&B on: the current [monitors.wandb] and the older top-level [wandb], in each
# sub-config of an rl file too
_WANDB_TABLES = tuple(
    prefix + table for prefix in ((), ("trainer",), ("orchestrator",)) for table in (("monitors", "wandb"), ("wandb",))
)
_MODEL_NAMES = (
    ("model", "name"),
    ("trainer", "model", "name"),
    ("orchestrator", "model", "name"),
    ("inference", "vllm", "model"),
    ("inference", "model", "name"),
    ("vllm", "model"),
)


def _get(data: dict, path: tuple) -> Any:
    node: Any = data
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def needed(data: dict[str, Any]) -> dict[str, str]:
    """{environment variable: why the run needs it} for a parsed config."""
    from services.config.memory import registry

    # the exact id only: a mirror under another account (same basename) is usually not gated
    gated = {name.lower(): name for name, shape in registry().items() if shape.gated}
    out: dict[str, str] = {}
    for path in _WANDB_TABLES:
        table = as_table(_get(data, path))
        if table is not None and table.get("offline") is not True:
            out[WANDB_ENV] = f"[{'.'.join(path)}] logs to W&B"
            break
    for path in _MODEL_NAMES:
        name = _get(data, path)
        if isinstance(name, str) and name.lower() in gated:
            out[HF_ENV] = f"{gated[name.lower()]} is gated on the Hugging Face hub (its licence must be accepted)"
            break
    return out
