"""S3 (or any S3-compatible store) for checkpoint backups: settings, the client, errors for users.

botocore is imported lazily (it costs ~300 ms). Credentials come only from boto3's normal chain
(environment, profiles, instance roles); nothing here writes, logs or forwards them: the pod gets
presigned URLs only.

Flexible checksums: botocore >= 1.36 adds a CRC32 checksum to every upload by default, which MinIO
(before 2025-01), R2 and others reject. Our client sets ``request_checksum_calculation`` and
``response_checksum_validation`` to ``when_required`` unless the settings say otherwise, so the
presigned part URLs carry no checksum parameters the pod's plain PUT could not satisfy. Integrity comes
from our own manifest (sha256 per file, md5 per part checked against the ETags); the pod sends each part's
Content-MD5 (the store refuses changed bytes) and, where the store takes it, its CRC32
(services.backup.store_caps.part_caps); where the store also catches a wrong CRC32
(the same probe) the CRC32 alone checks a new part and the pod computes no md5 for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from services.errors import PrimeTrainError, SettingsError

MIB = 1024 * 1024
MIN_PART = 5 * MIB  # S3: every part but the last >= 5 MiB, <= 5 GiB, <= 10,000 parts
MAX_PART = 5 * 1024 * MIB
MAX_PARTS = 10_000
_BUCKET_REGIONS: dict[tuple[str, str, str], str] = {}  # (endpoint, bucket, default region) -> bucket's region
DEFAULT_PART = 16 * MIB  # s3transfer uses 8 MiB; 16 MiB pipelines reading, hashing and PUTs well, 47 GB = 3,008 parts


class BackupError(PrimeTrainError):
    """A backup or restore could not be done (store unreachable, refused, checksum mismatch, ...)."""


@dataclass(frozen=True)
class BackupSettings:
    bucket: str = ""
    prefix: str = ""  # default prime-train/<run name>/
    endpoint: str | None = None  # None: boto3 decides (AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 / AWS)
    region: str | None = None
    compression: str = "none"  # "zstd" | "none"
    level: int = 1
    auto_backup: bool = False
    keep_last: int = 3  # in the bucket, separate from the pod's keep_last
    checksums: str = "when_required"  # or "when_supported" (boto3's default since 1.36)
    part_checksums: str = "auto"  # CRC32 per part when the store takes it unsigned (store_caps.part_caps)
    part_size: int = DEFAULT_PART  # preferred; grows for huge files to stay <= 10,000 parts
    min_part: int = MIN_PART  # tests against moto lower it together with S3_UPLOAD_PART_MIN_SIZE
    jobs: int = 8  # parallel part uploads on the pod
    max_bandwidth: int = 0  # bytes/s for uploads from the pod, 0 = unlimited
    url_expiry: int = 6 * 3600
    # A store that accepts connections and never answers fails in about attempts x read_timeout, saying
    # "cannot reach the S3 endpoint <url>: no answer in N s" (botocore's default: 3 x 60 s, and on the pod
    # urllib waited 4 x 120 s). The pod's presigned PUTs/GETs use read_timeout too (per read, per MiB sent).
    connect_timeout: float = 5.0  # s to open a connection to the store
    read_timeout: float = 15.0  # s without a byte of the answer (app and pod)
    attempts: int = 2  # tries per S3 request from this app (botocore's retries, bounded)

    def with_overrides(self, **kw: Any) -> BackupSettings:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def prefix_for(self, run_dir: str) -> str:
        prefix = self.prefix or f"prime-train/{Path(run_dir.rstrip('/')).name or 'run'}/"
        return prefix if prefix.endswith("/") else prefix + "/"


class BackupSettingsError(BackupError, SettingsError):
    """backup.toml cannot be read or is wrong (services/tomlfile.py's policy): a SettingsError, and a
    BackupError for the callers that catch those."""


CREDENTIAL_KEYS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
_BACKUP_CHOICES = {
    "compression": ("zstd", "none"),
    "checksums": ("when_required", "when_supported"),
    "part_checksums": ("auto", "none"),
}


def load_backup_settings(path: Path | None, env: Mapping[str, str] | None = None) -> BackupSettings:
    """``[backup]`` of a TOML file (missing file: defaults), then PRIME_TRAIN_TUI_BUCKET /
    PRIME_TRAIN_TUI_S3_ENDPOINT from the environment. Credentials are never read from files by us.

    A file that exists but cannot be read (a directory, not TOML, too deep), an unknown table (``[bakup]``)
    or key, or a value of the wrong type is a :class:`BackupSettingsError` — never the defaults, which
    would mean "no backup" to cleanup."""
    from services.tomlfile import kinds_of, read_toml, show_value

    environ: Mapping[str, str] = os.environ if env is None else env
    table: dict[str, Any] = {}
    if path is not None:
        doc = read_toml(path, error=BackupSettingsError)
        doc.only_tables(["backup"])
        table = doc.table("backup")
        creds = [k for k in table if k.lower() in CREDENTIAL_KEYS]
        if creds:
            raise doc.fail(
                f"unknown [backup] keys {', '.join(creds)}",
                "backup",
                creds[0],
                hint="credentials belong in the environment or ~/.aws, never in our settings",
            )
        doc.check(table, ("backup",), kinds_of(BackupSettings))
        for key, value in table.items():
            choices = _BACKUP_CHOICES.get(key)
            if choices is not None and value not in choices:
                raise doc.fail(
                    f"backup.{key} must be one of {', '.join(map(repr, choices))}, not {show_value(value)}",
                    "backup",
                    key,
                )
            low = 1 if key in ("part_size", "min_part", "jobs", "url_expiry") else 0
            if isinstance(value, int) and not isinstance(value, bool) and value < low:
                raise doc.fail(f"backup.{key} must be at least {low}, not {value}", "backup", key)
    settings = BackupSettings(**table)
    return settings.with_overrides(
        bucket=environ.get("PRIME_TRAIN_TUI_BUCKET") or None,
        endpoint=environ.get("PRIME_TRAIN_TUI_S3_ENDPOINT") or None,
    )


def part_size_for(size: int, preferred: int = DEFAULT_PART, minimum: int = MIN_PART, jobs: int = 8) -> int:
    """The part size for a file (the agent on the pod applies the same rule): the preferred one, halved
    while the file would give fewer than 2 parts per upload thread, doubled until it fits 10,000 parts."""
    part = max(preferred, minimum)
    while part // 2 >= minimum and size < part * 2 * jobs:
        part //= 2
    while size > part * MAX_PARTS:
        part *= 2
    return min(part, MAX_PART)


def multipart_etag(part_md5s: list[str]) -> str:
    """The ETag S3 gives a multipart object: md5 of the parts' binary md5s, '-', part count."""
    if len(part_md5s) == 1:
        return part_md5s[0]
    digest = hashlib.md5(b"".join(bytes.fromhex(m) for m in part_md5s)).hexdigest()
    return f"{digest}-{len(part_md5s)}"


def hide_credentials(text: str) -> str:
    """Hide anything that looks like a credential or a signature (for logs and the screen)."""
    text = re.sub(r"(X-Amz-(Signature|Credential|Security-Token)=)[^&\s]+", r"\1***", text)
    text = re.sub(r"\b(AKIA|ASIA)[A-Z0-9]{12,}\b", "***", text)
    return re.sub(r"(?i)(secret[^=:\s]*\s*[=:]\s*)\S+", r"\1***", text)


def transport_error(exc: BaseException, doing: str) -> BackupError | None:
    """A timeout or a lost connection to the pod met while ``doing`` (e.g. "backup of step 4") as a
    one-line BackupError; None for anything else (a bug: let it surface)."""
    if isinstance(exc, BackupError):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return BackupError(
            f"{doing}: the pod did not answer in time",
            hint="check the pod (load, disk) and try again; finished parts are kept",
        )
    reason = str(getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc or type(exc).__name__)
    reason = reason.strip().rstrip(".").lower()
    if isinstance(exc, (ConnectionError, EOFError)) or type(exc).__module__.split(".")[0] == "asyncssh":
        detail = "" if "lost" in reason or "closed" in reason else f" ({reason})"
        return BackupError(
            f"{doing}: connection to the pod lost{detail}",
            hint="reconnect and run it again; finished parts are not sent twice",
        )
    if isinstance(exc, OSError):
        return BackupError(f"{doing}: {reason}")
    return None


_LOADER: list[Any] = []  # botocore's data loader, shared by every session of this process
_LOADER_LOCK = threading.Lock()


def _session() -> Any:
    """A fresh botocore session (the credential chain and the config files read anew for each client,
    as before) that shares one data loader: the S3 service model and the endpoint rules are parsed once
    per process. Without it every client cost ~200-250 ms (~50 ms with it) and a backup made three or
    more (its own, the prune's listing, one per step the listing verifies)."""
    import botocore.session

    session = botocore.session.Session()
    with _LOADER_LOCK:
        if _LOADER:
            session.register_component("data_loader", _LOADER[0])
        else:
            _LOADER.append(session.get_component("data_loader"))
    return session


class S3:
    """A thin async wrapper over one boto3 client: every call runs in a thread and raises BackupError."""

    def __init__(self, settings: BackupSettings) -> None:
        if not settings.bucket:
            raise BackupError(
                "no bucket configured", hint="pass --bucket, set PRIME_TRAIN_TUI_BUCKET, or bucket in backup.toml"
            )
        for key in ("connect_timeout", "read_timeout", "attempts"):
            value = getattr(settings, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 86400:
                raise BackupError(
                    f"backup.{key} must be a number of {'tries' if key == 'attempts' else 'seconds'} "
                    f"above 0, not {value!r}",
                    hint="fix it in backup.toml",
                )
        self.settings = settings
        self.bucket = settings.bucket
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._new_client(self.settings.region or _BUCKET_REGIONS.get(self._where_key()) or None)
            return self._client

    def _new_client(self, region: str | None) -> Any:
        from botocore.config import Config

        s = self.settings
        cfg = Config(
            signature_version="s3v4",
            request_checksum_calculation=s.checksums,
            response_checksum_validation=s.checksums,
            connect_timeout=s.connect_timeout,
            read_timeout=s.read_timeout,
            retries={"total_max_attempts": int(s.attempts), "mode": "standard"},
        )
        return _session().create_client("s3", endpoint_url=s.endpoint or None, region_name=region or None, config=cfg)

    def _where_key(self) -> tuple[str, str, str]:
        env = os.environ
        return (
            self.settings.endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "",
            self.bucket,
            env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "",
        )

    async def call(self, name: str, **kw: Any) -> Any:
        return await asyncio.to_thread(self._sync, name, kw)

    def _sync(self, name: str, kw: dict[str, Any]) -> Any:
        op = name
        try:
            if (
                not self.settings.region
                and not self._located
                and name != "head_bucket"
                and self._where_key() not in _BUCKET_REGIONS
            ):
                op = "head_bucket"  # its errors are the clear ones (no such bucket, refused)
                self._locate(self.client.head_bucket(Bucket=self.bucket))
                op = name
            out = getattr(self.client, name)(**kw)
            if name == "head_bucket" and kw.get("Bucket") == self.bucket and not self.settings.region:
                self._locate(out)
            return out
        except Exception as exc:  # noqa: BLE001 - botocore's hierarchy is only importable lazily; re-raised
            raise self._explain(exc, op) from None

    _located = False

    def _locate(self, head: dict[str, Any]) -> None:
        """No region configured: use the bucket's (the ``x-amz-bucket-region`` header of HEAD bucket,
        which boto3 reaches through its redirect), so the presigned URLs the pod uses are signed for the
        region that holds the bucket (a us-east-1 signature on a eu-west-1 bucket is refused)."""
        region = (head.get("ResponseMetadata", {}).get("HTTPHeaders") or {}).get("x-amz-bucket-region")
        with self._lock:
            self._located = True
            _BUCKET_REGIONS[self._where_key()] = region or ""  # "": the store does not say (boto3 decides)
            if region and self._client is not None and self._client.meta.region_name != region:
                self._client = self._new_client(region)

    def presign(self, op: str, **params: Any) -> str:
        return self.client.generate_presigned_url(
            op, Params={"Bucket": self.bucket, **params}, ExpiresIn=self.settings.url_expiry
        )

    def _explain(self, exc: Exception, op: str) -> BackupError:
        from botocore import exceptions as bx

        where = self.settings.endpoint or (self._client.meta.endpoint_url if self._client is not None else "AWS S3")
        if isinstance(exc, bx.NoCredentialsError):
            return BackupError(
                "no S3 credentials found",
                hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE (boto3's chain)",
            )
        if isinstance(exc, (bx.ReadTimeoutError, bx.ConnectTimeoutError)):  # accepted (or not) and silent
            waited = (
                self.settings.read_timeout if isinstance(exc, bx.ReadTimeoutError) else self.settings.connect_timeout
            )
            return BackupError(
                f"cannot reach the S3 endpoint {where}: no answer in {waited:g} s",
                hint="the store is down or overloaded, or a firewall swallows the traffic; "
                "read_timeout / connect_timeout in backup.toml set the wait",
            )
        if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectionClosedError)):
            return BackupError(
                f"cannot reach the S3 endpoint {where}",
                hint="check the endpoint setting / AWS_ENDPOINT_URL and the network",
            )
        if isinstance(exc, bx.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchBucket",) or (code == "404" and op == "head_bucket"):
                return BackupError(
                    f"bucket {self.bucket!r} does not exist at {where}", hint="create it first, or fix --bucket"
                )
            if code in (
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "AccessDenied",
                "403",
                "InvalidToken",
                "ExpiredToken",
            ):
                return BackupError(
                    f"the S3 store refused our credentials ({code}) for bucket {self.bucket!r}",
                    hint="check the access key, secret and region in boto3's chain",
                )
            if (
                code in ("MissingContentMD5", "XAmzContentSHA256Mismatch", "InvalidRequest")
                and self.settings.checksums != "when_required"
            ):
                return BackupError(
                    f"the store rejected boto3's default checksums ({code})",
                    hint='set checksums = "when_required" in backup.toml',
                )
            return BackupError(f"S3 {op} failed: {code or status} {hide_credentials(str(exc))}")
        if isinstance(exc, bx.BotoCoreError):
            return BackupError(f"S3 {op} failed: {hide_credentials(str(exc))}")
        return BackupError(f"S3 {op} failed: {type(exc).__name__}: {hide_credentials(str(exc))}")


async def each_page(s3: S3, op: str, key: str, **kw: Any) -> list[Any]:
    """All items of a paginated listing (list_objects_v2 -> 'Contents', ...)."""
    out: list[Any] = []
    token_in, token_out = {
        "list_objects_v2": ("ContinuationToken", "NextContinuationToken"),
        "list_parts": ("PartNumberMarker", "NextPartNumberMarker"),
    }[op]
    token: Any = None
    while True:
        page = await s3.call(op, Bucket=s3.bucket, **kw, **({token_in: token} if token else {}))
        out.extend(page.get(key, []) or [])
        token = page.get(token_out)
        if not page.get("IsTruncated") or not token:
            return out
