"""Property tests of the manifest parser (issue 13 item 1): whatever JSON -- or bytes -- the bucket returns as a
``manifest.json`` either parses into a Manifest whose every path is safe to create under a staging dir, or
raises the project's BackupError (ManifestError) with a one-line message; never another exception. The pod
agent's own check of a restore plan holds the same line, and accepts every plan the app builds from a
manifest it accepted (the two guards agree)."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tempfile

# hypothesis keeps caches in ./.hypothesis unless told otherwise: not in the shared working tree
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import HealthCheck, example, given, settings, strategies as st

from services.backup.manifest import Manifest
from services.backup.s3 import BackupError
from services.pod.agent.restore import PlanError, check_plan

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
STAGING = "/pod/run/checkpoints/.step_3.restoring-t1"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**310),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
# paths built from the pieces that matter: separators, dots, NUL, a lone surrogate, long names
pieces = st.sampled_from(
    ["a", "trainer", "orchestrator", "..", ".", "", "/", "\0", "\\", "\ud800", "é", "x" * 256, "~", "step_3", " "]
)
honest = st.sampled_from(["trainer/__0_0.distcp", "trainer/.metadata", "orchestrator/progress.pt", "a b/ü/x.pt"])
paths = st.one_of(
    honest,
    st.lists(pieces, min_size=0, max_size=6).map("/".join),
    st.lists(pieces, max_size=6).map("".join),
    st.text(max_size=20),
    json_values,
)


def _file(path, body: bytes, nparts: int) -> dict:
    cut = [len(body) * i // nparts for i in range(nparts + 1)]
    chunks = [body[a:b] for a, b in zip(cut, cut[1:])]
    return {
        "path": path,
        "size": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
        "encoding": "none",
        "level": 0,
        "stored_size": len(body),
        "store_etag": "",
        "mtime_ns": 1,
        "parts": [
            {"n": n, "offset": cut[n - 1], "raw": len(c), "size": len(c), "md5": hashlib.md5(c).hexdigest()}
            for n, c in enumerate(chunks, 1)
        ],
    }


FILE_KEYS = st.sampled_from(
    ["path", "size", "sha256", "encoding", "level", "stored_size", "store_etag", "mtime_ns", "parts"]
)
files = st.builds(
    lambda path, body, nparts, changes: {**_file(path, body, nparts), **changes},
    paths,
    st.binary(max_size=40),
    st.integers(1, 3),
    st.one_of(st.just({}), st.dictionaries(FILE_KEYS, json_values, max_size=2)),
)
TOP_KEYS = st.sampled_from(["version", "step", "run", "created", "files", "source"])
manifests = st.builds(
    lambda fs, changes: {
        "version": 1,
        "step": 3,
        "run": "run",
        "created": 1.0,
        "files": fs,
        "source": {"pod": "p", "run_dir": "/r"},
        **changes,
    },
    st.lists(files, max_size=4),
    st.one_of(st.just({}), st.dictionaries(TOP_KEYS, json_values, max_size=2)),
)


def assert_safe(path: str) -> None:
    assert isinstance(path, str) and path and "\0" not in path and not path.startswith("/")
    assert all(part not in ("", ".", "..") for part in path.split("/"))
    assert posixpath.normpath(posixpath.join(STAGING, path)).startswith(STAGING + "/")


def parse(text: str | bytes) -> Manifest | None:
    try:
        manifest = Manifest.from_json(text)
    except BackupError as exc:  # the project's error, one line, saying something
        assert str(exc).strip() and "\n" not in str(exc)
        return None
    for f in manifest.files:
        assert_safe(f.path)
        assert f.etag and f.key.startswith(f.path)
    assert len({f.path for f in manifest.files}) == len(manifest.files)
    assert Manifest.from_json(manifest.to_json()) == manifest  # what we write, we read back as it was
    return manifest


def plan_of(manifest: Manifest) -> dict:
    """What restore_checkpoint sends the agent for this manifest."""
    return {
        "run_dir": "/pod/run",
        "step": manifest.step,
        "tag": "t1",
        "files": [
            {
                "path": f.path,
                "size": f.size,
                "sha256": f.sha256,
                "encoding": f.encoding,
                "mtime_ns": f.mtime_ns,
                "url": "https://s3.example/b/k?X-Amz-Signature=x",
                "parts": [p.__dict__ for p in f.parts],
            }
            for f in manifest.files
        ],
    }


@FAST
@given(st.binary(max_size=200))
@example(b"[" * 100_000)  # nested past the recursion limit
@example(b"\xff\xfe{\x00")
@example(b'{"version": 1, "step": 1e400, "files": []}')
@example(b'{"version": 1, "step": 3, "files": [], "created": 1e400}')
@example(
    b'{"version": 1, "step": 3, "files": [], "source": {"pod": "p", "run_dir": "/r", "lineage": ["a"], '
    b'"resumed_at": [Infinity]}}'
)
def test_any_bytes_are_a_manifest_or_a_backup_error(raw):
    parse(raw)


@FAST
@given(json_values)
def test_any_json_is_a_manifest_or_a_backup_error(value):
    parse(json.dumps(value, allow_nan=True))


@FAST
@given(manifests)
@example({"version": 1, "step": 3, "files": [_file("/root/.ssh/authorized_keys", b"k", 1)]})
@example({"version": 1, "step": 3, "files": [_file("trainer/../../../../.ssh/authorized_keys", b"k", 1)]})
@example({"version": 1, "step": 3, "files": [_file("a", b"k", 1), _file("a/b", b"k", 1)]})
@example({"version": 1, "step": 3, "files": [_file("a", b"k", 1), _file("a", b"j", 1)]})
@example({"version": 1, "step": 3, "files": [], "created": 10**400})  # no float holds it (found by hypothesis)
def test_a_near_manifest_is_safe_or_refused_and_the_pod_agrees(doc):
    manifest = parse(json.dumps(doc, allow_nan=True))
    if manifest is not None:
        assert check_plan(plan_of(manifest)) is not None  # the pod accepts what the app accepted


@FAST
@given(st.lists(files, max_size=4), json_values)
def test_the_pod_refuses_or_stages_every_entry_inside(fs, tag):
    plan = {
        "run_dir": "/pod/run",
        "step": 3,
        "tag": "t1" if not isinstance(tag, str) else tag,
        "files": [{**f, "url": "http://127.0.0.1:9/b/k"} for f in fs],
    }
    try:
        checked = check_plan(plan)
    except PlanError as exc:
        assert str(exc).strip() and "\n" not in str(exc)
        return
    assert plan["tag"] and "/" not in plan["tag"] and plan["tag"] not in (".", "..")
    for f in checked:
        assert_safe(f["path"])
