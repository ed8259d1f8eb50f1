"""The GPUs of a running job, node by node, read through the login node (no SSH to the compute nodes).

One command per job on the login node: ``srun --overlap --jobid=J`` starts one short task on every node of
the job, beside the job's own processes (``--overlap``: it waits for no resources). Each task prints the
node's name, ``nvidia-smi``'s GPU figures, and the command lines of the job's processes on that node (found
by the ``SLURM_JOB_ID`` in their environment, so two jobs sharing a machine are told apart); the prime-rl
roles are named from those on this side and nothing else of them is kept. The whole command is bounded
(``timeout`` on the login node, so what the nodes that answered printed still comes back); a node that does
not answer, has no NVIDIA driver or whose nvidia-smi fails is reported on its own.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Iterable

from services.errors import PrimeTrainError
from services.models import GpuSample
from services.pod.connection import Connection
from services.slurm import parse
from services.slurm.models import JobGpus, NodeGpus, SlurmJob

MIB = 1024 * 1024
QUERY = "index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"
MARK = "@@ptt"
ROLES = (  # a process is a role when one of these words appears among its arguments' words
    ("inference", frozenset({"vllm", "inference"})),
    ("orchestrator", frozenset({"orchestrator"})),
    ("trainer", frozenset({"trainer", "torchrun", "sft"})),
)
# Slurm's own launchers name every role in their arguments (the batch script's srun lines): not a role
LAUNCHERS = frozenset({"srun", "sbatch", "salloc", "sattach", "scancel"})
# nor is a shell running an inline script (``bash -c 'if rank 0 then inference else trainer'``): its children are
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
MAX_NODES = 512
_TASK = re.compile(r"^\s*(\d{1,6}):\s?(.*)$")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_LAUNCH_FAILED = re.compile(r"on node ([A-Za-z0-9][A-Za-z0-9._-]{0,63}):\s*(.+)$")
_NO_OVERLAP = re.compile(r"(unrecognized|invalid|unknown) option.*overlap", re.IGNORECASE)
_NO_DRIVER = re.compile(
    r"couldn't communicate with the NVIDIA driver|NVIDIA driver|No devices were found", re.IGNORECASE
)

# Runs on each node (POSIX sh); $1 is nvidia-smi's own bound in seconds.
SCRIPT = r"""
M=@@ptt
echo "$M node ${SLURMD_NODENAME:-$(hostname)}"
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "$M gpus"
  if command -v timeout >/dev/null 2>&1; then
    timeout "$1" nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits 2>&1
  else
    nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits 2>&1
  fi
  echo "$M smi $?"
else
  echo "$M nosmi"
fi
echo "$M procs"
f=$(grep -lzx "SLURM_JOB_ID=$SLURM_JOB_ID" /proc/[0-9]*/environ 2>/dev/null)
[ -n "$f" ] && f=$(grep -lzx "SLURMD_NODENAME=$SLURMD_NODENAME" $f 2>/dev/null)
[ -n "$f" ] && f=$(grep -Lzx "SLURM_STEP_ID=$SLURM_STEP_ID" $f 2>/dev/null)
for e in $f; do tr '\0\n' '  ' < "${e%/environ}/cmdline" 2>/dev/null | cut -c1-400; done
echo "$M end"
""".replace("QUERY", QUERY)


# ------------------------------------------------------------------------------------------- parsing


def _value(field: str) -> float | None:
    """One nvidia-smi figure; ``None`` for "[N/A]", "[Not Supported]" or anything unreadable."""
    try:
        v = float(field.strip())
    except ValueError:
        return None
    return v if v == v and abs(v) < 1e12 else None


def gpu_line(line: str) -> GpuSample | None:
    """``index, name, util, mem used MiB, mem total MiB, temp, power`` → a GPU; ``None`` if not one."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 7 or not fields[0].isdigit() or len(fields[0]) > 4:
        return None
    util, used, total, temp, power = (_value(f) for f in fields[2:])
    return GpuSample(
        index=int(fields[0]),
        name=parse.text(fields[1], 80),
        util=None if util is None or not 0 <= util <= 100 else util,
        mem_used=None if used is None or used < 0 else int(used * MIB),
        mem_total=None if total is None or total <= 0 else int(total * MIB),
        temp_c=temp,
        power_w=None if power is None or power < 0 else power,
    )


TITLES = {"Inference": "inference", "Orchestrator": "orchestrator", "Trainer": "trainer"}  # PRIME-RL::<Title>


