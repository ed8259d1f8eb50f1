"""The App's rentals never close on absence alone (issue 4 review): a rejected provider key while the
monitor cannot reach a rented pod is said to the user and the rental stays; at start-up a rental with only
its create request (the app died mid-create) is looked for by name and back in the sidebar when found.
Real App (Pilot), recorded payloads over httpx.MockTransport, a real sshd as the pod."""

from __future__ import annotations

import time
from pathlib import Path

from services.offers.rentals import AuditLog, Rental
from tests.app.helpers import rentals_app, wait_for
from tests.services.offers.test_fetch import load
from tests.services.offers.test_launch import Api


async def test_a_rejected_key_is_said_and_the_offline_rental_stays_open(tmp_path: Path):
    from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus

    now = time.time()
    audit = AuditLog(tmp_path / "audit.jsonl")
    r = Rental("v1", "vast", "31000001", "vast 1× H100", 2.0, 2.2, now - 600, now + 7200)
    audit.append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    api = Api({"GET /api/v0/instances/31000001/": [(404, load("vast-edge-http404-invalid-user-key.json"))]})
    pod = Pod(name="v1", kind=PodKind.SSH, host="10.0.0.9", provider="vast", provider_id="31000001")
    app = rentals_app([pod], tmp_path, audit, api, watch_interval=0.1)
    async with app.run_test(size=(140, 40)) as pilot:
        app.on_snapshot(PodSnapshot(pod=pod, status=PodStatus(PodState.OFFLINE, "connection refused", since=now)))
        await wait_for(pilot, lambda: any("key rejected" in str(n.message) for n in app._notifications))
        await wait_for(pilot, lambda: sum(q.method == "GET" for q in api.seen) >= 2)  # asked again, said once
        said = [str(n.message) for n in app._notifications if "key rejected" in str(n.message)]
        assert len(said) == 1 and "VAST key rejected" in said[0] and "may still be billing" in said[0]
        assert "v1" in app.pods
    assert audit.open_rentals() == [r]
    assert [x["action"] for x in audit.records()] == ["create"]


async def test_a_create_request_without_an_answer_is_found_by_name_at_start(tmp_path: Path, sshd):
    now = time.time()
    audit = AuditLog(tmp_path / "audit.jsonl")
    for name in ("lost", "young"):
        audit.append(
            "create-request",
            now=now - 120,
            provider="primeintellect",
            name=name,
            offer="o1",
            title="primeintellect 1× H100",
            price_hr=2.0,
            max_price=2.2,
            deadline=now + 7200,
            est_cost=3.0,
        )
    item = load("primeintellect-pods-status.json")["data"][0]
    ready = {**item, "podId": "pod-lost", "priceHr": 2.0, "sshConnection": f"{sshd.user}@127.0.0.1 -p {sshd.port}"}
    api = Api(
        {
            "GET /api/v1/pods/": [(200, {"data": [{"id": "pod-lost", "name": "lost", "status": "ACTIVE"}]})],
            "GET /api/v1/pods/status": [(200, {"data": [ready]})],
        }
    )
    app = rentals_app([], tmp_path, audit, api, parked=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: "lost" in app.pods)
        await app.workers.wait_for_complete()
        assert (app.pods["lost"].provider_id, app.pods["lost"].deadline) == ("pod-lost", now + 7200)
        assert any("young" in str(n.message) and "creating?" in str(n.message) for n in app._notifications)
    rentals = {r.name: r for r in audit.open_rentals()}
    assert rentals["lost"].pod_id == "pod-lost" and not rentals["lost"].provisional
    assert rentals["young"].provisional  # not listed yet and still inside the grace period: kept
