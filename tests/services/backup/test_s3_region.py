"""The S3 client follows the bucket's region when none is configured, and names the endpoint it really
used when it cannot reach it (moto's S3 server over real HTTP; the local pod runs the real agent)."""

from __future__ import annotations

import urllib.parse

import pytest

from services.backup.s3 import S3, BackupError
from services.backup.transfer import backup_checkpoint
from services.models import Pod, PodKind
from services.pod.local import LocalConnection
from tests.conftest import free_port
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint


def credential_region(url: str) -> str:
    cred = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Credential"][0]
    return cred.split("/")[2]  # AKID/date/REGION/s3/aws4_request


@pytest.fixture
def eu_bucket(s3env):
    name = s3env.bucket + "-eu"
    s3env.client.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    return name


async def test_without_a_region_the_client_and_presigned_urls_follow_the_bucket(
    s3env, eu_bucket, tmp_path, monkeypatch
):
    s3 = S3(s3env.settings(bucket=eu_bucket, region=None))  # AWS_DEFAULT_REGION is us-east-1 (s3env)
    await s3.call("list_objects_v2", Bucket=eu_bucket)
    assert s3.client.meta.region_name == "eu-west-1"
    assert credential_region(s3.presign("put_object", Key="k")) == "eu-west-1"

    # a whole backup: every URL the pod got was signed for eu-west-1, and it is verified
    signed: list[str] = []
    real = S3.presign

    def spy(self, op, **params):
        url = real(self, op, **params)
        signed.append(url)
        return url

    monkeypatch.setattr(S3, "presign", spy)
    run = tmp_path / "run"
    write_checkpoint(run, 2, shard_bytes=200 * 1024)
    async with LocalConnection(Pod(name="local", kind=PodKind.LOCAL)) as conn:
        result = await backup_checkpoint(conn, s3env.settings(bucket=eu_bucket, region=None), str(run), 2)
    assert result.verified and signed
    assert {credential_region(u) for u in signed} == {"eu-west-1"}


async def test_a_configured_region_is_kept_and_a_us_east_1_bucket_stays_there(s3env, eu_bucket):
    s3 = S3(s3env.settings(bucket=eu_bucket, region="eu-central-1"))  # the user said so: not second-guessed
    await s3.call("list_objects_v2", Bucket=eu_bucket)
    assert s3.client.meta.region_name == "eu-central-1"
    s3 = S3(s3env.settings(region=None))
    await s3.call("head_bucket", Bucket=s3env.bucket)
    assert credential_region(s3.presign("get_object", Key="k")) == "us-east-1"


async def test_a_missing_bucket_is_still_named_when_the_region_is_looked_up(s3env):
    with pytest.raises(BackupError, match="does not exist"):
        await S3(s3env.settings(bucket="no-such-bucket-here", region=None)).call(
            "list_objects_v2", Bucket="no-such-bucket-here"
        )


async def test_endpoint_down_from_aws_endpoint_url_names_that_endpoint(s3env, monkeypatch):
    down = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", down)
    with pytest.raises(BackupError) as err:
        await S3(s3env.settings(endpoint=None)).call("head_bucket", Bucket=s3env.bucket)
    assert f"cannot reach the S3 endpoint {down}" in str(err.value) and "AWS S3" not in str(err.value)
