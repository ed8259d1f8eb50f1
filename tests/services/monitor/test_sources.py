"""MonitorService with the run's other sources: W&B (a fake API injected; information only) and a
runbook-style training.csv written by the simulated trainer, both through the real probe."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from services.models import Pod, PodKind, PodSnapshot
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from tests.services.monitor.test_service import wait_for

WANDB_LINE = (
    "wandb: \U0001f680 View run quiet-sun-7 at: \x1b[34m\x1b[4mhttps://wandb.ai/acme/rl-runs/runs/k3x9q2\x1b[0m"
)


def step_line(n: int) -> str:
    return (
        f"14:00:{n:02d} SUCCESS Step {n} |    1.0s | Loss 0.{n:04d} | Entropy 0.4 | Mismatch KL 0.001 | "
        "Grad. Norm 0.2 | LR 3.00e-06 | Throughput 25000 tokens/s | MFU 31.0% | Peak Mem. 41.0 GiB\n"
    )


class FakeWandb:
    """Stands in for ``wandb.Api()``: W&B says the run crashed an hour ago (its heartbeat is stale)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def factory(self) -> FakeWandb:
        return self

    def run(self, path: str):
        self.calls.append(path)

        class Run:
            state = "crashed"
            heartbeatAt = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))

        return Run()


async def test_wandb_is_polled_for_the_run_the_logs_name_and_never_raises_an_alert(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    log = run / "logs" / "trainer.log"
    log.write_text("")
    api = FakeWandb()
    settings = MonitorSettings(interval=0.2, wandb=True, wandb_interval=3600.0)
    snaps: list[PodSnapshot] = []
    mon = MonitorService(snaps.append, settings=settings, wandb_api_factory=api.factory)
    mon.add(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run)))
    try:
        await wait_for(lambda: mon.snapshot("p").samples_total >= 1, what="first sample")
        with log.open("a") as f:
            f.write(WANDB_LINE + "\n")
            f.write(step_line(1))
        snap = await wait_for(
            lambda: getattr(mon.snapshot("p"), "wandb", None) is not None and mon.snapshot("p"), what="a W&B status"
        )
        for n in range(2, 5):  # the pod keeps stepping; W&B keeps saying "crashed"
            with log.open("a") as f:
                f.write(step_line(n))
            await wait_for(lambda n=n: (mon.snapshot("p").run or snap.run).step == n, what=f"step {n}")
        snap = mon.snapshot("p")
    finally:
        await mon.aclose()
    assert api.calls == ["acme/rl-runs/k3x9q2"]  # one request: rate-limited to one per wandb_interval
    status = snap.wandb  # type: ignore[attr-defined]
    assert status.state == "crashed" and 3500 < status.lag(time.time()) < 3700
    assert not {a.id for a in snap.alerts} & {"no-progress", "gpu-dead", "nccl-hang"}  # W&B alone: information


async def test_wandb_is_off_without_a_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "trainer.log").write_text("")
    api = FakeWandb()
    mon = MonitorService(lambda s: None, settings=MonitorSettings(interval=0.2), wandb_api_factory=api.factory)
    mon.add(Pod(name="p", kind=PodKind.LOCAL, run_dir=str(run)))
    try:
        await wait_for(lambda: mon.snapshot("p").samples_total >= 1, what="first sample")
        with (run / "logs" / "trainer.log").open("a") as f:
            f.write(WANDB_LINE + "\n" + step_line(1))
        await wait_for(lambda: mon.snapshot("p").run is not None, what="step 1")
        await asyncio.sleep(0.3)
        snap = mon.snapshot("p")
    finally:
        await mon.aclose()
    assert api.calls == [] and snap.wandb is None  # type: ignore[attr-defined]


async def test_runbook_training_csv_gives_step_loss_tokens_and_eta_end_to_end() -> None:
    settings = MonitorSettings(interval=0.2, demo_gpus=2, demo_runbook=True, demo_step_seconds=0.2, demo_max_steps=500)
    mon = MonitorService(lambda s: None, settings=settings)
    mon.add(Pod(name="demo", kind=PodKind.DEMO))
    try:
        snap = await wait_for(
            lambda: (
                (r := mon.snapshot("demo").run) is not None
                and r.step is not None
                and r.step >= 4
                and r.step_time_s is not None
                and mon.snapshot("demo")
            ),
            what="four training.csv steps",
        )
    finally:
        await mon.aclose()
    run = snap.run
    assert run is not None and run.source == "training.csv"
    assert run.loss is not None and 0.4 < run.loss < 0.55 and run.tokens_per_s is not None and run.tokens_per_s > 20000
    assert run.max_steps == 500 and run.eta_s is not None and run.cost_so_far is not None  # the demo's config + price
    assert not [line for line in snap.log_tail if "Step " in line]  # nothing prime-rl-shaped: it came from the CSV
