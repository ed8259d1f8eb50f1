"""The ledger learns (issue 35): each rental records whether it was spot, the audit log records each preemption
of a rental's pod (the watcher, when the preemption tracker marks its run interrupted), the spend ledger counts
them per rental, and the spot risk model takes this user's measured interruption rate for a provider once its
spot rentals add up to 24 hours (spot_risk.MIN_OBSERVED_HOURS). Before, nothing recorded spot or preemptions
and the assumed rates were used forever."""

from __future__ import annotations

from pathlib import Path

from services.lifecycle.preemption import Decision
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.offers.spend import LEDGER_NAME, SpendLedger, measured_spot_rates
from services.offers.spot_risk import DEFAULT_RATES, MIN_OBSERVED_HOURS, interruption_rates
from services.watch.watcher import Watcher, WatchOptions

NOW = 1_800_000_000.0


def rent(audit: AuditLog, name: str, pod_id: str, *, hours_ago: float, spot: bool, provider: str = "vast") -> Rental:
    r = Rental(
        name,
        provider,
        pod_id,
        f"{provider} 1x H100{' spot' if spot else ''}",
        2.0,
        2.2,
        NOW - hours_ago * 3600,
        None,
        spot=spot,
    )
    audit.append("create", now=r.created_at, provider=r.provider, pod_id=r.pod_id, rental=r.to_json())
    return r


def test_preemptions_reach_the_ledger_and_the_measured_rate_replaces_the_assumed_one(tmp_path: Path):
    data = tmp_path
    audit = AuditLog(data / AUDIT_NAME)
    rent(audit, "spot-a", "1", hours_ago=20.0, spot=True)
    rent(audit, "ondemand", "2", hours_ago=100.0, spot=False)  # never counts: not spot
    clock = [NOW - 3 * 3600]
    w = Watcher([], WatchOptions(data), clock=lambda: clock[0])
    w._read_rentals()
    for _ in range(2):  # the tracker marks the run on spot-a interrupted, twice (two outages, hours apart)
        w._preempted([Decision("interrupted", "spot-a", "run-1", "its pod was lost")])
        clock[0] += 2 * 3600
    w._preempted([Decision("interrupted", "ondemand", "run-2", "its pod was lost")])
    spends = {s.name: s for s in SpendLedger(data / LEDGER_NAME).sync(audit, NOW)}
    assert (spends["spot-a"].spot, spends["spot-a"].preemptions) == (True, 2)
    assert (spends["ondemand"].spot, spends["ondemand"].preemptions) == (False, 1)
    assert measured_spot_rates(data, NOW) == {}  # 20 spot hours: not enough to measure a rate
    audit.append("terminate", now=NOW, provider="vast", pod_id="1", name="spot-a", reason="user")
    rent(audit, "spot-b", "3", hours_ago=10.0, spot=True)  # 30 spot hours in all
    assert 30.0 >= MIN_OBSERVED_HOURS
    rates = measured_spot_rates(data, NOW)
    assert rates == {"vast": 2 / 30}
    closed = [s for s in SpendLedger(data / LEDGER_NAME).closed() if s.name == "spot-a"]
    assert [(s.spot, s.preemptions) for s in closed] == [(True, 2)]  # kept in the ledger's closed line
    assert interruption_rates({"vast": 0.5}, rates)["vast"] == 2 / 30 != DEFAULT_RATES["vast"]


def test_one_outage_seen_by_the_app_and_the_watcher_is_one_preemption(tmp_path: Path):
    """The App's tracker and the watcher's both mark the run lost: the audit log keeps one record per outage of a
    run (the same run on the same rental within an hour). A pod that is no rental, or whose rental the user
    terminated, records nothing; a rental its provider reported gone still gets the preemption it was."""
    audit = AuditLog(tmp_path / AUDIT_NAME)
    rent(audit, "spot-a", "1", hours_ago=5.0, spot=True)
    rent(audit, "spot-b", "2", hours_ago=5.0, spot=True)
    rent(audit, "mine", "3", hours_ago=5.0, spot=False)
    assert audit.record_preemption("spot-a", "run-1", now=NOW) is not None  # the App
    assert audit.record_preemption("spot-a", "run-1", now=NOW + 120) is None  # the watcher, two minutes later
    assert audit.record_preemption("spot-a", "run-2", now=NOW + 150) is not None  # another run: counted
    audit.append("gone", now=NOW + 200, provider="vast", pod_id="2", name="spot-b", reason="terminated")
    assert audit.record_preemption("spot-b", "run-3", now=NOW + 210) is not None  # taken back: the preemption
    audit.append("terminate", now=NOW + 200, provider="vast", pod_id="3", name="mine", reason="user")
    assert audit.record_preemption("mine", "run-4", now=NOW + 210) is None  # the user's own terminate
    assert audit.record_preemption("by-hand", "run-5", now=NOW + 210) is None  # not a rental
    with audit.path.open("a") as f:  # a garbled time in an old record: read as long ago, nothing breaks
        f.write('{"action":"preempted","provider":"vast","pod_id":"1","run_id":"run-9","ts":"soon"}\n')
    assert audit.record_preemption("spot-a", "run-9", now=NOW + 300) is not None
    spends = {s.name: s for s in SpendLedger(tmp_path / LEDGER_NAME).sync(audit, NOW + 400)}
    assert spends["spot-a"].preemptions == 4 and spends["spot-b"].preemptions == 1  # run-9's garbled line counts
