"""What a backup costs besides its bytes (moto's S3 server, the real sshd "pod").

Measured on 256 MiB (tests/benchmarks/backup_throughput.py): each S3 client took ~200-250 ms to make on a
busy machine (botocore parsed the S3 model anew every time) and one backup made 2 + one per step in the
bucket (its own, the prune's listing, one per step that listing verified); every object of a step was
checked with one HEAD after the other; the store was asked (HEAD bucket) before the pod's plan started and
whether it takes per-part CRC32s only when the first large file came up. Now: one client per backup, a new
client reuses the parsed model (still reading the credential chain anew), the HEADs go out together, and
the store, the pod and the CRC32 question are asked at once. The tests hold each of these without timing
anything: a step that must run beside another waits for it, and fails when it never comes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import urllib.parse
import zlib

import psutil
import pytest

from services.backup import store_caps
from services.backup.bucket import verify_backup
from services.backup.s3 import S3, BackupError
from services.backup.transfer import AGENT_PATH, PodAgent, backup_checkpoint
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

pytestmark = pytest.mark.ssh

WAIT = 5.0  # s a call waits for the one that must be in flight beside it (sequential code: it never comes)

_OPENED: list[str] = []
_RECORD = [False]


def _audit(event: str, args: tuple) -> None:
    if _RECORD[0] and event == "open" and args and isinstance(args[0], (str, bytes)):
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)


def on_call(monkeypatch, hook) -> None:
    """Run ``hook(name, params)`` in the S3 worker thread before every S3 call goes to the store."""
    real = S3._sync

    def wrapped(self, name, kw):
        hook(name, kw)
        return real(self, name, kw)

    monkeypatch.setattr(S3, "_sync", wrapped)


async def test_one_backup_makes_one_client_for_itself_its_listing_and_its_prune(pod, s3env, tmp_path, monkeypatch):
    run = tmp_path / "run"
    settings = s3env.settings(keep_last=2)
    made = []
    real = S3._new_client
    async with SSHConnection(pod) as conn:
        for step in (1, 2, 3):
            write_checkpoint(run, step, shard_bytes=200 * 1024)
            if step == 3:
                monkeypatch.setattr(S3, "_new_client", lambda self, region: made.append(region) or real(self, region))
            result = await backup_checkpoint(conn, settings, str(run), step)
    assert result.verified and result.pruned == [1]  # its prune listed and verified every step of the run
    assert len(made) == 1, f"{len(made)} S3 clients for one backup"


async def test_a_new_client_reuses_the_parsed_model_and_reads_the_credentials_anew(s3env, monkeypatch):
    def key_id(s3: S3) -> str:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(s3.presign("get_object", Key="k")).query)
        return query["X-Amz-Credential"][0].split("/")[0]

    assert key_id(S3(s3env.settings())) == "AKIAPTTTESTKEY000001"  # the model is loaded once here at the latest
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPTTTESTKEY000002")  # the user switched keys meanwhile
    _OPENED.clear()
    _RECORD[0] = True
    try:
        again = S3(s3env.settings())
        assert key_id(again) == "AKIAPTTTESTKEY000002"
    finally:
        _RECORD[0] = False
    models = [p for p in _OPENED if "botocore" in p and "data" in p]
    assert models == [], f"a new client read botocore's data again: {models}"


async def test_the_objects_of_a_step_are_checked_together(pod, s3env, tmp_path, monkeypatch):
    run = tmp_path / "run"
    write_checkpoint(run, 4)
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(run), 4)).verified
    both = threading.Barrier(2, timeout=WAIT)  # the first two HEADs meet: one after the other, they never do
    heads = []
    lock = threading.Lock()

    def hook(name, kw):
        if name == "head_object":
            with lock:
                heads.append(kw["Key"])
                first_two = len(heads) <= 2
            if first_two:
                both.wait()

    on_call(monkeypatch, hook)
    checked = await verify_backup(settings, str(run), 4)
    assert checked.verified and len(heads) == 3


async def test_the_store_and_the_pod_are_asked_at_once(pod, s3env, tmp_path, monkeypatch):
    run = tmp_path / "run"
    write_checkpoint(run, 5)
    planning = threading.Event()
    seen = []
    real_run_json = PodAgent.run_json

    async def run_json(self, args, timeout=3600):
        if args[0] == "plan":
            planning.set()
        return await real_run_json(self, args, timeout)

    def hook(name, kw):
        if name == "head_bucket":
            seen.append(planning.wait(WAIT))  # the pod's plan starts while the store answers

    monkeypatch.setattr(PodAgent, "run_json", run_json)
    on_call(monkeypatch, hook)
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, s3env.settings(), str(run), 5)
    assert result.verified and seen == [True]


async def test_the_part_checksum_question_goes_out_beside_the_claim(pod, s3env, tmp_path, monkeypatch):
    monkeypatch.setattr(store_caps, "_PART_CRC32", {})
    monkeypatch.setattr(store_caps, "_CRC32_GUARD", {})
    run = tmp_path / "run"
    write_checkpoint(run, 6, shard_bytes=300 * 1024)
    probing = threading.Event()
    seen = []

    def hook(name, kw):
        if name == "create_multipart_upload" and kw["Key"].endswith(".checksum-probe"):
            probing.set()
        elif name == "put_object" and "/claims/" in kw["Key"]:  # the step's claim: the probe is out already
            seen.append(probing.wait(WAIT))

    on_call(monkeypatch, hook)
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, s3env.settings(), str(run), 6)
    assert result.verified and seen == [True]
    shard = next(f for f in result.manifest.files if f.path.endswith("__0_0.distcp"))
    assert len(shard.parts) == 5  # multipart, with the parts' CRC32s (the store takes them)
    assert store_caps._PART_CRC32 == {(s3env.endpoint, s3env.bucket): True}
    uploads = s3env.client.list_multipart_uploads(Bucket=s3env.bucket).get("Uploads", [])
    assert uploads == [], "the probe's upload (or another) was left open"


def test_the_pod_computes_part_crc32s_only_for_an_upload_that_names_them(s3env, tmp_path):
    """Each CRC32 is another pass over the part's bytes on the pod: for a store that does not take them
    (AWS: unsigned headers on presigned URLs) the agent leaves them out; where the upload names CRC32
    every part has its own."""
    s3 = S3(s3env.settings())
    data = os.urandom(3 * 64 * 1024)
    (tmp_path / "shard").write_bytes(data)
    lines = []
    for key, crc in (("plain", False), ("with-crc", True)):
        upload = s3.client.create_multipart_upload(
            Bucket=s3env.bucket, Key=key, **({"ChecksumAlgorithm": "CRC32"} if crc else {})
        )
        parts = [
            {
                "n": n,
                "offset": off,
                "raw": 64 * 1024,
                "url": s3.presign("upload_part", Key=key, UploadId=upload["UploadId"], PartNumber=n),
            }
            for n, off in enumerate(range(0, len(data), 64 * 1024), 1)
        ]
        line = {"path": key, "full": str(tmp_path / "shard"), "key": key, "size": len(data), "parts": parts}
        lines.append(json.dumps({**line, "encoding": "none", "level": 0, **({"crc32": True} if crc else {})}))
    out = subprocess.run(
        [sys.executable, str(AGENT_PATH), "send", "--jobs", "2", "--min-part", str(64 * 1024)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    files = {e["key"]: e for e in map(json.loads, out.stdout.splitlines()) if e["event"] == "file"}
    assert [p["crc32"] for p in files["plain"]["parts"]] == ["", "", ""]
    want = [
        base64.b64encode(zlib.crc32(data[i : i + 64 * 1024]).to_bytes(4, "big")).decode() for i in (0, 65536, 131072)
    ]
    assert [p["crc32"] for p in sorted(files["with-crc"]["parts"], key=lambda p: p["n"])] == want


def _senders(under) -> list[psutil.Process]:
    """The backup agents sending from a pod whose files are under ``under`` (the pod fixture's state dir
    is in the test's tmp_path: other tests' agents are not counted)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if "send" in argv and any(str(under) in a for a in argv):
            found.append(proc)
    return found


