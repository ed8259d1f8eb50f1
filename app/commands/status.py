"""``prime-train-tui status [POD ...] [--run-dir DIR] [--json]``: one sample and the current alerts per pod.

One look per pod: the probe's ``--once`` sample (GPUs, host, checkpoints) plus one short command that
reads the tail and modification time of the run's logs, ``metrics.jsonl`` and ``training.csv`` (the
probe streams only lines appended after it starts, so a single sample has no history). That decides
the alerts a single look can: stale log (no step for longer than the adaptive budget), errors in the
logs' tails after the last step, disk, open files. The over-60-s rules (dead GPU, NCCL hang) need
history and are left to the TUI.

W&B, when ``WANDB_API_KEY`` is set and the logs' tails name the run (wandb's "View run at" URL): its state
and heartbeat age, as information beside the pod's own evidence (never an alert of its own).

``--json``: ``{"pods": [{"name", "state", "reason", "gpus": [...], "host": {...}, "run": {"step",
"loss", "tokens_per_s", "last_step_age_s", ...}, "alerts": [{"id", "severity", "title", "message",
"line"}], "wandb": null | {"run_path", "state", "heartbeat_age_s", "error"}, "slurm": null | {"jobs": [...],
"nodes": [...], "error"}}]}``. Exit 0 when every pod was reached, 1 otherwise, 2 on bad arguments.

A pod with ``kind = "slurm"`` (pods.toml) is a cluster's login node: besides its own sample, the user's
jobs (pending, running, ended in the last minutes) with their nodes, every node's state, and the alerts
those decide (services/slurm/health.py: a node lost under a running job, a job pending too long, a job
that ended with NODE_FAIL, PREEMPTED, TIMEOUT...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, connected, fail, fail_usage, resolve_pod, saved_pods
from services.text import plain

if TYPE_CHECKING:
    from services.models import Pod
    from services.pod.connection import Connection


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="one sample and the current alerts per pod",
        description="One sample and the alerts a single look can decide, per pod.",
    )
    p.add_argument("pods", nargs="*", metavar="POD", help="pods (default: every pod in pods.toml)")
    p.add_argument("--run-dir", help="the run directory on the pod(s) (default: the pod's run_dir)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to reach each pod")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.errors import PodSpecError, SettingsError

    try:
        if args.pods:
            pods = [resolve_pod(spec) for spec in args.pods]
        else:
            pods = saved_pods()
    except (SettingsError, PodSpecError) as exc:
        return fail_usage(exc)
    if not pods:
        return fail("no pods to look at", "name one (status POD) or add pods to pods.toml", EXIT_USAGE)
    if args.run_dir:
        pods = [replace(p, run_dir=args.run_dir) for p in pods]
    pods = _recorded_run_dirs(pods)
    results = asyncio.run(_all(pods, args.timeout))
    if args.json:
        print(json.dumps({"pods": results}, indent=2))
    else:
        _print(results)
    return EXIT_OK if all(r["reached"] for r in results) else EXIT_FAIL


def _recorded_run_dirs(pods: list) -> list:
    """A pod without a run_dir: the run dir of its newest launch recorded on this machine (a launch on such
    a pod goes to prime-train-tui/runs/<config stem>)."""
    from app.settings import data_dir
    from services.runs import newest_run_dir

    if all(p.run_dir for p in pods):
        return pods
    base = data_dir() / "runs"
    return [p if p.run_dir else replace(p, run_dir=newest_run_dir(base, p.name)) for p in pods]


def _rented_at(pod) -> float | None:
    """When a pod rented through the app was created (the rentals audit log), else None."""
    if not pod.provider_id and not pod.provider:
        return None
    from app.settings import data_dir
    from services.offers.rentals import AUDIT_NAME, AuditLog

    try:
        rentals = AuditLog(data_dir() / AUDIT_NAME).open_rentals()
    except OSError:
        return None
    for r in rentals:
        if r.name == pod.name or (pod.provider_id and (r.provider, r.pod_id) == (pod.provider, pod.provider_id)):
            return r.created_at
    return None


async def _all(pods, timeout: float) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_one(p, timeout) for p in pods)))


async def _one(pod, timeout: float) -> dict[str, Any]:
    from services.errors import AuthError, HostKeyError, PodUnsupported, PrimeTrainError
    from services.models import PodState
    from services.monitor.cluster import cluster_once
    from services.monitor.worker import MonitorSettings

    result: dict[str, Any] = {
        "name": pod.name,
        "state": PodState.OFFLINE.value,
        "reason": "",
        "reached": False,
        "gpus": [],
        "host": None,
        "run": _run_json(None, None),
        "alerts": [],
        "wandb": None,
        "slurm": None,
    }
    try:
        if pod.simulated:  # the demo's run (the TUI's, or one started now in its sandbox), then one look
            from app.demo import ensure_run, note

            note(await asyncio.wait_for(ensure_run(pod), timeout))
        async with connected(pod, demo=MonitorSettings(), timeout=timeout) as conn:
            sample, tails = await _look(conn, pod, timeout)
            cluster = await cluster_once(conn, timeout)  # None unless a Slurm cluster's login node
        result.update(reached=True, state=PodState.ONLINE.value)
        wandb = await _wandb(tails)
        result.update(_judge(pod, sample, tails, host_rules=pod.host_rules, wandb=wandb, rented_at=_rented_at(pod)))
        result["wandb"] = None if wandb is None else wandb.as_json(time.time())
        if cluster is not None:
            result["slurm"], alerts = cluster
            result["alerts"] = [_alert_json(a) for a in alerts] + result["alerts"]
    except HostKeyError as exc:
        result.update(state=PodState.HOSTKEY_UNKNOWN.value, reason=f"{exc} (headless mode never trusts a new key)")
    except AuthError as exc:
        result.update(state=PodState.AUTH_FAILED.value, reason=str(exc))
    except PodUnsupported as exc:  # no exec channel, no python3: what is missing and the fix
        result.update(state=PodState.UNSUPPORTED.value, reason=str(exc))
    except asyncio.TimeoutError:
        result.update(reason=f"no answer within {timeout:g} s")
    except (PrimeTrainError, OSError) as exc:
        result.update(reason=str(exc))
    return result


async def _look(conn: Connection, pod: Pod, timeout: float) -> tuple[Any, dict | None]:
    """The probe's --once sample and the run dir's tails (None without a run dir or when unreadable)."""
    from services.errors import PrimeTrainError
    from services.models import Sample
    from services.monitor.progress import TAIL_SCRIPT
    from services.pod.ssh import SSHConnection

    args = ["--once", "--interval", "1"] + (["--run-dir", pod.run_dir] if pod.run_dir else [])
    stream = await conn.start_probe(args)
    sample = None
    while sample is None:
        line = await asyncio.wait_for(stream.readline(), timeout)
        if not line:
            raise PrimeTrainError("the probe exited without a sample: " + stream.stderr_tail().strip()[-200:])
        try:
            sample = Sample.from_line(line)
        except PrimeTrainError:
            continue  # malformed lines are skipped
    if not pod.run_dir:
        return sample, None
    python = "python3" if isinstance(conn, SSHConnection) else shlex.quote(sys.executable)
    cmd = f"{python} -c {shlex.quote(TAIL_SCRIPT)} {shlex.quote(pod.run_dir)}"
    code, out, _err = await conn.run(cmd, timeout=timeout)
    if code != 0:
        return sample, None
    try:
        return sample, json.loads(out)
    except ValueError:
        return sample, None


def _alert_json(a) -> dict[str, Any]:
    return {"id": a.id, "severity": a.severity.value, "title": a.title, "message": a.message, "line": a.line}


async def _wandb(tails: dict | None):
    """W&B's word on the run the logs name (off without WANDB_API_KEY; one request, in a thread)."""
    from services.monitor import wandb_status

    if tails is None or not wandb_status.enabled():
        return None
    path = None
    for log in tails.get("logs") or []:
        for line in log.get("lines") or []:
            path = wandb_status.run_path_in(str(line)) or path
    if path is None:
        return None
    poller = wandb_status.WandbPoller(path, api_factory=wandb_status.default_api)
    return await asyncio.to_thread(poller.fetch)


