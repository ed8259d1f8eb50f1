"""Rentals are never closed on absence alone (issue 4 review, items 1 and 4): a rejected key keeps the rental
open with its deadline and says so; a 404 or an empty status answer is confirmed against the provider's
list of pods first; a create whose answer was lost leaves a provisional rental ("creating?") that is
matched by name later and closed only when the provider's list shows no such pod after a grace period.
Recorded payloads over httpx.MockTransport; clocks injected."""

from __future__ import annotations

from pathlib import Path

from services.offers import vast
from services.offers.launch import (
    GONE_GRACE,
    DeadlineWatch,
    launch_offer,
    plan_launch,
    resolve_provisional,
    terminate_rental,
)
from services.offers.rentals import AuditLog, Rental
from tests.services.offers.test_fetch import load
from tests.services.offers.test_launch import Api, Clock, prime_offer

KEY_404 = load("vast-edge-http404-invalid-user-key.json")


def _vast_rental(pod_id: str = "31000001", deadline: float | None = 9_000.0, created: float = 1_000.0) -> Rental:
    return Rental("vast-h100x1-abcde", "vast", pod_id, "vast 1× H100 US", 2.0, 2.2, created, deadline)


def _open(audit: AuditLog, r: Rental) -> None:
    audit.append("create", now=r.created_at, provider=r.provider, pod_id=r.pod_id, rental=r.to_json())


def _actions(audit: AuditLog) -> list[str]:
    return [r["action"] for r in audit.records()]


async def test_a_rejected_vast_key_at_the_deadline_keeps_the_rental_open_and_says_it_may_be_billing(tmp_path: Path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    rental = _vast_rental()
    _open(audit, rental)
    api = Api({"DELETE /api/v0/instances/31000001/": [(404, KEY_404)]})
    async with api.providers() as p:
        (event,) = await DeadlineWatch(audit, clock=Clock(10_000.0)).check(p)
    assert event.kind == "failed"
    assert "VAST key rejected" in event.message and "may still be billing" in event.message
    assert audit.open_rentals() == [rental], "the rental and its deadline stay"
    assert _actions(audit) == ["create", "terminate-failed"]


async def test_a_rejected_key_while_polling_a_new_pod_closes_nothing(tmp_path: Path):
    clock = Clock()
    offer = vast.parse(load("vast-bundles-ondemand.json"))[0]
    api = Api(
        {
            f"PUT /api/v0/asks/{offer.id}/": [(200, load("vast-asks-create.json"))],
            "GET /api/v0/instances/31000001/": [(404, KEY_404)],
        }
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [
            e
            async for e in launch_offer(
                p, plan_launch(offer, 1.0, now=clock()), audit, clock=clock, sleep=clock.sleep, ready_timeout=60
            )
        ]
    assert any("VAST key rejected" in e.message for e in events if e.kind == "status")
    assert events[-1].kind == "failed" and "deadline still applies" in events[-1].message
    assert [r.pod_id for r in audit.open_rentals()] == ["31000001"]
    assert "gone" not in _actions(audit) and "terminate" not in _actions(audit)


async def test_an_empty_prime_status_answer_is_unknown_and_the_pod_list_decides(tmp_path: Path, sshd):
    """Prime's status answer without the pod: the pod list still shows it → keep polling (then ready);
    a list without it while the pod is young → still kept; after the grace period → closed as gone."""
    clock = Clock()
    plan = plan_launch(prime_offer(), 1.0, now=clock())
    ready = {
        "data": [
            {
                **load("primeintellect-pods-status.json")["data"][0],
                "podId": "pod-synthetic-0001",
                "sshConnection": f"root@127.0.0.1 -p {sshd.port}",
            }
        ]
    }
    listed = {"data": [{"id": "pod-synthetic-0001", "name": plan.name, "status": "PROVISIONING"}]}
    api = Api(
        {
            "POST /api/v1/pods/": [(200, load("primeintellect-pods-create.json"))],
            "GET /api/v1/pods/status": [(200, {"data": []}), (200, {}), (200, ready)],
            "GET /api/v1/pods/": [(200, listed)],
        }
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, audit, clock=clock, sleep=clock.sleep)]
    assert events[-1].kind == "ready" and "gone" not in _actions(audit)

    clock, audit = Clock(), AuditLog(tmp_path / "audit2.jsonl")
    api = Api(
        {
            "POST /api/v1/pods/": [(200, load("primeintellect-pods-create.json"))],
            "GET /api/v1/pods/status": [(200, {"data": []})],
            "GET /api/v1/pods/": [(200, {"data": []})],
        }
    )
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, audit, clock=clock, sleep=clock.sleep, poll=60)]
    assert events[-1].kind == "failed" and "gone" in events[-1].message
    (gone,) = [r for r in audit.records() if r["action"] == "gone"]
    assert gone["ts"] - audit.records()[0]["ts"] >= GONE_GRACE, "never closed before the grace period"
    assert "list of pods has no" in gone["reason"]