async def test_the_sending_agent_starts_while_the_bucket_is_set_up(pod, s3env, tmp_path, monkeypatch):
    run = tmp_path / "run"
    write_checkpoint(run, 7)
    sending = threading.Event()
    seen = []
    real_start = SSHConnection.start

    async def start(self, command):
        if " send " in f"{command} ":
            sending.set()
        return await real_start(self, command)

    def hook(name, kw):
        if name == "put_object" and "/claims/" in kw["Key"]:
            seen.append(sending.wait(WAIT))  # the agent's start overlaps the claim

    monkeypatch.setattr(SSHConnection, "start", start)
    on_call(monkeypatch, hook)
    async with SSHConnection(pod) as conn:
        result = await backup_checkpoint(conn, s3env.settings(), str(run), 7)
    assert result.verified and seen == [True]


async def test_a_refused_backup_stops_the_agent_it_started_ahead(pod, s3env, tmp_path):
    """Another run (same run dir name: the same prefix) backed up step 8: this one is refused before it
    sends anything, and the sending agent started beside the refusal does not stay behind on the pod."""
    first, second = tmp_path / "a" / "run", tmp_path / "b" / "run"
    write_checkpoint(first, 8)
    write_checkpoint(second, 8)
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(first), 8)).verified
        before = s3env.keys("prime-train/run/step_8/")
        with pytest.raises(BackupError, match="backed up by another run"):
            await backup_checkpoint(conn, settings, str(second), 8)
        for _ in range(10):  # killed before the error is raised; it may take a moment to go
            if not _senders(tmp_path):
                break
            await asyncio.sleep(0.1)
        assert _senders(tmp_path) == [], "the sending agent of the refused backup is still running"
    assert s3env.keys("prime-train/run/step_8/") == before  # nothing of the second run's was sent
