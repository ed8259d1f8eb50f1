"""Run records kept on this machine: one JSON file per run under ``<data dir>/runs/`` (atomic writes).

The pod keeps its own copy (``<run_dir>/.ptt/run.json`` and the pod-wide registry written by
``services/pod/agent/lifecycle.py``); the pod's copy is the truth about processes, ours survives the pod.
A record holds secret NAMES only, never values. Its keys: id, pod, config_hash, config, config_name, command,
base_command, command_template, started, run_dir, log, method, pid, pgid, sid, tmux_session, env,
secret_names, resume_step, resumed_from, state, ended.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

from services.atomic import atomic_write_text


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def save_record(base: Path, record: dict[str, Any]) -> Path:
    path = Path(base) / f"{record['id']}.json"
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n", mode=0o600)
    return path


def update_record(base: Path, run_id: str, **changes: Any) -> dict[str, Any] | None:
    rec = load_record(base, run_id)
    if rec is None:
        return None
    rec.update(changes)
    save_record(base, rec)
    return rec


def load_record(base: Path, run_id: str) -> dict[str, Any] | None:
    try:
        return json.loads((Path(base) / f"{run_id}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def list_records(base: Path, pod: str | None = None) -> list[dict[str, Any]]:
    """Records (oldest first), optionally of one pod. Unreadable files are skipped."""
    out = []
    for path in sorted(Path(base).glob("*.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and (pod is None or rec.get("pod") == pod):
            out.append(rec)
    out.sort(key=lambda r: (r.get("started") or 0, r.get("id", "")))
    return out


def latest_record(base: Path, pod: str) -> dict[str, Any] | None:
    recs = list_records(base, pod)
    return recs[-1] if recs else None


def newest_run_dir(base: Path | None, pod: str) -> str | None:
    """The run dir of the pod's newest recorded run that names one (how the monitor and ``status`` find a
    run launched on a pod without run_dir in pods.toml); None without records or a readable base."""
    if base is None:
        return None
    for rec in reversed(list_records(base, pod)):
        run_dir = rec.get("run_dir")
        if isinstance(run_dir, str) and run_dir.strip():
            return run_dir
    return None


def append_log(base: Path, line: str) -> None:
    """One line in ``<base>/lifecycle.log`` (deletions with their sizes, kills, launches)."""
    path = Path(base) / "lifecycle.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(time.strftime("%Y-%m-%dT%H:%M:%SZ ", time.gmtime()) + line.rstrip("\n") + "\n")
