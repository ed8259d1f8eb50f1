"""Pods as providers really give them, on real OpenSSH sshds (tests/conftest.py's ``provider_sshd``): a server
without SFTP (probe, lifecycle helper and backup agent all work), an endpoint that runs no commands (one clear
message, no retry storm), a pod whose PATH has no python3 (the message names the install command)."""

from __future__ import annotations

import asyncio
import json
import shlex
import stat
import time
from pathlib import Path

import pytest

from services.backup.transfer import PodAgent
from services.errors import ConnectError, ExecRefused, PythonMissing
from services.lifecycle.events import LifecycleError
from services.lifecycle.shell import PodShell
from services.models import Pod, PodState, Sample
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod import provider_ssh
from services.pod.connection import probe_source
from services.pod.ssh import SSHConnection

pytestmark = pytest.mark.ssh

FAST = MonitorSettings(interval=0.2, stale_after=1.0, backoff_max=0.1, keepalive_interval=2.0)
RUNPOD_FIX = "RunPod → Connect → SSH over exposed TCP"


def expected_install() -> str:
    """This machine's distribution's python3 install command (the sshd's pod is this machine)."""
    fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    ids = {fields.get("ID", "").strip('"'), *fields.get("ID_LIKE", "").strip('"').split()}
    if ids & {"debian", "ubuntu"}:
        return "apt-get install -y python3"
    if ids & {"rhel", "fedora", "centos"}:
        return "dnf install -y python3"
    return "apk add python3" if "alpine" in ids else "apt-get install -y python3"


async def first_sample(stream) -> Sample:
    for _ in range(50):
        line = await asyncio.wait_for(stream.readline(), 15)
        assert line, f"the probe ended: {stream.stderr_tail()}"
        try:
            return Sample.from_line(line)
        except Exception:  # noqa: BLE001 - the probe's first lines may be partial: the next one counts
            continue
    raise AssertionError("no valid sample in 50 lines")


# ------------------------------------------------------------------ no SFTP


