"""Item 13 (lock): "another action is already running on p1 (pid ? on the pod, from ?, since ?)".

The pod-side action lock records who holds it (pid on the pod, the owner: user@host of the machine that
took it, the action, since when) and a refused taker says so: "kill is already running on p1: pid 4242 on
the pod, from alice@laptop, since 14:02:10 (3 min ago)". A record that is missing, half-written or garbage
(the lock file is outside data: anything with root on the pod can write it) never crashes the reader on
the pod nor the message here: it reads "unknown holder". Two takers over the real sshd, the reader fed
anything by hypothesis."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import HealthCheck, example, given, settings, strategies as st

from services.lifecycle.actions import kill
from services.lifecycle.events import LifecycleError
from services.lifecycle.lock import held_error, owner_id, pod_lock
from services.lifecycle.shell import AGENT_PATH
from services.pod.agent import podlock
from services.pod.ssh import SSHConnection
from tests.services.lifecycle.test_actions import make_settings

FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=5)),
    max_leaves=20,
)
# a record's own keys, each given any JSON value
records = st.dictionaries(st.sampled_from(["pid", "action", "owner", "since", "age", "known"]), json_values, max_size=6)
PLACEHOLDER = "?"


def one_line(message: str) -> bool:
    return message.isprintable() and "\n" not in message


def clock(since: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(since))


# ------------------------------------------------------------------ the owner string


def test_the_owner_is_the_user_and_host_of_the_machine_that_took_it():
    import getpass
    import socket

    assert owner_id() == f"{getpass.getuser()}@{socket.gethostname()}"


# ------------------------------------------------------------------ the message


def test_the_refusal_names_the_action_pid_owner_and_since_when():
    since = time.time() - 190
    err = held_error({"pid": 4242, "action": "kill", "owner": "alice@laptop", "since": since, "age": 190.0}, "p1")
    assert isinstance(err, LifecycleError)
    assert (
        str(err) == f"kill is already running on p1: pid 4242 on the pod, from alice@laptop, "
        f"since {clock(since)} (3 min ago)"
    )
    assert err.hint


@pytest.mark.parametrize(
    "held",
    [
        {},
        None,
        [],
        "x",
        3,
        {"pid": "?"},
        {"known": False},
        {"pid": True},
        {"since": "yesterday"},
        {"since": 1e308},
        {"since": float("nan")},
        {"pid": -1},
    ],
)
def test_an_unreadable_record_reads_unknown_holder_never_question_marks(held):
    message = str(held_error(held, "p1"))
    assert message.startswith("another action is already running on p1")
    assert "unknown holder" in message and PLACEHOLDER not in message and one_line(message)


@FAST
@given(st.one_of(json_values, records))
@example({"pid": 7, "action": "kill\n\x1b[31mrm -rf /", "owner": "x" * 10_000, "since": -5.0})
@example({"pid": 10**30, "since": 10**30})
def test_held_error_takes_anything_the_pod_says(held):
    err = held_error(held, "p1")
    assert isinstance(err, LifecycleError)
    message = str(err)
    assert one_line(message) and len(message) < 400
    assert "is already running on p1" in message


# ------------------------------------------------------------------ the pod-side reader


def _valid(record: dict) -> bool:
    pid = record.get("pid") if isinstance(record, dict) else None
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31


def check_holder(holder) -> None:
    assert isinstance(holder, dict) and isinstance(holder.get("known"), bool)
    assert holder.get("pid") is None or (type(holder["pid"]) is int and holder["pid"] > 0)
    for key in ("action", "owner"):
        assert holder.get(key) is None or (
            isinstance(holder[key], str) and one_line(holder[key]) and len(holder[key]) <= 80
        )
    for key in ("since", "age"):
        assert holder.get(key) is None or (isinstance(holder[key], float) and math.isfinite(holder[key]))
    json.dumps(holder, allow_nan=False)  # it goes over the wire as JSON


@FAST
@given(st.binary(max_size=400))
@example(b"")
@example(b"[" * 50_000)
@example(b'{"pid": 12, "action": "kill", "owner": "me", "since": 1e400}')
@example(b'{"pid": 12, "since": "\xff"}')
@example(b"\xff\xfe{\x00")
def test_the_pod_side_reader_takes_any_bytes(data):
    holder = podlock.parse_holder(data, time.time())
    check_holder(holder)
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        parsed = None
    if not _valid(parsed):
        assert holder["known"] is False
        assert "unknown holder" in str(held_error(holder, "p1"))


@FAST
@given(st.one_of(json_values, records))
def test_the_pod_side_reader_takes_any_json(value):
    holder = podlock.parse_holder(json.dumps(value, allow_nan=True).encode(), time.time())
    check_holder(holder)
    assert holder["known"] is _valid(value)
    if not holder["known"]:
        assert "unknown holder" in str(held_error(holder, "p1"))


def test_a_garbage_lock_file_is_read_from_disk_as_unknown_holder(tmp_path):
    path = tmp_path / "action.lock"
    for data in (b"", b"\x00" * 10, b"[1, 2]", b'{"pid": "12"}', os.urandom(5000), b"{" * 100_000):
        path.write_bytes(data)
        holder = podlock.read_holder(str(path))
        check_holder(holder)
        assert holder["known"] is False
    path.unlink()
    assert podlock.read_holder(str(path))["known"] is False  # gone meanwhile
    path.mkdir()
    assert podlock.read_holder(str(path))["known"] is False  # not even a file


# ------------------------------------------------------------------ the window between flock and record

HOLDER = """
import fcntl, json, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))  # the record comes a little after the flock, as in take_lock
os.write(fd, json.dumps({"pid": os.getpid(), "action": "cleanup", "owner": "bob@desk", "since": time.time()}).encode())
print("written", flush=True)
sys.stdin.read()
"""


def test_a_taker_in_the_window_before_the_record_still_names_the_holder(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state / "action.lock"), "0.3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        fd, holder = podlock.take_lock(str(state), "launch", "me@here")
        assert fd is None
        assert holder["known"] and holder["pid"] == proc.pid and holder["owner"] == "bob@desk"
        assert holder["action"] == "cleanup"
    finally:
        proc.stdin.close()
        proc.wait(10)


# ------------------------------------------------------------------ two takers over the real sshd


@pytest.mark.ssh
async def test_two_takers_over_ssh_the_second_is_told_who_holds_it(pod, tmp_path):
    async with SSHConnection(pod) as conn, SSHConnection(pod) as conn2:
        async with pod_lock(conn, "kill") as info:
            with pytest.raises(LifecycleError) as err:
                async with pod_lock(conn2, "launch"):
                    pass
            message = str(err.value)
            assert message.startswith(
                f"kill is already running on {pod.name}: pid {info['pid']} on the pod, "
                f"from {owner_id()}, since {clock(info['since'])} ("
            )
            assert message.endswith(" s ago)") and PLACEHOLDER not in message and one_line(message)
            # the one-exec kill takes the lock inside its own helper: the same refusal, as an event
            events = [e async for e in kill(conn2, settings=make_settings(tmp_path))]
            assert events[-1].kind == "error"
            assert (
                f"kill is already running on {pod.name}: pid {info['pid']} on the pod, from {owner_id()}"
                in events[-1].message
            )


@pytest.mark.ssh
@pytest.mark.parametrize(
    "garbage", [b"", b'{"pid": "me", "owner": {"x": 1}}', b"\xff\x00" * 300], ids=["empty", "wrong-types", "binary"]
)
async def test_a_garbage_record_under_a_live_lock_reads_unknown_holder(pod, garbage):
    state = Path(pod.probe_dir)
    env = {**os.environ, "PTT_STATE_DIR": str(state)}
    holder = subprocess.Popen(
        [sys.executable, str(AGENT_PATH), "lock", "--action", "cleanup", "--owner", "x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert json.loads(holder.stdout.readline())["ok"]
        (state / "action.lock").write_bytes(garbage)  # same inode: the flock still holds
        async with SSHConnection(pod) as conn:
            with pytest.raises(LifecycleError) as err:
                async with pod_lock(conn, "kill"):
                    pass
        message = str(err.value)
        assert message.startswith(f"another action is already running on {pod.name}")
        assert "unknown holder" in message and PLACEHOLDER not in message and one_line(message)
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
