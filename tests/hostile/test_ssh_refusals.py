"""Item 13 (ssh): a refusal says what was refused.

A host key marked ``@revoked`` in known_hosts used to read "unknown host key" (asyncssh drops the revoked
list when it retries a non-22 port without it), and the app then offered to trust it; with the key also
trusted it read "could not be verified". It must say revoked, and never be a key the user may trust. A
ProxyJump that fails used to read "connection refused" as if the pod refused: it must name the jump host.
Against the real sshd on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from services.errors import ConnectError, HostKeyError, HostKeyRevoked
from services.pod.specs import parse_pod_spec
from services.pod.ssh import SSHConnection
from tests.conftest import free_port
from tests.services.lifecycle.test_actions import wait_for

pytestmark = pytest.mark.ssh
REPO = Path(__file__).resolve().parents[2]


def fingerprint(sshd) -> str:
    return subprocess.run(
        ["ssh-keygen", "-lf", str(sshd.root / "host_ed25519.pub"), "-E", "sha256"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]


def pub(sshd) -> str:
    return " ".join((sshd.root / "host_ed25519.pub").read_text().split()[:2])


def assert_revoked(err: BaseException, sshd, client_home) -> None:
    assert isinstance(err, HostKeyRevoked) and isinstance(err, ConnectError)
    assert not isinstance(err, HostKeyError)  # no trust prompt may ever offer it: HostKeyError's are trustable
    message = str(err)
    assert "revoked" in message.lower()
    assert "unknown" not in message.lower() and "changed" not in message.lower()
    assert fingerprint(sshd) in message and str(client_home.known_hosts) in message
    assert err.fingerprint == fingerprint(sshd) and err.known_hosts_file == str(client_home.known_hosts)
    assert "never" in err.hint


# ------------------------------------------------------------------ @revoked


@pytest.mark.parametrize(
    "lines",
    [
        lambda s: [f"@revoked {s.known_hosts_line}"],  # only the revocation
        lambda s: [s.known_hosts_line, f"@revoked {s.known_hosts_line}"],  # trusted, and revoked since
        lambda s: [f"@revoked * {pub(s)}"],  # revoked for every host
    ],
    ids=["revoked-only", "trusted-and-revoked", "revoked-everywhere"],
)
async def test_a_revoked_host_key_is_refused_as_revoked(sshd, client_home, lines):
    text = "\n".join(lines(sshd)) + "\n"
    client_home.known_hosts.write_text(text)
    with pytest.raises(ConnectError) as info:
        await SSHConnection(sshd.pod()).connect()
    assert_revoked(info.value, sshd, client_home)
    assert client_home.known_hosts.read_text() == text  # the record is left alone


@pytest.mark.parametrize("trusted_too", [False, True], ids=["revoked-only", "trusted-and-revoked"])
async def test_a_revoked_key_is_revoked_through_an_ssh_alias_too(sshd, client_home, trusted_too):
    trusted = f"{sshd.known_hosts_line}\n" if trusted_too else ""
    client_home.known_hosts.write_text(f"{trusted}@revoked {sshd.known_hosts_line}\n")
    with pytest.raises(ConnectError) as info:
        await SSHConnection(parse_pod_spec("testpod")).connect()
    assert_revoked(info.value, sshd, client_home)


async def test_another_hosts_revoked_key_does_not_make_this_one_revoked(sshd, client_home, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "old")], check=True)
    old = " ".join((tmp_path / "old.pub").read_text().split()[:2])
    client_home.known_hosts.write_text(f"{sshd.known_hosts_line}\n@revoked [127.0.0.1]:{sshd.port} {old}\n")
    async with SSHConnection(sshd.pod()) as conn:  # an old key revoked, the current one trusted: fine
        assert (await conn.run("echo ok"))[1].strip() == "ok"


def test_status_says_revoked_and_offers_no_trust(sshd, client_home, tmp_path):
    client_home.known_hosts.write_text(f"@revoked {sshd.known_hosts_line}\n")
    env = {
        **os.environ,
        "HOME": str(client_home.home),
        "PRIME_TRAIN_TUI_DATA_DIR": str(tmp_path / "data"),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path / "cfg"),
    }
    env.pop("SSH_AUTH_SOCK", None)
    r = subprocess.run(
        [sys.executable, "-m", "app.cli", "status", "testpod", "--json", "--timeout", "20"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    (pod,) = json.loads(r.stdout)["pods"]
    assert "revoked" in pod["reason"] and pod["state"] != "hostkey_unknown", pod


# ------------------------------------------------------------------ ProxyJump


def jump_config(client_home, sshd, jump: str, bastion_port: int, pod_port: int = 0) -> None:
    (client_home.home / ".ssh" / "config").write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion_port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {client_home.known_hosts}\n"
        f"Host p1\n  HostName 127.0.0.1\n  Port {pod_port or sshd.port}\n  User {sshd.user}\n  ProxyJump {jump}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {client_home.known_hosts}\n"
    )


async def test_a_proxyjump_to_a_closed_port_names_the_jump_host(sshd, client_home):
    client_home.trust()
    jump_config(client_home, sshd, "bastion", free_port())  # nothing listens there
    with pytest.raises(ConnectError) as info:
        await SSHConnection(parse_pod_spec("p1")).connect()
    assert str(info.value) == "cannot reach the jump host bastion (ProxyJump for p1): connection refused"


async def test_a_literal_proxyjump_is_named_as_written(sshd, client_home):
    client_home.trust()
    closed = free_port()
    jump_config(client_home, sshd, f"{sshd.user}@127.0.0.1:{closed}", closed)
    with pytest.raises(ConnectError) as info:
        await SSHConnection(parse_pod_spec("p1")).connect()
    assert str(info.value).startswith(f"cannot reach the jump host {sshd.user}@127.0.0.1:{closed} (ProxyJump for p1): ")


async def test_a_working_proxyjump_still_connects_and_closes_both_hops(sshd, client_home):
    client_home.trust()
    jump_config(client_home, sshd, "bastion", sshd.port)  # the sshd is its own bastion
    listener = psutil.Process(sshd.proc.pid)
    conn = SSHConnection(parse_pod_spec("p1"))
    await conn.connect()
    try:
        rc, out, _ = await conn.run("echo through")
        assert rc == 0 and out.strip() == "through"
        assert len(listener.children()) == 2  # one session per hop: the jump, and the pod through it
    finally:
        await conn.close()
    assert wait_for(lambda: not listener.children(), 10)  # both hops closed


async def test_a_pod_unreachable_behind_a_working_jump_is_not_blamed_on_the_jump(sshd, client_home):
    client_home.trust()
    jump_config(client_home, sshd, "bastion", sshd.port, pod_port=free_port())  # the jump works, the pod is shut
    with pytest.raises(ConnectError) as info:
        await SSHConnection(parse_pod_spec("p1")).connect()
    message = str(info.value)
    assert message.endswith("(through the jump host bastion)") and "cannot reach the jump host" not in message
    listener = psutil.Process(sshd.proc.pid)
    assert wait_for(lambda: not listener.children(), 10)  # the jump's session was closed, not left behind
