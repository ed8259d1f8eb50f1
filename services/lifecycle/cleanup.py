"""Keep-last-N cleanup of a run's checkpoints: a plan to confirm, then the deletions, one at a time.

Only complete checkpoints older than the N newest complete ones are deleted; never the newest complete
one, never one in progress, and — when a bucket is configured — never one not yet verified there, unless
it is older than the oldest verified step in the bucket (superseded: the bucket keeps only its newest
verified steps, so older ones are pruned there and would otherwise stay on the pod forever). "Verified"
means verified backups of THIS run (services.backup.transfer.run_source: the pod's run record and what it was
resumed from): another run sharing the bucket prefix, or a backup of unknown source (a manifest written
before sources were recorded), never makes a checkpoint on this pod deletable; nor does a backup of the
same step made from another checkpoint (a run relaunched by hand in the same dir writes its own
step_100): a backup counts for the checkpoint whose files' sizes and mtimes its manifest recorded.
With a disk threshold (the cleanup daemon), older complete ones beyond N go too while the run volume
would stay above it (still never the newest complete, never an unverified one). What prime-rl leaves
behind is pruned as well (research prime-rl.md §6.3): orphaned orchestrator step dirs under the run dir
when the trainer's checkpoints live elsewhere, and all but the newest ``keep_broadcasts`` broadcasts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services import runs
from services.errors import PrimeTrainError
from services.lifecycle.events import Event, LifecycleError, with_hint
from services.lifecycle.lock import hold
from services.lifecycle.preflight import LifecycleSettings
from services.lifecycle.records import backup_on, backup_where, ckpt_dir_of, pod_runs
from services.lifecycle.shell import PodShell
from services.units import fmt_bytes

if TYPE_CHECKING:
    from services.pod.connection import Connection


@dataclass(frozen=True)
class CleanupPlan:
    ckpt_dir: str
    keep: int
    delete: tuple[dict[str, Any], ...]
    kept: tuple[dict[str, Any], ...]
    in_progress: tuple[dict[str, Any], ...]
    # with a bucket configured: old complete checkpoints kept because their backup is not verified
    unbacked: tuple[dict[str, Any], ...] = ()
    backup_where: str = ""  # "s3://bucket/prefix/" when backup is on, else ""
    run_dir: str = ""
    # prime-rl's leftovers: {"kind": "orchestrator" | "broadcast", "step", "path", "bytes"}
    leftovers: tuple[dict[str, Any], ...] = ()
    keep_broadcasts: int = 2
    disk: dict[str, Any] | None = None  # the volume before: {"used", "total"} bytes
    threshold_pct: float | None = None
    for_disk: tuple[int, ...] = ()  # steps in ``delete`` beyond keep-last, to get under the threshold
    # backup on: steps in ``delete`` that are not in the bucket (any more) but older than its oldest
    # verified step — a newer verified backup replaces them (the bucket's own keep-last pruned them)
    superseded: tuple[int, ...] = ()
    oldest_verified: int | None = None
    source: Any = None  # backup on: the run (services.backup.manifest.RunSource) whose verified backups count
    # prime-rl prunes this run's checkpoints itself ([ckpt] keep_last / keep_interval in its resolved config):
    # {"keep_last", "keep_interval"}; the daemon then leaves checkpoints to it, and no plan deletes a step
    # prime-rl keeps on purpose (a multiple of keep_interval)
    prunes: dict[str, Any] | None = None

    @property
    def bytes(self) -> int:
        return sum(int(c.get("bytes", 0)) for c in (*self.delete, *self.leftovers))

    @property
    def empty(self) -> bool:
        return not self.delete and not self.leftovers

    def pct_after(self) -> float | None:
        if not self.disk or not self.disk.get("total"):
            return None
        return 100.0 * max(0, int(self.disk["used"]) - self.bytes) / int(self.disk["total"])

    def pct_before(self) -> float | None:
        if not self.disk or not self.disk.get("total"):
            return None
        return 100.0 * int(self.disk["used"]) / int(self.disk["total"])

    def preview(self, fmt: Any = None) -> list[str]:
        """The dry-run text (the CLI, the modal and the daemon's first-deletion approval show it)."""
        fmt = fmt or fmt_bytes
        lines = [f"{self.ckpt_dir}: keep the newest {self.keep} complete"]
        if self.prunes:
            lines.append(f"  prime-rl prunes this run's checkpoints itself ({self.prunes_text()})")
        lines += [f"  keep   step_{c['step']}" for c in self.kept]
        lines += [f"  keep   step_{c['step']} (incomplete / in progress)" for c in self.in_progress]
        lines += [f"  keep   step_{c['step']} ({self.reason(c)})" for c in self.unbacked]
        lines += [
            f"  DELETE step_{c['step']}  {fmt(c['bytes'])}"
            + (f"  (volume over {self.threshold_pct:g}%)" if c["step"] in self.for_disk else "")
            + (f"  ({self.why_superseded()})" if c["step"] in self.superseded else "")
            for c in self.delete
        ]
        lines += [f"  DELETE {c['path']}  {fmt(c['bytes'])}  ({_LEFTOVER[c['kind']]})" for c in self.leftovers]
        lines.append(f"frees {fmt(self.bytes)}" if not self.empty else "nothing to delete")
        before, after = self.pct_before(), self.pct_after()
        if before is not None and after is not None:
            ceiling = f" (ceiling {self.threshold_pct:g}%)" if self.threshold_pct is not None else ""
            lines.append(f"run volume {before:.0f}% used → {after:.0f}% after{ceiling}")
            if self.threshold_pct is not None and after > self.threshold_pct:
                lines.append("  still over the ceiling: nothing else may be deleted (newest complete / unverified)")
        return lines

    def prunes_text(self) -> str:
        p = self.prunes or {}
        return ", ".join(f"{k} = {p[k]}" for k in ("keep_last", "keep_interval") if p.get(k))

    def reason(self, c: dict[str, Any]) -> str:
        return f"not yet verified in {self.backup_where}"

    def why_superseded(self) -> str:
        return f"superseded by verified backup step_{self.oldest_verified}"

    def to_json(self) -> dict[str, Any]:
        def brief(cs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{"step": c["step"], "path": c["path"], "bytes": c["bytes"]} for c in cs]

        out = {
            "ckpt_dir": self.ckpt_dir,
            "keep": self.keep,
            "delete": brief(self.delete),
            "kept": brief(self.kept),
            "in_progress": brief(self.in_progress),
            "bytes": self.bytes,
            "leftovers": [dict(c) for c in self.leftovers],
            "prunes": self.prunes,
        }
        if self.disk:
            out["disk"] = {
                **self.disk,
                "pct_before": self.pct_before(),
                "pct_after": self.pct_after(),
                "threshold_pct": self.threshold_pct,
                "for_disk": list(self.for_disk),
            }
        if self.backup_where:
            out["backup"] = self.backup_where
            out["unbacked"] = [{**b, "reason": self.reason(c)} for b, c in zip(brief(self.unbacked), self.unbacked)]
            out["superseded"] = [{"step": step, "reason": self.why_superseded()} for step in self.superseded]
        return out


def refuse_unreadable_backup(backup: Any) -> None:
    """Fail closed: ``backup`` is the error that made the backup configuration unreadable (what the app
    passes instead of settings when backup.toml is a directory, has ``[bakup]``, ...) → LifecycleError.
    Never "no backup": that would let cleanup delete checkpoints that were never backed up."""
    if isinstance(backup, BaseException):
        reason = str(backup)
        reason = reason[len("cannot read ") :] if reason.startswith("cannot read ") else reason
        raise LifecycleError(
            f"backup.toml cannot be read ({reason}): cleanup deletes nothing until it is fixed",
            hint=getattr(backup, "hint", "") or "fix or remove backup.toml",
        )


def deletable(step: int, verified: Iterable[int] | None, oldest: int | None = None) -> bool:
    """Backup on (``verified`` given: the steps whose checkpoint on the pod has a verified backup of that
    very checkpoint): may this step's checkpoint leave the pod? When its own backup is verified, or when
    it is older than ``oldest``, the oldest step verified for this run in the bucket (default: the
    oldest of ``verified``; superseded: the bucket's keep-last pruned it after newer verified backups).
    Never a step newer than that without its own backup; with nothing verified, nothing. Backup off:
    always."""
    if verified is None:
        return True
    ok = set(verified)
    floor = (min(ok) if oldest is None else min(oldest, *ok)) if ok else None
    return step in ok or (floor is not None and step < floor)


def plan_keep_last(
    ckpt_dir: str,
    ckpts: list[dict[str, Any]],
    keep: int,
    verified: Iterable[int] | None = None,
    backup_where: str = "",
    run_dir: str = "",
    oldest: int | None = None,
) -> CleanupPlan:
    """Delete complete checkpoints older than the ``keep`` newest complete ones; never the newest
    complete one, never an incomplete (in-progress) one. With ``verified`` (the steps whose backup is
    verified; backup on), a checkpoint outside it is never deleted either: it goes to ``unbacked``."""
    keep = max(1, int(keep))
    complete = sorted((c for c in ckpts if c.get("complete")), key=lambda c: c["step"])
    kept = complete[-keep:]
    delete = complete[:-keep] if len(complete) > keep else []
    in_progress = [c for c in ckpts if not c.get("complete")]
    unbacked: list[dict[str, Any]] = []
    superseded: tuple[int, ...] = ()
    oldest = None
    if verified is not None:
        ok = set(verified)
        oldest = (min(ok) if oldest is None else min(oldest, *ok)) if ok else None
        unbacked = [c for c in delete if not deletable(c["step"], ok, oldest)]
        delete = [c for c in delete if deletable(c["step"], ok, oldest)]
        superseded = tuple(c["step"] for c in delete if c["step"] not in ok)
    return CleanupPlan(
        ckpt_dir,
        keep,
        tuple(delete),
        tuple(kept),
        tuple(in_progress),
        tuple(unbacked),
        backup_where if verified is not None else "",
        run_dir,
        superseded=superseded,
        oldest_verified=oldest if verified is not None else None,
    )


_LEFTOVER = {
    "orchestrator": "orchestrator state whose trainer checkpoint is gone",
    "broadcast": "old broadcast weights, not needed to resume",
}


def keep_what_prime_rl_keeps(plan: CleanupPlan, prunes: dict[str, Any]) -> CleanupPlan:
    """prime-rl prunes the run itself: a step it keeps on purpose (a multiple of keep_interval) is never planned
    for deletion here; the plan says who prunes."""
    every = prunes.get("keep_interval")
    if isinstance(every, int) and every > 0:
        kept = tuple(c for c in plan.delete if c["step"] % every == 0)
        plan = replace(
            plan,
            delete=tuple(c for c in plan.delete if c["step"] % every),
            kept=tuple(sorted((*plan.kept, *kept), key=lambda c: c["step"])),
        )
    return replace(plan, prunes=dict(prunes))


def plan_for_disk(
    plan: CleanupPlan,
    disk: dict[str, Any] | None,
    threshold_pct: float | None,
    leftovers: Iterable[dict[str, Any]] = (),
    keep_broadcasts: int = 2,
    verified: Iterable[int] | None = None,
) -> CleanupPlan:
    """``plan`` plus the leftovers, then — while the volume would stay above ``threshold_pct`` — the
    oldest kept complete checkpoints too; never the newest complete one, never an unverified one when
    ``verified`` is given (backup on: those go to ``unbacked``)."""
    plan = replace(
        plan, leftovers=tuple(leftovers), keep_broadcasts=keep_broadcasts, disk=disk, threshold_pct=threshold_pct
    )
    if threshold_pct is None or not disk or not disk.get("total"):
        return plan
    total, used = int(disk["total"]), int(disk["used"])
    kept, delete, unbacked, extra = list(plan.kept), list(plan.delete), list(plan.unbacked), []
    ok = set(verified) if verified is not None else None
    superseded = list(plan.superseded)
    for c in list(kept[:-1]):  # oldest first; the newest complete one is never a candidate
        if 100.0 * (used - sum(int(d["bytes"]) for d in (*delete, *plan.leftovers))) / total <= threshold_pct:
            break
        kept.remove(c)
        if not deletable(c["step"], ok, plan.oldest_verified):
            unbacked.append(c)
            continue
        delete.append(c)
        extra.append(c["step"])
        if ok is not None and c["step"] not in ok:
            superseded.append(c["step"])
    delete.sort(key=lambda c: c["step"])
    return replace(
        plan,
        kept=tuple(kept),
        delete=tuple(delete),
        unbacked=tuple(unbacked),
        for_disk=tuple(extra),
        superseded=tuple(sorted(superseded)),
        oldest_verified=plan.oldest_verified if ok is None or ok else None,
    )


async def plan_cleanup(
    conn: Connection,
    *,
    keep: int | None = None,
    settings: LifecycleSettings | None = None,
    run_dir: str | None = None,
    backup: Any = None,
    threshold_pct: float | None = None,
    run_records: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None,
) -> CleanupPlan:
    """``backup`` (``services.backup.s3.BackupSettings``) with a bucket set: only checkpoints whose backup is
    verified in the bucket may be deleted; an unreachable bucket is an error (nothing is planned).
    ``threshold_pct`` (the daemon's disk ceiling): delete older complete ones beyond ``keep`` as well
    while the run volume would stay above it. prime-rl's leftovers are always planned. ``backup`` may be the
    error that made backup.toml unreadable: then nothing is planned (LifecycleError, fail closed).
    ``run_records``: the pod's runs, oldest first, as its run target reads them (the run dir is the newest's
    unless given); the lifecycle helper's records by default."""
    refuse_unreadable_backup(backup)
    settings = settings or LifecycleSettings()
    shell = PodShell(conn)
    await shell.home()
    if run_dir is None:
        records = await (run_records() if run_records is not None else pod_runs(shell))
        if records:
            run_dir = records[-1]["run_dir"]
        elif conn.pod.run_dir:
            run_dir = conn.pod.run_dir
        else:
            raise LifecycleError(
                f"no run recorded on {conn.pod.name} and no run_dir for it",
                hint="give --run-dir or set run_dir in pods.toml",
            )
    run_abs = shell.abspath(run_dir)
    ckpt_dir = ckpt_dir_of(run_abs, settings)
    survey = await shell.agent(
        "survey", "--run-dir", run_abs, "--ckpt-dir", ckpt_dir, "--keep-broadcasts", str(settings.keep_broadcasts)
    )
    ckpts = list(survey.get("ckpts", []))
    keep_n = settings.keep_last if keep is None else keep
    verified, source = None, None
    if backup_on(backup):
        from services.backup.transfer import pod_backed_up

        verified, oldest, source = await pod_backed_up(conn, backup, run_abs)  # of THESE checkpoints
    plan = plan_keep_last(
        ckpt_dir,
        ckpts,
        keep_n,
        verified,
        backup_where(backup, run_abs) if verified is not None else "",
        run_abs,
        oldest if verified is not None else None,
    )
    plan = replace(plan, source=source)
    prunes = survey.get("prunes") if isinstance(survey.get("prunes"), dict) else None
    if prunes:
        plan = keep_what_prime_rl_keeps(plan, prunes)
    plan = plan_for_disk(
        plan, survey.get("disk"), threshold_pct, survey.get("leftovers", []), settings.keep_broadcasts, verified
    )
    # the orchestrator halves (separate ckpt output dir) of the steps deleted now become orphans too
    going = {c["step"] for c in plan.delete}
    planned = {c["path"] for c in plan.leftovers}
    extra = [c for c in survey.get("orchestrator_dirs", []) if c["step"] in going and c["path"] not in planned]
    return replace(plan, leftovers=(*plan.leftovers, *extra)) if extra else plan


async def cleanup(
    conn: Connection, plan: CleanupPlan, *, settings: LifecycleSettings | None = None, backup: Any = None
) -> AsyncIterator[Event]:
    """Delete what ``plan`` lists, one step dir at a time; the pod re-checks each one first. With a
    bucket configured, the bucket is asked again just before deleting: a step whose backup is no longer
    verified is kept."""
    settings = settings or LifecycleSettings()
    try:
        refuse_unreadable_backup(backup)
        async with hold(conn, "cleanup") as guard:
            shell = PodShell(conn)
            for c in plan.unbacked:
                yield Event("cleanup", "warn", f"kept step_{c['step']}: {plan.reason(c)}")
            todo = list(plan.delete)
            if todo and backup_on(backup):
                from services.backup.manifest import RunSource
                from services.backup.transfer import pod_backed_up, run_source

                run_dir = plan.run_dir or str(Path(plan.ckpt_dir).parent)
                where = backup_where(backup, run_dir)
                # asked again: another run may have started there
                source: RunSource | None = await run_source(conn, run_dir)
                if plan.source is not None and not plan.source.same_run(source):
                    source = None  # the plan was made for another run: nothing counts as backed up
                # asked again (it may have changed); of THESE checkpoints
                verified: set[int] = set()
                oldest: int | None = None
                if source is not None:
                    verified, oldest, _ = await pod_backed_up(conn, backup, run_dir, source)
                for c in [c for c in todo if not deletable(c["step"], verified, oldest)]:
                    yield Event("cleanup", "warn", f"kept step_{c['step']}: not yet verified in {where}")
                todo = [c for c in todo if deletable(c["step"], verified, oldest)]
            freed, n = 0, len(todo) + len(plan.leftovers)
            if not n:
                yield Event(
                    "cleanup",
                    "done",
                    f"nothing to delete (keeping {len(plan.kept)} complete"
                    + (f", {len(plan.unbacked)} not yet backed up" if plan.unbacked else "")
                    + ")",
                    progress=1.0,
                    data={"deleted": [], "bytes": 0},
                )
                return
            deleted: list[dict[str, Any]] = []
            await guard.ready()
            for i, c in enumerate(todo):
                run_dir_args = ["--run-dir", plan.run_dir] if plan.run_dir else []  # both halves judged, as planned
                res = await shell.agent(
                    "delete",
                    "--ckpt-dir",
                    plan.ckpt_dir,
                    *run_dir_args,
                    "--keep",
                    str(max(1, min(plan.keep, len(plan.kept)))),
                    str(c["step"]),
                )
                for d in res.get("deleted", []):
                    freed += int(d["bytes"])
                    deleted.append(d)
                    if settings.runs_dir is not None:
                        runs.append_log(
                            settings.runs_dir, f"cleanup {conn.pod.name} deleted {d['path']} ({d['bytes']} bytes)"
                        )
                    yield Event(
                        "cleanup",
                        "progress",
                        f"deleted step_{d['step']} ({fmt_bytes(d['bytes'])})",
                        progress=(i + 1) / n,
                    )
                for r in res.get("refused", []):
                    yield Event("cleanup", "warn", f"kept step_{r['step']}: {r['reason']}", progress=(i + 1) / n)
            if plan.leftovers:
                res = await shell.agent(
                    "prune",
                    "--run-dir",
                    plan.run_dir or str(Path(plan.ckpt_dir).parent),
                    "--ckpt-dir",
                    plan.ckpt_dir,
                    "--keep-broadcasts",
                    str(plan.keep_broadcasts),
                    *[c["path"] for c in plan.leftovers],
                )
                for d in res.get("deleted", []):
                    freed += int(d["bytes"])
                    deleted.append(d)
                    if settings.runs_dir is not None:
                        runs.append_log(
                            settings.runs_dir,
                            f"cleanup {conn.pod.name} deleted {d['path']} ({d['bytes']} bytes, {d['kind']} leftover)",
                        )
                    yield Event(
                        "cleanup",
                        "progress",
                        f"deleted {d['path']} ({fmt_bytes(d['bytes'])}, {d['kind']} leftover)",
                        progress=len(deleted) / n,
                    )
                for r in res.get("refused", []):
                    yield Event("cleanup", "warn", f"kept {r['path']}: {r['reason']}")
            yield Event(
                "cleanup",
                "done",
                f"deleted {len(deleted)} dir(s), freed {fmt_bytes(freed)}",
                progress=1.0,
                data={"deleted": deleted, "bytes": freed},
            )
    except PrimeTrainError as exc:
        yield Event("cleanup", "error", with_hint(exc))
