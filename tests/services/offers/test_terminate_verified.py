"""A terminate is verified (issue 35). GPU clouds have answered a destroy call with success while the
instance kept billing; the app believed the answer, closed the rental and stopped looking. Now the pod
is listed again, backing off, until the provider no longer bills it; a pod that stays listed ends as
"terminate requested, not confirmed" in the audit log, the rental stays open (the deadline pass tries
again) and the alert carries the provider's own words. Against a real HTTP server with the recorded
payload shapes (tests/services/offers/cloud_stub.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.offers.launch import VERIFY_WAITS, DeadlineWatch, NotConfirmed, terminate_rental
from services.offers.rentals import AuditLog, Rental
from tests.services.offers.cloud_stub import cloud, prime_pod, providers, vast_instance


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def rental(
    pod_id: str, provider: str = "primeintellect", name: str = "ours-1", deadline: float | None = None
) -> Rental:
    return Rental(name, provider, pod_id, f"{provider} 8x H100", 17.92, 19.72, 1_000.0, deadline)


def opened(tmp_path: Path, r: Rental) -> AuditLog:
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.append("create", now=r.created_at, provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    return audit


async def test_a_terminate_whose_pod_stays_listed_is_not_confirmed_and_the_rental_stays_open(tmp_path: Path):
    r = rental("pod-stuck")
    audit = opened(tmp_path, r)
    sleeps = Sleeps()
    with cloud() as (c, base):
        c.prime = [prime_pod("pod-stuck", "ours-1")]
        c.stuck.add("pod-stuck")
        async with providers(base) as p:
            with pytest.raises(NotConfirmed) as caught:
                await terminate_rental(p, r, audit, reason="user", now=5_000.0, sleep=sleeps)
        assert c.count("DELETE", "/pi/api/v1/pods/pod-stuck") == 1
        assert c.count("GET", "/pi/api/v1/pods/") == len(VERIFY_WAITS), "listed again after each wait"
    assert sleeps.waits == [w for w in VERIFY_WAITS if w] and sleeps.waits == sorted(sleeps.waits), "backing off"
    assert "not confirmed" in str(caught.value) and "'active'" in str(caught.value)
    last = audit.records()[-1]
    assert last["action"] == "terminate-unconfirmed" and last["note"] == "terminate requested, not confirmed"
    assert "still lists it as 'active'" in last["provider_says"]
    assert [x.pod_id for x in audit.open_rentals()] == ["pod-stuck"], "still billing: the rental stays open"


async def test_a_vast_destroy_answered_success_that_keeps_running_carries_vasts_own_words(tmp_path: Path):
    r = rental("31000007", "vast", "ours-v")
    audit = opened(tmp_path, r)
    with cloud() as (c, base):
        c.vast = [vast_instance(31000007, "ours-v", msg="host busy \x1b[31mretrying\x1b[0m")]
        c.stuck.add("31000007")
        async with providers(base) as p:
            with pytest.raises(NotConfirmed, match="still lists it as 'running': host busy retrying"):
                await terminate_rental(p, r, audit, reason="user", now=5_000.0, sleep=Sleeps())


async def test_a_terminate_the_list_confirms_closes_the_rental_and_says_how(tmp_path: Path):
    r = rental("pod-ok")
    audit = opened(tmp_path, r)
    sleeps = Sleeps()
    with cloud() as (c, base):
        c.prime = [prime_pod("pod-ok", "ours-1"), prime_pod("pod-other", "theirs")]
        async with providers(base) as p:
            outcome = await terminate_rental(p, r, audit, reason="user", now=5_000.0, sleep=sleeps)
    assert "no longer listed" in outcome and sleeps.waits == [], "confirmed at the first look: no wait"
    assert audit.records()[-1]["action"] == "terminate" and audit.open_rentals() == []


async def test_the_deadline_pass_alerts_once_that_the_terminate_is_not_confirmed(tmp_path: Path):
    r = rental("pod-stuck", deadline=2_000.0)
    audit = opened(tmp_path, r)
    with cloud() as (c, base):
        c.prime = [prime_pod("pod-stuck", "ours-1")]
        c.stuck.add("pod-stuck")
        watch = DeadlineWatch(audit, clock=lambda: 5_000.0, sleep=Sleeps())
        async with providers(base) as p:
            (ev,) = await watch.check(p)
            assert ev.kind == "failed" and "NOT confirmed" in ev.message and "'active'" in ev.message
            assert await watch.check(p) == [], "said once; tried again every pass"
            assert c.count("DELETE", "/pi/api/v1/pods/pod-stuck") == 2
            c.stuck.clear()  # the provider finally lets it go
            (done,) = await watch.check(p)
            assert done.kind == "terminated" and "no longer listed" in done.message
    assert audit.open_rentals() == []
    assert [x["action"] for x in audit.records()].count("terminate-unconfirmed") == 2
