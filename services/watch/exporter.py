"""The Prometheus exporter: ``/metrics`` over the watcher's latest snapshots, built at each scrape.

Served on 127.0.0.1 by default (``--metrics-addr`` to change it: the metrics name pods and runs). Names
(every series labelled ``pod``; docs/grafana-dashboard.json is built on them)::

    ptt_watch_up, ptt_pod_up, ptt_pod_samples_total
    ptt_gpu_utilization_percent / _memory_used_bytes / _memory_total_bytes / _power_watts / _temperature_celsius
                                            {pod, gpu, model}
    ptt_host_cpu_percent, ptt_host_memory_used_bytes, ptt_host_memory_total_bytes, ptt_host_disk_used_bytes,
    ptt_host_disk_total_bytes, ptt_host_open_files_limit
    ptt_run_step, ptt_run_max_steps, ptt_run_loss, ptt_run_reward, ptt_run_tokens_per_second,
    ptt_run_steps_per_hour, ptt_run_step_age_seconds, ptt_run_eta_seconds
    ptt_alert_active {pod, rule, severity}  1 per alert the health rules see now
    ptt_alerts_opened_total {pod, rule}     alert threads opened since the watcher started
    ptt_price_per_hour_dollars, ptt_spent_dollars {pod, basis}  the run's "$ so far" where the price is known
    ptt_rental_price_per_hour_dollars, ptt_rental_spent_dollars, ptt_rental_deadline_seconds,
    ptt_rental_budget_dollars {pod, provider}
    ptt_spend_dollars, ptt_spend_per_hour_dollars        the spend ledger: every rented pod's cost, $ billing now
    ptt_run_spend_dollars {run}                          the ledger per run
    ptt_backup_age_seconds {pod}                         age of the pod's newest verified backup in the bucket
    ptt_notifications_total {kind, outcome}

A value the pod could not measure is left out (no series), never exported as 0."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.errors import PrimeTrainError
from services.models import PodKind, PodSnapshot, PodState

log = logging.getLogger(__name__)
DEFAULT_ADDR = "127.0.0.1"


@dataclass(frozen=True)
class WatchView:
    """What a scrape reads (built by the watcher on the event loop; immutable)."""

    snapshots: tuple[PodSnapshot, ...] = ()
    opened_total: Mapping[tuple[str, str], int] = field(default_factory=dict)
    rentals: tuple[Any, ...] = ()  # services.offers.rentals.Rental
    notifications: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (kind, outcome) -> count
    demo_price_per_hr: float | None = None
    now: float = 0.0
    spends: tuple[Any, ...] = ()  # services.offers.spend.Spend: the spend ledger, closed and open rentals
    backup_age: Mapping[str, float] = field(default_factory=dict)  # pod -> s since its newest verified backup


def _prom() -> Any:
    try:
        from prometheus_client import core
    except ImportError:
        raise PrimeTrainError(
            "the metrics exporter needs prometheus-client, which is not installed",
            hint="pip install 'prime-train-tui[watch]', or leave out --metrics-port",
        ) from None
    return core


class WatchCollector:
    def __init__(self, view: Callable[[], WatchView]) -> None:
        self.view = view

    def collect(self) -> Iterator[Any]:  # one flat list of families
        core = _prom()
        g, c = core.GaugeMetricFamily, core.CounterMetricFamily
        v = self.view()
        pod_l = ["pod"]
        gpu_l = ["pod", "gpu", "model"]
        up = g("ptt_watch_up", "1 while the watcher runs")
        up.add_metric([], 1.0)
        fam = {
            "pod_up": g("ptt_pod_up", "1 while samples arrive from the pod (online)", labels=pod_l),
            "samples": c("ptt_pod_samples", "probe samples received from the pod", labels=pod_l),
            "util": g("ptt_gpu_utilization_percent", "GPU utilisation, %", labels=gpu_l),
            "mem": g("ptt_gpu_memory_used_bytes", "GPU memory in use, bytes", labels=gpu_l),
            "memt": g("ptt_gpu_memory_total_bytes", "GPU memory, bytes", labels=gpu_l),
            "power": g("ptt_gpu_power_watts", "GPU power draw, W", labels=gpu_l),
            "temp": g("ptt_gpu_temperature_celsius", "GPU temperature, °C", labels=gpu_l),
            "cpu": g("ptt_host_cpu_percent", "host CPU use, %", labels=pod_l),
            "hmem": g("ptt_host_memory_used_bytes", "host memory in use, bytes", labels=pod_l),
            "hmemt": g("ptt_host_memory_total_bytes", "host memory, bytes", labels=pod_l),
            "disk": g("ptt_host_disk_used_bytes", "run volume used, bytes", labels=pod_l),
            "diskt": g("ptt_host_disk_total_bytes", "run volume size, bytes", labels=pod_l),
            "nofile": g("ptt_host_open_files_limit", "soft open-files limit (ulimit -n)", labels=pod_l),
            "step": g("ptt_run_step", "the run's latest step", labels=pod_l),
            "max": g("ptt_run_max_steps", "the run's last step (from its config)", labels=pod_l),
            "loss": g("ptt_run_loss", "the latest loss", labels=pod_l),
            "reward": g("ptt_run_reward", "the latest reward", labels=pod_l),
            "tps": g("ptt_run_tokens_per_second", "training throughput, tokens/s", labels=pod_l),
            "sph": g("ptt_run_steps_per_hour", "steps per hour (recent)", labels=pod_l),
            "age": g("ptt_run_step_age_seconds", "seconds since the latest step (pod clock)", labels=pod_l),
            "eta": g("ptt_run_eta_seconds", "estimated seconds to the last step", labels=pod_l),
            "alert": g("ptt_alert_active", "1 per alert the health rules see now", labels=["pod", "rule", "severity"]),
            "opened": c("ptt_alerts_opened", "alert threads opened since the watcher started", labels=["pod", "rule"]),
            "price": g("ptt_price_per_hour_dollars", "the pod's price, $/hour", labels=pod_l),
            "spent": g("ptt_spent_dollars", "the run's cost so far, $", labels=["pod", "basis"]),
            "rprice": g(
                "ptt_rental_price_per_hour_dollars", "a rented pod's price, $/hour", labels=["pod", "provider"]
            ),
            "rspent": g(
                "ptt_rental_spent_dollars", "a rented pod's cost since it was created, $", labels=["pod", "provider"]
            ),
            "rleft": g(
                "ptt_rental_deadline_seconds",
                "seconds to a rented pod's auto-terminate deadline",
                labels=["pod", "provider"],
            ),
            "rbudget": g(
                "ptt_rental_budget_dollars", "a rented pod's budget (rentals --budget), $", labels=["pod", "provider"]
            ),
            "total": g("ptt_spend_dollars", "every rented pod's cost (the spend ledger), $"),
            "perhr": g("ptt_spend_per_hour_dollars", "what the open rentals bill per hour, $"),
            "runspend": g("ptt_run_spend_dollars", "the spend ledger per run, $", labels=["run"]),
            "idle": g(
                "ptt_pod_idle_seconds",
                "how long the pod's GPUs have sat idle with no run (only past [health] idle_minutes)",
                labels=pod_l,
            ),
            "idlecost": g("ptt_pod_idle_wasted_dollars", "what the idle time cost at the pod's price, $", labels=pod_l),
            "bage": g("ptt_backup_age_seconds", "seconds since the pod's newest verified backup", labels=pod_l),
            "notes": c("ptt_notifications", "messages pushed, by kind and outcome", labels=["kind", "outcome"]),
        }

        def put(key: str, labels: list[str], value: Any) -> None:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                fam[key].add_metric(labels, float(value))

        for snap in v.snapshots:
            try:
                self._pod(snap, v, put)
            except Exception:  # a scrape shows what it can; one odd snapshot never makes it a 500
                log.exception("metrics of %s left out", snap.pod.name)
        for (pod, rule), n in sorted(v.opened_total.items()):
            put("opened", [pod, rule], n)
        ledger = {(s.provider, s.pod_id): s.cost for s in v.spends}
        for r in v.rentals:
            labels = [r.name, r.provider]
            put("rprice", labels, r.price_hr)
            if not r.provisional:
                put("rspent", labels, ledger.get((r.provider, r.pod_id), r.spent(v.now)))
            put("rbudget", labels, r.budget_usd)
            if r.deadline is not None:
                put("rleft", labels, r.deadline - v.now)
        for pod, age in sorted(v.backup_age.items()):
            put("bage", [pod], age)
        if v.spends:
            from services.offers.spend import totals

            sums = totals(v.spends, v.now)
            put("total", [], sums["total"])
            put("perhr", [], sums["per_hour_now"])
            for run, cost in sums["runs"].items():
                put("runspend", [run], cost)
        for (kind, outcome), n in sorted(v.notifications.items()):
            put("notes", [kind, outcome], n)
        yield up
        yield from fam.values()

    @staticmethod
    def _pod(snap: PodSnapshot, v: WatchView, put: Callable[[str, list[str], Any], None]) -> None:
        name = snap.pod.name
        put("pod_up", [name], 1.0 if snap.status.state is PodState.ONLINE else 0.0)
        put("samples", [name], snap.samples_total)
        latest = snap.latest
        if latest is not None:
            for gpu in latest.gpus:
                labels = [name, str(gpu.index), gpu.name]
                put("util", labels, gpu.util)
                put("mem", labels, gpu.mem_used)
                put("memt", labels, gpu.mem_total)
                put("power", labels, gpu.power_w)
                put("temp", labels, gpu.temp_c)
            h = latest.host
            for key, value in (
                ("cpu", h.cpu_pct),
                ("hmem", h.mem_used),
                ("hmemt", h.mem_total),
                ("disk", h.disk_used),
                ("diskt", h.disk_total),
                ("nofile", h.nofile_soft),
            ):
                put(key, [name], value)
        run = snap.run
        if run is not None:
            for key, value in (
                ("step", run.step),
                ("max", run.max_steps),
                ("loss", run.loss),
                ("reward", run.reward),
                ("tps", run.tokens_per_s),
                ("sph", run.steps_per_hr),
                ("eta", run.eta_s),
            ):
                put(key, [name], value)
            if run.last_step_at is not None:
                put("age", [name], max(0.0, (latest.t if latest is not None else v.now) - run.last_step_at))
            if run.cost_so_far is not None:
                put("spent", [name, run.cost_basis or "run"], run.cost_so_far)
        price = snap.pod.price_per_hr
        if price is None and snap.pod.kind is PodKind.DEMO:
            price = v.demo_price_per_hr
        put("price", [name], price)
        if snap.idle is not None:
            put("idle", [name], snap.idle.seconds)
            put("idlecost", [name], snap.idle.wasted_usd)
        for a in snap.alerts:
            put("alert", [name, a.id, a.severity.value], 1.0)


def is_loopback(addr: str) -> bool:
    """Only this machine can reach ``addr`` (anything else, 0.0.0.0 and host names included, is public)."""
    if addr.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class Exporter:
    """The HTTP server of ``/metrics`` (prometheus_client's, in a daemon thread)."""

    def __init__(self, view: Callable[[], WatchView], port: int, addr: str = DEFAULT_ADDR) -> None:
        self.view, self.port, self.addr = view, port, addr
        self._server: Any = None

    def start(self) -> int:
        """Start serving; returns the port (``port`` 0 picks a free one). OSError → PrimeTrainError."""
        core = _prom()
        from prometheus_client import start_http_server

        registry = core.CollectorRegistry(auto_describe=False)
        registry.register(WatchCollector(self.view))
        try:
            self._server, _thread = start_http_server(self.port, addr=self.addr, registry=registry)
        except OSError as exc:
            raise PrimeTrainError(
                f"cannot serve metrics on {self.addr}:{self.port}: {exc.strerror or exc}",
                hint="pick another --metrics-port (or stop what uses that one)",
            ) from None
        self.port = int(self._server.server_address[1])
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()
