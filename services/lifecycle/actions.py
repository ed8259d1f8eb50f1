"""Launch, kill, resume and cleanup of a training run on a pod, as async generators of :class:`Event`.

Each action talks to the pod through :class:`PodShell`: short commands and the stdlib-only helper
``pod/agent/lifecycle.py`` (uploaded by SFTP under its content hash, like the probe). A generator never
raises a :class:`PrimeTrainError` at its consumer: it yields ``Event(kind="error")`` last instead, so
the CLI and the modal show one reason. ``kind="done"`` ends a successful action. Secret values never
appear in an event (they are masked) and never reach the pod's disk (the helper takes them on stdin).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services import runs
from services.errors import PrimeTrainError
from services.lifecycle import dry_run, preflight as pf
from services.lifecycle.command import collect_secrets, hide_values, render
from services.lifecycle.events import Action, Event, LifecycleError, with_hint
from services.lifecycle.lock import BUSY, held_error, hold, owner_id
from services.lifecycle.preflight import Check, LifecycleSettings
from services.lifecycle.records import (
    active_run,
    backup_on,
    backup_where,
    checkpoints,
    default_run_dir,
    newest_complete,
    pod_runs,
)
from services.lifecycle.run_config import local_config, pod_has_config
from services.lifecycle.shell import PodShell
from services.units import fmt_bytes

if TYPE_CHECKING:
    from services.pod.connection import Connection


# ------------------------------------------------------------------------------------ launch


async def launch(
    conn: Connection,
    config: Path,
    *,
    settings: LifecycleSettings | None = None,
    command: str | None = None,
    run_dir: str | None = None,
    force: bool = False,
    environ: dict[str, str] | None = None,
    _resume: dict[str, Any] | None = None,
) -> AsyncIterator[Event]:
    """Pre-flight, upload the config, start the run detached, record it. Ends with done/error.
    The pod's action lock is taken by the helper itself, in the same exec."""
    settings = settings or LifecycleSettings()
    action: Action = "resume" if _resume else "launch"
    secrets = collect_secrets(settings.secrets, environ)
    try:
        with BUSY.hold(conn.pod.name, action):
            async for ev in _launch(
                conn,
                Path(config) if config else None,
                settings,
                command,
                run_dir,
                force,
                secrets,
                action,
                _resume,
                None,
            ):
                yield ev
    except PrimeTrainError as exc:
        yield Event(action, "error", hide_values(with_hint(exc), secrets.values()))


