"""Items 8 and 12: ``prime-train-tui probe POD --json`` against a real sshd pod whose probe misbehaves. It
must end, non-zero, with one line saying why: when the probe only sends garbage (it once waited for ever:
its timeout was per line, and garbage lines kept coming), when it never answers, and when the probe on the
pod is killed (it once exited 0 with nothing on stderr)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import _make_server, cli_pod_home

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ssh

# misbehaving probes, uploaded, verified and started by the real command in place of the real one (a probe
# planted on the pod under the real one's name is never run: tests/hostile/test_shared_probe_dir.py)
FAKES = {
    "garbage": """
import os, sys, threading, time
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
while True:
    print("garbage, not a sample", flush=True)
    time.sleep(0.2)
""",
    "silent": "import sys\nsys.stdin.read()\n",
}


# the command line, its pods' probe replaced by the file named first (none: the real probe)
WITH_PROBE = """import pathlib, sys
from services.pod import trusted
from services.pod.ssh import SSHConnection
if sys.argv[1]:
    SSHConnection.probe_bundle = lambda self: trusted.pod_bundle(self.pod, (pathlib.Path(sys.argv[1]),), "probe")
from app.cli import main
sys.exit(main(sys.argv[2:]))
"""


class CliPod:
    def __init__(self, root: Path, env: dict[str, str], probe_dir: Path) -> None:
        self.root, self.env, self.probe_dir = root, env, probe_dir
        self.fake: Path | None = None

    def mode(self, mode: str) -> None:
        """The probe the pod runs: a fake one (FAKES), or "" for the real one."""
        self.fake = None
        if mode:
            self.fake = self.root / f"fake-{mode}" / "probe.py"
            self.fake.parent.mkdir(exist_ok=True)
            self.fake.write_text(FAKES[mode])

    def start(self, *args: str) -> subprocess.Popen:
        command = [sys.executable, "-c", WITH_PROBE, str(self.fake or ""), *args]
        return subprocess.Popen(
            command, cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )

    def probes(self) -> list[psutil.Process]:
        """This pod's probe processes (their command line names the probe-<hash> dir under our probe_dir)."""
        found = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or ())
            if "probe-" in cmd and str(self.probe_dir) in cmd and "probe.py" in cmd:
                found.append(p)
        return found


@pytest.fixture(scope="module")
def cli_pod(tmp_path_factory) -> CliPod:
    root = tmp_path_factory.mktemp("cli-pod")
    server = _make_server(root / "sshd", env={"PTT_FAKE_GPUS": "2"})
    server.start()
    env, probe_dir = cli_pod_home(root, server)
    yield CliPod(root, env, probe_dir)
    server.kill()


def finish(proc: subprocess.Popen, limit: float = 60.0) -> tuple[int, str, str]:
    """Its exit within a generous bound (the bound is a hang detector, not a timing claim)."""
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running after {limit:g} s; stderr: {err.decode()!r}")
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("mode, why", [("garbage", "malformed"), ("silent", "no valid sample")])
def test_a_probe_without_valid_samples_ends_the_command_with_a_reason(cli_pod, mode, why):
    cli_pod.mode(mode)
    code, out, err = finish(cli_pod.start("probe", "p1", "--json", "--timeout", "5"))
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "no valid sample from p1 within 5 s" in err and why in err


def test_a_killed_probe_is_exit_1_with_a_reason(cli_pod):
    cli_pod.mode("")
    proc = cli_pod.start("probe", "p1", "--json", "--interval", "0.3")
    try:
        first = proc.stdout.readline()
        assert first.startswith(b'{"v":1'), proc.stderr.read1().decode() if first == b"" else first
        deadline = time.monotonic() + 20
        while not (victims := cli_pod.probes()):
            assert time.monotonic() < deadline, "no probe process found on the pod"
            time.sleep(0.1)
        assert len(victims) == 1, [v.cmdline() for v in victims]
        victims[0].send_signal(signal.SIGKILL)
    except BaseException:
        proc.kill()
        raise
    code, _, err = finish(proc)
    assert code == 1
    assert len(err.strip().splitlines()) == 1, err
    assert "the probe on p1 stopped (killed by signal 9)" in err
