"""The demo pod behind the ordinary Connection interface.

``--demo`` must exercise the same code path as a real pod: the real probe, run as a subprocess,
reads a simulated GPU through the real nvidia-smi parser (a fake ``nvidia-smi`` first on PATH), a
simulated /proc, and the run directory of a simulated trainer. Only the hardware and the trainer are
simulated; the UI labels the pod SIMULATED.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from services.demo.pod import DemoPod
from services.models import Pod
from services.pod.ssh import LocalConnection, ProbeStream


@dataclass(frozen=True)
class DemoOptions:
    """How the simulated pod behaves (the monitor's demo settings)."""
    seed: int = 0
    gpus: int = 8
    scenario: str = "training"
    max_ticks: int | None = None
    interval: float = 1.0
    max_steps: int = 0
    runbook: bool = False
    step_seconds: float = 2.0


class DemoConnection(LocalConnection):
    def __init__(self, pod: Pod, options: DemoOptions) -> None:
        super().__init__(pod)
        self._options = options
        self.demo: DemoPod | None = None

    async def connect(self) -> None:
        await super().connect()
        self.demo = DemoPod(**asdict(self._options))
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