def _judge(
    pod, sample, tails: dict | None, *, host_rules: bool, wandb=None, rented_at: float | None = None
) -> dict[str, Any]:
    """Feed one look into the health rules. Each line is timed by its own loguru stamp anchored to its
    file's mtime (``HealthTracker.feed_tails``), so "last step" ages from the pod's own clock, the
    trainer's steps are the run's progress, and an error is cleared only by a later step of its own
    component or of the trainer, as it would have been live."""
    from dataclasses import replace

    from app.settings import load_health_settings
    from services.errors import SettingsError
    from services.monitor.health import HealthSettings, HealthTracker

    try:
        base = load_health_settings()
    except SettingsError:
        base = HealthSettings()  # status still answers; the TUI names the broken table
    settings = replace(base, log_alert_ttl_s=math.inf)  # one look: whatever the tail holds after the last step
    tracker = HealthTracker(
        settings, price_per_hr=pod.price_per_hr, host_rules=host_rules, max_steps=(tails or {}).get("max_steps")
    )
    now = sample.t
    run_note = ""
    if tails is not None:
        now = float(tails.get("now") or sample.t)
        if not tails.get("exists"):
            run_note = f"no such run dir on the pod: {pod.run_dir}"
        tracker.feed_tails(tails)
        if rented_at is None and pod.billed_since_boot and isinstance(tails.get("uptime"), (int, float)):
            tracker.set_billing(now - float(tails["uptime"]), "since the pod started")
    if rented_at is not None:
        tracker.set_billing(rented_at, "since rented")
    note = wandb.note(now) if wandb is not None else ""
    alerts = tracker.observe(replace(sample, log=(), metrics=()), now, wandb_note=note)
    progress = tracker.progress
    return {
        "gpus": [asdict(g) for g in sample.gpus],
        "host": asdict(sample.host),
        "run": _run_json(progress if progress.step is not None else None, now, note=run_note),
        "alerts": [_alert_json(a) for a in alerts],
    }


