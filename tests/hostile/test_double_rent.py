"""Issue 13 item 3: a lost rent answer plus a retry rented a second pod. After the create answer was lost (a
provisional "creating?" rental in the audit log), Enter on the same offer opened the same dialog and created
a second pod under a new name; both billed. Now, while a provisional rental is open at a provider, renting
there again says so and needs an explicit second yes naming the open one (default: No) — checked in the
App at Enter, and again at the moment of renting: the audit log, read fresh under a file lock (flock on
``audit.jsonl.lock``), is the truth, so two renters (two coroutines, two processes) never both pass."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.screens.confirm import ConfirmScreen
from app.screens.rent import RentScreen
from app.settings import cache_dir
from services.offers import cache, primeintellect
from services.offers.launch import Providers, launch_offer, plan_launch
from services.offers.models import FetchResult
from services.offers.rentals import AuditLog
from tests.app.helpers import laid_out, rentals_app, wait_for
from tests.http_stub import serve
from tests.services.offers.test_fetch import load
from tests.services.offers.test_launch import Api
from tests.shared_data import OFFER_FIXTURES
from widgets.offers_view import OffersView

REPO = Path(__file__).resolve().parents[2]
OPEN = "primeintellect-h100x8-old01"  # the rental whose create answer was lost
GPUS_JSON = "primeintellect-availability-gpus.json"  # the Prime Intellect offers answer the tests rent from


def _lost_answer(audit: AuditLog, name: str = OPEN, age: float = 240.0) -> None:
    """What launch_offer leaves behind when the create answer is lost: a create-request and nothing after."""
    audit.append(
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


def _api() -> Api:
    return Api(
        {
            "POST /api/v1/pods/": [(200, load("primeintellect-pods-create.json"))],
            "GET /api/v1/pods/": [(200, {"data": []})],  # the lost one is not listed yet (younger than the grace)
            "GET /api/v1/pods/status": [(200, load("primeintellect-pods-status.json"))],
        }
    )


def _creates(api: Api) -> int:
    return len(api.bodies("POST /api/v1/pods/"))


async def _enter_on_the_best_offer(app, pilot) -> None:
    await pilot.press("2")
    table = app.query_one(OffersView)
    await wait_for(pilot, lambda: table.row_count > 0)
    table.focus()
    await pilot.press("enter")


async def test_enter_with_a_creating_rental_warns_and_only_an_explicit_yes_rents(tmp_path: Path):
    cache.save(cache_dir(), False, FetchResult(tuple(primeintellect.parse(load(GPUS_JSON)))), time.time())
    audit = AuditLog(tmp_path / "audit.jsonl")
    _lost_answer(audit)
    api = _api()
    app = rentals_app([], tmp_path, audit, api, poll=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        for refuse in ("n", "escape", "enter"):  # enter: the focus starts on No
            await _enter_on_the_best_offer(app, pilot)
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            question = app.screen.question
            assert question.startswith(
                f"a rental on primeintellect may still be starting: {OPEN} (asked 4 min ago, "
                "no answer). Rent ANOTHER pod anyway?"
            ), question
            await laid_out(pilot, "#no")
            await pilot.press(refuse)
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            await pilot.pause(0.1)
            assert not isinstance(app.screen, RentScreen) and _creates(api) == 0
        assert [r["action"] for r in audit.records()] == ["create-request"]

        await _enter_on_the_best_offer(app, pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, RentScreen))
        await laid_out(pilot, "#yes")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: _creates(api) == 1)
        await wait_for(pilot, lambda: any(r["action"] == "create" for r in audit.records()))
    names = [r.name for r in audit.open_rentals()]
    assert OPEN in names and len(names) == 2, names  # the lost one is still looked for; the new one is rented


async def test_a_rental_started_elsewhere_while_the_dialog_is_open_is_caught_at_renting(tmp_path: Path):
    """Another app (or process) asks for a pod while this one's rent dialog is open: the check at the moment
    of renting reads the log fresh and asks again; nothing goes out without the second yes."""
    cache.save(cache_dir(), False, FetchResult(tuple(primeintellect.parse(load(GPUS_JSON)))), time.time())
    audit = AuditLog(tmp_path / "audit.jsonl")
    api = _api()
    app = rentals_app([], tmp_path, audit, api, poll=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        await _enter_on_the_best_offer(app, pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, RentScreen))  # nothing open: no warning
        _lost_answer(AuditLog(tmp_path / "audit.jsonl"), name="other-app-pod", age=5)
        await laid_out(pilot, "#yes")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "may still be starting: other-app-pod (asked " in app.screen.question
        assert " s ago, no answer). Rent ANOTHER pod anyway?" in app.screen.question
        assert _creates(api) == 0
        await laid_out(pilot, "#no")
        await pilot.press("n")
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
        assert _creates(api) == 0 and [r["action"] for r in audit.records()] == ["create-request"]

        await _enter_on_the_best_offer(app, pilot)  # now it is open at Enter: asked there, then renting passes
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, RentScreen))
        await laid_out(pilot, "#yes")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: _creates(api) == 1)


# ------------------------------------------------------------------ two renters
def _offer():
    return next(
        o for o in primeintellect.parse(load(GPUS_JSON)) if o.gpu_type == "H100" and o.gpu_count == 8 and not o.spot
    )


@pytest.fixture
def prime_api():
    """Prime's pod API on 127.0.0.1: creates are counted and answered after a short while (the window in which
    a second renter would look at the log)."""
    seen: list[str] = []

    def answer(method: str, path: str) -> tuple:
        seen.append(f"{method} {path.split('?')[0]}")
        if method == "POST" and path.startswith("/api/v1/pods"):
            time.sleep(0.3)
            return 200, load("primeintellect-pods-create.json")
        if path.startswith("/api/v1/pods/status"):
            return 200, load("primeintellect-pods-status.json")
        return 200, {"data": []}

    with serve(answer) as base:
        yield f"{base}/api/v1", seen


async def _rent(url: str, audit: AuditLog, name: str, also: tuple[str, ...] = ()) -> list[str]:
    """One renter: launch_offer until the pod is created, or it stops (pending, failed)."""
    plan = plan_launch(_offer(), 2.0, now=time.time(), name=name)
    kinds = []
    async with Providers(
        {"primeintellect": "pk-test"}, {"primeintellect": url}, client=httpx.AsyncClient(timeout=10)
    ) as providers:
        async for ev in launch_offer(providers, plan, audit, poll=0.01, also=also):
            kinds.append(ev.kind)
            if ev.kind in ("created", "pending", "failed"):
                break
    return kinds


async def test_two_renters_at_once_send_one_create(tmp_path: Path, prime_api):
    url, seen = prime_api
    audit = AuditLog(tmp_path / "audit.jsonl")
    first, second = await asyncio.gather(_rent(url, audit, "renter-a"), _rent(url, audit, "renter-b"))
    assert sorted([first[-1], second[-1]]) == ["created", "pending"], (first, second)
    assert seen.count("POST /api/v1/pods/") == 1
    # the explicit override, naming the open one, rents beside it
    assert (await _rent(url, audit, "renter-c", also=("renter-a", "renter-b")))[-1] == "created"
    assert seen.count("POST /api/v1/pods/") == 2


RENTER = """
import asyncio, json, sys, time
sys.path.insert(0, {repo!r})
import httpx
from services.offers import primeintellect
from services.offers.launch import Providers, launch_offer, plan_launch
from services.offers.rentals import AuditLog

