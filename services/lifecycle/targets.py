"""Where a run runs, one target per kind of pod: :func:`target_for` gives the pod's. The front-ends (the
lifecycle dialog, the ``launch/kill/resume/cleanup`` commands) ask it for a plan, show the plan's own words,
and show the events of the action it runs; none of them asks which kind of pod it holds.

Cleanup is the same for both (the checkpoints are files the pod or login node reaches).

- :class:`SingleHost`: one machine (SSH, this machine, the simulated pod): the run is a detached process group
  (``services.lifecycle.actions``).
- :class:`SlurmCluster`: a cluster's login node (pods.toml ``kind = "slurm"``): prime-rl's launcher submits a
  job (``slurm_launch``), kill cancels the run's job (``slurm_jobs``).

A new kind of target (Kubernetes, SkyPilot) is one more class here and one more line in :func:`target_for`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.lifecycle.events import Event
from services.lifecycle.preflight import LifecycleSettings
from services.lifecycle.records import default_run_dir, pod_runs
from services.lifecycle.shell import PodShell

if TYPE_CHECKING:
    from services.lifecycle.cleanup import CleanupPlan
    from services.models import Pod
    from services.pod.connection import Connection


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch starts. ``doc``: the command line's JSON ``target``; ``lines``: its account before the
    events; ``text``: the dialog's (fields as :class:`KillPlan`'s)."""

    doc: dict[str, Any]
    lines: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class KillPlan:
    """What a kill stops. ``doc``: the command line's JSON ``target``; ``lines``: its account before the
    question; ``text``: the dialog's; ``question``: the command line's confirm."""

    doc: dict[str, Any]
    lines: tuple[str, ...]
    text: str
    question: str
    job: str | None = None  # a cluster: the job to cancel


@dataclass(frozen=True)
class ResumePlan:
    """What a resume starts from (fields as :class:`KillPlan`'s); ``backup``: the bucket it may restore from."""

    doc: dict[str, Any]
    lines: tuple[str, ...]
    text: str
    question: str
    backup: Any = field(default=None, compare=False)


