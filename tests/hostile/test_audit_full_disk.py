"""Hardening item 6: the rentals' audit log lost records after a full disk. ``AuditLog.append`` ignored a short
``os.write`` and reported success (``rentals --budget`` exited 0 leaving a torn line), and the next record
appended once space was back was glued to that fragment and lost too — a budget, a terminate, or a create
(a billing pod the app no longer knows, its deadline never enforced). Now every write is checked and fsync'd,
an append that did not land whole fails the command (exit 1, one line), a torn tail is ended before the next
record, and readers skip the torn line and keep every other one.

Real parts: a 64 KiB tmpfs filled to the last byte, the real ``rentals --budget`` command as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.errors import AuditWriteError
from services.offers.rentals import AuditLog, Rental

REPO = Path(__file__).resolve().parents[2]
PAGE = 4096


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs at tmp_path/disk, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {r.stderr.strip()[:200]}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    """Write until the disk is full; returns the filler (delete it to free space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (PAGE, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
    return filler


def _audit_near_a_page_end(path: Path) -> AuditLog:
    """An audit log with one open rental whose size leaves ~40 bytes in its last page: a record appended
    when the disk is otherwise full is cut there (tmpfs allocates whole pages)."""
    audit = AuditLog(path)
    now = time.time()
    rental = Rental("pod-a", "vast", "123", "vast 1× H100", 2.0, 2.5, now - 600, now + 3600)
    audit.append("create", provider="vast", pod_id="123", rental=rental.to_json())
    while path.stat().st_size % PAGE < PAGE - 300:
        audit.append("deadline", provider="vast", pod_id="123", deadline=now + 3600, reason="padding")
    pad = PAGE - 40 - path.stat().st_size % PAGE - len('{"pad":""}\n')
    with open(path, "a") as f:
        f.write('{"pad":"' + "x" * pad + '"}\n')  # not a record (no action): skipped by readers
    assert path.stat().st_size % PAGE == PAGE - 40
    return audit


def _cli(tmp_path: Path, data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path / "cfg"),
        "XDG_DATA_HOME": str(data),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env
    )


def test_rentals_budget_on_a_full_disk_fails_and_loses_nothing_once_space_is_back(tmp_path, small_disk):
    path = small_disk / "prime-train-tui" / "audit.jsonl"
    path.parent.mkdir()
    audit = _audit_near_a_page_end(path)
    before = audit.records()
    filler = _fill(small_disk)

    r = _cli(tmp_path, small_disk, "rentals", "--budget", "pod-a", "50")
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    [line] = r.stderr.splitlines()
    assert "did not record 'budget'" in line and "No space left on device" in line and "free space" in line, line
    assert "budget $50" not in r.stdout
    assert path.read_bytes()[-1:] != b"\n", "the disk was not full enough to tear the record: the test proves nothing"
    assert audit.records() == before, "a torn line must be skipped, the others kept"

    filler.unlink()
    r = _cli(tmp_path, small_disk, "rentals", "--budget", "pod-a", "70")
    assert r.returncode == 0, r.stderr
    after = audit.records()
    assert after[:-1] == before, "an earlier record was lost"
    assert after[-1]["action"] == "budget" and after[-1]["budget_usd"] == 70.0
    [rental] = audit.open_rentals()
    assert rental.budget_usd == 70.0


def test_every_append_on_a_full_disk_raises_and_the_next_one_lands_whole(small_disk):
    path = small_disk / "audit.jsonl"
    audit = _audit_near_a_page_end(path)
    before = audit.records()
    filler = _fill(small_disk)
    for action in ("terminate", "create"):  # the torn tail of the first is ended by nobody: the disk is full
        with pytest.raises(AuditWriteError, match=f"did not record '{action}'"):
            audit.append(action, provider="vast", pod_id="123", name="pod-a", reason="test")
    filler.unlink()
    now = time.time()
    rental = Rental("pod-b", "vast", "456", "vast 1× A100", 1.0, 1.5, now, now + 7200)
    audit.append("create", provider="vast", pod_id="456", rental=rental.to_json())
    assert audit.records()[:-1] == before
    assert {r.pod_id for r in audit.open_rentals()} == {"123", "456"}, "the create after the torn line was lost"


def test_a_torn_last_line_is_ended_before_the_next_record(tmp_path):
    """Without a full disk at hand (a crash mid-write leaves the same): the fragment is skipped, the record kept."""
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path)
    audit.append("budget", provider="vast", pod_id="1", budget_usd=5)
    with open(path, "ab") as f:
        f.write(b'{"ts":1,"action":"terminate","provider":"va')
    audit.append("gone", provider="vast", pod_id="2")
    assert [r["action"] for r in audit.records()] == ["budget", "gone"]
    assert path.read_bytes().endswith(b"\n")


def test_an_unwritable_log_raises_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(AuditWriteError, match="did not record 'create'") as info:
        AuditLog(blocker / "audit.jsonl").append("create", provider="vast")
    assert isinstance(info.value, OSError) and info.value.hint
    assert os.path.isfile(blocker)
