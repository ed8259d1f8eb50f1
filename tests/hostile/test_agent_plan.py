"""Issue 13 item 1, the pod's own guard: the backup agent (``backup.py download``, run as the pod runs it) gets a
hostile restore plan directly -- as if the app's check of the manifest had been skipped or fooled -- and
refuses it whole before writing anything: no file outside the run dir is created or truncated, not even the
run dir is made, nothing is downloaded, and the one-line error names the entry.

Real parts: the agent script in a subprocess, a real HTTP server on 127.0.0.1 standing in for the bucket.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.pod.agent import BACKUP
from tests.http_stub import serve

PAYLOAD = b"ssh-ed25519 AAAA attacker@evil\n"
CANARY = b"ssh-ed25519 AAAA the-owner@laptop\n"


@pytest.fixture(scope="module")
def store():
    """The "bucket": every GET answers PAYLOAD; ``store.hits`` counts the requests."""
    hits: list[str] = []

    def answer(method: str, path: str):
        hits.append(f"{method} {path}")
        return 200, PAYLOAD, "application/octet-stream"

    with serve(answer) as url:
        yield type("Store", (), {"url": url, "hits": hits})


@pytest.fixture
def place(tmp_path):
    """(run dir -- not created --, a dir outside it holding a canary authorized_keys)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "authorized_keys").write_bytes(CANARY)
    return tmp_path / "pod" / "run", outside


def entry(store_url: str, path: str, body: bytes = PAYLOAD, sha256: str | None = None, **extra) -> dict:
    return {
        "path": path,
        "size": len(body),
        "sha256": sha256 or hashlib.sha256(body).hexdigest(),
        "encoding": "none",
        "mtime_ns": 0,
        "url": f"{store_url}/bucket/obj",
        "parts": [{"n": 1, "offset": 0, "raw": len(body), "size": len(body), "md5": hashlib.md5(body).hexdigest()}],
        **extra,
    }


