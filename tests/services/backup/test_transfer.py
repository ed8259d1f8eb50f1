"""Backup/restore against moto's S3 server (real HTTP) and the real sshd "pod" (a tmp dir here).

How we prove the app never read the checkpoint bytes: a ``sys.addaudithook`` records every ``open``
this test process (the app) makes while the backup runs; none is under the checkpoint dir. The bytes
reach the bucket only through the agent that sshd started as a separate process (the "pod").
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import urllib.parse
from pathlib import Path

import psutil
import pytest

from services.backup.bucket import list_bucket, verify_backup
from services.backup.claims import run_key
from services.backup.manifest import Manifest
from services.backup.s3 import S3, BackupError, part_size_for
from services.backup.transfer import PodAgent, backup_checkpoint, pod_checkpoints, restore_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import ACCESS_KEY, SECRET_KEY, write_checkpoint

pytestmark = pytest.mark.ssh

_OPENED: list[str] = []
_RECORD = [False]


def _audit(event: str, args: tuple) -> None:
    if _RECORD[0] and event == "open" and args and isinstance(args[0], (str, bytes)):
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_backup_goes_from_the_pod_to_the_bucket_and_is_verified(pod, s3env, tmp_path):
    run = tmp_path / "pod-run"
    ckpt = write_checkpoint(run, 10, shard_bytes=300 * 1024)
    settings = s3env.settings()
    events = []
    async with SSHConnection(pod) as conn:
        _OPENED.clear()
        _RECORD[0] = True
        try:
            result = await backup_checkpoint(conn, settings, str(run), 10, on_progress=events.append)
        finally:
            _RECORD[0] = False
    assert not [p for p in _OPENED if str(ckpt) in p], "the app opened checkpoint files itself"
    assert result.verified and result.problems == []
    shard = result.manifest.files[[f.path for f in result.manifest.files].index("trainer/__0_0.distcp")]
    assert len(shard.parts) == 5 and shard.size == 300 * 1024  # 64 KiB parts: presigned multipart
    assert result.uploaded_parts == 5 + 2 and result.skipped_parts == 0
    base = "prime-train/pod-run/step_10/"
    # the run's claim on the step stays (services.backup.claims)
    claim = f"claims/{run_key(result.manifest.source)}.json"
    assert s3env.keys(base) == [
        base + k
        for k in (claim, "manifest.json", "orchestrator/progress.pt", "trainer/.metadata", "trainer/__0_0.distcp")
    ]
    manifest = Manifest.from_json(s3env.get(base + "manifest.json"))
    for f in manifest.files:
        local = ckpt / f.path
        assert f.size == local.stat().st_size and f.sha256 == sha(local)
        assert s3env.get(base + f.key) == local.read_bytes()
    head = s3env.client.head_object(Bucket=s3env.bucket, Key=base + "trainer/__0_0.distcp")
    # moto catches a wrong part CRC32 (store_caps.part_caps): the parts carry no md5, the store's ETag is kept
    assert head["ETag"].strip('"') == shard.store_etag and shard.store_etag.endswith("-5") and not shard.etag
    phases = [e.phase for e in events]
    assert phases[0] == "scan" and phases[-1] == "done" and "upload" in phases
    last_upload = [e for e in events if e.phase == "upload"][-1]
    assert last_upload.done == last_upload.total == manifest.bytes and last_upload.rate > 0
    # the credentials never reached the pod: not in any file there, nor in sshd's log
    for path in [*run.rglob("*"), *(tmp_path / "podstate").rglob("*"), *(tmp_path / "sshd").rglob("*.log")]:
        if path.is_file():
            body = path.read_bytes()
            assert SECRET_KEY.encode() not in body and ACCESS_KEY.encode() not in body, path
    assert (await verify_backup(settings, str(run), 10)).verified


async def test_interrupted_backup_resumes_without_resending_finished_parts(pod, s3env, tmp_path):
    run = tmp_path / "run"
    write_checkpoint(run, 5, shard_bytes=16 * 64 * 1024)  # 16 parts
    settings = s3env.settings(jobs=1, max_bandwidth=640 * 1024)  # ~10 parts/s: time to interrupt
    uploaded = asyncio.Event()
    seen = []

    def on_progress(p):
        seen.append(p)
        if p.phase == "upload" and p.done >= 3 * 64 * 1024:
            uploaded.set()

    async with SSHConnection(pod) as conn:
        task = asyncio.ensure_future(backup_checkpoint(conn, settings, str(run), 5, on_progress=on_progress))
        await asyncio.wait_for(uploaded.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # wait until the agent on the pod is gone, so the bucket no longer changes
        for _ in range(100):
            if not [
                p
                for p in psutil.process_iter(["cmdline"])
                if "backup-agent-" in " ".join(p.info["cmdline"] or [])
                and str(tmp_path) in " ".join(p.info["cmdline"] or [])
            ]:
                break
            await asyncio.sleep(0.1)
        uploads = s3env.client.list_multipart_uploads(Bucket=s3env.bucket)["Uploads"]
        assert len(uploads) == 1
        there = s3env.client.list_parts(
            Bucket=s3env.bucket, Key=uploads[0]["Key"], UploadId=uploads[0]["UploadId"]
        ).get("Parts", [])
        assert 3 <= len(there) < 16
        result = await backup_checkpoint(conn, settings, str(run), 5)
    assert result.verified
    assert result.uploaded_parts == 16 - len(there)  # only the shard's missing parts were sent again
    assert result.skipped_parts == len(there) + 2  # + the two small files, sent first, found complete
    assert (
        s3env.get("prime-train/run/step_5/trainer/__0_0.distcp")
        == (run / "checkpoints/step_5/trainer/__0_0.distcp").read_bytes()
    )


async def test_restore_into_an_empty_run_dir_is_verified_first_and_byte_identical(pod, s3env, tmp_path):
    src = tmp_path / "a" / "myrun"
    write_checkpoint(src, 3, shard_bytes=200 * 1024)
    settings = s3env.settings()
    fresh = tmp_path / "b" / "myrun"  # same run name: same prefix; nothing on the "new pod" yet
    async with SSHConnection(pod) as conn:
        await backup_checkpoint(conn, settings, str(src), 3)
        # by default only this run's backups: step 3 is another run's (another run dir), named in the error
        with pytest.raises(BackupError, match="no verified backup of this run .*other runs' steps there: 3"):
            await restore_checkpoint(conn, settings, str(fresh))
        notes: list[str] = []
        manifest = await restore_checkpoint(conn, settings, str(fresh), 3, notes=notes)  # asked for explicitly
        assert manifest.step == 3
        assert notes == [f"step 3 was backed up by another run: testpod:{src} (this is testpod:{fresh})"]
        ckpts, disk = await pod_checkpoints(conn, str(fresh))
    assert [(c.step, c.complete) for c in ckpts] == [(3, True)] and disk["total"] > 0
    for f in (src / "checkpoints/step_3").rglob("*"):
        if f.is_file():
            twin = fresh / "checkpoints/step_3" / f.relative_to(src / "checkpoints/step_3")
            assert twin.read_bytes() == f.read_bytes()
    assert [p.name for p in (fresh / "checkpoints").iterdir()] == ["step_3"]  # no staging dir left


async def test_a_corrupted_object_fails_verification_and_restore_refuses(pod, s3env, tmp_path):
    run = tmp_path / "run"
    write_checkpoint(run, 7, shard_bytes=100 * 1024)
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        await backup_checkpoint(conn, settings, str(run), 7)
        s3env.client.put_object(Bucket=s3env.bucket, Key="prime-train/run/step_7/trainer/.metadata", Body=b"tampered")
        checked = await verify_backup(settings, str(run), 7)
        assert not checked.verified and "trainer/.metadata" in checked.problems[0]
        listing = await list_bucket(settings, str(run))
        assert [(c.step, c.verified) for c in listing] == [(7, False)]
        empty = tmp_path / "other" / "run"
        with pytest.raises(BackupError, match="does not match its manifest"):
            await restore_checkpoint(conn, settings, str(empty), 7)
    assert not (empty / "checkpoints" / "step_7").exists()


async def test_keep_last_n_in_the_bucket_with_the_simulated_trainer(pod, s3env, tmp_path):
    run = tmp_path / "sim"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--max-steps",
            "6",
            "--ckpt-interval",
            "2",
            "--step-seconds",
            "0",
        ],
        check=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[3],
    )
    settings = s3env.settings(keep_last=2)
    async with SSHConnection(pod) as conn:
        ckpts, _ = await pod_checkpoints(conn, str(run))
        assert [c.step for c in ckpts if c.complete] == [2, 4, 6]
        pruned = []
        for c in ckpts:
            pruned += (await backup_checkpoint(conn, settings, str(run), c.step)).pruned
    assert pruned == [2]
    assert [(c.step, c.verified) for c in await list_bucket(settings, str(run))] == [(4, True), (6, True)]
    assert (run / "checkpoints" / "step_2").is_dir()  # the pod's copies are not the bucket's business


async def test_incomplete_checkpoint_is_refused(pod, s3env, tmp_path):
    run = tmp_path / "run"
    write_checkpoint(run, 9, complete=False)
    async with SSHConnection(pod) as conn:
        with pytest.raises(BackupError, match="incomplete"):
            await backup_checkpoint(conn, s3env.settings(), str(run), 9)
    assert s3env.keys() == []


async def test_missing_bucket_and_endpoint_down_are_clear_errors(pod, s3env, tmp_path):
    from tests.conftest import free_port

    run = tmp_path / "run"
    ckpt = write_checkpoint(run, 1)
    async with SSHConnection(pod) as conn:
        with pytest.raises(BackupError, match="does not exist"):
            await backup_checkpoint(conn, s3env.settings(bucket="no-such-bucket"), str(run), 1)
        with pytest.raises(BackupError, match="cannot reach the S3 endpoint"):
            await backup_checkpoint(conn, s3env.settings(endpoint=f"http://127.0.0.1:{free_port()}"), str(run), 1)
    assert sorted(p.name for p in ckpt.rglob("*") if p.is_file()) == [".metadata", "__0_0.distcp", "progress.pt"]


async def test_flexible_checksums_stay_off_the_presigned_urls(pod, s3env, tmp_path, monkeypatch):
    # boto3 >= 1.36 would add CRC32 (x-amz-sdk-checksum-algorithm) to uploads; stores like R2 reject it
    # and the pod's plain PUT could not satisfy it. The environment asks for it; our client says no.
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported")
    settings = s3env.settings()
    s3 = S3(settings)
    upload = s3.client.create_multipart_upload(Bucket=s3env.bucket, Key="k")
    url = s3.presign("upload_part", Key="k", UploadId=upload["UploadId"], PartNumber=1)
    query = {k.lower() for k in urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)}
    assert not [k for k in query if "checksum" in k], query
    assert s3.client.meta.config.request_checksum_calculation == "when_required"
    run = tmp_path / "run"
    write_checkpoint(run, 2, shard_bytes=130 * 1024)
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(run), 2)).verified


async def test_zstd_per_file_when_it_pays_off_and_restore_decompresses(pod, s3env, tmp_path):
    run = tmp_path / "zrun"
    text = b"".join(b"step %08d loss 0.%06d\n" % (i, i * 7 % 999999) for i in range(12000))
    ckpt = write_checkpoint(run, 4, data=text)  # compressible shard; random files stay raw
    (ckpt / "trainer" / "random.bin").write_bytes(__import__("os").urandom(100 * 1024))
    settings = s3env.settings(compression="zstd", level=3, part_size=128 * 1024, min_part=1024)
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, settings, str(run), 4)
        enc = {f.path: (f.encoding, f.stored_size, f.size) for f in result.manifest.files}
        assert enc["trainer/__0_0.distcp"][0] == "zstd" and enc["trainer/__0_0.distcp"][1] < len(text) / 3
        assert enc["trainer/random.bin"][0] == "none"
        assert "prime-train/zrun/step_4/trainer/__0_0.distcp.zst" in s3env.keys()
        out = tmp_path / "restored" / "zrun"
        await restore_checkpoint(conn, settings, str(out), 4)
    assert (out / "checkpoints/step_4/trainer/__0_0.distcp").read_bytes() == text


async def test_agent_is_installed_once_per_content_hash(pod, tmp_path):
    async with SSHConnection(pod) as conn:
        first = await PodAgent(conn).install()
        second = await PodAgent(conn).install()
    assert first == second and Path(first).parent.name.startswith("backup-agent-")
    assert len(list((tmp_path / "podstate").iterdir())) == 1


def test_part_size_keeps_big_files_under_ten_thousand_parts():
    assert part_size_for(47 * 1024**3) == 16 * 1024**2  # 3,008 parts
    assert part_size_for(200 * 1024**3) == 32 * 1024**2  # 16 MiB would be 12,800 parts
    assert part_size_for(256 * 1024**2) == 16 * 1024**2  # 16 parts: 8 threads stay busy
    assert part_size_for(1024**2) == 8 * 1024**2  # never below S3's 5 MiB minimum
    assert part_size_for(1024**4) == 128 * 1024**2  # 1 TiB: 8192 parts of 128 MiB
    assert 1024**4 / part_size_for(1024**4) <= 10_000


async def test_wrong_credentials_are_a_clear_error_and_nothing_is_deleted(pod, s3env, tmp_path, monkeypatch):
    import moto.settings

    run = tmp_path / "run"
    ckpt = write_checkpoint(run, 1, shard_bytes=4096)
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks keys from now on
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    async with SSHConnection(pod) as conn:
        with pytest.raises(BackupError, match="refused our credentials") as info:
            await backup_checkpoint(conn, s3env.settings(), str(run), 1)
    assert SECRET_KEY not in str(info.value) + info.value.hint
    assert len([p for p in ckpt.rglob("*") if p.is_file()]) == 3


def test_settings_file_and_environment(tmp_path):
    from services.backup.s3 import load_backup_settings

    path = tmp_path / "backup.toml"
    path.write_text('[backup]\nbucket = "from-file"\nprefix = "team/x"\ncompression = "zstd"\nkeep_last = 5\n')
    s = load_backup_settings(path, env={})
    assert (s.bucket, s.compression, s.keep_last, s.prefix_for("/w/run")) == ("from-file", "zstd", 5, "team/x/")
    s = load_backup_settings(path, env={"PRIME_TRAIN_TUI_BUCKET": "env-b", "PRIME_TRAIN_TUI_S3_ENDPOINT": "http://e"})
    assert (s.bucket, s.endpoint) == ("env-b", "http://e")
    assert load_backup_settings(None, env={}).prefix_for("/workspace/outputs/my-run/") == "prime-train/my-run/"
    path.write_text('[backup]\nbucket = "b"\naws_secret_access_key = "nope"\n')
    with pytest.raises(BackupError, match="unknown"):
        load_backup_settings(path, env={})