async def _launch(
    conn: Connection,
    config: Path | None,
    settings: LifecycleSettings,
    command: str | None,
    run_dir: str | None,
    force: bool,
    secrets: dict[str, str],
    action: Action,
    resume: dict[str, Any] | None,
    guard: Any,
) -> AsyncIterator[Event]:
    """ONE exec of the helper's ``launch`` (lock unless ``guard`` holds it already, pre-flight streamed
    check by check, the config and the secrets over its stdin, the start); see pod/agent/actions.py."""
    shell = PodShell(conn)
    t0 = time.monotonic()
    request: dict[str, Any] = {
        "secrets": secrets,
        "force": force,
        "mode": settings.tmux,
        "watch": settings.start_watch_seconds,
        # the helper sets --run-dir and --trainer itself (absolute, rendered)
        "preflight": pf.agent_args(settings, "", "")[1:],
    }
    checked: Path | None = config
    if resume:
        config_hash = resume.get("config_hash", "")
        config_name = resume.get("config_name", "")
        request.update(run_dir=resume["run_dir"], base_command=resume["base_command"], remote_config=resume["config"])
        if resume.get("resume_step") is not None:
            request["suffix"] = render(settings.resume_args, step=resume["resume_step"])
        # the launch's config goes along whenever this machine still has it (a wiped volume, another pod:
        # the pod's copy may be gone); the helper writes it where the pod's copy is missing or differs
        try:
            data = local_config(resume)
        except LifecycleError:
            if resume.get("upload_config"):  # another pod: it has never seen the config
                raise
            await pod_has_config(shell, resume)  # else the pod's own copy must be there, unchanged
            checked = None
        else:
            request["config"] = {"name": config_name, "hash": config_hash, "data": base64.b64encode(data).decode()}
            checked = Path(resume["local_config"])
    else:
        if config is None or not config.is_file():
            raise LifecycleError(f"config not found: {config}")
        data = config.read_bytes()
        config_hash = hashlib.sha256(data).hexdigest()[:12]
        config_name = config.name
        request.update(
            run_dir=run_dir or default_run_dir(conn.pod, config),
            template=command or settings.command,
            config={"name": config_name, "hash": config_hash, "data": base64.b64encode(data).decode()},
        )
    request["preflight"] += pf.login_args(checked, settings.secrets)  # W&B / a gated model: a login on the pod?
    if dry_run.wanted(settings.dry_run, request.get("base_command") or request.get("template") or ""):
        request["dry_run"] = {"timeout": settings.dry_run_timeout}
    if guard is None:
        request["lock"] = {"action": action, "owner": owner_id()}
    run_id = runs.new_run_id()
    request["record"] = {
        "id": run_id,
        "pod": conn.pod.name,
        "config_hash": config_hash,
        "config_name": config_name,
        "command_template": settings.command,
        "started": time.time(),
        "env": dict(settings.env),
        "secret_names": sorted(secrets),
        "nofile": settings.min_nofile,
        "state": "running",
        "resume_step": resume.get("resume_step") if resume else None,
        "resumed_from": resume.get("id") if resume else None,
        "local_config": str(config.resolve())
        if config is not None and not resume
        else (resume or {}).get("local_config"),
    }
    yield Event(action, "step", f"pre-flight on {conn.pod.name}", progress=0.05)
    config_check = pf.config_check(checked)
    if resume and config_check.status == pf.FAIL:
        # byte-identical (hash-checked) to what this run was launched with, forced or not: resuming it
        # must not be refused for it (auto-resume after a preemption never forces)
        config_check = Check(
            config_check.name,
            pf.WARN,
            config_check.detail + " — the config this run was launched with (same hash), so the resume goes on",
            config_check.fix,
        )
    yield Event(action, "check", "config validates", check=config_check)
    where = "tmux" if settings.tmux == "tmux" else ("setsid" if settings.tmux == "setsid" else "tmux or setsid")
    failures: list[Check] = [config_check] if config_check.status == pf.FAIL else []
    if failures and not force:  # the pod's checks are still shown (all failures at once), nothing starts
        async for ev in _pod_checks(shell, settings, request, action, failures):
            yield ev
        _refuse(failures)
    record: dict[str, Any] | None = None
    command_shown = ""
    # each check answers in its own time: the CUDA one within 120 s, the user's within theirs
    quiet = max([180.0] + [float(c.timeout) + 30 for c in settings.checks])
    async for msg in shell.stream(["launch"], request, timeout=quiet):
        kind = msg.get("event")
        if kind == "locked":
            raise held_error(msg.get("held_by") or {}, conn.pod.name)
        if kind == "check":
            c = msg["check"]
            check = Check(c["name"], c["status"], c.get("detail", ""), c.get("fix") or "", c.get("act") or "")
            if c.get("output") is not None and check.status == pf.FAIL:  # prime-rl's dry run refused it
                output = _masked(c["output"], secrets)
                errors = dry_run.parse(output)
                if not errors:  # no validation error to point at (a crash): the end of what it printed
                    for line in output[-12:]:
                        yield Event(action, "warn", f"dry run: {line}")
                detail, fix = dry_run.verdict(c.get("code"), output, errors, _text(checked))
                check = Check(check.name, pf.FAIL, detail, fix)
            if check.status == pf.FAIL:
                failures.append(check)
            yield Event(action, "check", check.name, check=check)
        elif kind == "checked":
            if failures and not force:
                _refuse(failures)
            if failures:
                yield Event(action, "warn", f"starting despite {len(failures)} failed check(s) (--force)")
            command_shown = hide_values(str(msg.get("command", "")), secrets.values())
        elif kind == "config":
            yield Event(action, "step", f"config {config_name} → {msg.get('path')}", progress=0.5)
        elif kind == "started":
            yield Event(action, "step", f"starting detached ({where}): {command_shown}", progress=0.7)
            record = dict(msg["record"])
        elif kind == "exited" and record is not None:  # the helper watched the start: it ended at once
            async for ev in _exited(conn, settings, action, record, msg, secrets):
                yield ev
        elif kind == "error":
            text = hide_values(str(msg.get("error") or "the run did not start"), secrets.values())
            if msg.get("missing_config"):
                raise LifecycleError(text, hint="launch the run again with its config")
            raise LifecycleError(text)
    if record is None:
        raise LifecycleError(f"the pod's helper ended before the run started ({conn.pod.name})")
    record.pop("cwd", None)
    run_dir_abs = record.get("run_dir", "")
    if settings.runs_dir is not None:
        runs.save_record(settings.runs_dir, record)
        runs.append_log(
            settings.runs_dir,
            f"{action} {conn.pod.name} run {run_id} pid {record.get('pid')} ({record.get('method')}) in {run_dir_abs}",
        )
    how = (
        f"tmux session {record['tmux_session']} (attach: tmux attach -t {record['tmux_session']})"
        if record.get("tmux_session")
        else f"process group {record.get('pgid')}"
    )
    yield Event(
        action,
        "done",
        f"run {run_id} started in {how} (pid {record.get('pid')}), log {record['log']} [{time.monotonic() - t0:.2f} s]",
        progress=1.0,
        data=record,
    )


