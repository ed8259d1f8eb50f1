"""``backup`` / ``restore`` when the pod side misbehaves: a backup agent that hangs, one that prints
nothing, the SSH connection dropping under it -> exit 1 with one line, never a traceback.

The local pod runs the agent as a real subprocess; the misbehaving agent is a real script put in the
place of services/pod/agent/backup.py (PodAgent.install points at it)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from app.cli import main
from services.backup.transfer import PodAgent
from services.pod.local import LocalConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def agent_script(tmp_path, monkeypatch):
    """``use(body)``: the backup agent on the (local) pod is a Python script with this body."""

    def use(body: str) -> Path:
        script = tmp_path / "fake_agent.py"
        script.write_text(body)

        async def install(self: PodAgent) -> str:
            # exec: the timeout's kill reaches the script itself, not only the shell around it
            self.command = f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))}"
            return str(script)

        monkeypatch.setattr(PodAgent, "install", install)
        return script

    return use


@pytest.fixture
def short_runs(monkeypatch):
    """Every command run on the local pod gets at most 1.5 s (the agent's real limits are minutes)."""
    real = LocalConnection.run

    async def run(self, command, timeout=30.0, input=None):
        return await real(self, command, min(timeout, 1.5), input)

    monkeypatch.setattr(LocalConnection, "run", run)


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("  hint:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("step", [["--step", "2"], []], ids=["plan", "list"])
def test_an_agent_that_hangs_is_a_one_line_timeout(step, agent_script, short_runs, s3env, tmp_path, capsys):
    run = tmp_path / "run"
    write_checkpoint(run, 2, shard_bytes=4096)
    agent_script("import time\ntime.sleep(30)\n")
    code, out, err = cli(
        capsys, "backup", "local", "--run-dir", str(run), "--bucket", s3env.bucket, "--endpoint", s3env.endpoint, *step
    )
    assert code == 1, (out, err)
    line = one_line(err)
    assert line.startswith("prime-train-tui: ") and "did not answer" in line, line
    assert s3env.keys() == []


def test_an_agent_that_prints_no_plan_is_a_one_line_error(agent_script, s3env, tmp_path, capsys):
    run = tmp_path / "run"
    write_checkpoint(run, 2, shard_bytes=4096)
    agent_script("import sys\nsys.exit(0)\n")  # no plan, no error event, no stderr
    code, out, err = cli(
        capsys,
        "backup",
        "local",
        "--run-dir",
        str(run),
        "--step",
        "2",
        "--bucket",
        s3env.bucket,
        "--endpoint",
        s3env.endpoint,
    )
    assert code == 1, (out, err)
    line = one_line(err)
    assert "no plan" in line and "step 2" in line, line
    assert s3env.keys() == []  # nothing was started in the bucket


CUT_THE_LINE = """
import os, signal, sys, time
sys.stdout.write('{"event": "part", "bytes": 1}\\n'); sys.stdout.flush()
pid = os.getppid()  # up to the sshd process that serves this connection: killed, the TCP link drops
while pid > 1:
    with open(f"/proc/{pid}/comm") as fh:
        name = fh.read().strip()
    if name.startswith("sshd"):
        os.kill(pid, signal.SIGKILL)
        break
    with open(f"/proc/{pid}/stat") as fh:
        pid = int(fh.read().rsplit(")", 1)[1].split()[1])
time.sleep(5)
"""


@pytest.mark.ssh
@pytest.mark.parametrize("command", ["backup", "restore"])
def test_the_ssh_connection_dropping_under_the_agent_is_one_line(
    command, sshd, client_home, agent_script, s3env, tmp_path, capsys
):
    client_home.trust()
    target = f"{sshd.user}@127.0.0.1:{sshd.port}"
    run = tmp_path / "run"
    write_checkpoint(run, 2, shard_bytes=4096)
    store = ["--bucket", s3env.bucket, "--endpoint", s3env.endpoint]
    if command == "restore":
        assert cli(capsys, "backup", target, "--run-dir", str(run), *store)[0] == 0
    agent_script(CUT_THE_LINE)
    argv = [command, target, *store, "--run-dir", str(run if command == "backup" else tmp_path / "fresh" / "run")]
    code, out, err = cli(capsys, *argv + (["--step", "2"] if command == "backup" else []))
    assert code == 1, (out, err)
    line = one_line(err)
    assert "connection" in line.lower() or "lost" in line.lower(), line
    assert not (tmp_path / "fresh" / "run" / "checkpoints" / "step_2").exists()
