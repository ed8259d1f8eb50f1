"""The Spend view's sweep section (issue 35): a pod terminated here that its provider still lists (billing
with nobody watching) is said first, and a pod created in the console is shown with its price and age —
through the real app, over a real HTTP server with the providers' recorded payload shapes."""

from __future__ import annotations

import os
from pathlib import Path

from app.tui import PrimeTrainApp
from services.models import Pod, PodKind
from services.monitor.service import MonitorService
from tests.app.helpers import Parked, wait_for
from tests.services.offers.cloud_stub import KEYS, cloud, urls
from tests.services.offers.test_sweep import populate


async def test_the_spend_view_shows_a_billing_orphan_and_a_pod_made_elsewhere(tmp_path: Path, monkeypatch) -> None:
    from app.screens.spend import SpendScreen

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_API_KEY", KEYS["primeintellect"])
    with cloud() as (c, base):
        monkeypatch.setenv("PRIME_TRAIN_TUI_PRIME_URL", urls(base)["primeintellect"])
        populate(Path(os.environ["PRIME_TRAIN_TUI_DATA_DIR"]), c)
        c.prime[2]["name"] = "[b]made-in-console[/b]"  # a provider's text is never read as markup
        app = PrimeTrainApp(
            [Pod("p1", PodKind.SSH, host="h")],
            pods_path=tmp_path / "pods.toml",
            monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("dollar_sign")
            await wait_for(pilot, lambda: isinstance(app.screen, SpendScreen), timeout=10)
            box = app.screen.query_one("#spend-sweep")
            await wait_for(pilot, lambda: "asked" in str(box.render()), timeout=10)
            text = str(box.render())
    assert "1 pod(s) terminated here are STILL LISTED" in text.splitlines()[1]
    assert "billing  primeintellect pod-orphan ours-orphan" in text and "terminated here" in text
    assert "foreign  primeintellect pod-console [b]made-in-console[/b]  active  $2.50/hr" in text and "days old" in text
