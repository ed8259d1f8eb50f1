"""Shared fixtures: a real OpenSSH sshd on loopback, and an isolated client HOME.

The sshd runs as the current user with generated host and client keys. Its sessions get a PATH whose
first entry holds the demo's fake ``nvidia-smi`` (services/demo/bin), so the probe on the "pod" reads
simulated GPUs through the real nvidia-smi code path, and the system python3 (no pynvml, no psutil), so
the /proc fallbacks are exercised too.
"""

from __future__ import annotations

import contextlib
import getpass
import inspect
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from services.models import Pod, PodKind

# The test command (scripts/test.sh, hence CI) runs the property tests derandomized: the same examples on every run,
# so a red run is reproducible and main never turns red by chance. Exploring new examples is a separate, deliberate
# run: PTT_HYPOTHESIS_PROFILE=explore scripts/test.sh tests/hostile (see docs/testing.md).
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)

REPO = Path(__file__).resolve().parent.parent
FAKE_BIN = REPO / "services" / "demo" / "bin"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
    )


@dataclass
class SshServer:
    """One sshd on 127.0.0.1:port. ``kill()`` ends the listener AND every session it forked."""

    root: Path
    port: int
    user: str
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def host_key(self) -> Path:
        return self.root / "host_ed25519"

    @property
    def client_key(self) -> Path:
        return self.root / "client_ed25519"

    @property
    def known_hosts_line(self) -> str:
        pub = (self.root / "host_ed25519.pub").read_text().split()
        return f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}"

    def write_config(self) -> Path:
        env = {"PATH": f"{FAKE_BIN}:/usr/local/bin:/usr/bin:/bin", **self.env}
        setenv = " ".join(f"{k}={v}" for k, v in env.items())
        cfg = self.root / "sshd_config"
        cfg.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin prohibit-password",
                    "MaxStartups 200",
                    "MaxSessions 50",
                    "LogLevel ERROR",
                    "Subsystem sftp internal-sftp",
                    f"SetEnv {setenv}",
                    "",
                ]
            )
        )
        return cfg

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation dir
        cfg = self.write_config()
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "sshd.log", "ab"),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError("sshd did not start listening")

    def kill(self) -> None:
        """Kill the listener and all its session processes (a pod dying mid-stream)."""
        import psutil

        if self.proc is None:
            return
        # stop before killing: a connection the listener accepts while we kill (the monitor reconnecting) would
        # otherwise fork a session after the list was taken and outlive the "dead" pod, answering as if online
        stopped: dict[int, psutil.Process] = {}
        try:
            parent = psutil.Process(self.proc.pid)
        except psutil.NoSuchProcess:
            parent = None
        while parent is not None:
            try:
                found = [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            fresh = [v for v in found if v.pid not in stopped and _is_sshd(v)]
            if not fresh:
                break
            for v in fresh:
                with contextlib.suppress(psutil.NoSuchProcess):
                    v.suspend()
                stopped[v.pid] = v
        sshd_like = list(stopped.values())
        for v in sshd_like:
            try:
                v.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(sshd_like, timeout=5)
        self.proc.wait(timeout=5)
        self.proc = None

    def pod(self, name: str = "testpod", **kw) -> Pod:
        return Pod(name=name, kind=PodKind.SSH, host="127.0.0.1", user=self.user, port=self.port, **kw)


def _is_sshd(p) -> bool:
    try:
        return "sshd" in p.name() or "sshd" in " ".join(p.cmdline()[:1])
    except Exception:  # noqa: BLE001 - a process that ended or is not ours to read is not our sshd
        return False


@dataclass
class ClientHome:
    """An isolated ~ for the client: .ssh/config, known_hosts, keys; no agent."""

    home: Path
    server: SshServer

    @property
    def known_hosts(self) -> Path:
        return self.home / ".ssh" / "known_hosts"

    def trust(self) -> None:
        self.known_hosts.write_text(self.server.known_hosts_line + "\n")

    def write_ssh_config(self, identity: Path | None = None, alias: str = "testpod") -> None:
        identity = identity or self.server.client_key
        (self.home / ".ssh" / "config").write_text(
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {self.server.port}\n"
            f"  User {self.server.user}\n  IdentityFile {identity}\n"
            f"  UserKnownHostsFile {self.known_hosts}\n"
            f"Host 127.0.0.1\n  IdentityFile {identity}\n  UserKnownHostsFile {self.known_hosts}\n"
        )


def _make_server(root: Path, env: dict[str, str] | None = None) -> SshServer:
    root.mkdir(parents=True, exist_ok=True)
    server = SshServer(root=root, port=free_port(), user=getpass.getuser(), env=env or {})
    keygen(server.host_key, "test-host")
    keygen(server.client_key, "test-client")
    shutil.copy(root / "client_ed25519.pub", root / "authorized_keys")
    return server


def cli_pod_home(root: Path, server: SshServer) -> tuple[dict[str, str], Path]:
    """A client HOME under ``root`` that trusts ``server`` and names it ``p1`` in pods.toml (its probe_dir
    ``root/podstate``): the environment for the command line as a subprocess, and that probe_dir."""
    home = root / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    client = ClientHome(home=home, server=server)
    client.write_ssh_config()
    client.trust()
    config = home / ".config" / "prime-train-tui"
    config.mkdir(parents=True)
    probe_dir = root / "podstate"
    (config / "pods.toml").write_text(
        f'[pods.p1]\nhost = "127.0.0.1"\nuser = "{server.user}"\nport = {server.port}\nprobe_dir = "{probe_dir}"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        PRIME_TRAIN_TUI_CONFIG_DIR=str(config),
        PYTHONPATH=str(REPO),
    )
    return env, probe_dir


@pytest.fixture(autouse=True)
def _isolated_app_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the developer's own data/cache dirs or uses their provider keys."""
    root = tmp_path_factory.mktemp("app-dirs")
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CACHE_DIR", str(root / "cache"))
    for var in ("PRIME_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "RUNPOD_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _panes_mount_after_the_first_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The App mounts the panes besides the Monitor pane once the selected pod's first sample is on screen, at
    the latest FIRST_LOOK_WAIT after the first screen (app/tui.py). Most tests' pods never answer (Parked) and
    look at the panes at once: here they mount right after the first screen. tests/app/test_start_order.py
    tests the wait itself (it sets FIRST_LOOK_WAIT back)."""
    import app.tui

    monkeypatch.setattr(app.tui, "FIRST_LOOK_WAIT", 0.0)


@pytest.fixture(autouse=True)
def _apps_hand_over_once_watching(monkeypatch: pytest.MonkeyPatch) -> None:
    """PrimeTrainApp starts watching its pods (the monitor, the lifecycle's background work, the demo sandbox)
    just after its first frame (app/tui.py, _start_watching), a moment after Textual's run_test hands
    the app over. Tests feed snapshots, remove pods or read the pods at once, as a user acts a frame later: here
    run_test hands over once the app watches and the monitor's first steps have run, as it did when the app
    started watching in on_mount; so does snap_compare's run_before."""
    from contextlib import asynccontextmanager

    import textual._doc

    from app.tui import PrimeTrainApp

    async def watched(pilot) -> None:
        app = pilot.app
        deadline = time.monotonic() + 20.0
        while isinstance(app, PrimeTrainApp) and not app.watching and time.monotonic() < deadline:
            await pilot.pause(0.01)
        assert not isinstance(app, PrimeTrainApp) or app.watching, (
            "the app did not start watching its pods within 20 s of its start"
        )
        await pilot.pause()

    run_test = PrimeTrainApp.run_test

    @asynccontextmanager
    async def watching_run_test(self: PrimeTrainApp, *args, **kwargs):
        async with run_test(self, *args, **kwargs) as pilot:
            await watched(pilot)
            yield pilot

    monkeypatch.setattr(PrimeTrainApp, "run_test", watching_run_test)

    screenshot = textual._doc.take_svg_screenshot  # snap_compare's: its run_before too starts once the app watches

    def watching_screenshot(*args, run_before=None, **kwargs):
        async def before(pilot) -> None:
            await watched(pilot)
            if run_before is not None and inspect.isawaitable(result := run_before(pilot)):
                await result

        return screenshot(*args, run_before=before, **kwargs)

    monkeypatch.setattr(textual._doc, "take_svg_screenshot", watching_screenshot)


@pytest.fixture
def sshd(tmp_path: Path):
    """A running sshd (function-scoped: tests may kill and restart it)."""
    if not os.path.exists(SSHD):
        pytest.fail("OpenSSH sshd is not installed: run the README's test command (it installs it)")
    server = _make_server(tmp_path / "sshd", env={"PTT_FAKE_GPUS": "8"})
    server.start()
    yield server
    server.kill()


@pytest.fixture
def client_home(tmp_path: Path, sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> ClientHome:
    """HOME for the client side, with an ssh config pointing at ``sshd`` and no agent."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(home / ".config" / "prime-train-tui"))
    client = ClientHome(home=home, server=sshd)
    client.write_ssh_config()
    return client


@pytest.fixture
def pod(sshd, client_home, tmp_path: Path):
    """The sshd as a trusted pod; the probe and the pod-side helpers keep their state in tmp/podstate."""
    client_home.trust()
    return sshd.pod(probe_dir=str(tmp_path / "podstate"))


# ------------------------------------------------------------------ sshds as providers configure them

_REFUSE_EXEC = """#!/bin/sh
# an endpoint that offers only an interactive shell (like RunPod's basic SSH proxy): commands are refused
if [ -n "$SSH_ORIGINAL_COMMAND" ]; then
  echo "Error: Your SSH client doesn't support PTY" >&2
  exit 1
fi
exec /bin/sh -i
"""
_NO_PYTHON = """#!/bin/sh
# a minimal image: sh and coreutils, no python3 (the user's shell rc files are not read)
PATH={bin}
export PATH
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""
_SLOW_START = """#!/bin/sh
# a pod whose every command starts late (a heavy shell rc on a busy machine)
sleep 3
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""
# what a minimal image has besides python: enough for the uploads, the probe's start and a shell
_MINIMAL_TOOLS = (
    "sh",
    "cat",
    "mkdir",
    "mv",
    "rm",
    "chmod",
    "sha256sum",
    "base64",
    "env",
    "head",
    "wc",
    "test",
    "printf",
    "echo",
    "sleep",
    "ls",
)


@dataclass
class ProviderSshServer(SshServer):
    """An sshd configured like some providers' pods: no SFTP subsystem (``sftp=False``) and extra config lines
    (a ForceCommand)."""

    sftp: bool = True
    extra: tuple[str, ...] = ()

    def write_config(self) -> Path:
        cfg = super().write_config()
        lines = [ln for ln in cfg.read_text().splitlines() if self.sftp or not ln.startswith("Subsystem sftp")]
        cfg.write_text("\n".join([*lines, *self.extra, ""]))
        return cfg


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def provider_sshd(tmp_path_factory: pytest.TempPathFactory):
    """``provider_sshd(variant)``: one sshd per variant for the whole module (started on first use), each with
        its own keys. Variants: ``"no-sftp"`` (no ``Subsystem sftp``: minimal images, container SSH servers),
        ``"pty-only"`` (no SFTP, and every command refused: an interactive-shell-only proxy), ``"no-python"`` (no
        SFTP, and commands run by sh with a PATH that holds no python3), ``"slow-start"`` (no SFTP, and every command
    starts 3 s late)."""
    if not os.path.exists(SSHD):
        pytest.fail("OpenSSH sshd is not installed: run the README's test command (it installs it)")
    servers: dict[str, ProviderSshServer] = {}

    def start(variant: str) -> ProviderSshServer:
        if variant in servers:
            return servers[variant]
        root = tmp_path_factory.mktemp(f"sshd-{variant}")
        extra: tuple[str, ...] = ()
        if variant == "pty-only":
            extra = (f"ForceCommand {_script(root / 'refuse_exec.sh', _REFUSE_EXEC)}",)
        elif variant == "no-python":
            bin_dir = root / "bin"
            bin_dir.mkdir()
            for tool in _MINIMAL_TOOLS:
                if found := shutil.which(tool, path="/usr/bin:/bin"):
                    (bin_dir / tool).symlink_to(found)
            extra = (f"ForceCommand {_script(root / 'no_python.sh', _NO_PYTHON.format(bin=bin_dir))}",)
        elif variant == "slow-start":
            extra = (f"ForceCommand {_script(root / 'slow_start.sh', _SLOW_START)}",)
        elif variant != "no-sftp":
            raise ValueError(f"unknown sshd variant {variant!r}")
        base = _make_server(root / "sshd", env={"PTT_FAKE_GPUS": "2"})
        server = ProviderSshServer(
            root=base.root, port=base.port, user=base.user, env=base.env, sftp=False, extra=extra
        )
        server.start()
        servers[variant] = server
        return server

    yield start
    for server in servers.values():
        server.kill()


@pytest.fixture
def provider_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[SshServer], Path]:
    """``provider_home(server)``: an isolated client HOME (no agent) whose known_hosts trusts ``server`` and whose
    ~/.ssh/config gives it the server's client key; returns the HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(home / ".config" / "prime-train-tui"))

    def trust(server: SshServer) -> Path:
        client = ClientHome(home=home, server=server)
        client.write_ssh_config()
        client.trust()
        return home

    return trust
