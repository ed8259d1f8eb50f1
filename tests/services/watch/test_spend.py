"""The spend ledger (services/offers/spend.py) over a real audit log and ledger file in a temp data dir, and
``rentals --history`` in-process: closed rentals written once (price x time, or the provider's billed total),
open ones computed live, per run and per local day, garbage skipped, budgets from the rental records."""

from __future__ import annotations

import json
from datetime import datetime

from app.cli import main
from app.settings import data_dir
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.offers.spend import BILLED, ESTIMATED, LEDGER_NAME, SpendLedger, totals

T0 = datetime(2025, 3, 1, 22, 0).timestamp()  # local 22:00: a 4 h rental runs over midnight


def rent(audit: AuditLog, pod_id: str, name: str, price: float, start: float, **kw) -> Rental:
    r = Rental(name, "primeintellect", pod_id, f"pi 1x H100 ({name})", price, price * 1.1, start, None, **kw)
    audit.append("create", now=start, provider=r.provider, pod_id=pod_id, rental=r.to_json())
    return r


def test_closed_rentals_are_written_once_and_open_ones_computed(tmp_path):
    audit, ledger = AuditLog(tmp_path / AUDIT_NAME), SpendLedger(tmp_path / LEDGER_NAME)
    rent(audit, "a", "alpha", 2.0, T0, run="grpo-1")
    rent(audit, "b", "beta", 3.0, T0 + 600)
    rent(audit, "c", "gamma", 1.0, T0 + 1200, run="grpo-1")
    audit.append("terminate", now=T0 + 4 * 3600, provider="primeintellect", pod_id="a", reason="deadline")
    audit.append("gone", now=T0 + 600 + 1800, provider="primeintellect", pod_id="b", billed_usd=1.23)
    now = T0 + 5 * 3600
    spends = ledger.sync(audit, now)
    by = {s.pod_id: s for s in spends}
    assert by["a"].cost == 8.0 and by["a"].basis == ESTIMATED and by["a"].end == T0 + 4 * 3600
    assert by["a"].reason == "deadline" and by["a"].run == "grpo-1"
    assert by["b"].cost == 1.23 and by["b"].basis == BILLED and by["b"].run == "beta"
    assert by["c"].end is None and by["c"].cost == round((5 * 3600 - 1200) / 3600, 4)
    lines = (tmp_path / LEDGER_NAME).read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["action"] == "closed" for x in lines)
    ledger.sync(audit, now + 60)  # idempotent: nothing new is closed, nothing written
    assert (tmp_path / LEDGER_NAME).read_text().splitlines() == lines
    t = totals(spends, now)
    assert t["runs"] == {"beta": 1.23, "grpo-1": round(8.0 + by["c"].cost, 2)}
    assert t["per_hour_now"] == 1.0
    # alpha: 2 h before midnight, 2 h after
    assert by["a"].per_day(now) == {"2025-03-01": 4.0, "2025-03-02": 4.0}
    assert abs(sum(t["days"].values()) - t["total"]) < 0.02


def test_a_closed_line_survives_the_audit_log_and_garbage_is_skipped(tmp_path):
    audit, ledger = AuditLog(tmp_path / AUDIT_NAME), SpendLedger(tmp_path / LEDGER_NAME)
    rent(audit, "a", "alpha", 2.0, T0)
    audit.append("terminate", now=T0 + 3600, provider="primeintellect", pod_id="a")
    ledger.sync(audit, T0 + 7200)
    (tmp_path / AUDIT_NAME).unlink()  # the audit log is lost: what was paid is still known
    with open(tmp_path / LEDGER_NAME, "a") as fh:
        fh.write(
            '{"action": "closed", "name": "x", "provider": "p", "pod_id": "z", "price_hr": "NaN", "cost": 1e99,'
            ' "start": 1}\n{torn\n[1, 2]\n'
        )
        fh.write(
            json.dumps(
                {
                    "action": "closed",
                    "name": "dup",
                    "provider": "primeintellect",
                    "pod_id": "a",
                    "price_hr": 9,
                    "start": T0,
                    "end": T0 + 1,
                    "cost": 999,
                }
            )
            + "\n"
        )
    spends = ledger.sync(audit, T0 + 7200)
    assert [(s.name, s.cost) for s in spends] == [("alpha", 2.0)]


def test_a_budget_record_sets_the_rentals_budget_and_a_garbled_one_is_ignored(tmp_path):
    audit = AuditLog(tmp_path / AUDIT_NAME)
    rent(audit, "a", "alpha", 2.0, T0, budget_usd=10.0)
    assert audit.open_rentals()[0].budget_usd == 10.0
    audit.append("budget", provider="primeintellect", pod_id="a", budget_usd=25)
    assert audit.open_rentals()[0].budget_usd == 25.0
    audit.append("budget", provider="primeintellect", pod_id="a", budget_usd="lots")
    assert audit.open_rentals()[0].budget_usd == 25.0
    rent(audit, "b", "beta", 2.0, T0, budget_usd="NaN?")
    assert [r.budget_usd for r in audit.open_rentals()] == [25.0, None]


def test_rentals_history_prints_the_ledger_and_json(capsys):
    audit = AuditLog(data_dir() / AUDIT_NAME)
    rent(audit, "a", "alpha", 2.0, T0, run="grpo-1", budget_usd=50.0)
    audit.append("terminate", now=T0 + 3600, provider="primeintellect", pod_id="a", reason="user (CLI)")
    assert main(["rentals", "--history", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["cost"], s["basis"], s["run"]) for s in doc["spend"]] == [
        ("alpha", 2.0, "price x time", "grpo-1")
    ]
    assert doc["totals"]["runs"] == {"grpo-1": 2.0} and doc["totals"]["days"] == {"2025-03-01": 2.0}
    assert (data_dir() / LEDGER_NAME).is_file()
    assert main(["rentals", "--history"]) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "grpo-1" in out and "2025-03-01" in out and "2.00" in out and "50.00" in out


def test_rentals_history_with_nothing_rented(capsys):
    assert main(["rentals", "--history"]) == 0
    assert "nothing rented yet" in capsys.readouterr().out


def test_rentals_budget_sets_a_budget_and_refuses_bad_values(capsys):
    audit = AuditLog(data_dir() / AUDIT_NAME)
    rent(audit, "a", "alpha", 2.0, T0)
    assert main(["rentals", "--budget", "alpha", "12.5"]) == 0
    assert audit.open_rentals()[0].budget_usd == 12.5
    for bad in ("-3", "nan", "x"):
        assert main(["rentals", "--budget", "alpha", bad]) == 2
    assert "a positive amount" in capsys.readouterr().err
    assert main(["rentals", "--budget", "nobody", "5"]) == 2
    assert audit.open_rentals()[0].budget_usd == 12.5
