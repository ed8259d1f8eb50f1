"""`rentals` with rentals whose create answer was lost (or whose app died mid-create): only a
``create-request`` in the audit log. They are listed as "creating?", looked for by name at the provider (a
local HTTP server serving Prime's pod list) and closed only when the list shows none after the grace
period."""

from __future__ import annotations

import json
import time

import pytest

from app.cli import main
from app.settings import data_dir
from services.offers.launch import GONE_GRACE
from services.offers.rentals import AUDIT_NAME, AuditLog
from tests.http_stub import serve


@pytest.fixture
def prime_pods(monkeypatch):
    listing = {"data": []}

    def answer(method: str, path: str) -> tuple:
        return (200, listing) if path.startswith("/api/v1/pods/") else (404, {"detail": "no"})

    with serve(answer) as base:
        monkeypatch.setenv("PRIME_TRAIN_TUI_PRIME_URL", f"{base}/api/v1")
        monkeypatch.setenv("PRIME_API_KEY", "pk-cli-test-key-123456")
        yield listing


def _requested(name: str, age: float) -> None:
    AuditLog(data_dir() / AUDIT_NAME).append(
        "create-request",
        now=time.time() - age,
        provider="primeintellect",
        name=name,
        offer="o1",
        title="primeintellect 8× H100",
        price_hr=17.92,
        max_price=19.72,
        deadline=time.time() + 3600,
        est_cost=5.0,
    )


def test_creating_rentals_are_listed_found_by_name_or_closed_after_the_grace(prime_pods, capsys):
    _requested("young", 30)
    _requested("found", 30)
    _requested("never", GONE_GRACE + 60)
    prime_pods["data"] = [{"id": "pod-77", "name": "found", "status": "ACTIVE"}]
    assert main(["rentals", "--json"]) == 0
    out, err = capsys.readouterr()
    rows = {r["name"]: r for r in json.loads(out)["rentals"]}
    assert set(rows) == {"young", "found"}, "the old request with no pod listed is closed"
    assert rows["young"]["status"] == "creating?" and rows["young"]["pod_id"] == ""
    assert rows["found"]["status"] == "rented" and rows["found"]["pod_id"] == "pod-77"
    assert "found found at primeintellect as pod pod-77" in err and "never: primeintellect lists no such pod" in err
    assert main(["rentals"]) == 0
    assert "creating?" in capsys.readouterr().out
    assert main(["rentals", "--terminate", "young", "--yes"]) == 1
    assert "'creating?'" in capsys.readouterr().err
    assert [r.name for r in AuditLog(data_dir() / AUDIT_NAME).open_rentals()] == ["young", "found"]
