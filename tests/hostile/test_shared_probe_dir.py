"""A shared pod: another user of it must never get our code run as us.

With ``probe_dir`` in a shared directory (``/tmp/ptt``; a Slurm login node is the usual case), what was found there
used to be trusted by its name: a planted ``probe-<hash>/probe.py`` was run because it existed, every lifecycle
action ran the interpreter named in a planted ``lifecycle-<hash>/python``, the backup agent's install skipped the
upload on ``test -f``, and a symbolic link at the upload path made us write the bundle into its target. Now a
script runs only from a directory the SSH user owns with mode 0700, only once each file's content matches what
we upload, and the interpreter is never read from the pod.

Against the real sshd on loopback (the SSH user is root, the strongest victim); the other user is ``nobody``,
run with ``setpriv``. Each planted script would write a marker file where only root can: the marker's absence
is the proof that it did not run as us."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from services.backup.s3 import BackupError
from services.backup.transfer import pod_checkpoints
from services.errors import UnsafeProbeDir
from services.lifecycle.events import LifecycleError
from services.lifecycle.shell import AGENT_FILES, PodShell
from services.pod.agent import BACKUP_FILES, PROBE_FILES
from services.pod.connection import bundle
from services.pod.ssh import SSHConnection

pytestmark = pytest.mark.ssh
OTHER = 65534  # nobody

if not shutil.which("setpriv") or os.geteuid() != 0:
    pytest.skip("needs root and setpriv to act as a second user of the pod", allow_module_level=True)


def as_other(script: str) -> None:
    """Run ``script`` (sh) as the pod's other user."""
    subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "sh", "-c", script], check=True, cwd="/"
    )