class SingleHost:
    """A run on one machine: a detached process group, resumed from a checkpoint on it or in the bucket."""

    restores_from_bucket = True  # resume restores the newest verified backup when the pod has none
    kill_button = "Kill"  # the dialog's confirm label

    def plan_launch(
        self, pod: Pod, config: Path, run_dir: str | None, settings: LifecycleSettings, command: str | None = None
    ) -> LaunchPlan:
        """What a launch of ``config`` will do; ``run_dir`` None: the default one, ``command`` None: the
        settings' template."""
        run_dir = run_dir or default_run_dir(pod, config)
        command = command or settings.command
        return _launch_plan(
            pod,
            config,
            run_dir,
            command,
            f"Launch {config.name} on {pod.name}",
            "Pre-flight checks run first; a failed one stops the launch.",
        )

    def launch(
        self,
        conn: Connection,
        config: Path,
        *,
        settings: LifecycleSettings,
        command: str | None = None,
        run_dir: str | None = None,
        force: bool = False,
    ) -> AsyncIterator[Event]:
        from services.lifecycle import actions

        return actions.launch(conn, config, settings=settings, command=command, run_dir=run_dir, force=force)

    async def plan_kill(self, conn: Connection, settings: LifecycleSettings) -> KillPlan | None:
        """The active run and its processes, or None when the pod has none."""
        from services.lifecycle import actions

        target = await actions.plan_kill(conn)
        if target is None:
            return None
        procs = target.get("procs", [])
        head = f"run {target['id']} in {target['run_dir']}: {len(target.get('pids', []))} process(es)"
        listed = "\n".join(f"  {p['pid']:>7}  {p['cmd'][:70]}" for p in procs[:10])
        return KillPlan(
            doc={k: target.get(k) for k in ("id", "run_dir", "pid", "pgid", "tmux_session", "pids")},
            lines=(head, *(f"  {p['pid']:>7}  {p['cmd'][:100]}" for p in procs[:12])),
            text=f"Kill {head}\n{listed}\nSIGTERM, {settings.grace_seconds:g} s grace, then SIGKILL.",
            question=f"kill run {target['id']} on {conn.pod.name}?",
        )

    def kill(
        self, conn: Connection, plan: KillPlan, *, settings: LifecycleSettings, grace: float | None = None
    ) -> AsyncIterator[Event]:
        from services.lifecycle import actions

        return actions.kill(conn, settings=settings, grace=grace)

    async def plan_resume(self, conn: Connection, settings: LifecycleSettings, backup: Any = None) -> ResumePlan:
        from services.lifecycle import actions

        p = await actions.plan_resume(conn, settings, backup=backup)
        step, restore = p["checkpoint"]["step"], p.get("restore")
        doc = {
            "run": p["run"]["id"],
            "step": step,
            "ckpt_dir": p["ckpt_dir"],
            "skipped": [c["step"] for c in p["skipped"]],
        }
        if restore:
            doc["restore"] = restore
            lines: tuple[str, ...] = (
                (
                    f"run {p['run']['id']}: no complete checkpoint in {p['ckpt_dir']}; "
                    f"step_{step} will be restored from {restore['where']} first"
                ),
            )
        else:
            lines = (
                f"run {p['run']['id']}: newest complete checkpoint step_{step} in {p['ckpt_dir']}",
                *(f"  ! step_{c['step']} is incomplete — skipped" for c in p["skipped"]),
            )
        skipped = "".join(f"\n  step_{c['step']} is incomplete — skipped" for c in p["skipped"])
        source = (
            f"restored first from {restore['where']}" if restore else f"newest complete checkpoint in {p['ckpt_dir']}"
        )
        return ResumePlan(
            doc=doc,
            lines=lines,
            text=f"Resume run {p['run']['id']} from step_{step} ({source}){skipped}",
            question=f"resume from step {step}?",
            backup=backup,
        )

    def resume(
        self, conn: Connection, plan: ResumePlan, *, settings: LifecycleSettings, force: bool = False
    ) -> AsyncIterator[Event]:
        from services.lifecycle import actions

        return actions.resume(conn, settings=settings, force=force, backup=plan.backup)

    def resume_run(
        self, conn: Connection, run: dict[str, Any], *, settings: LifecycleSettings, backup: Any = None
    ) -> AsyncIterator[Event]:
        """Resume the recorded ``run`` (a run record of this machine's) here, unasked: the auto-resume of a
        preempted run, possibly on another pod than its own (its config is uploaded again)."""
        from services.lifecycle import actions

        return actions.resume(conn, settings=settings, backup=backup, run=run)

    async def run_records(self, conn: Connection) -> list[dict[str, Any]]:
        """The runs recorded on the pod, oldest first (the lifecycle helper's records)."""
        return await pod_runs(PodShell(conn))

    async def plan_cleanup(
        self,
        conn: Connection,
        *,
        keep: int | None,
        settings: LifecycleSettings,
        run_dir: str | None = None,
        backup: Any = None,
        threshold_pct: float | None = None,
    ) -> CleanupPlan:
        """The checkpoints older than the newest ``keep`` complete ones (a cluster's too: its run dirs are on
        the login node's filesystem), of the newest recorded run unless ``run_dir`` is given; the plan says
        itself (``preview``, ``to_json``). ``threshold_pct``: the cleanup daemon's disk ceiling."""
        from services.lifecycle.cleanup import plan_cleanup

        return await plan_cleanup(
            conn,
            keep=keep,
            settings=settings,
            run_dir=run_dir,
            backup=backup,
            threshold_pct=threshold_pct,
            run_records=lambda: self.run_records(conn),
        )

    def cleanup(
        self, conn: Connection, plan: CleanupPlan, *, settings: LifecycleSettings, backup: Any = None
    ) -> AsyncIterator[Event]:
        from services.lifecycle.cleanup import cleanup

        return cleanup(conn, plan, settings=settings, backup=backup)


