"""Fixtures for backup tests: moto's S3 server (real HTTP on 127.0.0.1) and checkpoints on the "pod".

Import the fixtures into a test module with ``from tests.services.backup.fixtures import *``.
"""

from __future__ import annotations

import http.client
import http.server
import os
import secrets
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.backup.s3 import BackupSettings
from tests.conftest import free_port

ACCESS_KEY = "AKIAPTTTESTKEY000001"
SECRET_KEY = "ptt-test-secret-" + "x" * 24

__all__ = ["ACCESS_KEY", "SECRET_KEY", "S3Env", "moto_server", "s3env", "write_checkpoint", "boto_client"]


@pytest.fixture(scope="session")
def moto_server():
    import logging

    import moto.s3.models as s3_models
    from moto.server import ThreadedMotoServer

    s3_models.S3_UPLOAD_PART_MIN_SIZE = 1024  # small parts (real S3: 5 MiB); the server runs in-process
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def boto_client(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(request_checksum_calculation="when_required", response_checksum_validation="when_required"),
    )


@dataclass
class S3Env:
    endpoint: str
    bucket: str
    client: object

    def settings(self, **kw) -> BackupSettings:
        base = dict(
            bucket=self.bucket,
            endpoint=self.endpoint,
            region="us-east-1",
            part_size=64 * 1024,
            min_part=64 * 1024,
            jobs=4,
            keep_last=0,
        )
        base.update(kw)
        return BackupSettings(**base)

    def keys(self, prefix: str = "") -> list[str]:
        res = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for o in res.get("Contents", []))

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


@pytest.fixture
def s3env(moto_server, monkeypatch, tmp_path) -> S3Env:
    """A fresh bucket, dummy credentials in the environment only, no ~/.aws of the machine."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for var in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REQUEST_CHECKSUM_CALCULATION",
        "AWS_RESPONSE_CHECKSUM_VALIDATION",
        "PRIME_TRAIN_TUI_BUCKET",
        "PRIME_TRAIN_TUI_S3_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)
    with urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")):
        pass
    client = boto_client(moto_server)
    bucket = "ptt-" + secrets.token_hex(4)
    client.create_bucket(Bucket=bucket)
    return S3Env(endpoint=moto_server, bucket=bucket, client=client)


def write_checkpoint(
    run_dir: Path, step: int, *, shard_bytes: int = 300 * 1024, complete: bool = True, data: bytes | None = None
) -> Path:
    """A prime-rl-like step_N: a DCP shard, .metadata (last), orchestrator/progress.pt."""
    d = run_dir / "checkpoints" / f"step_{step}"
    (d / "trainer").mkdir(parents=True, exist_ok=True)
    (d / "orchestrator").mkdir(parents=True, exist_ok=True)
    (d / "trainer" / "__0_0.distcp").write_bytes(data if data is not None else os.urandom(shard_bytes))
    (d / "orchestrator" / "progress.pt").write_bytes(f"progress {step}".encode())
    if complete:
        (d / "trainer" / ".metadata").write_bytes(b"dcp-metadata-" + str(step).encode())
    return d


class StoreProxy(http.server.BaseHTTPRequestHandler):
    """An HTTP proxy in front of moto for tests of what a store does that moto does not: each request's body goes
    through :meth:`alter` (a subclass changes it, or answers the request itself by returning None), then to
    ``upstream``, and moto's answer back."""

    upstream = ""

    def alter(self, body: bytes) -> bytes | None:
        return body

    def _forward(self) -> None:
        body = self.alter(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if body is None:
            return
        conn = http.client.HTTPConnection(urllib.parse.urlsplit(self.upstream).netloc, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "content-length"}
        conn.request(self.command, self.path, body=body, headers={**headers, "Content-Length": str(len(body))})
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    def log_message(self, *args) -> None:  # quiet
        pass