def roles(command_lines: Iterable[str]) -> tuple[str, ...]:
    """The prime-rl roles these process command lines show, in a fixed order (Slurm's launchers skipped). A
    process prime-rl titled (``PRIME-RL::Trainer``: its setproctitle, the first word of its command line) is
    what its title says, whatever its arguments name; the others are guessed from their arguments' words."""
    found: set[str] = set()
    for line in command_lines:
        args = line.split()
        if args and args[0].startswith("PRIME-RL::"):
            if (role := TITLES.get(args[0][len("PRIME-RL::") :])) is not None:
                found.add(role)
            continue  # the launcher and the env servers: no GPU role
        program = args[0].rsplit("/", 1)[-1] if args else ""
        if (
            not args
            or program in LAUNCHERS
            or "slurm_script" in line
            or (program.lstrip("-") in SHELLS and "-c" in args[1:3])
        ):
            continue
        words = set(re.split(r"[^a-z0-9]+", line.lower()))
        found.update(role for role, names in ROLES if words & names)
    return tuple(role for role, _ in ROLES if role in found)


class _Task:
    def __init__(self) -> None:
        self.node = ""
        self.section = ""
        self.gpus: list[GpuSample] = []
        self.smi_text: list[str] = []
        self.smi_rc: int | None = None
        self.no_smi = False
        self.procs: list[str] = []
        self.ended = False

    def feed(self, line: str) -> None:
        if line.startswith(MARK + " "):
            word, _, rest = line[len(MARK) + 1 :].partition(" ")
            if word == "node" and not self.node and _NODE.fullmatch(rest.strip()):
                self.node = rest.strip()
            elif word == "smi":
                self.section = ""
                self.smi_rc = int(rest) if rest.strip().isdigit() and len(rest.strip()) < 6 else -1
            elif word == "nosmi":
                self.no_smi = True
            elif word in ("gpus", "procs"):
                self.section = word
            elif word == "end":
                self.ended, self.section = True, ""
        elif self.section == "gpus":
            gpu = gpu_line(line)
            if gpu is not None:
                self.gpus.append(gpu)
            elif line.strip() and len(self.smi_text) < 20:
                self.smi_text.append(parse.text(line.strip(), 300))
        elif self.section == "procs" and len(self.procs) < 2000:
            self.procs.append(line)

    def record(self, node: str, smi_timeout: float) -> NodeGpus:
        found = roles(self.procs)
        if self.no_smi:
            return NodeGpus(node, roles=found, error=f"no NVIDIA driver on {node} (nvidia-smi is not installed there)")
        why = self.smi_text[-1].split(". ", 1)[0].rstrip(".") if self.smi_text else ""  # its first sentence
        if self.smi_rc in (124, 137):
            error = f"nvidia-smi on {node} did not answer within {smi_timeout:g} s"
        elif self.smi_rc is None and not self.gpus:
            error = f"{node} stopped answering before its GPUs were read"
        elif self.smi_rc not in (None, 0) or (not self.gpus and why):
            error = (
                f"no NVIDIA driver on {node}: {why}"
                if _NO_DRIVER.search(why)
                else f"nvidia-smi failed on {node}: {why or f'exit status {self.smi_rc}'}"
            )
        elif not self.gpus:
            error = f"nvidia-smi lists no GPU on {node}"
        else:
            error = ""
        return NodeGpus(node, gpus=tuple(self.gpus[:64]) if not error else (), roles=found, error=error)


def node_gpus(
    out: str, err: str, nodes: Iterable[str], *, timed_out: float | None = None, smi_timeout: float = 10.0
) -> tuple[NodeGpus, ...]:
    """What ``srun --label`` printed (tasks' lines prefixed ``N: ``) → one record per node: every node in
    ``nodes`` (the job's, in order) and any other that answered. A node that printed nothing gets srun's
    reason from ``err`` when it names the node, else "did not answer". Never raises."""
    wanted = [n for n in dict.fromkeys(nodes) if isinstance(n, str) and n][:MAX_NODES]
    tasks: dict[int, _Task] = {}
    for raw in str(out).splitlines()[:200_000]:
        m = _TASK.match(raw)
        if m is None:
            continue
        task = tasks.get(int(m.group(1)))
        if task is None:
            if len(tasks) >= MAX_NODES:
                continue
            task = tasks[int(m.group(1))] = _Task()
        task.feed(m.group(2).rstrip("\r"))
    by_node: dict[str, NodeGpus] = {}
    for i, task in sorted(tasks.items()):
        node = task.node or (wanted[i] if i < len(wanted) else f"task {i}")
        if node not in by_node:
            by_node[node] = task.record(node, smi_timeout)
    reasons: dict[str, str] = {}
    for line in str(err).splitlines()[-200:]:
        m = _LAUNCH_FAILED.search(line)
        if m and m.group(1) not in reasons:
            reasons[m.group(1)] = parse.text(m.group(2).strip(), 300)
    result = []
    for node in wanted:
        got = by_node.pop(node, None)
        if got is None:
            if node in reasons:
                got = NodeGpus(node, error=f"{node} could not be reached: {reasons[node]}")
            elif reasons and not tasks:  # srun gave up on the whole step because of another node
                got = NodeGpus(node, error=f"{node} not read: srun could not start on {next(iter(reasons))}")
            elif timed_out is not None:
                got = NodeGpus(node, error=f"{node} did not answer within {timed_out:g} s")
            else:
                got = NodeGpus(node, error=f"{node} did not answer")
        result.append(got)
    return tuple(result + list(by_node.values()))


