"""Budgets (services/watch/budget.py through the watcher's rentals pass) over real parts: the provider is a
real HTTP server on 127.0.0.1 (tests/http_stub.py), the final backup goes from the real sshd pod to moto's
S3 server, the audit log and the spend ledger are real files. The done-when test: a rental over its budget
is terminated AFTER its newest complete checkpoint is verified in the bucket (the provider's DELETE sees
the manifest there already). Without permission, without a bucket or with an unknown pod: no termination."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.models import Pod, PodKind
from services.offers.launch import Providers
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.offers.spend import LEDGER_NAME, SpendLedger
from services.watch.state import STATE_NAME, read_state
from services.watch.watcher import Watcher, WatchOptions
from tests.http_stub import serve
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.backup.fixtures import write_checkpoint

KEY = "pk-budget-test-key-123456"


class Provider:
    """The primeintellect pod API: DELETE /pods/<id> answers TERMINATED and the pod leaves the list of pods
    (the terminate is verified there); each call is recorded with what ``look()`` sees at that moment (the
    bucket's keys)."""

    def __init__(self, look=lambda: None) -> None:
        self.calls: list[tuple[str, str, object]] = []
        self.look = look
        self.deleted = False

    def answer(self, method: str, path: str) -> tuple:
        self.calls.append((method, path, self.look()))
        if method == "DELETE":
            self.deleted = True
            return 200, {"status": "TERMINATED"}
        if method == "GET" and path.split("?")[0] == "/api/v1/pods/":
            return 200, {"data": [] if self.deleted else [{"id": "pod-1", "name": "testpod", "status": "ACTIVE"}]}
        return 404, {"detail": "not here"}


def rent(data: Path, name: str, *, spent_hours: float, price: float = 2.0, budget: float | None = 3.0) -> Rental:
    r = Rental(
        name,
        "primeintellect",
        "pod-1",
        "primeintellect 1x H100",
        price,
        price * 1.1,
        time.time() - spent_hours * 3600,
        None,
        budget_usd=budget,
    )
    AuditLog(data / AUDIT_NAME).append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    return r


def watcher(data: Path, base: str, pods: list[Pod], **kw) -> Watcher:
    return Watcher(
        pods,
        WatchOptions(data, **kw),
        providers=lambda: Providers({"primeintellect": KEY}, {"primeintellect": f"{base}/api/v1"}),
    )


@pytest.mark.ssh
async def test_over_budget_is_terminated_after_a_final_backup(pod, s3env, tmp_path):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, 2, shard_bytes=8 * 1024)
    write_checkpoint(run_dir, 4, shard_bytes=40 * 1024)
    write_checkpoint(run_dir, 6, complete=False)  # still being written: never the one backed up
    data = tmp_path / "data"
    rent(data, "testpod", spent_hours=2.0)  # $4 of a $3 budget
    manifest = "prime-train/run/step_4/manifest.json"
    provider = Provider(look=lambda: s3env.keys("prime-train/run/"))
    the_pod = Pod(
        "testpod",
        PodKind.SSH,
        host="127.0.0.1",
        user=pod.user,
        port=pod.port,
        probe_dir=pod.probe_dir,
        run_dir=str(run_dir),
    )
    with serve(provider.answer) as base:
        w = watcher(data, base, [the_pod], terminate_over_budget=True, backup=s3env.settings())
        await w.rentals_pass()
    deletes = [(path, keys) for method, path, keys in provider.calls if method == "DELETE"]
    assert len(deletes) == 1 and deletes[0][0] == "/api/v1/pods/pod-1"
    assert manifest in deletes[0][1], deletes  # the backup was verified BEFORE the terminate call
    assert not any(k.startswith("prime-train/run/step_6/") for k in s3env.keys())
    assert AuditLog(data / AUDIT_NAME).open_rentals() == []
    closed = SpendLedger(data / LEDGER_NAME).closed()
    assert [(s.name, s.reason, s.budget_usd) for s in closed] == [("testpod", "budget", 3.0)]
    assert w.spends == tuple(closed)
    w._save()
    whats = [a["what"] for a in read_state(data / STATE_NAME)["actions"]]
    assert whats.index("budget backed-up") < whats.index("budget terminated")
    assert [a.get("step") for a in read_state(data / STATE_NAME)["actions"] if a["what"] == "budget terminated"] == [4]


async def test_without_a_bucket_an_over_budget_pod_is_not_terminated(tmp_path):
    data = tmp_path / "data"
    rent(data, "p", spent_hours=2.0)
    provider = Provider()
    with serve(provider.answer) as base:
        w = watcher(data, base, [Pod("p", PodKind.SSH, host="127.0.0.1", run_dir="/r")], terminate_over_budget=True)
        await w.rentals_pass()
        await w.rentals_pass()  # said once, retried silently
    assert [m for m, _p, _k in provider.calls] == []
    assert [r.name for r in AuditLog(data / AUDIT_NAME).open_rentals()] == ["p"]
    failed = [a for a in w.state.actions if a["what"] == "budget failed"]
    assert len(failed) == 1 and "NOT terminated" in failed[0]["message"] and "no bucket" in failed[0]["message"]
    assert KEY not in str(list(w.state.actions))


async def test_a_rental_the_watcher_does_not_watch_is_not_terminated(s3env, tmp_path):
    data = tmp_path / "data"
    rent(data, "elsewhere", spent_hours=2.0)
    provider = Provider()
    with serve(provider.answer) as base:
        w = watcher(data, base, [], terminate_over_budget=True, backup=s3env.settings())
        await w.rentals_pass()
    assert provider.calls == []
    failed = [a for a in w.state.actions if a["what"] == "budget failed"]
    assert len(failed) == 1 and "does not watch elsewhere" in failed[0]["message"]


async def test_warn_at_80_percent_then_over_without_permission(tmp_path):
    data = tmp_path / "data"
    rent(data, "p", spent_hours=1.25)  # $2.50 of $3: 83 %
    provider = Provider()
    with serve(provider.answer) as base:
        w = watcher(data, base, [])
        await w.rentals_pass()
        await w.rentals_pass()
        assert [a["what"] for a in w.state.actions if a["what"].startswith("budget")] == ["budget warn"]
        w.clock = w.budget.clock = lambda: time.time() + 3600  # an hour later: $4.50 of $3
        await w.rentals_pass()
        await w.rentals_pass()
    assert [a["what"] for a in w.state.actions if a["what"].startswith("budget")] == ["budget warn", "budget over"]
    assert "still running" in w.state.actions[-1]["message"] or any(
        "still running" in a.get("message", "") for a in w.state.actions
    )
    assert provider.calls == []  # never terminated without terminate_over_budget
    assert [r.name for r in AuditLog(data / AUDIT_NAME).open_rentals()] == ["p"]


async def test_no_budget_no_message(tmp_path):
    data = tmp_path / "data"
    rent(data, "p", spent_hours=100.0, budget=None)
    provider = Provider()
    with serve(provider.answer) as base:
        w = watcher(data, base, [], terminate_over_budget=True)
        await w.rentals_pass()
    assert not [a for a in w.state.actions if a["what"].startswith("budget")] and provider.calls == []