async def test_probe_is_uploaded_over_exec_and_runs_without_sftp(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("no-sftp")
    provider_home(server)
    pod = server.pod(probe_dir=str(tmp_path / "podstate"))
    async with SSHConnection(pod) as conn:
        stream = await conn.start_probe(["--interval", "0.2"])
        sample = await first_sample(stream)
        assert conn.uploads == 1 and conn._sftp_refused
    assert len(sample.gpus) == 2  # the fake nvidia-smi through the real probe
    files, digest = probe_source()
    where = tmp_path / "podstate" / f"probe-{digest}"
    for name, data in files:
        assert (where / name).read_bytes() == data
        assert stat.S_IMODE((where / name).stat().st_mode) == 0o600  # in a directory private to the SSH user
    assert stat.S_IMODE(where.stat().st_mode) == stat.S_IMODE(where.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in where.iterdir()) == sorted(name for name, _ in files)  # no temp file left
    async with SSHConnection(pod) as conn:  # the content hash is found without SFTP: not uploaded again
        await conn.upload_probe()
        assert conn.uploads == 0


async def test_files_over_exec_keep_bytes_and_modes_and_replace_atomically(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("no-sftp")
    provider_home(server)
    binary = bytes(range(256)) * 300 + b"\n\n no final newline"
    target = tmp_path / "a dir with 'quotes' and spaces" / "run.sh"
    async with SSHConnection(server.pod()) as conn:
        await conn.put_files(
            [
                (binary, str(tmp_path / "deep" / "x" / "blob.bin"), 0o600),
                (b"#!/bin/sh\necho hi\n", str(target), 0o755),
                (b"", str(tmp_path / "empty"), 0o644),
            ]
        )
        assert await conn.exists(str(target)) and not await conn.exists(str(tmp_path / "nothing here"))
        await conn.put_file(b"#!/bin/sh\necho replaced\n", str(target), 0o755)  # over an existing file
        assert (await conn.run(shlex.quote(str(target))))[1] == "replaced\n"
    assert (tmp_path / "deep" / "x" / "blob.bin").read_bytes() == binary
    assert stat.S_IMODE((tmp_path / "deep" / "x" / "blob.bin").stat().st_mode) == 0o600
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert (tmp_path / "empty").read_bytes() == b""
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.sh"]


async def test_a_failed_upload_over_exec_says_why(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("no-sftp")
    provider_home(server)
    (tmp_path / "a file").write_text("not a directory")
    async with SSHConnection(server.pod()) as conn:
        with pytest.raises(ConnectError) as info:
            await conn.put_files([(b"x", str(tmp_path / "a file" / "sub" / "x.py"), 0o644)])
    assert not isinstance(info.value, ExecRefused)  # the endpoint runs commands: the pod's own reason
    assert str(info.value).startswith(f"cannot write to {tmp_path / 'a file' / 'sub'} on the pod: ")
    assert "Not a directory" in str(info.value) or "File exists" in str(info.value)


async def test_lifecycle_helper_and_backup_agent_work_without_sftp(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("no-sftp")
    provider_home(server)
    pod = server.pod(probe_dir=str(tmp_path / "podstate"))
    (tmp_path / "run").mkdir()
    async with SSHConnection(pod) as conn:
        shell = PodShell(conn)
        assert await shell.agent("status") == {"runs": []}  # uploads the helper (over exec), then runs it
        assert conn._sftp_refused
        agent = PodAgent(conn)
        remote = await agent.install()
        rc, out, err = await conn.run(f"{agent.command} list {tmp_path / 'run'}")
    assert rc == 0, err
    assert json.loads(out)["ckpts"] == []
    assert Path(remote).is_file()
    helper = Path(await PodShell(conn).agent_path())
    assert helper.is_file() and helper.parent.name.startswith("lifecycle-")


# ------------------------------------------------------------------ an endpoint that runs no commands


async def test_interactive_only_endpoint_is_named_with_the_fix(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("pty-only")
    provider_home(server)
    async with SSHConnection(server.pod(probe_dir=str(tmp_path / "podstate"))) as conn:
        with pytest.raises(ExecRefused) as info:
            await conn.start_probe(["--interval", "0.2"])
        with pytest.raises(ExecRefused):
            await conn.put_file(b"x", str(tmp_path / "x"))
        with pytest.raises(LifecycleError) as helper:  # the lifecycle helper says the same
            await PodShell(conn).agent("status")
    for message in (str(info.value), str(helper.value)):
        assert message.startswith(
            "this SSH endpoint only offers an interactive shell; monitoring needs to run commands"
        )
        assert "public IP and TCP port" in message and RUNPOD_FIX in message
    assert not (tmp_path / "x").exists()


class CountingConnector:
    """The monitor's connections, counted (each is one login to the pod)."""

    def __init__(self) -> None:
        self.connects = 0

    def __call__(self, pod: Pod) -> SSHConnection:
        counter = self

        class Counted(SSHConnection):
            async def connect(self) -> None:
                counter.connects += 1
                await super().connect()

        return Counted(pod)


async def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def watch_unsupported(server, tmp_path: Path, needle: str) -> None:
    """The monitor shows the reason as the pod's state, logs in once in 3 s of a 0.1 s backoff (a plain
    connection error would retry ~20 times), and logs in again when the user asks (r)."""
    connector = CountingConnector()
    mon = MonitorService(lambda snap: None, settings=FAST, connector=connector)
    mon.add(server.pod(probe_dir=str(tmp_path / "podstate")))
    try:
        snap = await wait_for(
            lambda: (s := mon.snapshot("testpod")).status.state is PodState.UNSUPPORTED and s, what="offline"
        )
        assert needle in snap.status.reason
        assert snap.status.next_retry is not None and snap.status.next_retry - time.time() > 600
        await asyncio.sleep(3.0)
        assert connector.connects == 1
        mon.reconnect("testpod")
        await wait_for(lambda: connector.connects == 2, what="the user's reconnect")
        await wait_for(lambda: mon.snapshot("testpod").status.state is PodState.UNSUPPORTED, what="unsupported again")
        assert needle in mon.snapshot("testpod").status.reason
    finally:
        await mon.aclose()


async def test_monitor_shows_the_interactive_only_endpoint_and_does_not_retry_in_a_loop(
    provider_sshd, provider_home, tmp_path
):
    server = provider_sshd("pty-only")
    provider_home(server)
    await watch_unsupported(server, tmp_path, RUNPOD_FIX)


async def test_a_connection_lost_is_never_called_an_interactive_only_endpoint(provider_sshd, provider_home, tmp_path):
    """The canary is asked after a failure; when the failure is the line going down, the answer is "connection
    lost", not "this endpoint only offers an interactive shell" (a race the backup tests once hit)."""
    from services.errors import ProbeError

    server = provider_sshd("no-sftp")
    provider_home(server)
    async with SSHConnection(server.pod(probe_dir=str(tmp_path / "podstate"))) as conn:
        conn._conn.abort()  # the TCP connection dies under us
        await asyncio.sleep(0.2)
        for attempt in (conn.run("true"), conn.start_probe(["--interval", "0.2"])):
            with pytest.raises((ConnectError, ProbeError)) as info:
                await attempt
            assert not isinstance(info.value, ExecRefused), info.value
            assert "interactive shell" not in str(info.value)


# ------------------------------------------------------------------ no python3


async def test_pod_without_python3_names_what_is_missing_and_the_install(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("no-python")
    provider_home(server)
    async with SSHConnection(server.pod(probe_dir=str(tmp_path / "podstate"))) as conn:
        with pytest.raises(PythonMissing) as info:
            await conn.start_probe(["--interval", "0.2"])
        assert conn.uploads == 0  # nothing is put on a pod that cannot run it
        with pytest.raises(LifecycleError) as helper:
            await PodShell(conn).agent("status")
    for message in (str(info.value), str(helper.value)):
        assert "the pod has no python3" in message and "3.8 or newer" in message
        assert expected_install() in message


async def test_monitor_shows_missing_python3_and_does_not_retry_in_a_loop(provider_sshd, provider_home, tmp_path):
    server = provider_sshd("no-python")
    provider_home(server)
    await watch_unsupported(server, tmp_path, expected_install())


@pytest.mark.parametrize(("variant", "needle"), [("pty-only", RUNPOD_FIX), ("no-python", "the pod has no python3")])
async def test_status_and_the_monitor_pane_say_unsupported_with_the_reason(
    provider_sshd, provider_home, tmp_path, variant, needle
):
    """`status` (headless) reports the state "unsupported" with what is missing, and the Monitor pane's text for
    such a pod says the reason first and that r retries."""
    from dataclasses import replace

    from app.commands.status import _one
    from services.models import PodSnapshot, PodStatus
    from widgets.monitor_pane import state_text

    server = provider_sshd(variant)
    provider_home(server)
    pod = server.pod(probe_dir=str(tmp_path / "podstate"))
    result = await _one(pod, 20.0)
    assert result["state"] == "unsupported" and needle in result["reason"], result
    snap = PodSnapshot(
        pod=replace(pod, name="p1"),
        status=PodStatus(PodState.UNSUPPORTED, result["reason"], since=0.0, next_retry=1800.0),
    )
    text = state_text(snap, 0.0)
    assert text.startswith("p1 cannot be monitored as it is: ") and needle in text and "r retries now" in text


# ------------------------------------------------------------------ the messages


@pytest.mark.parametrize(
    ("os_release", "install"),
    [
        (
            'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n',
            "on Ubuntu 22.04.4 LTS: apt-get install -y python3",
        ),
        (
            'ID="rocky"\nID_LIKE="rhel centos fedora"\nPRETTY_NAME="Rocky Linux 9.3"\n',
            "on Rocky Linux 9.3: dnf install -y python3",
        ),
        ('ID=alpine\nNAME="Alpine Linux"\n', "on Alpine Linux: apk add python3"),
        ("", "Debian/Ubuntu: apt-get install -y python3; RHEL/Fedora: dnf install -y python3; Alpine: apk add python3"),
    ],
)
def test_install_line_follows_os_release(os_release, install):
    assert provider_ssh.install_line(os_release) == install


def test_an_old_python3_is_named_with_its_version():
    err = provider_ssh.python_answer([b"ptt-python-missing Python 3.6.9\n", b"ID=ubuntu\nPRETTY_NAME=Ubuntu 18.04\n"])
    assert "too old" in str(err) and "Python 3.6.9" in str(err) and "3.8 or newer" in str(err)
    assert "apt-get install -y python3" in str(err)


@pytest.mark.parametrize(
    ("output", "found"),
    [
        ("sh: 1: python3: not found\n", True),
        ("bash: line 1: python3: command not found\n", True),
        ("env: 'python3': No such file or directory\n", True),
        ("Traceback ...\nFileNotFoundError: [Errno 2] No such file or directory: 'x'\n", False),
    ],
)
def test_python3_not_found_is_recognised_only_as_such(output, found):
    assert provider_ssh.python_not_found("python3 agent.py list", 127, output) is found
    assert provider_ssh.python_not_found("python3 agent.py list", 1, output) is False


# ------------------------------------------------------------------ a probe that does not start in time


async def test_a_probe_that_does_not_start_in_time_says_so_not_connection_lost(provider_sshd, provider_home, tmp_path):
    """The guard's first line did not come within login_timeout. asyncio's timeout is an OSError too, and the
    handler for a lost connection came first: the pod showed "connection lost: timed out" while the connection
    was fine and the pod was only slow to start the probe."""
    from services.errors import ProbeError
    from services.pod.ssh import SSHOptions

    server = provider_sshd("slow-start")
    provider_home(server)
    pod = server.pod(probe_dir=str(tmp_path / "podstate"))
    async with SSHConnection(pod, SSHOptions(login_timeout=1.0)) as conn:
        with pytest.raises(ProbeError) as info:
            await conn._start_guarded_probe(conn.probe_bundle(), ["--interval", "0.2"])
    assert "the pod did not start the probe within 1 s" in str(info.value)
