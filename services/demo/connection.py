"""The demo pod behind the ordinary Connection interface.

``--demo`` must exercise the same code path as a real pod: the real probe, run as a subprocess,
reads a simulated GPU through the real nvidia-smi parser (a fake ``nvidia-smi`` first on PATH), a
simulated /proc, and the run directory of a simulated trainer. Only the hardware and the trainer are
simulated; the UI labels the pod SIMULATED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.demo.pod import DemoPod
from services.models import Pod
from services.ssh import LocalConnection, ProbeStream

if TYPE_CHECKING:
    from services.monitor import MonitorSettings


class DemoConnection(LocalConnection):
    def __init__(self, pod: Pod, settings: "MonitorSettings") -> None:
        super().__init__(pod)
        self._settings = settings
        self.demo: DemoPod | None = None

    async def connect(self) -> None:
        await super().connect()
        s = self._settings
        self.demo = DemoPod(seed=s.demo_seed, gpus=s.demo_gpus, scenario=s.demo_scenario,
                            max_ticks=s.demo_max_ticks, interval=s.interval, max_steps=s.demo_max_steps,
                            runbook=s.demo_runbook, step_seconds=s.demo_step_seconds)
        await self.demo.start_trainer()

    async def start_probe(self, args: list[str]) -> ProbeStream:
        assert self.demo is not None, "connect() first"
        self._env = self.demo.env()
        self._extra_args = self.demo.probe_args()
        return await super().start_probe(args)

    async def close(self) -> None:
        await super().close()
        demo, self.demo = self.demo, None
        if demo is not None:
            await demo.stop()
