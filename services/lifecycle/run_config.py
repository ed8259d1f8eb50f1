"""The run's config on a resume: this machine's copy (checked against the hash it was launched with) or
else the pod's own copy (present, and the one launched); neither is a refusal that says what to do."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from services.lifecycle.events import LifecycleError
from services.lifecycle.shell import PodShell


async def pod_has_config(shell: PodShell, record: dict[str, Any]) -> None:
    """Without the config on this machine, a resume needs the pod's copy: present and the one launched."""
    path, why = record.get("config"), local_config_problem(record)
    if not path:
        raise LifecycleError(
            f"the run record names no config on the pod and {why}", hint="launch the run again with its config"
        )
    rc, out, _ = await shell.exec(["sh", "-c", 'test -f "$1" && cat "$1"', "sh", path])
    if rc != 0:
        raise LifecycleError(
            f"the run's config {path} is gone from the pod and {why}", hint="launch the run again with its config"
        )
    got = hashlib.sha256(out.encode()).hexdigest()[:12]
    if record.get("config_hash") and got != record["config_hash"]:
        raise LifecycleError(
            f"the pod's copy of the run's config {path} changed since the launch (sha256 {got}, "
            f"launched with {record['config_hash']}) and {why}",
            hint="launch the run again with its config",
        )


def local_config_problem(record: dict[str, Any]) -> str:
    try:
        local_config(record)
    except LifecycleError as exc:
        return f"this machine's copy cannot stand in: {exc}"
    return "this machine has it"


def local_config(record: dict[str, Any]) -> bytes:
    """The run's config from this machine, checked against the hash it was launched with."""
    path = record.get("local_config")
    try:
        data = Path(path).read_bytes() if path else b""
    except OSError as exc:
        raise LifecycleError(f"cannot read the run's config {path}: {exc.strerror}") from None
    if not data or hashlib.sha256(data).hexdigest()[:12] != record.get("config_hash"):
        raise LifecycleError(
            f"the run's config {path or '(unknown)'} is missing or changed since the launch",
            hint="launch it on the new pod yourself, with its config",
        )
    return data
