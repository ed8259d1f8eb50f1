"""Launch and resume on a Slurm cluster (a pod of ``kind = "slurm"``; issue 19), as async generators of Event.

The launch is prime-rl's own multi-node launcher (the configured command, ``uv run rl @ {config}`` with the
config's ``[deployment] type = "multi_node"`` and ``[slurm]``) run on the login node, in the run dir on the
shared filesystem, in the foreground: it writes its sbatch script and submits it; placement is its own. We
check first (the config, the command and the disk on the login node, no job of an earlier run still in the run
dir), upload the config, stream the launcher's output (secrets masked; the secrets reach it through its
environment from a small runner's stdin, never a file), find the job it submitted ("Submitted batch job N",
else the user's job that appeared meanwhile), record the run on the login node (``slurm_jobs.slurm_runs``) and
wait until Slurm has it running or pending (with the reason in words).

Resume = the newest recorded run whose job has ended, from the newest COMPLETE checkpoint in its run dir (the
same checkpoint rules as a pod's): the launcher again, with the resume arguments, recorded as a resumed run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from secrets import token_hex
from typing import TYPE_CHECKING, Any

from services import runs
from services.errors import PrimeTrainError
from services.lifecycle import preflight as pf
from services.lifecycle.command import collect_secrets, hide_values, render
from services.lifecycle.events import Action, Event, LifecycleError, with_hint
from services.lifecycle.lock import hold
from services.lifecycle.preflight import Check, LifecycleSettings
from services.lifecycle.records import checkpoints, default_run_dir, newest_complete
from services.lifecycle.shell import PodShell
from services.lifecycle.slurm_jobs import records_dir, slurm_runs
from services.slurm.cluster import SlurmCluster
from services.slurm.health import pending_reason
from services.slurm.models import SlurmError, SlurmJob

if TYPE_CHECKING:
    from services.pod.connection import Connection


LAUNCH_TIMEOUT = 600.0  # the launcher (uv sync included, the first time) must have submitted within this
JOB_WAIT = 60.0  # then Slurm must show the job running or pending within this
PENDING_SETTLE = 10.0  # a just-submitted job pends "None" until the scheduler has looked at it
_SUBMITTED = re.compile(r"Submitted batch job (\d+(?:_\d+)?)")
_LOGIN_CHECKS = ("free disk", "trainer command")  # the pod pre-flight's checks that mean something on a login node
NODE_CHECK = "a compute node"
NODE_WAIT_S = 20  # srun --immediate: a node free within this, else the check is skipped (the job would queue)
_NODE_SCRIPT = r"""
echo "@@ptt node ${SLURMD_NODENAME:-$(hostname)}"
if [ -f "$1" ]; then echo "@@ptt shared yes"; else echo "@@ptt shared no"; fi
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>&1 | head -n 16; else echo "@@ptt nosmi"; fi
"""
# Reads the environment (secrets included) as one JSON line on its stdin, then becomes the launcher in the run
# dir, stderr joined to stdout and stdin closed: nothing of it is ever written to a file.
_RUNNER = (
    "import json,os,sys\n"
    "os.dup2(1,2)\n"
    "r=json.loads(sys.stdin.readline())\n"
    "os.environ.update(r['env'])\n"
    "os.chdir(r['cwd'])\n"
    "n=os.open(os.devnull,os.O_RDONLY)\n"
    "os.dup2(n,0)\n"
    "os.execv('/bin/sh',['/bin/sh','-c',r['cmd']])\n"
)


def job_env(settings: LifecycleSettings, secrets: dict[str, str]) -> dict[str, str]:
    """What the launcher's environment gets (sbatch passes it on to the job): the secrets and the user's own
    [lifecycle] env, but not the single-node defaults (NCCL_IB_DISABLE=1 would keep a multi-node run off
    InfiniBand)."""
    env = {k: v for k, v in settings.env.items() if pf.DEFAULT_ENV.get(k) != v}
    return {"PYTHONUNBUFFERED": "1", **env, **secrets}


# ------------------------------------------------------------------------------------ launch


async def launch(
    conn: Connection,
    config: Path | None,
    *,
    settings: LifecycleSettings | None = None,
    command: str | None = None,
    run_dir: str | None = None,
    force: bool = False,
    environ: dict[str, str] | None = None,
    timeout: float = LAUNCH_TIMEOUT,
    wait: float = JOB_WAIT,
    _resume: dict[str, Any] | None = None,
) -> AsyncIterator[Event]:
    """Pre-flight on the login node, upload the config, run the launcher, record the job; ends with done
    (the record in ``data``) or error."""
    settings = settings or LifecycleSettings()
    action: Action = "resume" if _resume else "launch"
    secrets = collect_secrets(settings.secrets, environ)
    try:
        async with hold(conn, action) as guard:
            async for ev in _launch(
                conn, config, settings, command, run_dir, force, secrets, action, _resume, guard, timeout, wait
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
    timeout: float,
    wait: float,
) -> AsyncIterator[Event]:
    t0 = time.monotonic()
    shell = PodShell(conn)
    cluster = SlurmCluster(conn)
    await shell.home()
    data: bytes | None
    checked: Path | None
    if resume is None:
        if config is None or not Path(config).is_file():
            raise LifecycleError(f"config not found: {config}")
        config = Path(config)
        data = config.read_bytes()
        config_hash, config_name = hashlib.sha256(data).hexdigest()[:12], config.name
        run_abs = shell.abspath(run_dir or default_run_dir(conn.pod, config))
        remote_config = f"{run_abs}/.ptt/config/{config_hash}/{config_name}"
        base_command = render(command or settings.command, config=remote_config, run_dir=run_abs)
        full, local_config, checked = base_command, str(config.resolve()), config
    else:
        rec, step = resume["run"], int(resume["step"])
        config_hash, config_name = rec.get("config_hash", ""), rec.get("config_name", "")
        run_abs, remote_config, base_command = rec["run_dir"], rec["config"], rec["base_command"]
        full = f"{base_command} {render(settings.resume_args, step=step)}"
        local_config, data = rec.get("local_config"), _local_copy(rec)
        checked = Path(local_config) if data is not None and local_config else None
    shown = hide_values(full, secrets.values())

    yield Event(action, "step", f"pre-flight on {conn.pod.name}'s login node", progress=0.05)
    failures: list[Check] = []
    check = pf.config_check(checked)
    if resume is not None and check.status == pf.FAIL:  # the very config this run was launched with
        check = Check(
            check.name,
            pf.WARN,
            check.detail + " — the config this run was launched with, so the resume goes on",
            check.fix,
        )
    async for ev in _checks(conn, shell, cluster, settings, run_abs, full, action, check, failures):
        yield ev
    if failures and not force:
        raise LifecycleError(
            f"pre-flight failed: {', '.join(c.name for c in failures)} — {failures[0].detail}", hint=failures[0].fix
        )
    if failures:
        yield Event(action, "warn", f"launching despite {len(failures)} failed check(s) (forced)")
    await guard.ready()  # the login node's action lock: nothing is changed before it is held
    if data is not None:
        await shell.put(data, remote_config)
        yield Event(action, "step", f"config {config_name} → {remote_config}", progress=0.2)
    else:
        from services.lifecycle.run_config import pod_has_config  # the login node's copy must be the one launched

        assert resume is not None  # no config bytes only when resuming
        await pod_has_config(shell, resume["run"])
    node = await _node_check(conn, run_abs, remote_config)
    yield Event(action, "check", node.name, check=node)
    if node.status == pf.FAIL and not force:
        raise LifecycleError(f"pre-flight failed: {node.name} — {node.detail}", hint=node.fix)
    try:
        before = {j.id for j in await cluster.jobs(finished_too=True, expand=False)}
    except SlurmError as exc:
        raise LifecycleError(str(exc), hint=exc.hint) from None

    yield Event(action, "step", f"running prime-rl's launcher in {run_abs}: {shown}", progress=0.3)
    job_id = ""
    tail: list[str] = []
    async for line in _run_launcher(conn, shell, run_abs, full, job_env(settings, secrets), timeout, tail):
        line = hide_values(line, secrets.values())
        yield Event(action, "progress", f"launcher: {line}", progress=0.4)
        if m := _SUBMITTED.search(line):
            job_id = m.group(1)
    if not job_id:  # a launcher that does not print sbatch's line: the job of the user that appeared meanwhile
        try:
            new = [j for j in await cluster.jobs(finished_too=True, expand=False) if j.id not in before]
        except SlurmError as exc:
            raise LifecycleError(str(exc), hint=exc.hint) from None
        new.sort(key=lambda j: (j.submit_time or 0.0, j.id))
        job_id = new[-1].id if new else ""
    if not job_id:
        last = hide_values(tail[-1], secrets.values()) if tail else "it printed nothing"
        raise LifecycleError(
            f"the launcher submitted no job on {conn.pod.name}: {last}",
            hint='check the config\'s [deployment] type = "multi_node" and [slurm] sections',
        )

    now = time.time()
    record = {
        "id": runs.new_run_id(now),
        "pod": conn.pod.name,
        "scheduler": "slurm",
        "job_id": job_id,
        "submitted": now,
        "started": now,
        "run_dir": run_abs,
        "config": remote_config,
        "config_name": config_name,
        "config_hash": config_hash,
        "local_config": local_config,
        "command_template": settings.command,
        "base_command": base_command,
        "command": shown,
        "env": job_env(settings, {}),
        "secret_names": sorted(secrets),
        "state": "submitted",
        "resume_step": int(resume["step"]) if resume else None,
        "resumed_from": resume["run"].get("id") if resume else None,
    }
    body = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    try:
        await conn.put_files(
            [(body, f"{records_dir(conn)}/{record['id']}.json", 0o644), (body, f"{run_abs}/.ptt/slurm-run.json", 0o644)]
        )
    except PrimeTrainError as exc:
        raise LifecycleError(
            f"job {job_id} was submitted but the run could not be recorded on {conn.pod.name}: {exc}",
            hint=f"cancel job {job_id} if it is not wanted",
        ) from None
    if settings.runs_dir is not None:
        runs.save_record(settings.runs_dir, record)
        runs.append_log(
            settings.runs_dir, f"{action} {conn.pod.name} run {record['id']} submitted Slurm job {job_id} in {run_abs}"
        )
    yield Event(
        action, "step", f"job {job_id} submitted; run {record['id']} recorded", progress=0.8, data={"job": job_id}
    )
    job = await _settled(conn, cluster, job_id, wait)
    if job.state == "RUNNING":
        where = f"running on {', '.join(job.nodes) or job.nodelist}"
    else:
        where = f"pending: {pending_reason(job.reason)}"
    yield Event(
        action,
        "done",
        f"job {job_id} {where} — run {record['id']} in {run_abs} [{time.monotonic() - t0:.2f} s]",
        progress=1.0,
        data={**record, "job_state": job.state, "nodes": list(job.nodes), "reason": job.reason},
    )


async def _checks(
    conn: Connection,
    shell: PodShell,
    cluster: SlurmCluster,
    settings: LifecycleSettings,
    run_abs: str,
    command: str,
    action: Action,
    config_check: Check,
    failures: list[Check],
) -> AsyncIterator[Event]:
    """The config, the login node's (disk, command, the user's own checks) and the cluster's (no job of an
    earlier run still in this run dir); each failure is added to ``failures``."""
    checks = [config_check]
    timeout = max([60.0] + [float(c.timeout) + 30 for c in settings.checks])
    wanted = set(_LOGIN_CHECKS) | {c.name for c in settings.checks}
    result = await shell.agent(*pf.agent_args(replace(settings, cuda_check=False), run_abs, command), timeout=timeout)
    checks += [c for c in pf.parse_agent(result) if c.name in wanted]
    try:
        active = {j.id: j for j in await cluster.jobs() if not j.finished}
    except SlurmError as exc:
        checks.append(Check("Slurm answers", pf.FAIL, str(exc), exc.hint))
    else:
        busy = [
            (r, active[str(r["job_id"])])
            for r in await slurm_runs(conn)
            if r.get("run_dir") == run_abs and str(r["job_id"]) in active
        ]
        if busy:
            rec, job = busy[-1]
            checks.append(
                Check(
                    "no job in this run dir",
                    pf.FAIL,
                    f"job {job.id} of run {rec.get('id')} is still {job.state.lower()} in {run_abs}",
                    "kill it first, or let it end",
                )
            )
        else:
            checks.append(
                Check(
                    "no job in this run dir",
                    pf.OK,
                    f"Slurm answers; {len(active)} job(s) of yours pending or running, none in this run dir",
                )
            )
    for c in checks:
        if c.status == pf.FAIL:
            failures.append(c)
        yield Event(action, "check", c.name, check=c)


async def _node_check(conn: Connection, run_abs: str, marker: str) -> Check:
    """One task on one compute node (``srun --immediate``, the cluster's default partition): it runs, it sees
    the run dir (``marker``, the config just uploaded into it: the shared filesystem the job will read and
    write) and its GPUs. No node free within NODE_WAIT_S
    is a warning (the real job would only wait in the queue). The check's allocation is waited for until it
    has left the queue, so the job submitted next finds the node free."""
    name = f"ptt-preflight-{token_hex(4)}"
    cmd = (
        f"srun --immediate={NODE_WAIT_S} --nodes=1 --ntasks=1 --time=2 --job-name={name} "
        f"sh -c {shlex.quote(_NODE_SCRIPT)} sh {shlex.quote(marker)}"
    )
    try:
        rc, out, err = await conn.run(cmd, timeout=NODE_WAIT_S + 40.0)
    except asyncio.TimeoutError:
        return Check(
            NODE_CHECK,
            pf.WARN,
            f"srun on a compute node did not finish within {NODE_WAIT_S + 40} s",
            "the cluster may be slow to start tasks; the launch goes on",
        )
    except PrimeTrainError as exc:
        return Check(NODE_CHECK, pf.WARN, f"srun could not be run: {exc}", "the launch goes on")
    finally:
        await _gone(conn, name)
    return node_check_result(rc, out, err, run_abs)


async def _gone(conn: Connection, name: str, wait: float = 15.0) -> None:
    """Wait (bounded) until the check's own allocation has left the queue (not even completing)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            rc, out, _ = await conn.run(f"squeue -h --me -n {shlex.quote(name)} -o %i", timeout=10.0)
        except (asyncio.TimeoutError, PrimeTrainError):
            return
        if rc != 0 or not out.strip():
            return
        await asyncio.sleep(0.5)


def node_check_result(rc: int, out: str, err: str, run_abs: str) -> Check:
    """What the compute-node task printed, as a pre-flight check (pure; see :data:`_NODE_SCRIPT`)."""
    node, shared, gpus, nosmi = "", None, [], False
    for line in out.splitlines():
        if line.startswith("@@ptt node "):
            node = line[len("@@ptt node ") :].strip()[:64]
        elif line.startswith("@@ptt shared "):
            shared = line.endswith("yes")
        elif line.strip() == "@@ptt nosmi":
            nosmi = True
        elif line.startswith("GPU "):
            gpus.append(line)
    if not node:
        text = " ".join(err.split())[:300] or f"srun exit status {rc}"
        if re.search(r"immediate execution impossible|--immediate", err, re.IGNORECASE):
            return Check(
                NODE_CHECK,
                pf.WARN,
                f"no compute node was free within {NODE_WAIT_S} s to check on ({text})",
                "the job will wait in the queue for its nodes; the launch goes on",
            )
        return Check(
            NODE_CHECK,
            pf.FAIL,
            f"a task could not run on a compute node: {text}",
            "check the cluster's partition and your account's access (sinfo, sacctmgr)",
        )
    if shared is False:
        return Check(
            NODE_CHECK,
            pf.FAIL,
            f"the run dir {run_abs} is not visible from compute node {node} (the config uploaded there is not found)",
            "put the run dir on the cluster's shared filesystem (pods.toml run_dir)",
        )
    if nosmi:
        return Check(
            NODE_CHECK,
            pf.WARN,
            f"{node} runs tasks and sees the run dir, but has no nvidia-smi",
            "the job's GPUs cannot be checked or shown; is this a GPU partition?",
        )
    if not gpus:
        return Check(
            NODE_CHECK,
            pf.WARN,
            f"{node} runs tasks and sees the run dir; nvidia-smi listed no GPU",
            "is this a GPU partition?",
        )
    model = gpus[0].split(":", 1)[1].split("(UUID", 1)[0].strip() if ":" in gpus[0] else "GPU"
    return Check(NODE_CHECK, pf.OK, f"{node} runs tasks, sees the run dir, {len(gpus)} x {model}")


async def _run_launcher(
    conn: Connection, shell: PodShell, run_abs: str, command: str, env: dict[str, str], timeout: float, tail: list[str]
) -> AsyncIterator[str]:
    """The launcher's output lines as they come (``tail`` keeps the last ones); LifecycleError when it
    exits non-zero or does not end within ``timeout`` seconds (it is stopped then)."""
    try:
        proc = await conn.start(shlex.join([shell.python, "-c", _RUNNER]))
    except PrimeTrainError as exc:
        raise LifecycleError(f"cannot run the launcher on {conn.pod.name}: {exc}") from None
    deadline = time.monotonic() + timeout
    try:
        await proc.write((json.dumps({"env": env, "cwd": run_abs, "cmd": command}) + "\n").encode())
        proc.write_eof()
        while True:
            try:
                raw = await asyncio.wait_for(proc.readline(), max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise LifecycleError(
                    f"the launcher did not finish within {timeout:g} s on {conn.pod.name}"
                    + (f": {tail[-1]}" if tail else ""),
                    hint="it was stopped; a job it submitted meanwhile is still queued",
                ) from None
            except (OSError, PrimeTrainError) as exc:
                raise LifecycleError(f"connection lost while the launcher ran: {exc}") from None
            if not raw:
                break
            line = raw.decode("utf-8", "replace").rstrip()
            if line.strip():
                tail[:] = (tail + [line])[-12:]
                yield line
        try:
            code = await asyncio.wait_for(proc.wait(), max(5.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise LifecycleError(f"the launcher did not exit within {timeout:g} s on {conn.pod.name}") from None
    except BaseException:
        await proc.kill()
        raise
    if code != 0:
        raise LifecycleError(
            f"the launcher exited with status {code} on {conn.pod.name}: {tail[-1] if tail else 'it printed nothing'}",
            hint="its output is above; fix the config or the command and launch again",
        )


async def _settled(conn: Connection, cluster: SlurmCluster, job_id: str, wait: float) -> SlurmJob:
    """The job once Slurm has it RUNNING, or PENDING for a reason (bounded by ``wait``)."""
    deadline = time.monotonic() + wait
    settle = time.monotonic() + min(PENDING_SETTLE, wait)
    job: SlurmJob | None = None
    while True:
        try:
            job = await _job_now(cluster, job_id)
        except SlurmError as exc:
            raise LifecycleError(f"job {job_id} was submitted, but {exc}", hint=exc.hint) from None
        if job is not None and job.state == "RUNNING":
            return job
        if job is not None and job.pending and (job.reason not in ("", "None") or time.monotonic() > settle):
            return job
        if job is not None and job.finished:
            raise LifecycleError(
                f"job {job_id} ended at once ({job.state.lower().replace('_', ' ')}) on {conn.pod.name}",
                hint="see the job's output in the run dir",
            )
        if time.monotonic() > deadline:
            state = job.state.lower() if job is not None else "not listed by Slurm"
            raise LifecycleError(f"job {job_id} is still {state} {wait:g} s after it was submitted")
        await asyncio.sleep(0.5)


async def _job_now(cluster: SlurmCluster, job_id: str) -> SlurmJob | None:
    """The job as Slurm has it now (queued, or what became of it); None once Slurm has forgotten it."""
    for job in await cluster.jobs(finished_too=True):
        if job.id == job_id:
            return job
    return (await cluster.job_states([job_id])).get(job_id)


def _local_copy(record: dict[str, Any]) -> bytes | None:
    """This machine's copy of the run's config when it is still the one launched (same hash), else None."""
    try:
        data = Path(record["local_config"]).read_bytes() if record.get("local_config") else b""
    except OSError:
        return None
    return data if data and hashlib.sha256(data).hexdigest()[:12] == record.get("config_hash") else None


# ------------------------------------------------------------------------------------ resume


async def plan_resume(
    conn: Connection, settings: LifecycleSettings | None = None, run_id: str | None = None
) -> dict[str, Any]:
    """The newest recorded run (``run_id``: that run), its job (ended: refused while it is queued or running)
    and the newest complete checkpoint in its run dir: {"run", "job", "ckpt_dir", "checkpoint", "skipped"}."""
    settings = settings or LifecycleSettings()
    records = await slurm_runs(conn)
    if run_id is not None:
        records = [r for r in records if str(r.get("id")) == run_id]
        if not records:
            raise LifecycleError(
                f"run {run_id} was not launched on the Slurm cluster {conn.pod.name} from here",
                hint="launch it afresh there",
            )
    if not records:
        raise LifecycleError(f"no run has been launched on {conn.pod.name} from here", hint="launch one first")
    run = records[-1]
    job_id = str(run["job_id"])
    try:
        job = await _job_now(SlurmCluster(conn), job_id)
    except SlurmError as exc:
        raise LifecycleError(str(exc), hint=exc.hint) from None
    if job is not None and not job.finished:
        raise LifecycleError(
            f"job {job_id} of run {run.get('id')} is still {job.state.lower()}", hint="kill it first, or let it end"
        )
    ckpt_dir, ckpts = await checkpoints(PodShell(conn), run["run_dir"], settings)
    best = newest_complete(ckpts)
    if best is None:
        raise LifecycleError(f"no complete checkpoint in {ckpt_dir}", hint="launch the run afresh")
    skipped = [c for c in ckpts if not c["complete"] and c["step"] > best["step"]]
    return {"run": run, "job": job, "ckpt_dir": ckpt_dir, "checkpoint": best, "skipped": skipped}


def describe_resume(plan: dict[str, Any], settings: LifecycleSettings) -> str:
    """The confirm step's text: the run, how its job ended, the checkpoint, what is submitted."""
    run, job, step = plan["run"], plan["job"], plan["checkpoint"]["step"]
    ended = job.state.lower().replace("_", " ") if job is not None else "ended"
    lines = [
        f"Resume run {run.get('id')} (job {run['job_id']}, {ended}) from step_{step}",
        f"newest complete checkpoint in {plan['ckpt_dir']}",
    ]
    lines += [f"  step_{c['step']} is incomplete — skipped" for c in plan["skipped"]]
    lines.append(f"A new job is submitted: {run['base_command']} {render(settings.resume_args, step=step)}")
    return "\n".join(lines)


async def resume(
    conn: Connection,
    *,
    settings: LifecycleSettings | None = None,
    force: bool = False,
    environ: dict[str, str] | None = None,
    timeout: float = LAUNCH_TIMEOUT,
    wait: float = JOB_WAIT,
    run_id: str | None = None,
) -> AsyncIterator[Event]:
    """Submit the newest recorded run (``run_id``: that run) again from its newest complete checkpoint (see
    :func:`plan_resume`)."""
    settings = settings or LifecycleSettings()
    try:
        plan = await plan_resume(conn, settings, run_id)
    except PrimeTrainError as exc:
        yield Event("resume", "error", with_hint(exc))
        return
    step = plan["checkpoint"]["step"]
    for c in plan["skipped"]:
        yield Event("resume", "warn", f"step_{c['step']} is incomplete (half-written) — skipped")
    yield Event(
        "resume",
        "step",
        f"resuming run {plan['run'].get('id')} from step_{step} (newest complete checkpoint)",
        progress=0.02,
        data={"step": step},
    )
    async for ev in launch(
        conn,
        None,
        settings=settings,
        force=force,
        environ=environ,
        timeout=timeout,
        wait=wait,
        _resume={"run": plan["run"], "step": step},
    ):
        yield ev
