"""Hardening item 9: a provider's SSH host was saved to pods.toml unchecked, and the app then refused its own
pods.toml — an IPv6 address was enough (``host = "::1"`` did not parse back), after which every command exited
2 and the shipped systemd unit did not restart the watcher (``RestartPreventExitStatus=2``). Now a host from a
provider is checked and normalised before anything saves it (a DNS name, IPv4, or IPv6 in one spelling;
garbage leaves a ready pod "pending" with the reason), IPv6 works as a pod host everywhere (``user@[::1]:22``,
pods.toml, the SSH connection), and one bad pods.toml entry disables that pod with its error, never the others.

Real parts: a real sshd listening on ::1, the real CLI as a subprocess, pods.toml written and read back."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import add_saved_pod, load_pods, remove_saved_pod
from services.connect import open_connection
from services.errors import PodSpecError
from services.models import Pod, PodKind
from services.offers.launch import checked_access
from services.offers.models import PodAccess, parse_ssh
from services.pod.specs import parse_pod_spec, ssh_host
from tests.conftest import SshServer

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "spec, host, user, port",
    [
        ("root@[::1]:22", "::1", "root", 22),
        ("::1", "::1", None, None),
        ("ubuntu@2001:DB8:0::1", "2001:db8::1", "ubuntu", None),
        ("[fe80::1%eth0]:2222", "fe80::1%eth0", None, 2222),
        ("root@203.0.113.7:22", "203.0.113.7", "root", 22),
    ],
)
def test_ipv6_pod_specs_parse_in_one_spelling(spec, host, user, port):
    pod = parse_pod_spec(spec)
    assert (pod.kind, pod.host, pod.user, pod.port) == (PodKind.SSH, host, user, port)


def test_a_bad_ipv6_spec_is_one_clear_error():
    with pytest.raises(PodSpecError, match="not an IPv6 address"):
        parse_pod_spec("root@[::1::2]:22")


GARBAGE = ["evil;rm -rf /", "a b", "x" * 1000, "-oProxyCommand=sh", "host\nname", "[::1]:22", "::gg", "", "$(id)"]


@pytest.mark.parametrize("host", GARBAGE, ids=range(len(GARBAGE)))
def test_a_garbage_host_from_a_provider_is_never_ready_nor_saved(host):
    access = checked_access(PodAccess("p1", "ready", "root", host or " ", 22))
    assert access.state == "pending" and access.host == "" and "unusable SSH address" in access.message
    assert len(access.message) < 200 and "\n" not in access.message


@pytest.mark.parametrize(
    "host, want",
    [
        ("[2001:DB8::0:1]", "2001:db8::1"),
        ("::1", "::1"),
        ("gpu-1.example.com", "gpu-1.example.com"),
        ("198.51.100.7", "198.51.100.7"),
    ],
)
def test_a_good_host_from_a_provider_is_normalised(host, want):
    access = checked_access(PodAccess("p1", "ready", "root", host, 2200))
    assert (access.state, access.host) == ("ready", want)
    assert parse_pod_spec(access.target).host == want  # what the user is shown reads back as the same pod


def test_a_garbage_user_or_port_from_a_provider_is_refused():
    assert checked_access(PodAccess("p1", "ready", "root;id", "h", 22)).state == "pending"
    assert checked_access(PodAccess("p1", "ready", "root", "h", 0)).state == "pending"
    assert parse_ssh("root@[2001:db8::1]:2200") == ("root", "2001:db8::1", 2200)
    with pytest.raises(PodSpecError):
        ssh_host("a b")


def test_a_rented_ipv6_pod_is_saved_and_read_back(tmp_path):
    path = tmp_path / "pods.toml"
    pod = Pod(
        name="rented-v6",
        kind=PodKind.SSH,
        host="2001:db8::1",
        user="root",
        port=2222,
        provider="vast",
        provider_id="31",
        saved=True,
    )
    add_saved_pod(pod, path)
    [back] = load_pods(path)
    assert (back.host, back.user, back.port, back.provider_id) == ("2001:db8::1", "root", 2222, "31")


BAD_AND_GOOD = """# my pods
[pods.bad]
host = "a b"

[pods.good]
host = "127.0.0.1"
user = "{user}"
port = {port}
"""


def test_one_bad_entry_disables_only_that_pod_and_survives_a_rewrite(tmp_path):
    path = tmp_path / "pods.toml"
    path.write_text(BAD_AND_GOOD.format(user="root", port=22))
    pods = load_pods(path)
    assert [p.name for p in pods] == ["good"] and list(pods.broken) == ["bad"]
    assert "pods.bad" in str(pods.broken["bad"]) and "a b" in str(pods.broken["bad"])
    add_saved_pod(Pod(name="new", kind=PodKind.SSH, host="::1", saved=True), path)
    remove_saved_pod("good", path)
    text = path.read_text()
    assert "[pods.bad]" in text and 'host = "a b"' in text, "the app dropped the user's entry it could not read"
    assert [p.name for p in load_pods(path)] == ["new"]


def _cli(home: Path, cfg: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(cfg),
        "PRIME_TRAIN_TUI_DATA_DIR": str(home / "data"),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env
    )


def test_commands_work_on_the_good_pod_and_say_what_is_wrong_with_the_bad_one(sshd, client_home, tmp_path):
    client_home.trust()
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "pods.toml").write_text(BAD_AND_GOOD.format(user=sshd.user, port=sshd.port))
    r = _cli(client_home.home, cfg, "status", "good", "--json")
    assert r.returncode == 0, r.stderr
    [good] = json.loads(r.stdout)["pods"]
    assert good["name"] == "good" and good["gpus"], good
    r = _cli(client_home.home, cfg, "status", "--json")  # every pod: the good one, and a warning for the bad one
    assert r.returncode == 0 and [p["name"] for p in json.loads(r.stdout)["pods"]] == ["good"], r.stderr
    [warning] = r.stderr.splitlines()
    assert "pods.bad" in warning and "left out" in warning, warning
    r = _cli(client_home.home, cfg, "status", "bad")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "pods.bad" in r.stderr.splitlines()[0], r.stderr


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class _V6Server(SshServer):
    """The shared sshd's setup, listening on ::1 as well."""

    def write_config(self) -> Path:
        cfg = super().write_config()
        cfg.write_text(cfg.read_text().replace("ListenAddress 127.0.0.1", "ListenAddress 127.0.0.1\nListenAddress ::1"))
        return cfg


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
def test_a_pod_at_ipv6_loopback_is_saved_read_back_and_reached(sshd, client_home, tmp_path):
    sshd.kill()
    v6 = _V6Server(root=sshd.root, port=sshd.port, user=sshd.user, env=sshd.env)
    v6.start()
    try:
        pub = (sshd.root / "host_ed25519.pub").read_text().split()
        client_home.known_hosts.write_text(f"[::1]:{sshd.port} {pub[0]} {pub[1]}\n")
        (client_home.home / ".ssh" / "config").write_text(
            f"Host ::1\n  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {client_home.known_hosts}\n"
        )
        path = tmp_path / "pods.toml"
        add_saved_pod(parse_pod_spec(f"{sshd.user}@[::1]:{sshd.port}", name="v6"), path)
        [pod] = load_pods(path)
        assert (pod.host, pod.port) == ("::1", sshd.port)

        async def echo() -> str:
            conn = open_connection(pod)
            await conn.connect()
            try:
                return (await conn.run("echo ok-$PTT_FAKE_GPUS"))[1].strip()
            finally:
                await conn.close()

        assert asyncio.run(echo()) == "ok-8"
    finally:
        v6.kill()