# ------------------------------------------------------------------------------------------- asking


def valid_job_id(job_id: str) -> bool:
    """A plain job id or an array task (``123``, ``123_4``): the only forms put on a command line."""
    return bool(job_id) and len(job_id) <= 32 and job_id.replace("_", "").isdigit() and not job_id.startswith("_")


class GpuReader:
    """Reads running jobs' per-node GPUs through ``conn`` (the login node). Whether ``srun`` knows
    ``--overlap`` (Slurm 20.11+) is found out on first use and remembered. Not thread-safe."""

    def __init__(self, conn: Connection, timeout: float = 20.0) -> None:
        self.conn = conn
        self.timeout = max(2.0, timeout)
        self.smi_timeout = max(1.0, min(10.0, self.timeout / 2))
        self.overlap: bool | None = None

    def command(self, job_id: str, nodes: list[str]) -> str:
        n = len(nodes)
        overlap = "--overlap " if self.overlap is not False else ""
        return (
            f"timeout -k 2 {self.timeout:g} srun {overlap}--jobid={shlex.quote(job_id)} --nodes={n} "
            f"--ntasks={n} --ntasks-per-node=1 --nodelist={shlex.quote(','.join(nodes))} --label --quiet "
            f"--chdir=/tmp sh -c {shlex.quote(SCRIPT)} ptt-gpus {self.smi_timeout:g}"
        )

    async def job(self, job: SlurmJob, now: float | None = None, down: Iterable[str] = ()) -> JobGpus:
        """One running job's GPUs node by node; every failure is the record's (or a node's) error. Nodes in
        ``down`` (the controller lost their slurmd) are not asked: srun would wait for them in vain."""
        where = self.conn.pod.name
        if not valid_job_id(job.id):
            return JobGpus(job.id, error=f"not a Slurm job id: {job.id!r}", checked_at=now)
        lost = set(down)
        ask = [n for n in job.nodes if n not in lost and _NODE.fullmatch(n)][:MAX_NODES]
        skipped = tuple(
            NodeGpus(n, error=f"{n} is not responding to Slurm" if n in lost else f"not a node name: {n!r}")
            for n in job.nodes
            if n not in ask
        )
        if not ask:
            error = f"Slurm names no node for job {job.id} yet" if not job.nodes else ""
            return JobGpus(job.id, nodes=skipped, error=error, checked_at=now)
        try:
            rc, out, err = await self._srun(job.id, ask)
        except asyncio.TimeoutError:
            return JobGpus(
                job.id,
                error=f"srun into job {job.id} on {where} did not answer within {self.timeout + 5:g} s",
                checked_at=now,
            )
        except (PrimeTrainError, OSError) as exc:
            return JobGpus(
                job.id, error=f"asking job {job.id}'s nodes failed: {exc or type(exc).__name__}", checked_at=now
            )
        if rc == 127 and MARK not in out:
            return JobGpus(job.id, error=f"srun is not installed on {where}", checked_at=now)
        err_lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
        if MARK not in out and rc not in (0, 124, 137) and not any(_LAUNCH_FAILED.search(ln) for ln in err_lines):
            reason = re.sub(r"^srun: (?:error: )?", "", err_lines[-1]) if err_lines else f"exit status {rc}"
            return JobGpus(
                job.id, error=f"srun into job {job.id} failed on {where}: {parse.text(reason, 300)}", checked_at=now
            )
        timed_out = self.timeout if rc in (124, 137) else None
        read = {n.node: n for n in node_gpus(out, err, ask, timed_out=timed_out, smi_timeout=self.smi_timeout)}
        by_node = {**read, **{n.node: n for n in skipped}}
        ordered = [by_node.pop(n) for n in job.nodes if n in by_node]
        return JobGpus(job.id, nodes=tuple(ordered + list(by_node.values())), checked_at=now)

    async def _srun(self, job_id: str, nodes: list[str]) -> tuple[int, str, str]:
        rc, out, err = await self.conn.run(self.command(job_id, nodes), timeout=self.timeout + 5)
        if self.overlap is None:
            if rc != 0 and MARK not in out and _NO_OVERLAP.search(err):
                self.overlap = False  # Slurm before 20.11: steps share the job's resources without asking
                rc, out, err = await self.conn.run(self.command(job_id, nodes), timeout=self.timeout + 5)
            elif MARK in out:
                self.overlap = True
        return rc, out, err

    async def jobs(
        self, jobs: Iterable[SlurmJob], now: float | None = None, down: Iterable[str] = ()
    ) -> tuple[JobGpus, ...]:
        """The GPUs of every running job with nodes among ``jobs`` (asked side by side)."""
        running = [j for j in jobs if j.state == "RUNNING" and j.nodes]
        if not running:
            return ()
        lost = frozenset(down)
        return tuple(await asyncio.gather(*(self.job(j, now, lost) for j in running)))
