"""One watcher per data dir (a real flock; a second taker names the holder), the state file (atomic, no
secrets, garbage-tolerant), and the notice the TUI shows at start: a watcher running or not, and the
alerts it opened since the TUI was last open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.models import Alert, Severity
from services.watch.lock import LOCK_NAME, WatcherRunning, WatchLock
from services.watch.state import SEEN_NAME, STATE_NAME, WatchState, read_state, watch_notice
from services.watch.threads import AlertBook, Policy

T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[3]


def test_a_second_watcher_is_refused_naming_the_holder_and_may_start_once_it_is_gone(tmp_path: Path):
    first = WatchLock(tmp_path)
    first.acquire(clock=lambda: T0)
    with pytest.raises(WatcherRunning) as info:
        WatchLock(tmp_path).acquire(clock=lambda: T0 + 125)
    message = str(info.value)
    assert f"pid {os.getpid()}" in message and "(2 min ago)" in message and str(tmp_path) in message
    assert "PRIME_TRAIN_TUI_DATA_DIR" in info.value.hint
    first.release()
    assert (tmp_path / LOCK_NAME).read_text() == ""
    with WatchLock(tmp_path):
        pass


def test_a_dead_holder_is_never_in_the_way(tmp_path: Path):
    code = (
        "import sys, os; sys.path.insert(0, %r); from services.watch.lock import WatchLock; "
        "WatchLock(%r).acquire(); os._exit(0)"
    ) % (str(REPO), str(tmp_path))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] > 0  # its record is left behind
    with WatchLock(tmp_path):  # ... but the kernel dropped its flock
        pass


@pytest.mark.parametrize("record", ["", "garbage", '{"pid": "x"}', "[1, 2]", '{"pid": 5, "since": 1e300}'])
def test_a_garbled_record_reads_unknown_or_partial(tmp_path: Path, record: str):
    held = WatchLock(tmp_path)
    held.acquire()
    (tmp_path / LOCK_NAME).write_text(record)
    with pytest.raises(WatcherRunning) as info:
        WatchLock(tmp_path).acquire(wait=0.1)
    message = str(info.value)
    assert message.isprintable() and ("an unknown process" in message or "pid 5 (?)" in message)
    held.release()


def test_the_state_file_round_trips_threads_and_actions(tmp_path: Path):
    book = AlertBook(Policy(resolve_after_s=0))
    book.update("p1", [Alert("no-progress", Severity.CRITICAL, "No training progress", "m. Fix it.", T0)], T0, step=4)
    state = WatchState(tmp_path, clock=lambda: T0 + 1)
    state.record("notified", kind="opened", sent=1, failed=0)
    state.save(book)
    assert (tmp_path / STATE_NAME).stat().st_mode & 0o777 == 0o600
    again = WatchState(tmp_path)
    threads = again.restore()
    assert [(t.pod, t.rule, t.step, t.notified) for t in threads] == [("p1", "no-progress", 4, True)]
    assert list(again.actions)[-1]["what"] == "notified"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "nope",
        "[]",
        '{"version": 9}',
        '{"version": 1, "threads": "x"}',
        '{"version": 1, "threads": [1, {"pod": 2}]}',
    ],
)
def test_a_broken_state_file_costs_only_the_memory(tmp_path: Path, text: str):
    (tmp_path / STATE_NAME).write_text(text)
    assert WatchState(tmp_path).restore() == []
    watch_notice(tmp_path, T0)  # never raises


def test_the_tui_notice(tmp_path: Path):
    assert watch_notice(tmp_path, T0) is None  # no watcher ever ran here: nothing to say
    assert not (tmp_path / SEEN_NAME).exists()
    book = AlertBook(Policy(resolve_after_s=0))
    book.update("p1", [Alert("no-progress", Severity.CRITICAL, "No training progress", "m.", T0)], T0 + 10)
    book.update("p1", [], T0 + 20)
    book.update("p2", [Alert("disk", Severity.WARNING, "Disk almost full", "m.", T0)], T0 + 30)
    state = WatchState(tmp_path, clock=lambda: T0 + 40)
    with WatchLock(tmp_path):
        state.save(book)
        first = watch_notice(tmp_path, T0 + 50)
        assert first.startswith(f"A watcher is running (pid {os.getpid()}")
        assert "2 alert(s) so far" in first and "no-progress on p1" in first and "(resolved " in first
        assert "disk on p2" in first and "(still open)" in first
        assert "no alerts since the TUI was last open" in watch_notice(tmp_path, T0 + 60)
        book.update("p1", [Alert("nofile", Severity.WARNING, "Open-files limit too low", "m.", T0)], T0 + 70)
        state.save(book)
        assert "1 alert(s) since the TUI was last open: nofile on p1" in watch_notice(tmp_path, T0 + 80)
    state.stopped = T0 + 90
    state.save(book)
    stopped = watch_notice(tmp_path, T0 + 100)
    assert stopped.startswith("No watcher is running (the last one stopped at ") and "docs/watch.md" in stopped
    assert "prime-train-tui " not in stopped  # no command line inside the TUI
    assert read_state(tmp_path / STATE_NAME)["stopped"] == T0 + 90


def test_the_tui_notice_names_what_the_watcher_did_meanwhile(tmp_path: Path):
    book = AlertBook(Policy())
    clock = [T0]
    state = WatchState(tmp_path, clock=lambda: clock[0])
    state.stopped = T0 + 5
    state.save(book)
    assert "did" not in watch_notice(tmp_path, T0 + 10)  # marks the TUI open at T0 + 10
    clock[0] = T0 + 20
    state.record("budget backed-up", pod="p1", step=4, message="p1: final backup ...")
    clock[0] = T0 + 30
    state.record("budget terminated", pod="p1", step=4, message="p1 terminated over its budget")
    state.record("deadline warn", pod="p2", message="p2 will be terminated in 14 min")
    state.record("notified", kind="opened")  # routine: not named
    state.save(book)
    note = watch_notice(tmp_path, T0 + 40)
    assert "While the TUI was closed it did:" in note
    assert "p1 terminated over its budget" in note and "final backup" in note and "p2 will be terminated" in note
    assert "notified" not in note
    assert "did" not in watch_notice(tmp_path, T0 + 50)  # said once