class SlurmCluster(SingleHost):
    """A Slurm cluster's login node: prime-rl's launcher submits the run as a job; kill cancels that job;
    resume submits a new one from the newest complete checkpoint (never from the bucket)."""

    restores_from_bucket = False
    kill_button = "Kill job"

    def plan_launch(
        self, pod: Pod, config: Path, run_dir: str | None, settings: LifecycleSettings, command: str | None = None
    ) -> LaunchPlan:
        run_dir = run_dir or default_run_dir(pod, config)
        command = command or settings.command
        return _launch_plan(
            pod,
            config,
            run_dir,
            command,
            f"Launch {config.name} on the Slurm cluster {pod.name}",
            "prime-rl's launcher runs on the login node and submits the job; checks run first, "
            "a failed one stops the launch.",
        )

    def launch(
        self,
        conn: Connection,
        config: Path,
        *,
        settings: LifecycleSettings,
        command: str | None = None,
        run_dir: str | None = None,
        force: bool = False,
    ) -> AsyncIterator[Event]:
        from services.lifecycle import slurm_launch

        return slurm_launch.launch(conn, config, settings=settings, command=command, run_dir=run_dir, force=force)

    async def plan_kill(self, conn: Connection, settings: LifecycleSettings) -> KillPlan | None:
        """The run's job (raises LifecycleError when there is none to cancel)."""
        from services.lifecycle import slurm_jobs

        job, others, record = await slurm_jobs.plan_cancel_run(conn)
        text = slurm_jobs.describe(job, others, record)
        return KillPlan(
            doc={
                "job": job.id,
                "state": job.state,
                "nodes": list(job.nodes),
                "run": (record or {}).get("id"),
                "others": [j.id for j in others],
            },
            lines=(text,),
            text=text,
            question=f"cancel job {job.id} on {conn.pod.name}?",
            job=job.id,
        )

    def kill(
        self, conn: Connection, plan: KillPlan, *, settings: LifecycleSettings, grace: float | None = None
    ) -> AsyncIterator[Event]:
        from services.lifecycle import slurm_jobs

        assert plan.job is not None
        return slurm_jobs.cancel(conn, plan.job)

    async def plan_resume(self, conn: Connection, settings: LifecycleSettings, backup: Any = None) -> ResumePlan:
        """The newest recorded run, whose job has ended, from its newest complete checkpoint."""
        from services.lifecycle import slurm_launch

        plan = await slurm_launch.plan_resume(conn, settings)
        step = plan["checkpoint"]["step"]
        text = slurm_launch.describe_resume(plan, settings)
        return ResumePlan(
            doc={
                "run": plan["run"]["id"],
                "job": plan["run"]["job_id"],
                "step": step,
                "ckpt_dir": plan["ckpt_dir"],
                "skipped": [c["step"] for c in plan["skipped"]],
            },
            lines=(text,),
            text=text,
            question=f"submit a new job from step {step}?",
        )

    def resume(
        self, conn: Connection, plan: ResumePlan, *, settings: LifecycleSettings, force: bool = False
    ) -> AsyncIterator[Event]:
        from services.lifecycle import slurm_launch

        return slurm_launch.resume(conn, settings=settings, force=force)

    async def run_records(self, conn: Connection) -> list[dict[str, Any]]:
        """The pod's own records, else the runs launched on the cluster from here."""
        from services.lifecycle.slurm_jobs import slurm_runs

        return await super().run_records(conn) or await slurm_runs(conn)

    def resume_run(
        self, conn: Connection, run: dict[str, Any], *, settings: LifecycleSettings, backup: Any = None
    ) -> AsyncIterator[Event]:
        """Submit ``run`` again (one launched on this cluster from here) from its newest complete checkpoint."""
        from services.lifecycle import slurm_launch

        return slurm_launch.resume(conn, settings=settings, run_id=str(run.get("id") or ""))


def _launch_plan(pod: Pod, config: Path, run_dir: str, command: str, head: str, then: str) -> LaunchPlan:
    return LaunchPlan(
        doc={"pod": pod.name, "config": config.name, "run_dir": run_dir, "command": command},
        lines=(head, f"run dir: {run_dir}", f"command: {command}"),
        text=f"{head}\nrun dir: {run_dir}\ncommand: {command}\n{then}",
    )


RunTarget = SingleHost  # every target has SingleHost's interface

_KINDS: dict[str | None, Callable[[], RunTarget]] = {"slurm": SlurmCluster}


def target_for(pod: Pod) -> RunTarget:
    """The pod's run target: its ``scheduler`` (pods.toml ``kind``) picks it, one machine by default."""
    return _KINDS.get(pod.scheduler, SingleHost)()