async def rent(name):
    doc = json.loads(open({fixture!r}).read())
    offer = next(o for o in primeintellect.parse(doc) if o.gpu_type == "H100" and o.gpu_count == 8 and not o.spot)
    plan = plan_launch(offer, 2.0, now=time.time(), name=name)
    kinds = []
    async with Providers({{"primeintellect": "pk-test"}}, {{"primeintellect": {url!r}}},
                         client=httpx.AsyncClient(timeout=10)) as providers:
        async for ev in launch_offer(providers, plan, AuditLog({audit!r}), poll=0.01):
            kinds.append(ev.kind)
            if ev.kind in ("created", "pending", "failed"):
                break
    return kinds

print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(asyncio.run(rent(sys.argv[1]))), flush=True)
"""


def _renter(tmp_path: Path, url: str, name: str) -> subprocess.Popen:
    code = RENTER.format(
        repo=str(REPO),
        url=url,
        audit=str(tmp_path / "audit.jsonl"),
        fixture=str(OFFER_FIXTURES / "primeintellect-availability-gpus.json"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _result(proc: subprocess.Popen) -> list[str]:
    out, _ = proc.communicate(timeout=60)
    return json.loads(out.strip().splitlines()[-1])


def test_two_processes_renting_at_once_send_one_create(tmp_path: Path, prime_api):
    url, seen = prime_api
    procs = [_renter(tmp_path, url, name) for name in ("proc-a", "proc-b")]
    for p in procs:  # both released together
        p.stdin.write("go\n")
        p.stdin.flush()
    kinds = [_result(p)[-1] for p in procs]
    assert sorted(kinds) == ["created", "pending"], kinds
    assert seen.count("POST /api/v1/pods/") == 1


def _blocked_on(lock: Path, pid: int) -> bool:
    """/proc/locks lists ``pid`` as waiting ("->") for a flock on ``lock``."""
    inode = f":{os.stat(lock).st_ino} "
    return any(
        "->" in line and f" {pid} " in line and inode in line for line in Path("/proc/locks").read_text().splitlines()
    )


def test_the_check_waits_for_the_lock_and_reads_the_log_after_it(tmp_path: Path, prime_api):
    """Another process holds the lock (between its own check and its create-request): the renter waits on
    the lock, then reads the log as it is after that process's append — and sends nothing."""
    import fcntl

    url, seen = prime_api
    audit = AuditLog(tmp_path / "audit.jsonl")
    lock = tmp_path / "audit.jsonl.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = _renter(tmp_path, url, "late")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while not _blocked_on(lock, proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "the renter never waited for the lock"
            time.sleep(0.02)
        _lost_answer(audit, name="holder", age=0)  # the holder's create-request, written under its lock
    finally:
        os.close(fd)  # releases the lock
    assert _result(proc)[-1] == "pending"
    assert seen.count("POST /api/v1/pods/") == 0
    assert [r["name"] for r in audit.records()] == ["holder"]
