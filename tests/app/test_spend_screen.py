"""The Spend view (``$``): the spend ledger as a table (every rented pod, per run and per day) and whether a
watcher is enforcing budgets now — over a real audit log and ledger in the test's data dir."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from services.offers.rentals import AUDIT_NAME, AuditLog, Rental
from services.offers.spend import LEDGER_NAME
from tests.app.helpers import Parked, wait_for


def _rent(audit: AuditLog, pod_id: str, name: str, hours_ago: float, **kw) -> None:
    r = Rental(name, "vast", pod_id, f"vast 1x H100 ({name})", 2.0, 2.2, time.time() - hours_ago * 3600, None, **kw)
    audit.append("create", provider="vast", pod_id=pod_id, rental=r.to_json())


async def test_the_spend_view_shows_the_ledger_and_the_watcher(tmp_path: Path) -> None:
    from app.screens.spend import SpendScreen

    data = Path(os.environ["PRIME_TRAIN_TUI_DATA_DIR"])
    audit = AuditLog(data / AUDIT_NAME)
    _rent(audit, "1", "alpha", 3, run="grpo-1")
    audit.append("terminate", provider="vast", pod_id="1", reason="deadline", now=time.time() - 3600)
    _rent(audit, "2", "beta", 1, budget_usd=10.0)
    app = PrimeTrainApp(
        [Pod("p1", PodKind.SSH, host="h")],
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("dollar_sign")
        await wait_for(pilot, lambda: isinstance(app.screen, SpendScreen), timeout=10)
        table = app.screen.query_one("#spend-table")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[0] for r in rows] == ["alpha", "beta"]
        assert rows[0][1] == "grpo-1" and "4.00" in rows[0][4] and rows[1][6] == "running"
        assert "10.00" in rows[1][5]
        totals = str(app.screen.query_one("#spend-totals").render())
        assert "grpo-1 $4.00" in totals and "billing now $2.00/hr" in totals
        watcher = str(app.screen.query_one("#spend-watcher").render())
        assert "No watcher is running" in watcher and "budgets are not enforced" in watcher
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SpendScreen), timeout=10)
    assert (data / LEDGER_NAME).is_file()  # the closed rental is in the ledger now


async def test_the_spend_view_with_nothing_rented(tmp_path: Path) -> None:
    from app.screens.spend import SpendScreen

    app = PrimeTrainApp(
        [Pod("p1", PodKind.SSH, host="h")],
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("dollar_sign")
        await wait_for(pilot, lambda: isinstance(app.screen, SpendScreen), timeout=10)
        assert "Nothing rented yet" in str(app.screen.query_one("#spend-totals").render())