def _masked(lines: Any, secrets: dict[str, str]) -> list[str]:
    return [hide_values(str(line), secrets.values()) for line in (lines if isinstance(lines, list) else [])]


def _text(path: Path | None) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path is not None else None
    except OSError:
        return None


def _refuse(failures: list[Check]) -> None:
    names = ", ".join(c.name for c in failures)
    raise LifecycleError(f"pre-flight failed: {names} — {failures[0].detail}", hint=failures[0].fix)


async def _pod_checks(
    shell: PodShell, settings: LifecycleSettings, request: dict[str, Any], action: Action, failures: list[Check]
) -> AsyncIterator[Event]:
    """The pod's pre-flight alone (no lock, nothing started): shown when the launch is refused already
    (an invalid config), so that every failure is reported at once. Adds the pod's failures."""
    await shell.home()
    run_abs = shell.abspath(request["run_dir"])
    if request.get("base_command"):
        command = request["base_command"]
    else:
        cfg = request.get("config") or {}
        command = render(
            request.get("template") or "",
            run_dir=run_abs,
            config=f"{run_abs}/.ptt/config/{cfg.get('hash')}/{cfg.get('name')}",
        )
    timeout = max([180.0] + [float(c.timeout) + 30 for c in settings.checks])
    try:
        pre = list(request.get("preflight") or [])
        logins = [a for i, a in enumerate(pre) if a == "--login" or (i > 0 and pre[i - 1] == "--login")]
        result = await shell.agent(*pf.agent_args(settings, run_abs, command), *logins, timeout=timeout)
    except LifecycleError as exc:
        yield Event(action, "warn", f"the pod's own checks did not run: {with_hint(exc)}")
        return
    for check in pf.parse_agent(result):
        if check.status == pf.FAIL:
            failures.append(check)
        yield Event(action, "check", check.name, check=check)


async def _exited(
    conn: Connection,
    settings: LifecycleSettings,
    action: Action,
    record: dict[str, Any],
    msg: dict[str, Any],
    secrets: dict[str, str],
) -> AsyncIterator[Event]:
    """The run ended within the helper's watch after its start: its log's tail, then the error."""
    code, after = msg.get("code"), float(msg.get("after") or 0.0)
    tail = [hide_values(str(line), secrets.values()) for line in msg.get("tail") or []][-12:]
    for line in tail:
        yield Event(action, "warn", f"log: {line}")
    if settings.runs_dir is not None:
        runs.save_record(
            settings.runs_dir,
            {
                **{k: v for k, v in record.items() if k != "cwd"},
                "state": "exited",
                "exit_code": code,
                "ended": time.time(),
            },
        )
        runs.append_log(
            settings.runs_dir,
            f"{action} {conn.pod.name} run {record.get('id')} exited with code {code} {after:.1f} s after its start",
        )
    last = tail[-1] if tail else "(the log is empty)"
    raise LifecycleError(
        f"run {record.get('id')} exited with code {code} {after:.1f} s after its start: {last}",
        hint=f"see the log on the pod: {record.get('log')}",
    )


