"""The Prometheus exporter (services/watch/exporter.py): scraped over real HTTP on 127.0.0.1 and parsed with
prometheus_client's own parser — GPU gauges per pod and GPU, host, run, alerts, money; a value the pod
could not measure is no series (never 0); a port in use is a clear error."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.errors import PrimeTrainError
from services.models import (
    Alert,
    GpuSample,
    HostSample,
    Pod,
    PodKind,
    PodSnapshot,
    PodState,
    PodStatus,
    RunProgress,
    Sample,
    Severity,
)
from services.offers.rentals import Rental
from services.watch.exporter import Exporter, WatchView

T0 = 1_700_000_000.0


def scrape(port: int) -> dict[str, list]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def view() -> WatchView:
    gpus = (
        GpuSample(0, "NVIDIA H100", 97.0, 60 * 2**30, 80 * 2**30, 650.0, 71.0),
        GpuSample(1, "NVIDIA H100", None, 1 * 2**30, 80 * 2**30, None, None),
    )
    sample = Sample(T0, gpus, HostSample(cpu_pct=12.5, mem_used=10, mem_total=20, disk_used=5, disk_total=10))
    run = RunProgress(
        step=812,
        max_steps=1000,
        loss=0.25,
        tokens_per_s=25000.0,
        steps_per_hr=1800.0,
        last_step_at=T0 - 42,
        eta_s=360.0,
        cost_so_far=12.5,
        cost_basis="since rented",
    )
    alert = Alert("no-progress", Severity.CRITICAL, "No training progress", "m", T0)
    snap = PodSnapshot(
        Pod("p1", PodKind.SSH, host="h", price_per_hr=23.92),
        PodStatus(PodState.ONLINE),
        history=(sample,),
        samples_total=7,
        alerts=(alert,),
        run=run,
    )
    down = PodSnapshot(Pod("p2", PodKind.SSH, host="h2"), PodStatus(PodState.OFFLINE, "refused"))
    rental = Rental("p1", "vast", "42", "vast 1x H100", 2.0, 2.2, T0 - 3600, T0 + 600)
    return WatchView((snap, down), {("p1", "no-progress"): 2}, (rental,), {("opened", "sent"): 1}, None, T0)


@pytest.fixture
def exporter():
    ex = Exporter(view, 0)
    ex.start()
    yield ex
    ex.stop()


def test_the_metrics_scraped_and_parsed(exporter: Exporter):
    m = scrape(exporter.port)
    assert exporter.addr == "127.0.0.1"
    util = {(lb["pod"], lb["gpu"]): v for lb, v in m["ptt_gpu_utilization_percent"]}
    assert util == {("p1", "0"): 97.0}  # GPU 1's utilisation is unknown: no series, not 0
    assert ({"pod": "p1", "gpu": "1", "model": "NVIDIA H100"}, float(2**30)) in m["ptt_gpu_memory_used_bytes"]
    assert m["ptt_gpu_power_watts"] == [({"pod": "p1", "gpu": "0", "model": "NVIDIA H100"}, 650.0)]
    assert m["ptt_gpu_temperature_celsius"][0][1] == 71.0
    assert dict((lb["pod"], v) for lb, v in m["ptt_pod_up"]) == {"p1": 1.0, "p2": 0.0}
    assert m["ptt_host_cpu_percent"] == [({"pod": "p1"}, 12.5)]
    assert m["ptt_run_step"] == [({"pod": "p1"}, 812.0)]
    assert m["ptt_run_step_age_seconds"] == [({"pod": "p1"}, 42.0)]
    assert m["ptt_run_tokens_per_second"] == [({"pod": "p1"}, 25000.0)]
    assert m["ptt_alert_active"] == [({"pod": "p1", "rule": "no-progress", "severity": "critical"}, 1.0)]
    assert m["ptt_alerts_opened_total"] == [({"pod": "p1", "rule": "no-progress"}, 2.0)]
    assert m["ptt_price_per_hour_dollars"] == [({"pod": "p1"}, 23.92)]
    assert m["ptt_spent_dollars"] == [({"pod": "p1", "basis": "since rented"}, 12.5)]
    assert m["ptt_rental_spent_dollars"] == [({"pod": "p1", "provider": "vast"}, 2.0)]
    assert m["ptt_rental_deadline_seconds"] == [({"pod": "p1", "provider": "vast"}, 600.0)]
    assert m["ptt_notifications_total"] == [({"kind": "opened", "outcome": "sent"}, 1.0)]
    assert m["ptt_watch_up"] == [({}, 1.0)]


def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(PrimeTrainError, match=r"cannot serve metrics on 127.0.0.1:\d+") as info:
            Exporter(view, s.getsockname()[1]).start()
        assert "--metrics-port" in info.value.hint


def test_the_grafana_dashboard_uses_only_exported_names(exporter: Exporter):
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[3] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\bptt_\w+", e)}
    exported = set(scrape(exporter.port))
    assert used and used <= exported, used - exported
    assert {"ptt_gpu_utilization_percent", "ptt_alert_active", "ptt_run_step_age_seconds"} <= used


def test_spend_metrics_come_from_the_ledger():
    from services.offers.spend import Spend

    closed = Spend("old", "vast", "7", "grpo-1", "vast 1x A100", 1.5, T0 - 86400, T0 - 86400 + 7200, 3.25, "billed")
    live = Spend("p1", "vast", "42", "grpo-2", "vast 1x H100", 2.0, T0 - 3600, None, 2.0, "price x time", 4.0)
    v = WatchView(
        rentals=(Rental("p1", "vast", "42", "vast 1x H100", 2.0, 2.2, T0 - 3600, None, budget_usd=4.0),),
        now=T0,
        spends=(closed, live),
    )
    ex = Exporter(lambda: v, 0)
    ex.start()
    try:
        m = scrape(ex.port)
    finally:
        ex.stop()
    assert m["ptt_spend_dollars"] == [({}, 5.25)]  # every rented pod's cost, the closed ones included
    assert m["ptt_spend_per_hour_dollars"] == [({}, 2.0)]  # what is billing now
    assert sorted((lb["run"], v) for lb, v in m["ptt_run_spend_dollars"]) == [("grpo-1", 3.25), ("grpo-2", 2.0)]
    assert m["ptt_rental_spent_dollars"] == [({"pod": "p1", "provider": "vast"}, 2.0)]
    assert m["ptt_rental_budget_dollars"] == [({"pod": "p1", "provider": "vast"}, 4.0)]


def test_an_idle_pod_and_what_it_wasted_are_exported():
    """A pod idle past [health] idle_minutes (the snapshot's IdleFigure): its idle time and cost are series of
    their own, for a Grafana alert on billed-but-idle GPUs; a pod not idle has none (no zero series)."""
    from dataclasses import replace

    from services.models import IdleFigure

    base = view()
    idle = replace(base.snapshots[0], idle=IdleFigure(since=T0 - 2520, seconds=2520.0, wasted_usd=3.1))
    ex = Exporter(lambda: replace(base, snapshots=(idle, base.snapshots[1])), 0)
    ex.start()
    try:
        m = scrape(ex.port)
    finally:
        ex.stop()
    assert m["ptt_pod_idle_seconds"] == [({"pod": "p1"}, 2520.0)]
    assert m["ptt_pod_idle_wasted_dollars"] == [({"pod": "p1"}, 3.1)]


def test_no_idle_series_for_a_busy_pod(exporter: Exporter):
    m = scrape(exporter.port)
    assert "ptt_pod_idle_seconds" not in m and "ptt_pod_idle_wasted_dollars" not in m
