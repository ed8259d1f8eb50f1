"""Issue 13 item 1: a backup manifest could write any file on the pod.

``restore`` trusted every entry's ``path``: an absolute path or ``../..`` in ``manifest.json`` made the agent
create files outside the run dir, and since it opened (truncated) each target before checking any sha256, a
wrong sha256 for an existing file still destroyed it: a tampered bucket could overwrite
~/.ssh/authorized_keys. Now the app refuses such a manifest whole when it reads it from the bucket, and the
agent on the pod refuses such a plan again before it writes anything (tests/hostile/test_agent_plan.py drives
the agent directly), writing only into a fresh staging dir.

Real parts: moto's S3 server, the real sshd "pod" (a tmp dir), the agent as the pod runs it. The attacker
has write access to the bucket only: they edit ``manifest.json`` and put the objects it names.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

import pytest

from services.backup.bucket import list_bucket, verify_backup
from services.backup.s3 import BackupError
from services.backup.transfer import backup_checkpoint, restore_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

pytestmark = pytest.mark.ssh

BASE = "prime-train/run/step_3/"
PAYLOAD = b"ssh-ed25519 AAAA attacker@evil\n"
CANARY = b"ssh-ed25519 AAAA the-owner@laptop\n"


def _one_part(path: str, body: bytes, sha256: str | None = None) -> dict:
    md5 = hashlib.md5(body).hexdigest()
    return {
        "path": path,
        "size": len(body),
        "sha256": sha256 or hashlib.sha256(body).hexdigest(),
        "encoding": "none",
        "level": 0,
        "stored_size": len(body),
        "store_etag": "",
        "mtime_ns": 0,
        "parts": [{"n": 1, "offset": 0, "raw": len(body), "size": len(body), "md5": md5}],
    }


def _tamper(s3env, honest: dict, entry: dict, body: bytes) -> None:
    """What an attacker with write access to the bucket does: put ``body`` where the new entry's object
    is looked for (so the app's size/ETag check passes) and add the entry to the honest manifest."""
    s3env.client.put_object(Bucket=s3env.bucket, Key=BASE + entry["path"], Body=body)
    manifest = {**honest, "files": [*honest["files"], entry]}
    s3env.client.put_object(Bucket=s3env.bucket, Key=BASE + "manifest.json", Body=json.dumps(manifest).encode())


@pytest.fixture
def backed_up(pod, s3env, tmp_path):
    """step_3 of ``a/run`` backed up; ``b/run`` is where it is restored; ``outside`` holds a canary
    (an authorized_keys) beside the run dirs."""
    src = tmp_path / "a" / "run"
    write_checkpoint(src, 3, shard_bytes=100 * 1024)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "authorized_keys").write_bytes(CANARY)
    return src, tmp_path / "b" / "run", outside


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


HOSTILE = {
    # a new file outside the run dir, by absolute path (correct sha256: it would have been kept)
    "absolute": lambda outside: (str(outside / "new_key"), PAYLOAD, None),
    # the same by climbing out of step_3/ (staging dir, checkpoints/, run/, b/ -> tmp_path)
    "dot-dot": lambda outside: ("trainer/../../../../../outside/new_key", PAYLOAD, None),
    # an existing file outside with a wrong sha256: it used to be truncated before the check failed
    "truncate": lambda outside: (str(outside / "authorized_keys"), PAYLOAD, "0" * 64),
}


async def test_a_tampered_manifest_writes_nothing_outside_the_run_dir(pod, s3env, backed_up):
    src, target, outside = backed_up
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(src), 3)).verified
        honest = json.loads(s3env.get(BASE + "manifest.json"))
        for case, hostile in HOSTILE.items():
            path, body, sha = hostile(outside)
            _tamper(s3env, honest, _one_part(path, body, sha), body)
            with pytest.raises(BackupError) as err:
                await restore_checkpoint(conn, settings, str(target), 3)
            message = str(err.value)
            assert "\n" not in message and "unsafe path" in message and repr(path) in message, (case, message)
            assert _files(outside) == ["authorized_keys"], case
            assert (outside / "authorized_keys").read_bytes() == CANARY, case
            assert _files(target) == [], case  # refused whole: not even the honest files, no staging dir
            # the listing shows that step as not verified, saying why, instead of failing for every step
            listing = await list_bucket(settings, str(src))
            assert [(c.step, c.verified) for c in listing] == [(3, False)], case
            assert "unsafe path" in listing[0].problems[0] and repr(path) in listing[0].problems[0], case
            assert not (await verify_backup(settings, str(src), 3)).verified, case


async def test_a_symlink_in_the_staging_dir_cannot_lead_the_restore_outside(pod, s3env, backed_up, monkeypatch):
    """Someone on the pod plants the staging dir the next restore will use, with ``trainer`` a symlink to a
    directory outside: the restore refuses it instead of writing through it."""
    src, target, outside = backed_up
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(src), 3)).verified
        staging = target / "checkpoints" / ".step_3.restoring-0badc0de"
        staging.mkdir(parents=True)
        (staging / "trainer").symlink_to(outside)
        monkeypatch.setattr(secrets, "token_hex", lambda n=None: "0badc0de")  # the tag the app picks
        with pytest.raises(BackupError) as err:
            await restore_checkpoint(conn, settings, str(target), 3)
    assert "\n" not in str(err.value) and ".step_3.restoring-0badc0de" in str(err.value)
    assert _files(outside) == ["authorized_keys"] and (outside / "authorized_keys").read_bytes() == CANARY
    assert not (target / "checkpoints" / "step_3").exists()


async def test_a_wrong_sha256_leaves_the_half_written_step_on_the_pod_untouched(pod, s3env, backed_up):
    """A wrong sha256 for a file the pod already has (step_3 cut short there): the restore fails on the
    check, and the file on the pod keeps its bytes -- only the staging dir was ever written."""
    src, target, outside = backed_up
    half = write_checkpoint(target, 3, shard_bytes=10 * 1024, complete=False)
    mine = (half / "trainer" / "__0_0.distcp").read_bytes()
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(src), 3)).verified
        manifest = json.loads(s3env.get(BASE + "manifest.json"))
        for f in manifest["files"]:
            if f["path"] == "trainer/__0_0.distcp":
                f["sha256"] = "0" * 64
        s3env.client.put_object(Bucket=s3env.bucket, Key=BASE + "manifest.json", Body=json.dumps(manifest).encode())
        with pytest.raises(BackupError, match="checksum mismatch against the manifest: trainer/__0_0.distcp"):
            await restore_checkpoint(conn, settings, str(target), 3)
    assert (half / "trainer" / "__0_0.distcp").read_bytes() == mine
    assert [p.name for p in (target / "checkpoints").iterdir()] == ["step_3"]  # no staging dir left
    assert _files(outside) == ["authorized_keys"]
