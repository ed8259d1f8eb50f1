"""Renting from the Offers pane in the real App (Pilot): enter on an offer → the confirmation with the cap
and deadline → the provider API (recorded payloads over httpx.MockTransport) → the pod answers SSH (a real
sshd) → it joins the sidebar and pods.toml; T terminates it; overdue rentals are offered for termination
at start-up."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Static

from app.rentals import Rentals
from app.screens.confirm import ConfirmScreen
from app.screens.rent import RentScreen
from app.settings import cache_dir, load_pods
from app.tui import PrimeTrainApp
from services.offers import cache, primeintellect
from services.offers.models import FetchResult
from services.offers.rentals import AuditLog, Rental
from tests.app.helpers import panes_mounted, rentals_app, wait_for
from tests.services.offers.test_fetch import load
from tests.services.offers.test_launch import Api
from widgets.offers_view import OffersView


def _offers_cached(now: float) -> None:
    offers = primeintellect.parse(load("primeintellect-availability-gpus.json"))
    cache.save(cache_dir(), False, FetchResult(tuple(offers)), now)


def _status(sshd, pod_id: str, price: float) -> dict:
    item = load("primeintellect-pods-status.json")["data"][0]
    return {
        "data": [{**item, "podId": pod_id, "priceHr": price, "sshConnection": f"{sshd.user}@127.0.0.1 -p {sshd.port}"}]
    }


async def test_rent_an_offer_then_terminate_it(tmp_path: Path, sshd, client_home):
    client_home.trust()
    now = time.time()
    _offers_cached(now)
    # the default run is prime-rl's 1 train + 1 inference GPU: 1-GPU offers are misfits, a 2× L40S wins
    cheapest = 2.05
    api = Api(
        {
            "POST /api/v1/pods/": [(200, load("primeintellect-pods-create.json"))],
            "GET /api/v1/pods/status": [(200, _status(sshd, "pod-synthetic-0001", cheapest))],
            "DELETE /api/v1/pods/pod-synthetic-0001": [(200, {"status": "TERMINATED"})],
            "GET /api/v1/pods/": [(200, {"data": []})],
        }
    )  # the terminate is verified there
    audit = AuditLog(tmp_path / "audit.jsonl")
    pods_path = tmp_path / "pods.toml"
    app = rentals_app([], tmp_path, audit, api, parked=False, poll=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("2")
        table = app.query_one(OffersView)
        await wait_for(pilot, lambda: table.row_count > 0)
        table.focus()
        first = table.ordered()[0]
        assert first.offer.price_hr == cheapest
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RentScreen))
        screen = app.screen
        cap = screen.query_one("#rent-cap", Input)
        assert float(cap.value) == pytest.approx(round(first.offer.price_hr * 1.10 + 0.005, 2), abs=0.011)
        cap.value = f"{first.offer.price_hr / 2:.2f}"  # below the listed price: refused
        await pilot.pause()
        assert screen.query_one("#yes", Button).disabled
        assert "at least the listed" in str(screen.query_one("#rent-problem", Static).render())
        cap.value = f"{first.offer.price_hr + 1:.2f}"
        screen.query_one("#rent-hours", Input).value = "3"
        await pilot.pause()
        assert not screen.query_one("#yes", Button).disabled
        assert "Worst case before the deadline" in str(screen.query_one("#rent-worst", Static).render())
        await pilot.click("#yes")
        await wait_for(pilot, lambda: any(p.provider for p in app.pods.values()))
        pod = next(p for p in app.pods.values() if p.provider)
        assert (pod.host, pod.port, pod.provider_id) == ("127.0.0.1", sshd.port, "pod-synthetic-0001")
        assert pod.deadline == pytest.approx(now + 3 * 3600, abs=60) and pod.price_per_hr == cheapest
        body = api.bodies("POST /api/v1/pods/")[0]
        assert body["pod"]["maxPrice"] == pytest.approx(first.offer.price_hr + 1)
        await app.workers.wait_for_complete()
        saved = {p.name: p for p in load_pods(pods_path)}
        assert saved[pod.name].provider_id == "pod-synthetic-0001"
        assert app.selected == pod.name
        row = app.pod_list.row(pod.name)
        await wait_for(pilot, lambda: "(in 2 h" in row.text or "(in 3 h" in row.text)
        assert f"${cheapest:.2f}/hr · ends" in row.text

        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "cost ≈ $" in app.screen.question and "pod-synthetic-0001" in app.screen.question
        await pilot.press("y")
        await wait_for(pilot, lambda: pod.name not in app.pods)
        await app.workers.wait_for_complete()
    actions = [r["action"] for r in audit.records()]
    assert actions == ["create-request", "create", "ready", "terminate"]
    assert audit.open_rentals() == [] and pod.name not in {p.name for p in load_pods(pods_path)}
    assert "pk-secret" not in (tmp_path / "audit.jsonl").read_text()


def _overdue_audit(path: Path, now: float) -> AuditLog:
    audit = AuditLog(path)
    r = Rental("old-pod", "primeintellect", "pod-old-1", "primeintellect 8× H100", 17.92, 19.72, now - 7200, now - 60)
    audit.append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    return audit


@pytest.mark.parametrize("answer", ["y", "n"])
async def test_overdue_rentals_are_offered_for_termination_at_start(tmp_path: Path, answer: str):
    now = time.time()
    audit = _overdue_audit(tmp_path / "audit.jsonl", now)
    api = Api(
        {"DELETE /api/v1/pods/pod-old-1": [(200, {"status": "TERMINATED"})], "GET /api/v1/pods/": [(200, {"data": []})]}
    )
    from services.models import Pod, PodKind

    pod = Pod(
        "old-pod",
        PodKind.SSH,
        host="10.0.0.7",
        provider="primeintellect",
        provider_id="pod-old-1",
        deadline=now - 60,
        saved=True,
    )
    app = rentals_app([pod], tmp_path, audit, api)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "past their auto-terminate deadline" in app.screen.question and "old-pod" in app.screen.question
        await pilot.press(answer)
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
        if answer == "n":  # the sidebar counts down to the new deadline, and pods.toml has it
            row = app.pod_list.row("old-pod")
            await wait_for(pilot, lambda: "(in 59 min" in row.text or "(in 1 h" in row.text)
            assert load_pods(tmp_path / "pods.toml")[0].deadline == pytest.approx(now + 3600, abs=30)
    if answer == "y":
        assert [r["action"] for r in audit.records()][-1] == "terminate" and audit.open_rentals() == []
    else:  # kept: nothing terminated, the deadline moved an hour on and the watch leaves it alone
        assert not [r for r in api.seen if r.method == "DELETE"]
        (kept,) = audit.open_rentals()
        assert kept.deadline == pytest.approx(now + 3600, abs=30)


async def test_T_on_a_pod_that_was_not_rented_explains(tmp_path: Path):
    from services.models import Pod, PodKind

    app = PrimeTrainApp(
        [Pod("mine", PodKind.SSH, host="127.0.0.1", port=1)],
        pods_path=tmp_path / "pods.toml",
        rentals=lambda a: Rentals(a, AuditLog(tmp_path / "audit.jsonl"), providers=Api({}).providers),
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("not rented through prime-train-tui" in str(n.message) for n in app._notifications)


async def test_config_pane_model_is_what_the_offers_pane_prices(tmp_path: Path):
    cfg = tmp_path / "rl.toml"
    cfg.write_text('max_steps = 40\n[model]\nname = "Qwen/Qwen3-8B"\n[orchestrator]\nbatch_size = 64\n')
    app = PrimeTrainApp(
        [],
        pods_path=tmp_path / "pods.toml",
        config_path=cfg,
        rentals=lambda a: Rentals(a, AuditLog(tmp_path / "audit.jsonl"), providers=Api({}).providers),
    )
    async with app.run_test(size=(140, 40)) as pilot:
        await panes_mounted(pilot)  # the panes besides Monitor mount after the first screen
        pane = app.offers_pane
        await wait_for(pilot, lambda: pane.run.model == "Qwen/Qwen3-8B")
        assert pane.run.steps == 40 and "rl.toml" in pane.run_source
        assert json.dumps(pane.run.train_tokens_per_step) == str(64 * 2048)


async def test_the_pane_says_which_keys_are_set_masked(tmp_path: Path, monkeypatch):
    from textual.widgets import Label

    monkeypatch.setenv("PRIME_API_KEY", "pk-live-abcdefghijklmnop")
    monkeypatch.setenv("HOME", str(tmp_path))
    app = PrimeTrainApp(
        [],
        pods_path=tmp_path / "pods.toml",
        rentals=lambda a: Rentals(a, AuditLog(tmp_path / "audit.jsonl"), providers=Api({}).providers),
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await panes_mounted(pilot)  # the panes besides Monitor mount after the first screen
        label = app.offers_pane.query_one("#of-keys", Label)
        await wait_for(pilot, lambda: "Keys:" in str(label.render()))
        text = str(label.render())
        assert "primeintellect ✓ pk-…op (PRIME_API_KEY)" in text and "vast ✗ set VAST_API_KEY" in text
        assert "abcdefghijklmnop" not in text


async def test_a_real_runs_rate_calibrates_the_offers_pane(tmp_path: Path):
    """The monitor's snapshot of a run (model and tokens per step from its configs, steps/hr from its
    logs) is recorded; the Offers pane then times that GPU shape from it (✓), and the demo pod never counts."""
    from dataclasses import replace

    from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus, RunProgress, Sample
    from services.monitor.service import MonitorService
    from tests.app.helpers import Parked

    gpu = {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "util": 90,
        "mem_used": 1,
        "mem_total": 80 * 2**30,
        "power_w": 600,
        "temp_c": 60,
    }
    sample = Sample.from_dict(
        {
            "v": 1,
            "t": 1.0,
            "gpus": [gpu] * 8,
            "host": {},
            "run": {"model": "Qwen/Qwen3-0.6B", "tokens_per_step": 256 * 2048},
        }
    )
    pod = Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1")
    snap = PodSnapshot(
        pod=pod,
        status=PodStatus(PodState.ONLINE, "", since=0.0),
        history=(sample,),
        run=RunProgress(step=10, steps_per_hr=100.0),
    )
    _offers_cached(time.time())
    demo = Pod(name="demo", kind=PodKind.DEMO)
    a100 = Sample.from_dict(
        {
            "v": 1,
            "t": 1.0,
            "gpus": [{**gpu, "name": "NVIDIA A100-SXM4-80GB"}] * 8,
            "host": {},
            "run": {"model": "Qwen/Qwen3-0.6B", "tokens_per_step": 256 * 2048},
        }
    )
    app = PrimeTrainApp(
        [pod, demo],
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
        rentals=lambda a: Rentals(a, AuditLog(tmp_path / "audit.jsonl"), providers=Api({}).providers),
    )
    async with app.run_test(size=(160, 40)) as pilot:
        app.on_snapshot(snap)
        app.on_snapshot(replace(snap, pod=demo, history=(a100,)))  # simulated GPUs: never a calibration point
        await pilot.pause(0.2)
    lines = app.rentals.observations.path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["gpu_type"] == "H100" and json.loads(lines[0])["gpu_count"] == 8

    app = PrimeTrainApp(
        [],
        pods_path=tmp_path / "pods.toml",
        rentals=lambda a: Rentals(a, AuditLog(tmp_path / "audit.jsonl"), providers=Api({}).providers),
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await panes_mounted(pilot)  # the panes besides Monitor mount after the first screen
        pane = app.offers_pane
        await wait_for(pilot, lambda: bool(pane.ranked))
        h100x8 = [r for r in pane.ranked if r.offer.gpu_type == "H100" and r.offer.gpu_count == 8]
        # 500 steps / 100 per hour, without a preemption; spot rows (listed beside on-demand) expect more
        assert h100x8 and all(r.measured and r.base_hours == pytest.approx(5.0) for r in h100x8)
        assert all(r.est_hours == pytest.approx(5.0) if not r.offer.spot else r.est_hours > 5.0 for r in h100x8)
        assert not any(r.measured for r in pane.ranked if r.offer.gpu_count != 8)


async def test_demo_shows_simulated_offers_without_keys_and_rents_nothing(tmp_path: Path, monkeypatch):
    from textual.widgets import Label

    from services.models import Pod, PodKind
    from services.monitor.service import MonitorService
    from tests.app.helpers import Parked

    monkeypatch.setenv("HOME", str(tmp_path))  # no provider CLI files either
    api = Api({})
    app = PrimeTrainApp(
        [Pod("demo", PodKind.DEMO)],
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
        rentals=lambda a: Rentals(a, AuditLog(tmp_path / "audit.jsonl"), providers=api.providers),
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await panes_mounted(pilot)  # the panes besides Monitor mount after the first screen
        pane = app.offers_pane
        await wait_for(pilot, lambda: bool(pane.ranked))
        assert "SIMULATED offers" in str(pane.query_one("#of-status", Label).render())
        assert {r.offer.provider for r in pane.ranked} == {"primeintellect", "vast", "lambda", "runpod"}
        pane.query_one("#of-max-price", Input).value = "5"  # a filter keeps the SIMULATED note
        await pilot.pause()
        assert "SIMULATED offers" in str(pane.query_one("#of-status", Label).render())
        await pilot.press("2")
        app.query_one(OffersView).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, RentScreen)
        assert any("SIMULATED offer" in str(n.message) for n in app._notifications)
    assert api.seen == [] and AuditLog(tmp_path / "audit.jsonl").records() == []


def _spot_taken_back(tmp_path: Path, now: float):
    """A spot pod rented 10 minutes ago whose provider now answers TERMINATED: (audit log, pod, App)."""
    from services.models import Pod, PodKind

    audit = AuditLog(tmp_path / "audit.jsonl")
    r = Rental("spot1", "primeintellect", "pod-spot-1", "primeintellect 8× H100 spot", 9.6, 10.6, now - 600, None)
    audit.append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    api = Api({"GET /api/v1/pods/status": [(200, {"data": [{"podId": "pod-spot-1", "status": "TERMINATED"}]})]})
    pod = Pod(name="spot1", kind=PodKind.SSH, host="10.0.0.9", provider="primeintellect", provider_id="pod-spot-1")
    return audit, pod, rentals_app([pod], tmp_path, audit, api, watch_interval=0.2)


async def test_a_rented_pod_its_provider_reports_terminated_closes_and_tells_the_tracker(tmp_path: Path):
    from services.models import PodSnapshot, PodState, PodStatus

    now = time.time()
    audit, pod, app = _spot_taken_back(tmp_path, now)
    async with app.run_test(size=(140, 40)) as pilot:
        app.on_snapshot(PodSnapshot(pod=pod, status=PodStatus(PodState.OFFLINE, "connection refused", since=now)))
        await wait_for(pilot, lambda: audit.open_rentals() == [])
        assert [x["action"] for x in audit.records()][-1] == "gone"
        assert any("reports spot1 terminated" in str(n.message) for n in app._notifications)
        tracked = app.lifecycle_bg.tracker._pods.get("spot1") if app.lifecycle_bg.tracker else None
        assert tracked is not None and tracked.terminated


async def test_a_run_lost_with_its_rented_pod_is_counted_once_as_a_preemption(tmp_path: Path):
    """The App's preemption tracker marks the run on a spot pod its provider took back interrupted: the rental
    gets one ``preempted`` record (the spend ledger's count, from which spot risk learns this user's rate).
    Before, only the headless watcher wrote it: with the app alone open, preemptions were never counted. The
    watcher seeing the same outage does not count it twice."""
    from services import runs
    from services.models import PodSnapshot, PodState, PodStatus
    from services.offers.spend import preemption_counts

    now = time.time()
    audit, pod, app = _spot_taken_back(tmp_path, now)
    async with app.run_test(size=(140, 40)) as pilot:
        runs_dir = app.lifecycle_bg.settings.runs_dir
        assert runs_dir is not None
        runs.save_record(runs_dir, {"id": "run-7", "pod": "spot1", "state": "running", "started": now - 300})
        app.on_snapshot(PodSnapshot(pod=pod, status=PodStatus(PodState.OFFLINE, "connection refused", since=now)))
        await wait_for(pilot, lambda: any(x["action"] == "preempted" for x in audit.records()))
        assert runs.load_record(runs_dir, "run-7")["state"] == "interrupted"
    preempted = [x for x in audit.records() if x["action"] == "preempted"]
    assert [(x["provider"], x["pod_id"], x["run_id"]) for x in preempted] == [("primeintellect", "pod-spot-1", "run-7")]
    assert audit.record_preemption("spot1", "run-7") is None  # the watcher, minutes later: the same outage
    assert preemption_counts(audit.records()) == {("primeintellect", "pod-spot-1"): 1}


async def test_a_rental_missing_from_the_sidebar_is_brought_back_or_closed(tmp_path: Path, sshd):
    """The app was closed while a pod was being created: at the next start the provider is asked."""
    now = time.time()
    audit = AuditLog(tmp_path / "audit.jsonl")
    for name, pod_id in (("back", "pod-b"), ("gone", "pod-g")):
        r = Rental(name, "primeintellect", pod_id, "primeintellect 1× H100", 2.0, 2.2, now - 60, now + 7200)
        audit.append("create", provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    ready = {**_status(sshd, "pod-b", 2.0)["data"][0]}
    api = Api({"GET /api/v1/pods/status": [(200, {"data": [ready, {"podId": "pod-g", "status": "TERMINATED"}]})]})
    app = rentals_app([], tmp_path, audit, api, parked=False)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: "back" in app.pods)
        await app.workers.wait_for_complete()
        pod = app.pods["back"]
        assert (pod.host, pod.port, pod.provider_id, pod.deadline) == ("127.0.0.1", sshd.port, "pod-b", now + 7200)
    assert [r.name for r in audit.open_rentals()] == ["back"]  # "gone" was closed by the provider's word
