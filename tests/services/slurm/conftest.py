"""A real Slurm for the tests: Debian's ``munged``, ``slurmctld`` and two ``slurmd`` (nodes n1 and n2, both
127.0.0.1 on their own ports) started once per session in a private temp dir, with their own munge key and
socket, state and spool dirs and free ports, so they never touch a system Slurm. scripts/test.sh installs
the packages; nothing is installed here.

``slurm.run(...)`` runs a Slurm command against this cluster; ``slurm.connection()`` is a LocalConnection whose
commands see it (``SLURM_CONF``), the way a login node's shell sees its cluster. ``kill_node``/``start_node``
stop and restart one node's slurmd. At the end every job is cancelled, every daemon stopped, any process
left in the temp dir killed, and the dir removed.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from services.models import Pod, PodKind
from services.pod.local import LocalConnection

DAEMONS = {name: shutil.which(name) or f"/usr/sbin/{name}" for name in ("munged", "slurmctld", "slurmd")}
NODES = ("n1", "n2")
START_TIMEOUT_S = 30


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class LocalSlurm:
    root: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def connection(self, name: str = "cluster") -> LocalConnection:
        return LocalConnection(Pod(name=name, kind=PodKind.LOCAL), env=self.env)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
            cwd=self.jobs_dir,
        )

    def sbatch(self, *args: str) -> str:
        """Submit a job (its output under jobs/); its id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.jobs_dir}", "--output=/dev/null", *args).stdout
        return out.strip().split(";", 1)[0]

    # ------------------------------------------------------------------------------- set-up

    def write_config(self) -> None:
        user = getpass.getuser()
        ctld, slurmd, *node_ports = _free_ports(2 + len(NODES))
        r = self.root
        lines = [
            "ClusterName=ptt",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r}/munge/munge.sock",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            # a lost slurmd is noticed within seconds (the controller pings every SlurmdTimeout/3)
            "SlurmdTimeout=5",
            "ReturnToService=2",
            "MinJobAge=300",
            *(
                f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs=2 RealMemory=500 State=UNKNOWN"
                for n, p in zip(NODES, node_ports)
            ),
            f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
        for d in ("state", "log", "jobs", *(f"spool/{n}" for n in NODES)):
            (r / d).mkdir(parents=True)
        self.conf.write_text("\n".join(lines))

    def _spawn(self, key: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{key}.out", "ab")
        self.procs[key] = subprocess.Popen(
            argv, stdout=log, stderr=log, env={**os.environ, **self.env}, cwd=self.root, start_new_session=True
        )
        log.close()

    def start_munge(self) -> None:
        m = self.root / "munge"
        m.mkdir(mode=0o755)  # munged wants its socket's dir reachable by all, its key readable by it alone
        key = m / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            [
                DAEMONS["munged"],
                "-F",
                f"--socket={m}/munge.sock",
                f"--key-file={key}",
                f"--pid-file={m}/munged.pid",
                f"--seed-file={m}/munged.seed",
                f"--log-file={m}/munged.log",
            ],
        )
        self._wait(lambda: (m / "munge.sock").exists(), "munged did not create its socket", ["munged"])

    def start_node(self, node: str) -> None:
        self._spawn(f"slurmd-{node}", [DAEMONS["slurmd"], "-D", "-N", node, "-f", str(self.conf)])

    def start(self) -> None:
        self.write_config()
        self.start_munge()
        self._spawn("slurmctld", [DAEMONS["slurmctld"], "-D", "-i", "-f", str(self.conf)])
        for node in NODES:
            self.start_node(node)
        self.wait_idle(NODES)

    def kill_node(self, node: str) -> None:
        """The node's slurmd dies without a word (SIGKILL), as when a machine is lost."""
        proc = self.procs.pop(f"slurmd-{node}")
        proc.kill()
        proc.wait(timeout=10)

    def node_states(self) -> dict[str, str]:
        res = self.run("sinfo", "--noheader", "-N", "-o", "%N %T", check=False)
        return dict(line.split(None, 1) for line in res.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, nodes: tuple[str, ...] | list[str]) -> None:
        self._wait(
            lambda: all(self.node_states().get(n) == "idle" for n in nodes),
            f"nodes {', '.join(nodes)} did not become idle",
            list(self.procs),
        )

    def _wait(self, ready, what: str, keys: list[str]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for key in keys:
                proc = self.procs.get(key)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{key} exited with status {proc.returncode} while starting:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"local Slurm: {what} within {START_TIMEOUT_S} s; states {self.node_states()}\n{self.logs()}"
        )

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if f.is_file():
                out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    # ------------------------------------------------------------------------------- tear-down

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", f"--user={getpass.getuser()}", check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.run("squeue", "--noheader", check=False).stdout.strip():
                time.sleep(0.2)
        for key in [k for k in self.procs if k.startswith("slurmd")] + ["slurmctld", "munged"]:
            proc = self.procs.pop(key, None)
            if proc is None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._kill_leftovers()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftovers(self) -> None:
        """Job steps (slurmstepd and the job's own processes) outlive a killed slurmd: end every process
        working in this cluster's dir, which only this fixture started."""
        mine = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != os.getpid() and Path(p.cwd()).is_relative_to(self.root):
                    mine.append(p)
            except (psutil.Error, OSError, ValueError):
                continue
        for p in mine:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(mine, timeout=5)


@pytest.fixture(scope="session")
def slurm():
    """The local Slurm cluster (2 nodes, n1 and n2), started once per session."""
    missing = [name for name, path in DAEMONS.items() if not os.path.exists(path)]
    if missing or not shutil.which("sbatch"):
        pytest.fail(
            f"Slurm is not installed ({', '.join(missing) or 'sbatch'} missing): run the README's test "
            "command (it installs slurmctld, slurmd and munge)"
        )
    cluster = LocalSlurm(Path(tempfile.mkdtemp(prefix="ptt-slurm-")))
    cluster.root.chmod(0o755)  # munged checks every directory above its socket
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
