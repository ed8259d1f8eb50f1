"""The demo pod behind the ordinary Connection interface.

``--demo`` must exercise the same code path as a real pod: the real probe, run as a subprocess,
reads a simulated GPU through the real nvidia-smi parser (a fake ``nvidia-smi`` first on PATH), a
simulated /proc, and the run directory of a simulated trainer. Only the hardware and the trainer are
simulated; the UI labels the pod SIMULATED.

A demo pod that carries its sandbox (``services.demo.pod.sandbox_paths``: run_dir and probe_dir in it) is a
LocalConnection confined to that directory: every command, started process and written file runs with the
sandbox's environment (PATH with its bin/ first, PTT_FAKE_*, HOME=<sandbox>/home, TMPDIR in it, nothing
secret of this machine's environment) and its cwd; ``~`` and relative paths resolve in it. Its run is
started, killed and resumed through services.lifecycle like any pod's; the connection starts nothing itself.
A demo pod without a sandbox (a monitor used alone: tests, embedding) gets a temp one, whose trainer the
connection starts at connect() and stops at close().
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from services.demo.pod import DemoPod, sandbox_root
from services.models import Pod
from services.pod.connection import ProbeStream, RemoteProcess
from services.pod.local import LocalConnection


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
    ckpt_interval: int = 5


class DemoConnection(LocalConnection):
    def __init__(self, pod: Pod, options: DemoOptions | None = None, *, root: Path | str | None = None) -> None:
        super().__init__(pod)
        self._options = options
        self.root = Path(root) if root is not None else sandbox_root(pod)
        self.demo: DemoPod | None = None

    async def connect(self) -> None:
        await super().connect()
        if self.root is None:  # standalone: a temp pod whose trainer this connection runs
            self.demo = DemoPod(**asdict(self._options or DemoOptions()))
            await self.demo.start_trainer()
        else:
            # what the sandbox says (demo.json, written by whoever started it) wins over these defaults
            self.demo = DemoPod.at(self.root, **asdict(self._options or DemoOptions()))
            self.demo.prepare(fresh=False)  # the layout (a headless command may be the first to use it)
            self.demo.drop_stale_owner()  # a killed app owns nothing: a run started now must not stop for it
        self._env = self.demo.env()

    def _sandbox(self) -> DemoPod:
        assert self.demo is not None, "connect() first"
        return self.demo

    async def start_probe(self, args: list[str]) -> ProbeStream:
        demo = self._sandbox()
        self._env = demo.env()
        self._extra_args = demo.probe_args()
        return await super().start_probe(args)

    def _shell_env(self) -> dict[str, str]:
        return self._sandbox().env()  # not this machine's environment: the sandbox's only

    def cwd(self) -> str:
        return str(self._sandbox().root)  # (run() and start() cd there first)

    def _in_sandbox(self, command: str) -> str:
        return f"cd {shlex.quote(str(self._sandbox().root))} && {command}"

    async def run(self, command: str, timeout: float = 30.0, input: bytes | None = None) -> tuple[int, str, str]:
        return await super().run(self._in_sandbox(command), timeout, input=input)

    async def start(self, command: str) -> RemoteProcess:
        return await super().start(self._in_sandbox(command))

    async def put_file(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        await super().put_file(data, str(self._sandbox().path(remote)), mode)

    async def exists(self, remote: str) -> bool:
        return self._sandbox().path(remote).exists()

    async def close(self) -> None:
        await super().close()
        demo, self.demo = self.demo, None
        if demo is not None:
            await demo.stop()  # standalone: its trainer and temp dir; a sandbox stays