def agent(plan: dict | str, cwd: Path) -> tuple[int, list[dict]]:
    line = plan if isinstance(plan, str) else json.dumps(plan)
    res = subprocess.run(
        [sys.executable, str(BACKUP), "download", "--jobs", "2", "--timeout", "10"],
        input=line + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert res.stderr == "", res.stderr  # no traceback: every failure is an event
    return res.returncode, [json.loads(x) for x in res.stdout.splitlines()]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_an_honest_plan_is_restored(store, place):
    """The control: the guard does not refuse what the app sends for a real manifest."""
    run, outside = place
    plan = {
        "run_dir": str(run),
        "step": 3,
        "tag": "t1",
        "files": [entry(store.url, "trainer/.metadata"), entry(store.url, "orchestrator/progress.pt")],
    }
    rc, events = agent(plan, outside.parent)
    assert rc == 0 and events[-1]["event"] == "done", events
    assert (run / "checkpoints/step_3/trainer/.metadata").read_bytes() == PAYLOAD
    assert _files(run / "checkpoints") == [
        "step_3",
        "step_3/orchestrator",
        "step_3/orchestrator/progress.pt",
        "step_3/trainer",
        "step_3/trainer/.metadata",
    ]


HOSTILE = {
    "absolute": (lambda o, u: [entry(u, str(o / "new_key"))], "an absolute path"),
    "dot-dot": (lambda o, u: [entry(u, "trainer/../../../../outside/new_key")], "'..' climbs out"),
    "truncate": (lambda o, u: [entry(u, str(o / "authorized_keys"), sha256="0" * 64)], "an absolute path"),
    "empty component": (lambda o, u: [entry(u, "trainer//x")], "an empty or '.' component"),
    "dot component": (lambda o, u: [entry(u, "./trainer/x")], "an empty or '.' component"),
    "empty path": (lambda o, u: [entry(u, "")], "empty"),
    "NUL": (lambda o, u: [entry(u, "trainer/x\0/../../../outside/new_key")], "NUL"),
    "not a string": (lambda o, u: [entry(u, ["a", "b"])], "not a string"),
    "duplicate": (lambda o, u: [entry(u, "trainer/x"), entry(u, "trainer/x")], "the same file"),
    "file and dir": (lambda o, u: [entry(u, "trainer/x"), entry(u, "trainer/x/y")], "under a file"),
    "sparse bomb": (
        lambda o, u: [
            entry(u, "trainer/x", parts=[{"n": 1, "offset": 10**15, "raw": len(PAYLOAD), "size": len(PAYLOAD)}])
        ],
        "do not cover",
    ),
    "bad sha256": (lambda o, u: [entry(u, "trainer/x", sha256="../../x")], "size or sha256"),
    "no URL": (lambda o, u: [entry(u, "trainer/x", url="file:///etc/shadow")], "no http(s) URL"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_plan_is_refused_whole_before_anything_is_written(store, place, case):
    run, outside = place
    make, why = HOSTILE[case]
    files = [entry(store.url, "trainer/.metadata"), *make(outside, store.url)]  # an honest entry first
    before = len(store.hits)
    rc, events = agent({"run_dir": str(run), "step": 3, "tag": "t1", "files": files}, outside.parent)
    assert rc == 1 and [e["event"] for e in events] == ["error"], events
    message = events[0]["message"]
    assert "\n" not in message and message.startswith("refused the restore: ") and why in message, message
    assert message.endswith("nothing was written")
    if "path" in message:
        assert "entry 2 (" in message  # names the entry
    assert not run.parent.exists()  # not even the run dir was made
    assert _files(outside) == ["authorized_keys"] and (outside / "authorized_keys").read_bytes() == CANARY
    assert len(store.hits) == before  # nothing downloaded


@pytest.mark.parametrize(
    "plan, why",
    [
        ("{not json", "not JSON"),
        ("[" * 100_000, "not JSON"),
        ('{"run_dir": "RUN", "step": "3", "files": []}', "step"),
        ('{"run_dir": "RUN", "step": 3, "tag": "../../../outside", "files": []}', "tag"),
        ('{"run_dir": "RUN", "step": 3, "files": {"path": "x"}}', "list of files"),
    ],
    ids=["not JSON", "100k deep", "step a string", "tag climbs out", "files an object"],
)
def test_a_plan_of_the_wrong_shape_is_refused(store, place, plan, why):
    run, outside = place
    rc, events = agent(plan.replace("RUN", str(run)), outside.parent)
    assert rc == 1 and [e["event"] for e in events] == ["error"] and why in events[0]["message"], events
    assert not run.parent.exists() and _files(outside) == ["authorized_keys"]


def test_a_sub_dir_named_in_the_plan_is_ignored(store, place):
    """``sub`` (where under the staging dir an orchestrator half goes) is the agent's to decide: one in the
    plan pointing outside is not followed."""
    run, outside = place
    plan = {
        "run_dir": str(run),
        "step": 3,
        "tag": "t1",
        "files": [entry(store.url, "trainer/.metadata", sub=str(outside))],
    }
    rc, events = agent(plan, outside.parent)
    assert rc == 0, events
    assert (run / "checkpoints/step_3/trainer/.metadata").read_bytes() == PAYLOAD
    assert _files(outside) == ["authorized_keys"]


@pytest.mark.parametrize("planted", ["a symlink inside", "the staging dir itself a symlink"])
def test_a_planted_staging_dir_is_never_written_into(store, place, planted):
    run, outside = place
    staging = run / "checkpoints" / ".step_3.restoring-t1"
    if planted == "a symlink inside":
        staging.mkdir(parents=True)
        (staging / "trainer").symlink_to(outside)
    else:
        staging.parent.mkdir(parents=True)
        staging.symlink_to(outside)
    plan = {"run_dir": str(run), "step": 3, "tag": "t1", "files": [entry(store.url, "trainer/new_key")]}
    rc, events = agent(plan, outside.parent)
    assert rc == 1 and events[-1]["event"] == "error", events
    assert "already exists" in events[-1]["message"] and str(staging) in events[-1]["message"]
    assert _files(outside) == ["authorized_keys"] and (outside / "authorized_keys").read_bytes() == CANARY
    assert staging.is_symlink() or (staging / "trainer").is_symlink()  # left as it was: not ours to delete
    assert not (run / "checkpoints" / "step_3").exists()