@pytest.fixture
def shared():
    """A directory like /tmp: anyone may create in it, only an entry's owner may rename or remove it."""
    path = Path(tempfile.mkdtemp(prefix="ptt-shared-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def payload(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran as ' + str(__import__('os').geteuid()))\n"


def plant_bundle(state: Path, prefix: str, files: tuple[Path, ...], replace: str, code: str, extra: str = "") -> Path:
    """As the other user: ``state`` (0777) with the bundle's directory, every real file but ``replace``, which
    holds ``code``."""
    contents, digest = bundle(files)
    where = state / f"{prefix}-{digest}"
    lines = [f"mkdir -p {where}", f"chmod 777 {state} {where}"]
    for name, data in contents:
        src = state.parent / f".src-{prefix}-{name}"
        src.write_bytes(code.encode() if name == replace else data)
        src.chmod(0o644)
        lines.append(f"cp {src} {where / name}")
    as_other(" && ".join(lines) + extra.format(where=where))
    return where


async def test_a_planted_probe_in_a_foreign_probe_dir_never_runs(sshd, client_home, shared, tmp_path):
    client_home.trust()
    marker = tmp_path / "probe-ran"
    state = shared / "ptt"
    plant_bundle(state, "probe", PROBE_FILES, "probe.py", payload(marker))
    async with SSHConnection(sshd.pod(probe_dir=str(state))) as conn:
        with pytest.raises(UnsafeProbeDir) as info:
            await conn.start_probe(["--interval", "0.2"])
    await asyncio.sleep(0.2)
    assert not marker.exists(), "another user's probe ran as the SSH user"
    message = str(info.value)
    assert str(state) in message and "belongs to nobody" in message and "run as you" in message
    assert "Set this pod's probe_dir" in message and "~/.cache/prime-train-tui" in message  # the fix
    assert "mode 700" in info.value.hint


async def test_a_planted_interpreter_is_never_run_by_a_lifecycle_action(sshd, client_home, shared, tmp_path):
    client_home.trust()
    marker = tmp_path / "python-ran"
    evil = shared / "evil.sh"
    as_other(f"printf '#!/bin/sh\\necho ran > {marker}\\n' > {evil} && chmod 755 {evil}")
    state = shared / "ptt"
    where = plant_bundle(state, "lifecycle", AGENT_FILES, "", "", extra=f" && echo {evil} > {{where}}/python")
    assert (where / "python").read_text().strip() == str(evil)
    async with SSHConnection(sshd.pod(probe_dir=str(state))) as conn:
        with pytest.raises(LifecycleError) as info:
            await PodShell(conn).agent("status")
    assert not marker.exists(), "the interpreter named in a planted file ran"
    assert "belongs to nobody" in str(info.value) and "Set this pod's probe_dir" in str(info.value)


async def test_a_planted_backup_agent_is_never_run(sshd, client_home, shared, tmp_path):
    client_home.trust()
    marker = tmp_path / "agent-ran"
    state = shared / "ptt"
    plant_bundle(state, "backup-agent", BACKUP_FILES, "backup.py", payload(marker))
    async with SSHConnection(sshd.pod(probe_dir=str(state))) as conn:
        with pytest.raises(BackupError) as info:
            await pod_checkpoints(conn, str(tmp_path / "run"))
    assert not marker.exists(), "another user's backup agent ran as the SSH user"
    assert "belongs to nobody" in str(info.value)


async def test_a_symlink_at_probe_dir_is_refused_and_nothing_is_written_through_it(sshd, client_home, shared, tmp_path):
    client_home.trust()
    victim = tmp_path / "victim"  # somewhere only the SSH user may write
    victim.mkdir(mode=0o700)
    link = shared / "ptt"
    as_other(f"ln -s {victim} {link}")
    async with SSHConnection(sshd.pod(probe_dir=str(link))) as conn:
        with pytest.raises(UnsafeProbeDir, match="symbolic link"):
            await conn.start_probe(["--interval", "0.2"])
        with pytest.raises(LifecycleError, match="symbolic link"):
            await PodShell(conn).agent("status")
    assert list(victim.iterdir()) == [], "files were written through another user's symbolic link"


async def test_a_probe_dir_under_another_users_directory_is_refused(sshd, client_home, shared):
    """Ours and private, but inside a directory someone else owns: they could swap it for another."""
    client_home.trust()
    as_other(f"mkdir -m 755 {shared / 'theirs'}")
    ours = shared / "theirs"
    async with SSHConnection(sshd.pod(probe_dir=str(ours / "ptt"))) as conn:
        with pytest.raises(UnsafeProbeDir, match="belongs to nobody"):
            await conn.start_probe(["--interval", "0.2"])


async def test_a_changed_file_in_our_own_dir_is_uploaded_again_not_run(pod, tmp_path):
    """Verified by content, not by name: a probe that differs from ours (a damaged or older upload) is replaced."""
    marker = tmp_path / "changed-ran"
    async with SSHConnection(pod) as conn:
        where = Path(await conn.upload_probe()).parent
        conn.uploads = 0
        assert stat.S_IMODE(Path(pod.probe_dir).stat().st_mode) == 0o700
        (where / "common.py").write_text(payload(marker))  # a sibling: imported by the probe, never by name alone
        stream = await conn.start_probe(["--interval", "0.2"])
        line = await asyncio.wait_for(stream.readline(), 15)
        assert line.startswith(b"{") and b'"gpus"' in line
        assert conn.uploads == 1  # the changed file was found by its content and put back
    assert not marker.exists()
    assert (where / "common.py").read_bytes() == dict(bundle(PROBE_FILES)[0])["common.py"]


@pytest.mark.parametrize(
    "mode, works",
    [(0o755, True), (0o777, False), (0o775, False)],
    ids=["readable-by-others: narrowed", "world-writable: refused", "group-writable: refused"],
)
async def test_our_own_probe_dir_is_narrowed_or_refused_by_its_mode(pod, mode, works):
    """A 0755 directory an older version made is narrowed to 0700; one others may write to may already hold
    their files, so it is refused."""
    state = Path(pod.probe_dir)
    state.mkdir(mode=mode)
    state.chmod(mode)
    async with SSHConnection(pod) as conn:
        if works:
            assert (await PodShell(conn).agent("status")) == {"runs": []}
            assert stat.S_IMODE(state.stat().st_mode) == 0o700
        else:
            with pytest.raises(LifecycleError, match="writable by other users"):
                await PodShell(conn).agent("status")
            assert stat.S_IMODE(state.stat().st_mode) == mode  # left as the user had it
