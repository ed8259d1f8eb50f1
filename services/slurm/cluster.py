"""Asking a Slurm cluster's login node about the user's jobs and the nodes, over the pod connection.

Each question is one short command (``Connection.run``). What the cluster supports is found out on first use
and remembered: ``squeue --json``/``sacct --json`` (Slurm 21.08+, built with its JSON plugins) else their
``--format``/``--parsable2`` text, and whether an accounting database answers ``sacct`` at all (else the
controller's memory of recent jobs, ``scontrol show job``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shlex
from collections.abc import Iterable

from services.pod.connection import Connection
from services.slurm import parse
from services.slurm.models import SlurmError, SlurmJob, SlurmNode, SlurmOutputError

# times in UTC and ISO form whatever the login node's locale and the user's SLURM_TIME_FORMAT
_ENV = "TZ=UTC SLURM_TIME_FORMAT=standard"
_ME = '-u "$(id -un)"'
_NO_JSON = re.compile(
    r"unrecognized option|invalid option|unknown option|json|serializ|data_parser|plugin", re.IGNORECASE
)
_NO_ACCOUNTING = re.compile(
    r"accounting storage is disabled|slurmdbd|accounting_storage|"
    r"unable to (?:contact|connect)",
    re.IGNORECASE,
)
_MARK = "@@ptt "


class SlurmCluster:
    """One cluster reached through ``conn`` (its login node). Not thread-safe; one per connection."""

    def __init__(self, conn: Connection, timeout: float = 30.0) -> None:
        self.conn = conn
        self.timeout = timeout
        self.squeue_json: bool | None = None  # None: not known yet
        self.sacct_json: bool | None = None
        self.accounting: bool | None = None  # sacct has a database behind it

    @property
    def _where(self) -> str:
        return self.conn.pod.name

    async def _run(self, command: str, what: str) -> tuple[int, str, str]:
        try:
            rc, out, err = await self.conn.run(command, timeout=self.timeout)
        except asyncio.TimeoutError:
            raise SlurmError(
                f"{what} on {self._where} did not answer within {self.timeout:g} s",
                hint="The Slurm controller may be busy or down; it is tried again on the next refresh.",
            ) from None
        if rc == 127:
            raise SlurmError(
                f"{what} is not installed on {self._where}",
                hint="Give the cluster's login node as the host: it has Slurm's commands.",
            )
        return rc, out, err

    def _failed(self, what: str, rc: int, err: str, otherwise: str = "") -> SlurmError:
        lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
        reason = lines[-1] if lines else otherwise or f"exited with status {rc}"
        return SlurmError(f"{what} failed on {self._where}: {reason}")

    # ----------------------------------------------------------------------------------- jobs

    async def jobs(self, *, finished_too: bool = False, expand: bool = True) -> list[SlurmJob]:
        """The user's jobs the controller knows: pending and running, and with ``finished_too`` those that
        ended in the last few minutes (Slurm's MinJobAge). Running jobs' nodes are expanded."""
        states = " -t all" if finished_too else ""
        jobs: list[SlurmJob] | None = None
        if self.squeue_json is not False:
            rc, out, err = await self._run(f"date +%s; {_ENV} squeue --json {_ME}{states}", "squeue")
            now_line, _, doc = out.partition("\n")
            if rc == 0:
                try:
                    jobs = parse.squeue_json(doc, parse.number(now_line))
                    self.squeue_json = True
                except SlurmOutputError:
                    if self.squeue_json:
                        raise
                    self.squeue_json = False
            elif _NO_JSON.search(err) and not self.squeue_json:
                self.squeue_json = False
            else:
                raise self._failed("squeue", rc, err)
        if jobs is None:
            fmt = shlex.quote(parse.SQUEUE_FORMAT)
            rc, out, err = await self._run(f"{_ENV} squeue --noheader {_ME}{states} --format={fmt}", "squeue")
            if rc != 0:
                raise self._failed("squeue", rc, err)
            jobs = parse.squeue_format(out)
        if not finished_too:  # a cancelled job still cleaning up its nodes (CA+CG) has ended for the user
            jobs = [j for j in jobs if not j.finished]
        return await self.expand_jobs(jobs) if expand else jobs

    async def job_states(self, job_ids: Iterable[str]) -> dict[str, SlurmJob]:
        """What became of these jobs (finished ones included), by id: from the accounting database
        (``sacct``), or where the cluster has none, from what the controller still remembers (Slurm forgets a
        finished job after MinJobAge, 5 minutes by default: such ids are missing from the answer)."""
        ids = [i for i in dict.fromkeys(job_ids) if parse.job_id(i)]
        if not ids:
            return {}
        found: list[SlurmJob] | None = None
        if self.accounting is not False:
            found = await self._sacct(ids)
        if found is None:
            rc, out, err = await self._run(f"{_ENV} scontrol show job -o", "scontrol")
            if rc != 0 and "no jobs" not in (out + err).lower():
                raise self._failed("scontrol show job", rc, err)
            found = parse.scontrol_jobs(out)
        wanted = set(ids)
        return {j.id: j for j in found if j.id in wanted or j.id.split("_", 1)[0] in wanted}

    async def _sacct(self, ids: list[str]) -> list[SlurmJob] | None:
        """Jobs from sacct, or None when the cluster keeps no accounting (remembered)."""
        sel = "-X -j " + shlex.quote(",".join(ids))
        if self.sacct_json is not False:
            rc, out, err = await self._run(f"{_ENV} sacct --json {sel}", "sacct")
            if _NO_ACCOUNTING.search(err) and not out.strip():
                self.accounting = False
                return None
            if rc == 0:
                try:
                    jobs = parse.sacct_json(out)
                    self.sacct_json = self.accounting = True
                    return jobs
                except SlurmOutputError:
                    if self.sacct_json:
                        raise
                    self.sacct_json = False
            elif _NO_JSON.search(err) and not self.sacct_json:
                self.sacct_json = False
            else:
                raise self._failed("sacct", rc, err)
        rc, out, err = await self._run(
            f"{_ENV} sacct --parsable2 --noheader {sel} --format={parse.SACCT_FIELDS}", "sacct"
        )
        if _NO_ACCOUNTING.search(err) and not out.strip():
            self.accounting = False
            return None
        if rc != 0:
            raise self._failed("sacct", rc, err)
        self.accounting = True
        return parse.sacct_parsable(out)

    # ----------------------------------------------------------------------------------- nodes

    async def expand_jobs(self, jobs: list[SlurmJob]) -> list[SlurmJob]:
        """The jobs with ``nodes`` filled from their ``nodelist`` (one command for all of them)."""
        expanded = await self.hostnames(j.nodelist for j in jobs if j.nodelist)
        return [dataclasses.replace(j, nodes=expanded.get(j.nodelist, ())) if j.nodelist else j for j in jobs]

    async def hostnames(self, nodelists: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Each compressed node list (``gpu[01-03],cpu7``) → its host names, in Slurm's order. Lists with
        ranges go to ``scontrol show hostnames`` on the login node, all in one command."""
        lists = list(dict.fromkeys(nodelists))
        ranges = list(dict.fromkeys(r for nl in lists for r in parse.nodelist_parts(nl) if "[" in r))
        names: dict[str, list[str]] = {}
        if ranges:
            loop = " ".join(shlex.quote(r) for r in ranges)
            rc, out, err = await self._run(
                f'for l in {loop}; do echo "{_MARK}$l"; scontrol show hostnames "$l"; done', "scontrol"
            )
            current: list[str] | None = None
            for line in out.splitlines():
                if line.startswith(_MARK):
                    current = names[line[len(_MARK) :]] = []
                elif current is not None:
                    current.extend(parse.hostnames(line))
            missing = [r for r in ranges if not names.get(r)]
            if missing:
                raise self._failed(f"scontrol show hostnames {missing[0]}", rc, err, "it printed no host names")
        result = {}
        for nl in lists:
            hosts = [h for part in parse.nodelist_parts(nl) for h in (names.get(part, ()) if "[" in part else [part])]
            result[nl] = tuple(dict.fromkeys(hosts))
        return result

    async def nodes(self) -> list[SlurmNode]:
        """Every node of the cluster with its state (``NOT_RESPONDING`` when its slurmd is lost)."""
        rc, out, err = await self._run(f"{_ENV} scontrol show node -o", "scontrol")
        if rc != 0:
            raise self._failed("scontrol show node", rc, err)
        return parse.scontrol_nodes(out)
