"""`rentals` with rentals whose create answer was lost (or whose app died mid-create): only a
``create-request`` in the audit log. They are listed as "creating?", looked for by name at the provider (a
local HTTP server serving Prime's pod list) and closed only when the list shows none after the grace
period."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.cli import main
from app.settings import data_dir
from services.offers.launch import GONE_GRACE
from services.offers.rentals import AUDIT_NAME, AuditLog


@pytest.fixture
def prime_pods(monkeypatch):
    listing = {"data": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(listing if self.path.startswith("/api/v1/pods/") else {"detail": "no"}).encode()
            self.send_response(200 if self.path.startswith("/api/v1/pods/") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    monkeypatch.setenv("PRIME_TRAIN_TUI_PRIME_URL", f"http://127.0.0.1:{server.server_address[1]}/api/v1")
    monkeypatch.setenv("PRIME_API_KEY", "pk-cli-test-key-123456")
    yield listing
    server.shutdown()
    server.server_close()


def _requested(name: str, age: float) -> None:
    AuditLog(data_dir() / AUDIT_NAME).append(
        "create-request", now=time.time() - age, provider="primeintellect", name=name, offer="o1",
        title="primeintellect 8× H100", price_hr=17.92, max_price=19.72, deadline=time.time() + 3600, est_cost=5.0)


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