# ------------------------------------------------------------------------------------ kill


async def plan_kill(conn: Connection) -> dict[str, Any] | None:
    """The active run and its processes (what the confirm step shows), or None."""
    return await active_run(PodShell(conn))


async def kill(
    conn: Connection,
    *,
    settings: LifecycleSettings | None = None,
    grace: float | None = None,
    run_id: str | None = None,
) -> AsyncIterator[Event]:
    """SIGTERM, grace, SIGKILL for the pod's active run (``run_id``: only that one). Ends with done/error."""
    settings = settings or LifecycleSettings()
    grace = settings.grace_seconds if grace is None else grace
    try:
        with BUSY.hold(conn.pod.name, "kill"):
            async for ev in _kill(conn, settings, grace, run_id):
                yield ev
    except PrimeTrainError as exc:
        yield Event("kill", "error", with_hint(exc))


async def _kill(
    conn: Connection, settings: LifecycleSettings, grace: float, run_id: str | None
) -> AsyncIterator[Event]:
    """ONE exec of the helper's ``kill``: lock, SIGTERM to the group, the grace period (streamed),
    SIGKILL for what is left, the GPU check; see pod/agent/actions.py."""
    shell = PodShell(conn)
    t0 = time.monotonic()
    request = {"lock": {"action": "kill", "owner": owner_id()}, "grace": grace, "run_id": run_id}
    rid, pids, left, gone, gpu_held = "?", [], [], False, None
    async for msg in shell.stream(["kill"], request, timeout=max(60.0, grace + 30)):
        kind = msg.get("event")
        if kind == "locked":
            raise held_error(msg.get("held_by") or {}, conn.pod.name)
        if kind == "none":
            raise LifecycleError(f"no active run on {conn.pod.name}")
        if kind == "term":
            rid, pids = msg.get("run") or "?", list(msg.get("pids", []))
            yield Event(
                "kill",
                "step",
                f"SIGTERM to run {rid}: {len(pids)} process(es) in group {msg.get('pgid')}",
                progress=0.1,
                data={"pids": pids},
            )
        elif kind == "left":
            left = list(msg.get("pids", []))
            yield Event(
                "kill",
                "progress",
                f"{len(left)} process(es) left, grace {msg.get('remaining', 0):.0f} s",
                progress=0.1 + 0.6 * (1 - len(left) / max(1, len(pids))),
            )
        elif kind == "sigkill":
            yield Event(
                "kill",
                "step",
                f"SIGKILL to {len(msg.get('pids', []))} process(es) still running after {grace:g} s",
                progress=0.75,
            )
        elif kind == "gone":
            left, gone = list(msg.get("left", [])), True
            if left:
                raise LifecycleError(
                    f"{len(left)} process(es) of run {rid} survived SIGKILL: {left[:10]}",
                    hint="they may be stuck in the kernel (D state); check the GPU driver",
                )
            yield Event(
                "kill",
                "check",
                "processes gone",
                check=Check("processes gone", pf.OK, f"all {len(pids)} process(es) of the group ended"),
            )
        elif kind == "gpu":
            if not msg.get("ok"):
                check = Check("GPUs freed", pf.SKIP, f"nvidia-smi: {str(msg.get('error', ''))[:120]}")
            else:
                still = sorted(set(msg.get("pids", [])) & set(pids))
                check = Check(
                    "GPUs freed",
                    pf.FAIL if still else pf.OK,
                    f"pids {still} still hold GPU memory" if still else "no process of the run holds a GPU",
                    "nvidia-smi; kill the leftover pid" if still else "",
                )
                gpu_held = check if still else None
            yield Event("kill", "check", check.name, check=check)
    if not gone:
        raise LifecycleError(f"the pod's helper ended before run {rid}'s processes were gone ({conn.pod.name})")
    if settings.runs_dir is not None:
        runs.update_record(settings.runs_dir, rid, state="killed", ended=time.time())
        runs.append_log(
            settings.runs_dir,
            f"kill {conn.pod.name} run {rid}: {len(pids)} process(es) gone"
            + (f"; GPUs NOT freed: {gpu_held.detail}" if gpu_held else ""),
        )
    if gpu_held is not None:  # the processes are gone, yet the GPUs are not free: not a success
        raise LifecycleError(
            f"run {rid}'s processes are gone but the GPUs are not freed: {gpu_held.detail}", hint=gpu_held.fix
        )
    yield Event(
        "kill",
        "done",
        f"run {rid} killed: {len(pids)} process(es) gone [{time.monotonic() - t0:.2f} s]",
        progress=1.0,
        data={"run": rid, "pids": pids},
    )


