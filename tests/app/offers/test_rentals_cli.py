"""`rentals` end to end: the audit log, a local HTTP server as the provider, the CLI in-process and as a
subprocess (`--watch` terminating an overdue pod)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import main
from app.settings import data_dir
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from tests.http_stub import serve

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def prime(monkeypatch):
    deleted: list[str] = []

    def answer(method: str, path: str) -> tuple:
        if method == "GET" and path.split("?")[0] == "/api/v1/pods/":  # the terminate verified: pod-1 is gone
            listed = [{"id": p, "name": f"p-{p}", "status": "ACTIVE"} for p in ("pod-2", "pod-bad")]
            return 200, {"data": listed if "/api/v1/pods/pod-1" in deleted else [{"id": "pod-1"}, *listed]}
        if method != "DELETE":
            return 405, {"detail": "only DELETE here"}
        deleted.append(path)
        ok = path.endswith("/pods/pod-1")
        return (200, {"status": "TERMINATED"}) if ok else (400, {"detail": "server on fire"})

    with serve(answer) as base:
        monkeypatch.setenv("PRIME_TRAIN_TUI_PRIME_URL", f"{base}/api/v1")
        monkeypatch.setenv("PRIME_API_KEY", "pk-cli-test-key-123456")
        yield deleted


def _open(pod_id: str, deadline: float | None, name: str | None = None) -> None:
    r = Rental(
        name or f"p-{pod_id}",
        "primeintellect",
        pod_id,
        "primeintellect 1× H100",
        2.0,
        2.2,
        time.time() - 3600,
        deadline,
    )
    AuditLog(data_dir() / AUDIT_NAME).append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())


def test_list_terminate_and_errors(prime, capsys):
    _open("pod-1", time.time() + 7200, name="alpha")
    _open("pod-2", time.time() - 60, name="beta")
    assert main(["rentals", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["overdue"]) for r in doc["rentals"]] == [("alpha", False), ("beta", True)]
    assert doc["rentals"][0]["spent"] == pytest.approx(2.0, abs=0.05)
    assert main(["rentals"]) == 0
    assert "OVERDUE" in capsys.readouterr().out
    assert main(["rentals", "--terminate", "nobody", "--yes"]) == 2
    assert main(["rentals", "--terminate", "alpha", "--yes"]) == 0
    assert main(["rentals", "--terminate", "beta", "--yes"]) == 1  # the provider refuses: said, kept open
    err = capsys.readouterr().err
    assert "server on fire" in err and "pk-cli-test-key" not in err
    assert [r.name for r in AuditLog(data_dir() / AUDIT_NAME).open_rentals()] == ["beta"]


def test_terminate_without_a_terminal_needs_yes(prime, capsys, monkeypatch):
    _open("pod-1", None, name="alpha")
    monkeypatch.setattr(sys, "stdin", open(os.devnull))
    assert main(["rentals", "--terminate", "alpha"]) == 2
    assert prime == []


def test_watch_terminates_an_overdue_rental(prime, tmp_path):
    _open("pod-1", time.time() - 5, name="late")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "rentals", "--watch", "--interval", "0.2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.time() + 20
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "terminated" in line:
                break
        assert any("late terminated at its deadline" in line for line in lines), lines
    finally:
        proc.terminate()
        proc.wait(10)
    assert AuditLog(data_dir() / AUDIT_NAME).open_rentals() == []
