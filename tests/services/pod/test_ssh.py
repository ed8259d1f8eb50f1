"""SSHConnection against a real OpenSSH sshd on loopback: trust, refusal, auth, upload, streaming."""

from __future__ import annotations

import asyncio
import subprocess

import psutil
import pytest

from services.errors import AuthError, ConnectError, HostKeyChanged, HostKeyUnknown
from services.models import Pod, Sample
from services.pod.connection import probe_source
from services.pod.known_hosts import trust_host_key
from services.pod.specs import parse_pod_spec
from services.pod.ssh import SSHConnection

pytestmark = pytest.mark.ssh


async def test_unknown_host_key_is_refused_until_trusted(sshd, client_home):
    pod = sshd.pod()
    with pytest.raises(HostKeyUnknown) as info:
        await SSHConnection(pod).connect()
    err = info.value
    expected_fp = subprocess.run(
        ["ssh-keygen", "-lf", str(sshd.root / "host_ed25519.pub"), "-E", "sha256"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    assert err.fingerprint == expected_fp
    assert err.key_line == sshd.known_hosts_line
    assert err.known_hosts_file == str(client_home.known_hosts)
    assert not client_home.known_hosts.exists()  # nothing written without the user's yes

    trust_host_key(err.key_line, err.known_hosts_file)
    trust_host_key(err.key_line, err.known_hosts_file)  # idempotent
    assert client_home.known_hosts.read_text().splitlines() == [sshd.known_hosts_line]
    async with SSHConnection(pod) as conn:
        assert (await conn.run("echo ok"))[1].strip() == "ok"


async def test_changed_host_key_is_refused_with_a_warning(sshd, client_home, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "imposter")], check=True)
    other = (tmp_path / "imposter.pub").read_text().split()
    client_home.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    with pytest.raises(HostKeyChanged) as info:
        await SSHConnection(sshd.pod()).connect()
    assert "man-in-the-middle" in str(info.value)
    assert "ssh-keygen" in info.value.hint
    # the record is left alone: only the user may change it
    assert client_home.known_hosts.read_text().split()[2] == other[1]


async def test_wrong_client_key_is_auth_failed(sshd, client_home, tmp_path):
    client_home.trust()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    client_home.write_ssh_config(identity=tmp_path / "stranger")
    with pytest.raises(AuthError, match="authentication failed"):
        await SSHConnection(sshd.pod()).connect()


async def test_ssh_config_alias_supplies_host_port_user_and_key(sshd, client_home):
    client_home.trust()
    async with SSHConnection(parse_pod_spec("testpod")) as conn:
        rc, out, _ = await conn.run("echo $USER-$PTT_FAKE_GPUS")
    assert rc == 0 and out.strip() == f"{sshd.user}-8"


async def test_refused_port_is_a_connect_error(client_home):
    with pytest.raises(ConnectError, match="refused"):
        await SSHConnection(Pod(name="x", host="127.0.0.1", port=1)).connect()


async def test_ssh_config_cannot_switch_host_key_checking_off(sshd, client_home):
    (client_home.home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {sshd.client_key}\n  UserKnownHostsFile none\n  StrictHostKeyChecking no\n"
    )
    with pytest.raises(HostKeyUnknown):
        await SSHConnection(sshd.pod()).connect()


async def test_probe_is_uploaded_once_per_content_hash_and_streams(sshd, client_home, tmp_path):
    client_home.trust()
    pod = sshd.pod(probe_dir=str(tmp_path / "probe-cache"))
    _, digest = probe_source()
    async with SSHConnection(pod) as conn:
        stream = await conn.start_probe(["--interval", "0.2"])
        samples = []
        while len(samples) < 3:
            line = await asyncio.wait_for(stream.readline(), 10)
            assert line, stream.stderr_tail()
            samples.append(Sample.from_line(line))
        assert conn.uploads == 1
    assert (tmp_path / "probe-cache" / f"probe-{digest}" / "probe.py").is_file()
    assert [len(s.gpus) for s in samples] == [8, 8, 8]
    assert samples[0].source == "nvidia-smi"
    g = samples[0].gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3" and g.mem_total == 81559 * 1024 * 1024
    assert 0 <= g.util <= 100 and g.power_w > 0 and g.temp_c > 0
    assert samples[0].host.mem_total > 0 and samples[0].host.disk_total > 0
    assert samples[2].t > samples[0].t

    async with SSHConnection(pod) as conn:  # a second connection finds it by hash: no upload
        await conn.upload_probe()
        assert conn.uploads == 0


async def test_probe_leaves_no_process_on_the_pod_when_the_channel_closes(sshd, client_home, tmp_path):
    client_home.trust()
    pod = sshd.pod(probe_dir=str(tmp_path / "probe-cache"))
    _, digest = probe_source()
    conn = SSHConnection(pod)
    await conn.connect()
    stream = await conn.start_probe(["--interval", "0.2"])
    assert await asyncio.wait_for(stream.readline(), 10)
    running = [
        p
        for p in psutil.process_iter(["cmdline"])
        if f"probe-{digest}" in " ".join(p.info["cmdline"] or [])
        and "probe.py" in (p.info["cmdline"] or [])
        and str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ]
    assert len(running) == 1, "exactly one probe runs on the pod while streaming"
    family = [running[0], *running[0].children(recursive=True)]
    assert any("nvidia-smi" in " ".join(p.cmdline()) for p in family[1:])  # ONE long-lived child
    await conn.close()
    gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == [], f"left behind on the pod: {[p.pid for p in alive]}"


async def test_aes_gcm_is_preferred_unless_the_ssh_config_names_ciphers(sshd, client_home):
    """AES-GCM (an AEAD cipher, as chacha20-poly1305) costs the client ~4x less CPU per packet; a user's
    Ciphers line in ~/.ssh/config still decides."""
    client_home.trust()
    async with SSHConnection(sshd.pod()) as conn:
        assert conn._conn.get_extra_info("recv_cipher") == "aes256-gcm@openssh.com"
    config = client_home.home / ".ssh" / "config"
    config.write_text(config.read_text() + "  Ciphers chacha20-poly1305@openssh.com\n")
    async with SSHConnection(sshd.pod()) as conn:
        assert conn._conn.get_extra_info("recv_cipher") == "chacha20-poly1305@openssh.com"