# ------------------------------------------------------------------------------------ resume
async def plan_resume(
    conn: Connection, settings: LifecycleSettings | None = None, backup: Any = None, run: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run to resume and the checkpoint it would start from (for the confirm step). With a bucket
    configured (``backup``) and no complete checkpoint on the pod, the newest verified backup is planned
    to be restored first (``plan["restore"]``); nothing is changed here. ``run`` (a local run record)
    resumes that run, possibly on another pod than its own (preemption: its config is uploaded again)."""
    settings = settings or LifecycleSettings()
    shell = PodShell(conn)
    records = await pod_runs(shell)
    if run is not None:
        here = [r for r in records if r.get("id") == run.get("id")]
        if any(r.get("active") for r in records if r.get("id") != run.get("id")):
            other = next(r for r in records if r.get("active"))
            raise LifecycleError(f"run {other['id']} is active on {conn.pod.name}", hint="kill it first")
        records = here or [dict(run, active=False)]
    if not records and settings.runs_dir is not None:
        local = runs.latest_record(settings.runs_dir, conn.pod.name)
        records = [local] if local else []
    if not records:
        raise LifecycleError(f"no run recorded on {conn.pod.name}", hint="launch one first")
    run = records[-1]
    if run.get("active"):
        raise LifecycleError(
            f"run {run['id']} is still running on {conn.pod.name}", hint="kill it first, or let it finish"
        )
    ckpt_dir, ckpts = await checkpoints(shell, run["run_dir"], settings)
    best = newest_complete(ckpts)
    restore: dict[str, Any] | None = None
    if best is None and backup_on(backup):
        from services.backup.bucket import verified_steps
        from services.backup.transfer import source_for_record

        where = backup_where(backup, run["run_dir"])
        source = await source_for_record(conn, run, settings.runs_dir)  # only this run's backups count
        steps = await verified_steps(backup, run["run_dir"], source)
        if steps:
            step = max(steps)
            restore = {"step": step, "where": where, "path": f"{ckpt_dir.rstrip('/')}/step_{step}", "source": source}
            best = {"step": step, "path": restore["path"], "complete": False, "bytes": 0, "restore": True}
        else:
            raise LifecycleError(
                f"no complete checkpoint in {ckpt_dir} and no verified backup in {where}", hint="launch fresh"
            )
    if best is None:
        raise LifecycleError(
            f"no complete checkpoint in {ckpt_dir}", hint="restore one from the backup first, or launch afresh"
        )
    skipped = [c for c in ckpts if not c["complete"] and c["step"] > best["step"]]
    return {"run": run, "ckpt_dir": ckpt_dir, "checkpoint": best, "skipped": skipped, "restore": restore}


async def resume(
    conn: Connection,
    *,
    settings: LifecycleSettings | None = None,
    force: bool = False,
    environ: dict[str, str] | None = None,
    backup: Any = None,
    run: dict[str, Any] | None = None,
) -> AsyncIterator[Event]:
    """Relaunch from the newest complete checkpoint; with a bucket configured and none on the pod,
    restore the newest verified backup first (checked against its manifest on the pod). ``run``: see
    :func:`plan_resume`."""
    settings = settings or LifecycleSettings()
    try:
        plan = await plan_resume(conn, settings, backup, run)
    except PrimeTrainError as exc:
        yield Event("resume", "error", with_hint(exc))
        return
    best = plan["checkpoint"]
    for c in plan["skipped"]:
        yield Event("resume", "warn", f"step_{c['step']} is incomplete (half-written) — skipped")
    base = {**plan["run"], "resume_step": best["step"]}
    if plan["run"].get("pod") not in (None, conn.pod.name):
        base["upload_config"] = True
    if not base.get("base_command"):
        base["base_command"] = base.get("command", "")
    if not plan.get("restore"):
        yield Event(
            "resume",
            "step",
            f"resuming run {plan['run']['id']} from step_{best['step']} (newest complete checkpoint)",
            progress=0.02,
            data={"step": best["step"]},
        )
        async for ev in launch(
            conn, Path(base.get("config") or "."), settings=settings, force=force, environ=environ, _resume=base
        ):
            yield ev
        return
    secrets = collect_secrets(settings.secrets, environ)
    try:
        async with hold(conn, "resume") as guard:
            await guard.ready()
            async for ev in _restore(conn, settings, backup, plan):
                yield ev
            yield Event(
                "resume",
                "step",
                f"resuming run {plan['run']['id']} from step_{best['step']} (restored from {plan['restore']['where']})",
                progress=0.5,
                data={"step": best["step"], "restored": True},
            )
            async for ev in _launch(
                conn, Path(base.get("config") or "."), settings, None, None, force, secrets, "resume", base, guard
            ):
                yield ev
    except PrimeTrainError as exc:
        yield Event("resume", "error", hide_values(with_hint(exc), secrets.values()))


async def _restore(
    conn: Connection,
    settings: LifecycleSettings,
    backup: Any,
    plan: dict[str, Any],
) -> AsyncIterator[Event]:
    """Restore ``plan["restore"]`` onto the pod, with progress events; then check it is complete there."""
    from services.backup.transfer import restore_checkpoint

    step, where = plan["restore"]["step"], plan["restore"]["where"]
    run_dir = plan["run"]["run_dir"]
    yield Event(
        "resume",
        "step",
        f"no complete checkpoint on {conn.pod.name}: restoring step_{step} from {where}",
        progress=0.03,
        data={"restore": step},
    )
    seen: list[Any] = []
    task = asyncio.ensure_future(
        restore_checkpoint(
            conn,
            backup,
            run_dir,
            step,
            on_progress=seen.append,
            ckpt_root=plan["ckpt_dir"],
            source=plan["restore"].get("source"),
        )
    )
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if seen:
                p = seen[-1]
                seen.clear()
                frac = p.done / p.total if p.total else 0.0
                yield Event(
                    "resume",
                    "progress",
                    f"restoring step_{step}: {fmt_bytes(p.done)} of {fmt_bytes(p.total)}",
                    progress=0.03 + 0.4 * frac,
                )
            if done:
                break
        manifest = task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    shell = PodShell(conn)
    _, ckpts = await checkpoints(shell, run_dir, settings)
    got = next((c for c in ckpts if c["step"] == step), None)
    if got is None or not got.get("complete"):
        raise LifecycleError(
            f"step_{step} was restored from {where} but is not complete on the pod",
            hint="check the completeness rule in settings against the backed-up files",
        )
    if settings.runs_dir is not None:
        runs.append_log(
            settings.runs_dir,
            f"resume {conn.pod.name} restored step_{step} from {where} "
            f"({len(manifest.files)} files, {manifest.bytes} bytes, verified)",
        )
    yield Event(
        "resume",
        "check",
        "checkpoint restored",
        check=Check(
            "checkpoint restored",
            pf.OK,
            f"step_{step}: {len(manifest.files)} files, {fmt_bytes(manifest.bytes)}, "
            f"sha256 verified against the manifest",
        ),
        progress=0.45,
        data={"restored": step, "files": len(manifest.files), "bytes": manifest.bytes},
    )
