"""Keep-last-N cleanup of a run's checkpoints: a plan to confirm, then the deletions, one at a time.

Only complete checkpoints older than the N newest complete ones are deleted; never the newest complete
one, never one in progress, and — when a bucket is configured — never one not yet verified there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

from services import runs
from services.errors import PrimeTrainError
from services.lifecycle_common import (
    Event,
    LifecycleError,
    hold,
    PodShell,
    _fmt_bytes,
    _one_line,
    backup_on,
    backup_where,
    checkpoints,
    pod_runs,
)
from services.preflight import LifecycleSettings

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

    @property
    def bytes(self) -> int:
        return sum(int(c.get("bytes", 0)) for c in self.delete)

    def reason(self, c: dict[str, Any]) -> str:
        return f"not yet verified in {self.backup_where}"

    def to_json(self) -> dict[str, Any]:
        def brief(cs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{"step": c["step"], "path": c["path"], "bytes": c["bytes"]} for c in cs]
        out = {"ckpt_dir": self.ckpt_dir, "keep": self.keep, "delete": brief(self.delete),
               "kept": brief(self.kept), "in_progress": brief(self.in_progress), "bytes": self.bytes}
        if self.backup_where:
            out["backup"] = self.backup_where
            out["unbacked"] = [{**b, "reason": self.reason(c)} for b, c in zip(brief(self.unbacked), self.unbacked)]
        return out


def plan_keep_last(ckpt_dir: str, ckpts: list[dict[str, Any]], keep: int, verified: Iterable[int] | None = None,
                   backup_where: str = "", run_dir: str = "") -> CleanupPlan:
    """Delete complete checkpoints older than the ``keep`` newest complete ones; never the newest
    complete one, never an incomplete (in-progress) one. With ``verified`` (the steps whose backup is
    verified; backup on), a checkpoint outside it is never deleted either: it goes to ``unbacked``."""
    keep = max(1, int(keep))
    complete = sorted((c for c in ckpts if c.get("complete")), key=lambda c: c["step"])
    kept = complete[-keep:]
    delete = complete[:-keep] if len(complete) > keep else []
    in_progress = [c for c in ckpts if not c.get("complete")]
    unbacked: list[dict[str, Any]] = []
    if verified is not None:
        ok = set(verified)
        unbacked = [c for c in delete if c["step"] not in ok]
        delete = [c for c in delete if c["step"] in ok]
    return CleanupPlan(ckpt_dir, keep, tuple(delete), tuple(kept), tuple(in_progress), tuple(unbacked),
                       backup_where if verified is not None else "", run_dir)


async def plan_cleanup(conn: Any, *, keep: int | None = None, settings: LifecycleSettings | None = None,
                       run_dir: str | None = None, backup: Any = None) -> CleanupPlan:
    """``backup`` (``services.s3.BackupSettings``) with a bucket set: only checkpoints whose backup is
    verified in the bucket may be deleted; an unreachable bucket is an error (nothing is planned)."""
    settings = settings or LifecycleSettings()
    shell = PodShell(conn)
    await shell.home()
    if run_dir is None:
        records = await pod_runs(shell)
        if records:
            run_dir = records[-1]["run_dir"]
        elif getattr(conn.pod, "run_dir", None):
            run_dir = conn.pod.run_dir
        else:
            raise LifecycleError(f"no run recorded on {conn.pod.name} and no run_dir for it",
                                 hint="give --run-dir or set run_dir in pods.toml")
    run_abs = shell.abspath(run_dir)
    ckpt_dir, ckpts = await checkpoints(shell, run_abs, settings)
    keep_n = settings.keep_last if keep is None else keep
    if not backup_on(backup):
        return plan_keep_last(ckpt_dir, ckpts, keep_n)
    from services.backup import verified_steps

    verified = await verified_steps(backup, run_abs)
    return plan_keep_last(ckpt_dir, ckpts, keep_n, verified, backup_where(backup, run_abs), run_abs)


async def cleanup(conn: Any, plan: CleanupPlan, *, settings: LifecycleSettings | None = None,
                  backup: Any = None) -> AsyncIterator[Event]:
    """Delete what ``plan`` lists, one step dir at a time; the pod re-checks each one first. With a
    bucket configured, the bucket is asked again just before deleting: a step whose backup is no longer
    verified is kept."""
    settings = settings or LifecycleSettings()
    try:
        async with hold(conn, "cleanup"):
            shell = PodShell(conn)
            for c in plan.unbacked:
                yield Event("cleanup", "warn", f"kept step_{c['step']}: {plan.reason(c)}")
            todo = list(plan.delete)
            if todo and backup_on(backup):
                from services.backup import verified_steps

                run_dir = plan.run_dir or str(Path(plan.ckpt_dir).parent)
                where = backup_where(backup, run_dir)
                verified = await verified_steps(backup, run_dir)
                for c in [c for c in todo if c["step"] not in verified]:
                    yield Event("cleanup", "warn", f"kept step_{c['step']}: not yet verified in {where}")
                todo = [c for c in todo if c["step"] in verified]
            freed, n = 0, len(todo)
            if not n:
                yield Event("cleanup", "done", f"nothing to delete (keeping {len(plan.kept)} complete"
                                               + (f", {len(plan.unbacked)} not yet backed up" if plan.unbacked
                                                  else "") + ")",
                            progress=1.0, data={"deleted": [], "bytes": 0})
                return
            deleted: list[dict[str, Any]] = []
            for i, c in enumerate(todo):
                res = await shell.agent("delete", "--ckpt-dir", plan.ckpt_dir, "--keep", str(plan.keep),
                                        str(c["step"]))
                for d in res.get("deleted", []):
                    freed += int(d["bytes"])
                    deleted.append(d)
                    if settings.runs_dir is not None:
                        runs.append_log(settings.runs_dir, f"cleanup {conn.pod.name} deleted {d['path']} "
                                                           f"({d['bytes']} bytes)")
                    yield Event("cleanup", "progress", f"deleted step_{d['step']} ({_fmt_bytes(d['bytes'])})",
                                progress=(i + 1) / n)
                for r in res.get("refused", []):
                    yield Event("cleanup", "warn", f"kept step_{r['step']}: {r['reason']}", progress=(i + 1) / n)
            yield Event("cleanup", "done", f"deleted {len(deleted)} checkpoint(s), freed {_fmt_bytes(freed)}",
                        progress=1.0, data={"deleted": deleted, "bytes": freed})
    except PrimeTrainError as exc:
        yield Event("cleanup", "error", _one_line(exc))
