"""Renting pods: the providers' create/status/terminate calls against the recorded fixtures (served by
httpx.MockTransport), the launch flow with a real sshd as the pod's SSH port, the audit log and the
deadline watch with an injected clock."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from services.offers import lambda_, primeintellect, vast
from services.offers._http import RetryPolicy
from services.offers.launch import DeadlineWatch, Providers, launch_offer, plan_launch, ssh_banner, terminate_rental
from services.offers.models import Offer, PodAccess, ProviderFailure, parse_ssh
from services.offers.rentals import AuditLog, Rental, default_deadline, open_rentals
from tests.services.offers.test_fetch import URLS, load  # the same fixtures and fake base URLs

KEYS = {"primeintellect": "pk-secret-1234", "vast": "vk-secret-5678", "lambda": "lk-secret-9999"}  # found nowhere


async def _nosleep(_: float) -> None:
    return None


FAST = RetryPolicy(attempts=2, base=0.0, sleep=_nosleep)


class Api:
    """Routes ``METHOD path`` → list of (status, json body) answered in order (the last repeats)."""

    def __init__(self, routes: dict[str, list[tuple[int, object]]]) -> None:
        self.routes = routes
        self.seen: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        key = f"{request.method} {request.url.path}"
        queue = self.routes.get(key)
        if queue is None:
            return httpx.Response(404, json={"detail": f"no route {key}"})
        status, payload = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(payload, Exception):
            raise payload
        return httpx.Response(status, json=payload)

    def providers(self) -> Providers:
        return Providers(KEYS, URLS, client=httpx.AsyncClient(transport=httpx.MockTransport(self.handler)), retry=FAST)

    def bodies(self, key: str) -> list[dict]:
        method, path = key.split(" ", 1)
        return [json.loads(r.content) for r in self.seen if r.method == method and r.url.path == path]


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


def prime_offer() -> Offer:
    return next(
        o
        for o in primeintellect.parse(load("primeintellect-availability-gpus.json"))
        if o.gpu_type == "H100" and o.gpu_count == 8 and not o.spot
    )


# ------------------------------------------------------------------ request bodies and status parsing
def test_prime_create_body_has_the_cap_and_only_documented_keys():
    body = primeintellect.create_body(prime_offer(), name="p1", max_price=19.72)
    ref = load("primeintellect-pods-create-request.json")
    assert body["pod"]["maxPrice"] == 19.72
    assert set(body["pod"]) <= set(ref["pod"]), "PodRequestConfig rejects unknown keys"
    assert {k: body["pod"][k] for k in ("cloudId", "gpuType", "socket", "gpuCount", "dataCenterId")} == {
        k: ref["pod"][k] for k in ("cloudId", "gpuType", "socket", "gpuCount", "dataCenterId")
    }
    assert body["provider"] == ref["provider"]


def test_vast_bid_is_the_minimum_bid_never_above_the_cap():
    spot = next(o for o in vast.parse(load("vast-bundles-bid.json"), spot=True))
    body = vast.create_body(spot, name="v1", max_price=spot.price_hr * 2)
    assert 0 < body["price"] <= spot.price_hr and body["label"] == "v1" and body["cancel_unavail"] is False
    with pytest.raises(ProviderFailure, match="above the cap"):
        vast.create_body(spot, name="v1", max_price=body["price"] / 2)
    on_demand = vast.parse(load("vast-bundles-ondemand.json"))[0]
    assert "price" not in vast.create_body(on_demand, name="v2", max_price=99)


def test_status_parsing_per_provider():
    st = load("primeintellect-pods-status.json")["data"]
    assert primeintellect.access(st[0], "a") == PodAccess("a", "ready", "root", "203.0.113.10", 22, 17.92)
    assert primeintellect.access(st[1], "b").state == "pending"  # installing 60 %
    odd = load("primeintellect-edge-pods-status-odd-connections.json")["data"]
    assert primeintellect.access(odd[0], "c").state == "pending"  # [null] ssh, costPerHr
    assert primeintellect.access(odd[0], "c").price_hr == 4.2
    assert primeintellect.access(odd[1], "d").target == "root@203.0.113.20:22"
    failed = primeintellect.access(odd[2], "e")
    assert failed.state == "failed" and "Image pull failed" in failed.message
    assert primeintellect.access(None, "f").state == "unknown"  # absent from the answer: never "terminated"
    inst = load("vast-instances-list.json")["instances"][0]
    assert vast.access(inst, "g").target == "root@198.51.100.101:20101"  # direct port wins over the proxy
    assert vast.access({**inst, "ports": {}}, "g").target == "root@ssh4.vast.ai:20100"
    assert vast.access({**inst, "actual_status": "exited"}, "g").state == "failed"
    lam = load("lambda-instances.json")["data"][0]
    assert lambda_.access(lam, "h") == PodAccess("h", "ready", "ubuntu", "198.51.100.21", 22, 2.49)
    assert lambda_.access({**lam, "status": "preempted"}, "h").state == "terminated"
    assert parse_ssh("ubuntu@203.0.113.22:2200") == ("ubuntu", "203.0.113.22", 2200)
    assert parse_ssh([None]) is None and parse_ssh("root@h -p 99999") is None


async def test_terminate_per_provider_and_404_is_already_gone():
    api = Api(
        {
            "DELETE /api/v1/pods/p1": [(200, load("primeintellect-pods-delete.json"))],
            "DELETE /api/v0/instances/31/": [(200, load("vast-instances-destroy.json"))],
            "POST /api/v1/instance-operations/terminate": [(200, load("lambda-instance-operations-terminate.json"))],
            "DELETE /api/v1/pods/gone": [(404, {"detail": "Pod not found"})],
        }
    )
    async with api.providers() as p:
        assert await p.terminate("primeintellect", "p1") == "terminated"
        assert await p.terminate("vast", "31") == "destroyed"
        assert await p.terminate("lambda", "l1") == "terminated"
        assert await p.terminate("primeintellect", "gone") == "already gone"
    assert api.bodies("POST /api/v1/instance-operations/terminate") == [{"instance_ids": ["l1"]}]
    assert all(r.headers["authorization"].startswith("Bearer ") for r in api.seen)


async def test_a_404_about_the_instance_is_unknown_not_terminated_and_a_key_error_is_never_gone():
    """The review of issue 4: Vast answers a bad key with 404 "Invalid user key" — that said "already gone"
    and "terminated" and closed rentals that kept billing. Now a 404 about the pod is "already gone" to the
    provider module (launch.terminate_rental then asks the pod list) and "unknown" as a status; a 404 about
    the key, 401 and 403 raise as key errors."""
    key_404 = load("vast-edge-http404-invalid-user-key.json")
    api = Api(
        {
            "DELETE /api/v0/instances/gone/": [(404, {"msg": "no such instance"})],
            "DELETE /api/v0/instances/31/": [(404, key_404)],
            "GET /api/v0/instances/31/": [(404, key_404)],
            "POST /api/v1/instance-operations/terminate": [
                (404, {"error": {"message": "not found"}}),
                (403, {"error": {"message": "forbidden"}}),
            ],
        }
    )
    async with api.providers() as p:  # unrouted paths answer 404 too
        assert await vast.terminate(p.client, "k", "gone", base_url=URLS["vast"]) == "already gone"
        assert await lambda_.terminate(p.client, "k", "gone", base_url=URLS["lambda"]) == "already gone"
        for provider in ("vast", "lambda"):
            access = await p.status(provider, "gone")
            assert access.state == "unknown" and "404" in access.message
        for call in (p.terminate("vast", "31"), p.status("vast", "31")):
            with pytest.raises(ProviderFailure, match="VAST key rejected .* the pod may still be billing") as err:
                await call
            assert err.value.auth and err.value.status == 404
        with pytest.raises(ProviderFailure) as err:
            await p.terminate("lambda", "l1")
    assert err.value.status == 403 and err.value.auth


# ------------------------------------------------------------------ the launch flow
def _ready_status(port: int) -> dict:
    item = load("primeintellect-pods-status.json")["data"][0]
    return {"data": [{**item, "podId": "pod-synthetic-0001", "sshConnection": f"root@127.0.0.1 -p {port}"}]}


async def test_launch_creates_with_cap_polls_and_waits_for_real_ssh(tmp_path: Path, sshd):
    clock = Clock()
    created = load("primeintellect-pods-create.json")
    provisioning = {"data": [{**load("primeintellect-pods-status.json")["data"][2], "podId": "pod-synthetic-0001"}]}
    api = Api(
        {
            "POST /api/v1/pods/": [(200, created)],
            "GET /api/v1/pods/status": [
                (200, provisioning),
                (500, {"detail": "flaky"}),
                (200, provisioning),
                (200, _ready_status(sshd.port)),
            ],
        }
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    offer = prime_offer()
    plan = plan_launch(offer, est_hours=2.0, now=clock())
    assert plan.max_price == pytest.approx(19.72) and plan.deadline == clock() + 3 * 3600  # 2 h × 1.25 + 0.5 h
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, audit, clock=clock, sleep=clock.sleep, poll=5)]
    assert events[-1].kind == "ready", [e.message for e in events]
    assert events[-1].access.target == f"root@127.0.0.1:{sshd.port}"
    assert [e.kind for e in events][:2] == ["step", "created"]
    assert api.bodies("POST /api/v1/pods/")[0]["pod"]["maxPrice"] == pytest.approx(19.72)
    assert {r.headers["user-agent"].split("/")[0] for r in api.seen} == {"prime-train-tui"}, "a product User-Agent"
    rentals = audit.open_rentals()
    assert [(r.pod_id, r.deadline, r.max_price) for r in rentals] == [("pod-synthetic-0001", plan.deadline, 19.72)]
    text = (tmp_path / "audit.jsonl").read_text()
    assert [json.loads(line)["action"] for line in text.splitlines()] == ["create-request", "create", "ready"]
    assert not any(k in text for k in KEYS.values()), "no API key in the audit log"


async def test_a_pod_charging_above_the_cap_is_terminated_at_once(tmp_path: Path):
    clock = Clock()
    pricey = {"data": [{**load("primeintellect-pods-status.json")["data"][0], "priceHr": 30.0}]}
    pricey["data"][0]["podId"] = "pod-synthetic-0001"
    api = Api(
        {
            "POST /api/v1/pods/": [(200, load("primeintellect-pods-create.json"))],
            "GET /api/v1/pods/status": [(200, pricey)],
            "DELETE /api/v1/pods/pod-synthetic-0001": [(200, {"status": "TERMINATED"})],
            "GET /api/v1/pods/": [(200, {"data": []})],
        }
    )  # the terminate verified: no longer listed
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [
            e
            async for e in launch_offer(
                p, plan_launch(prime_offer(), 1.0, now=clock()), audit, clock=clock, sleep=clock.sleep
            )
        ]
    assert events[-1].kind == "failed" and "above the cap" in events[-1].message and "terminated" in events[-1].message
    assert audit.open_rentals() == []
    assert [r["action"] for r in audit.records()][-1] == "terminate"


async def test_a_refused_create_opens_no_rental_and_says_why(tmp_path: Path):
    api = Api({"POST /api/v1/pods/": [(400, load("primeintellect-edge-http400-create-unavailable.json"))]})
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan_launch(prime_offer(), 1.0, now=0), audit)]
    assert events[-1].kind == "failed" and "HTTP 400" in events[-1].message
    assert audit.open_rentals() == [] and [r["action"] for r in audit.records()] == ["create-request", "create-failed"]
    assert len(api.bodies("POST /api/v1/pods/")) == 1, "a create is never retried"


async def test_a_lost_create_answer_is_reconciled_by_name_not_retried(tmp_path: Path):
    clock = Clock()
    plan = plan_launch(prime_offer(), 1.0, now=clock())
    pods = {"total_count": 1, "offset": 0, "limit": 100, "data": [{"id": "pod-found-7", "name": plan.name}]}
    api = Api(
        {
            "POST /api/v1/pods/": [(503, {"detail": "upstream"})],
            "GET /api/v1/pods/": [(200, pods)],
            "GET /api/v1/pods/status": [(200, {"data": [{"podId": "pod-found-7", "status": "TERMINATED"}]})],
        }
    )
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, audit, clock=clock, sleep=clock.sleep)]
    assert len(api.bodies("POST /api/v1/pods/")) == 1
    created = next(e for e in events if e.kind == "created")
    assert created.rental.pod_id == "pod-found-7"
    assert events[-1].kind == "failed" and audit.open_rentals() == []  # the provider said terminated: closed


async def test_an_offer_above_the_cap_creates_nothing(tmp_path: Path):
    api = Api({})
    plan = plan_launch(prime_offer(), 1.0, now=0)
    plan = type(plan)(**{**plan.__dict__, "max_price": 1.0})
    async with api.providers() as p:
        events = [e async for e in launch_offer(p, plan, AuditLog(tmp_path / "a.jsonl"))]
    assert events[-1].kind == "failed" and "nothing created" in events[-1].message and api.seen == []


async def test_vast_and_lambda_launch_bodies(tmp_path: Path):
    lam_offer = next(o for o in lambda_.parse(load("lambda-instance-types.json")) if o.available)
    v_offer = vast.parse(load("vast-bundles-ondemand.json"))[0]
    key = {"id": "k1", "name": "laptop", "public_key": "ssh-ed25519 A"}
    api = Api(
        {
            "GET /api/v1/ssh-keys": [(200, {"data": [key]})],
            "POST /api/v1/instance-operations/launch": [(200, load("lambda-instance-operations-launch.json"))],
            f"PUT /api/v0/asks/{v_offer.id}/": [(200, load("vast-asks-create.json"))],
        }
    )
    async with api.providers() as p:
        assert await p.create(lam_offer, name="l1", max_price=100) == "0000000000000000000000000000f1x1"
        assert await p.create(v_offer, name="v1", max_price=100) == "31000001"
    body = api.bodies("POST /api/v1/instance-operations/launch")[0]
    assert body == {
        "region_name": lam_offer.region,
        "instance_type_name": lam_offer.id,
        "ssh_key_names": ["laptop"],
        "name": "l1",
    }
    assert api.bodies(f"PUT /api/v0/asks/{v_offer.id}/")[0]["label"] == "v1"


async def test_missing_key_names_the_variable(tmp_path: Path):
    async with Providers({}, URLS, client=httpx.AsyncClient(transport=httpx.MockTransport(lambda r: None))) as p:
        with pytest.raises(ProviderFailure, match="VAST_API_KEY"):
            await p.status("vast", "1")


async def test_ssh_banner_against_real_sshd_and_a_closed_port(sshd):
    from tests.conftest import free_port

    assert await ssh_banner("127.0.0.1", sshd.port) is True
    assert await ssh_banner("127.0.0.1", free_port(), 1.0) is False


# ------------------------------------------------------------------ audit log and deadlines
def _rental(pod_id: str, deadline: float | None, created: float = 1000.0) -> Rental:
    return Rental(f"pod-{pod_id}", "primeintellect", pod_id, "primeintellect 8× H100", 17.92, 19.72, created, deadline)


def test_audit_log_skips_garbage_and_tracks_open_rentals(tmp_path: Path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.append("create", provider="primeintellect", pod_id="a", rental=_rental("a", 5000).to_json())
    audit.append("create", provider="primeintellect", pod_id="b", rental=_rental("b", None).to_json())
    with open(tmp_path / "audit.jsonl", "a") as fh:
        fh.write('{"action": "create", "rental": {"torn": \n garbage\n[1,2]\n')
    audit.append("deadline", provider="primeintellect", pod_id="b", deadline=9000)
    audit.append("terminate", provider="primeintellect", pod_id="a")
    assert [(r.pod_id, r.deadline) for r in audit.open_rentals()] == [("b", 9000)]
    assert oct((tmp_path / "audit.jsonl").stat().st_mode & 0o777) == "0o600"
    assert open_rentals([]) == [] and AuditLog(tmp_path / "missing.jsonl").records() == []


def test_default_deadline_rounds_up_to_quarter_hours():
    assert default_deadline(0, 1.0) == 2 * 3600 - 15 * 60  # 1.25 h + 0.5 h = 1 h 45 min
    assert default_deadline(0, 0.01) == 45 * 60


async def test_deadline_watch_warns_once_terminates_when_due_and_reports_a_failure_once(tmp_path: Path):
    clock = Clock(10_000.0)
    audit = AuditLog(tmp_path / "audit.jsonl")
    for r in (_rental("soon", 10_000 + 600), _rental("late", 9_000), _rental("stuck", 9_500), _rental("free", None)):
        audit.append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    api = Api(
        {
            "DELETE /api/v1/pods/late": [(200, {"status": "TERMINATED"})],
            "DELETE /api/v1/pods/stuck": [(500, {"detail": "down"})],
            "DELETE /api/v1/pods/soon": [(200, {"status": "TERMINATED"})],
            "GET /api/v1/pods/": [(200, {"data": [{"id": "stuck", "status": "ACTIVE"}]})],
        }
    )
    async with api.providers() as p:
        watch = DeadlineWatch(audit, clock=clock)
        first = {(e.kind, e.rental.pod_id) for e in await watch.check(p)}
        assert first == {("warn", "soon"), ("terminated", "late"), ("failed", "stuck")}
        assert {(e.kind, e.rental.pod_id) for e in await watch.check(p)} == set(), "each said once"
        clock.t += 700
        assert {(e.kind, e.rental.pod_id) for e in await watch.check(p)} == {("terminated", "soon")}
    assert [r.pod_id for r in audit.open_rentals()] == ["stuck", "free"]
    actions = [(r["action"], r.get("pod_id")) for r in audit.records()]
    assert ("terminate", "late") in actions and ("terminate-failed", "stuck") in actions


async def test_terminate_rental_records_the_spend(tmp_path: Path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    api = Api(
        {
            "DELETE /api/v1/pods/x": [(200, {"status": "TERMINATED"})],
            "GET /api/v1/pods/": [(200, {"data": [{"id": "x", "status": "TERMINATED"}]})],
        }
    )
    async with api.providers() as p:
        await terminate_rental(p, _rental("x", None, created=0.0), audit, reason="user", now=3600.0)
    rec = audit.records()[-1]
    assert rec["action"] == "terminate" and rec["reason"] == "user" and rec["spent"] == pytest.approx(17.92)