def _run_json(progress, now: float | None, note: str = "") -> dict[str, Any]:
    keys = (
        "step",
        "max_steps",
        "loss",
        "reward",
        "tokens_per_s",
        "mfu",
        "step_time_s",
        "steps_per_hr",
        "eta_s",
        "cost_so_far",
        "cost_basis",
        "cost_to_finish",
        "finished",
        "source",
        "phase",
    )
    out: dict[str, Any] = {k: getattr(progress, k, None) for k in keys}
    age = None
    if progress is not None and progress.last_step_at is not None and now is not None:
        age = round(max(0.0, now - progress.last_step_at), 1)
    out["last_step_age_s"] = age
    if note:
        out["note"] = note
    return out


def _print(results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def cell(value: Any, style: str = "") -> Text:  # a pod's, Slurm's or an exception's text: never markup
        return Text(plain(value, oneline=True), style=style)

    console = Console()
    table = Table(title="pods", title_justify="left")
    for col in ("pod", "state", "GPUs", "step", "loss", "tok/s", "last step", "alerts"):
        table.add_column(col, justify="left" if col in ("pod", "state") else "right")
    for r in results:
        utils = [g["util"] for g in r["gpus"] if g.get("util") is not None]
        run = r["run"]
        age = run.get("last_step_age_s")
        table.add_row(
            cell(r["name"]),
            cell(r["state"] + (f" ({r['reason']})" if r["reason"] else "")),
            f"{len(r['gpus'])} · {sum(utils) / len(utils):.0f}%" if utils else str(len(r["gpus"])),
            "—" if run["step"] is None else str(run["step"]),
            "—" if run["loss"] is None else f"{run['loss']:.4g}",
            "—" if run["tokens_per_s"] is None else f"{run['tokens_per_s']:,.0f}",
            "—" if age is None else f"{age:.0f} s ago",
            str(len(r["alerts"])),
        )
    console.print(table)
    for r in results:
        if (cluster := r.get("slurm")) is not None:
            _print_cluster(console, r["name"], cluster)
    style = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
    for r in results:
        if (w := r.get("wandb")) is not None:
            beat = "no heartbeat yet" if w["heartbeat_age_s"] is None else f"heartbeat {w['heartbeat_age_s']:.0f} s ago"
            said = f"unavailable ({w['error']})" if w["error"] else f"{w['state'] or 'unknown'}, {beat}"
            console.print(cell(f"{r['name']}: W&B {w['run_path']}: {said} (information only)", "dim"))
        for a in r["alerts"]:
            console.print(cell(f"{r['name']}: {a['title']}", style.get(a["severity"], "")), Text(plain(a["message"])))


def _print_cluster(console, name: str, cluster: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    from services.units import fmt_duration

    def cell(value: Any, style: str = "") -> Text:  # Slurm's text: never markup, no escape sequence
        return Text(plain(value, oneline=True), style=style)

    if cluster["error"]:
        console.print(cell(f"{name}: Slurm did not answer: {cluster['error']}", "yellow"))
        return
    table = Table(title=cell(f"{name}: your Slurm jobs"), title_justify="left")
    for col in ("job", "name", "state", "nodes", "elapsed", "limit", "reason"):
        table.add_column(col, justify="right" if col in ("elapsed", "limit") else "left")
    for j in cluster["jobs"]:
        table.add_row(
            cell(j["id"]),
            cell(j["name"]),
            cell(j["state"]),
            cell(", ".join(j["nodes"]) or j["nodelist"]),
            fmt_duration(j["elapsed_s"]),
            "none" if j["time_limit_s"] is None else fmt_duration(j["time_limit_s"]),
            cell(j["reason"]),
        )
    if not cluster["jobs"]:
        console.print(cell(f"{name}: no Slurm jobs of yours", "dim"))
    else:
        console.print(table)
    down = [n["name"] for n in cluster["nodes"] if not n["responding"]]
    console.print(
        cell(
            f"{name}: {len(cluster['nodes'])} nodes"
            + (f", not responding: {', '.join(down)}" if down else ", all responding"),
            "dim",
        )
    )
