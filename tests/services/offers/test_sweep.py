"""The sweep (issue 35): the app knew only the pods it rented and believed a terminate's answer, so a pod
terminated here that the provider kept listing (billing), or one created in the console and forgotten,
was found weeks later on the bill. Now every provider with a key is listed and joined with the audit log;
the watcher sweeps on an interval and pushes a billing orphan once; ``rentals --sweep --json`` prints it.
A real HTTP server answers with the recorded payload shapes (tests/services/offers/cloud_stub.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.offers.sweep import sweep
from services.watch.notify import NotifySettings
from services.watch.watcher import Watcher, WatchOptions
from tests.services.offers.cloud_stub import KEYS, cloud, prime_pod, providers, urls, vast_instance
from tests.services.watch.receiver import receiver

NOW = 1_768_500_000.0  # 2026-01-15T18:00Z: the listed pods were created at 10:00


def rent(audit: AuditLog, pod_id: str, name: str, provider: str = "primeintellect", *, closed: str = "") -> None:
    r = Rental(name, provider, pod_id, f"{provider} 8x H100", 17.92, 19.72, NOW - 7200, None)
    audit.append("create", now=r.created_at, provider=provider, pod_id=pod_id, rental=r.to_json())
    if closed:
        audit.append(
            closed, now=NOW - 3600, provider=provider, pod_id=pod_id, name=name, reason="deadline", outcome="terminated"
        )


def populate(tmp: Path, c) -> AuditLog:
    audit = AuditLog(tmp / AUDIT_NAME)
    rent(audit, "pod-open", "ours-open")
    rent(audit, "pod-orphan", "ours-orphan", closed="terminate")  # terminated here, still listed: billing
    rent(audit, "pod-done", "ours-done", closed="terminate")  # terminated and gone: nothing to say
    rent(audit, "pod-vanished", "ours-vanished")  # open here, no longer listed
    rent(audit, "31000009", "ours-vast", "vast", closed="gone")
    c.prime = [
        prime_pod("pod-open", "ours-open"),
        prime_pod("pod-orphan", "ours-orphan"),
        prime_pod("pod-console", "made-in-console", price=2.5, created="2026-01-15T16:00:00Z"),
        prime_pod("pod-ended", "old", status="TERMINATED"),
    ]
    c.vast = [vast_instance(31000009, "ours-vast", msg="running \x1b]0;pwned\x07fine")]
    return audit


async def test_the_sweep_sorts_every_listed_pod_against_the_audit_log(tmp_path: Path):
    with cloud() as (c, base):
        audit = populate(tmp_path, c)
        async with providers(base, {**KEYS, "runpod": "rk-123456789012"}) as p:
            result = await sweep(p, audit, NOW)
    rows = {(r.kind, r.provider, r.pod_id) for r in result.rows}
    assert rows == {
        ("billing", "primeintellect", "pod-orphan"),
        ("billing", "vast", "31000009"),
        ("foreign", "primeintellect", "pod-console"),
        ("open", "primeintellect", "pod-open"),
        ("gone", "primeintellect", "pod-vanished"),
    }
    assert [r.kind for r in result.rows][:2] == ["billing", "billing"], "what needs the user first"
    foreign = next(r for r in result.rows if r.kind == "foreign")
    assert foreign.price_hr == 2.5 and foreign.age_s == pytest.approx(2 * 3600) and foreign.name == "made-in-console"
    orphan = next(r for r in result.rows if r.pod_id == "pod-orphan")
    assert "terminated here 60 min ago (deadline)" in orphan.message and "'active'" in orphan.message
    assert result.swept == ("primeintellect", "vast") and "runpod" in result.errors
    assert "\x1b" not in json.dumps(result.to_json())


async def test_a_provider_whose_list_fails_is_named_not_swept(tmp_path: Path):
    with cloud() as (c, base):
        audit = populate(tmp_path, c)
        async with providers(base, {"primeintellect": KEYS["primeintellect"]}) as p:
            p.urls["primeintellect"] = f"{base}/nowhere/api/v1"  # every answer there is a 404 "no route"
            result = await sweep(p, audit, NOW)
    assert result.rows == () and result.swept == () and "no route" in result.errors["primeintellect"]


async def test_the_watcher_pushes_a_billing_orphan_once(tmp_path: Path):
    data = tmp_path / "data"
    stop = asyncio.Event()
    with cloud() as (c, base), receiver() as rx:
        populate(data, c)
        c.vast = []
        options = WatchOptions(
            data, notify=NotifySettings((rx.url(),), min_interval_s=0.0), tick_s=0.05, sweep_minutes=0.2 / 60
        )
        watcher = Watcher([], options, providers=lambda: providers(base))
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await asyncio.to_thread(rx.wait_for, lambda b: len(b) >= 1, 20.0, "the billing orphan")
            sweeps = c.count("GET", "/pi/api/v1/pods/")
            deadline = time.monotonic() + 10
            while c.count("GET", "/pi/api/v1/pods/") < sweeps + 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert c.count("GET", "/pi/api/v1/pods/") >= sweeps + 3, "swept again on the interval"
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    (body,) = rx.bodies
    assert "[BILLING]" in body["title"] and "ours-orphan" in body["title"] and "still lists it" in body["message"]


def test_rentals_sweep_json_on_the_command_line(tmp_path: Path, monkeypatch, capsys):
    from app.cli import main
    from app.settings import data_dir

    monkeypatch.setenv("HOME", str(tmp_path))  # no key file of the developer's
    monkeypatch.setenv("PRIME_API_KEY", KEYS["primeintellect"])
    monkeypatch.setenv("VAST_API_KEY", KEYS["vast"])
    with cloud() as (c, base):
        monkeypatch.setenv("PRIME_TRAIN_TUI_PRIME_URL", urls(base)["primeintellect"])
        monkeypatch.setenv("PRIME_TRAIN_TUI_VAST_URL", urls(base)["vast"])
        populate(data_dir(), c)
        code = main(["rentals", "--sweep", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1, "a pod terminated here still listed: exit 1"
    assert out["billing"] == 2 and set(out["swept"]) == {"primeintellect", "vast"}
    assert {p["kind"] for p in out["pods"]} == {"billing", "foreign", "open", "gone"}
    assert set(out["pods"][0]) == {"kind", "provider", "pod_id", "name", "state", "price_hr", "age_s", "message"}