async def test_terminate_answered_404_closes_only_when_the_pod_list_agrees(tmp_path: Path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    rental = _vast_rental()
    _open(audit, rental)
    still = {"instances": [{"id": 31000001, "label": rental.name, "actual_status": "running"}]}
    api = Api(
        {
            "DELETE /api/v0/instances/31000001/": [(404, {"msg": "no such instance"})],
            "GET /api/v0/instances": [(200, still), (200, {"instances": []})],
        }
    )
    async with api.providers() as p:
        try:
            await terminate_rental(p, rental, audit, reason="user", now=5_000.0)
        except Exception as exc:  # noqa: BLE001 - the ProviderFailure is the point
            assert "does not confirm" in str(exc)
        else:
            raise AssertionError("a 404 with the pod still listed must not count as terminated")
        assert audit.open_rentals() == [rental] and _actions(audit)[-1] == "terminate-failed"
        outcome = await terminate_rental(p, rental, audit, reason="user", now=5_000.0)
    assert outcome.startswith("already gone") and audit.open_rentals() == []


async def test_a_lost_create_answer_leaves_a_provisional_rental_matched_by_name_later(tmp_path: Path):
    clock = Clock()
    plan = plan_launch(prime_offer(), 1.0, now=clock())
    api = Api(
        {"POST /api/v1/pods/": [(504, {"detail": "gateway timeout"})], "GET /api/v1/pods/": [(200, {"data": []})]}
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, audit, clock=clock, sleep=clock.sleep)]
    assert events[-1].kind == "failed" and "creating?" in events[-1].message
    assert len(api.bodies("POST /api/v1/pods/")) == 1, "a create is never retried"
    assert sum(r.url.path == "/api/v1/pods/" and r.method == "GET" for r in api.seen) == 3, "find retried"
    assert _actions(audit) == ["create-request"]
    (prov,) = audit.open_rentals()
    assert prov.provisional and prov.name == plan.name and prov.deadline == plan.deadline and prov.pod_id == ""

    # the next deadline pass finds it by name: a real rental whose deadline is enforced
    found = {"data": [{"id": "pod-late-9", "name": plan.name, "status": "ACTIVE"}]}
    api = Api(
        {
            "GET /api/v1/pods/": [(200, found), (200, {"data": []})],  # found; then gone after the terminate
            "DELETE /api/v1/pods/pod-late-9": [(200, {"status": "TERMINATED"})],
        }
    )
    watch = DeadlineWatch(audit, clock=Clock(plan.deadline + 1))
    async with api.providers() as p:
        events = await watch.check(p)
    assert [(e.kind, e.rental.pod_id) for e in events] == [("terminated", "pod-late-9")]
    assert _actions(audit) == ["create-request", "create", "terminate"] and audit.open_rentals() == []


async def test_a_provisional_rental_closes_only_after_the_grace_period_with_the_list_empty(tmp_path: Path):
    audit = AuditLog(tmp_path / "audit.jsonl")  # the app died mid-create: only the request was written
    audit.append(
        "create-request",
        now=1_000.0,
        provider="primeintellect",
        name="prime-h100x8-zz",
        offer="o1",
        price_hr=17.92,
        max_price=19.72,
        deadline=50_000.0,
        est_cost=10.0,
    )
    (prov,) = audit.open_rentals()
    assert prov.provisional and prov.title.startswith("primeintellect")
    api = Api({"GET /api/v1/pods/": [(200, {"data": []})]})
    async with api.providers() as p:
        assert [o for _, o in await resolve_provisional(p, audit, 1_000.0 + 60)] == ["waiting"]
        assert audit.open_rentals() == [prov]
        assert [o for _, o in await resolve_provisional(p, audit, 1_000.0 + GONE_GRACE + 1)] == ["none"]
    assert audit.open_rentals() == [] and _actions(audit)[-1] == "create-failed"


async def test_a_rejected_key_never_closes_a_provisional_rental(tmp_path: Path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.append(
        "create-request", now=0.0, provider="vast", name="vast-x", offer="1", price_hr=1.0, max_price=1.1, deadline=None
    )
    api = Api({"GET /api/v0/instances": [(404, KEY_404)]})
    async with api.providers() as p:
        ((_, outcome),) = await resolve_provisional(p, audit, 10 * GONE_GRACE)
    assert "VAST key rejected" in outcome and len(audit.open_rentals()) == 1


async def test_a_2xx_create_answer_without_an_id_is_reconciled_not_refused(tmp_path: Path):
    clock = Clock()
    plan = plan_launch(prime_offer(), 1.0, now=clock())
    pods = {"data": [{"id": "pod-found-8", "name": plan.name, "status": "PROVISIONING"}]}
    api = Api(
        {
            "POST /api/v1/pods/": [(200, {"status": "PROVISIONING"})],
            "GET /api/v1/pods/": [(200, {"data": []}), (200, pods)],
            "GET /api/v1/pods/status": [(200, {"data": [{"podId": "pod-found-8", "status": "TERMINATED"}]})],
        }
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, audit, clock=clock, sleep=clock.sleep)]
    assert next(e for e in events if e.kind == "created").rental.pod_id == "pod-found-8"  # found on the 2nd look
    assert "create-failed" not in _actions(audit)
