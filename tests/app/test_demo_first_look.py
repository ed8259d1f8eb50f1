"""The monitor's first look at the demo pod's run dir, which the TUI has just emptied.

Before the probe starts, the monitor looks at the run dir's log tails (services/monitor/progress.py TAIL_SCRIPT,
a Python process). The demo's run dir is on this machine and empty at start, yet the look's process (~40 ms alone,
~130 ms on loaded cores) held back the probe's start and the demo's first GPUs on screen. What must hold now: a run
dir on this machine with nothing but empty directories is not looked at by a process, and the answer is the
script's (no logs: the probe reads the logs from their start); anything the script could read still goes through
it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.demo.connection import DemoConnection
from services.demo.pod import DemoPod, sandbox_paths
from services.models import Pod, PodKind
from services.monitor.progress import TAIL_SCRIPT
from services.monitor.service import MonitorService, _holds_no_files
from services.monitor.worker import MonitorSettings

SETTINGS = MonitorSettings(interval=0.2, stale_after=30.0)


def script_answer(run_dir: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", TAIL_SCRIPT, str(run_dir)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def layouts(root: Path) -> dict[str, Path]:
    """Run dirs, each named by what is in it."""
    made: dict[str, Path] = {}

    def run(name: str, *files: str, dirs: tuple[str, ...] = ()) -> None:
        d = root / name
        d.mkdir()
        for sub in dirs:
            (d / sub).mkdir(parents=True)
        for f in files:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            (d / f).write_text('{"max_steps": 5}\n' if f.endswith(".json") else "Step 3 | loss 0.5\n")
        made[name] = d

    run("empty")
    run("demo fresh", dirs=("logs", "checkpoints"))
    run("a log", "logs/trainer.log")
    run("a latest log", "logs/latest/orchestrator.log")
    run("metrics", "metrics.jsonl")
    run("csv", "training.csv")
    run("a config", "configs/trainer.json")
    run("a checkpoint only", "checkpoints/step_1/model.bin")
    linked = root / "linked"
    linked.mkdir()
    (linked / "logs").mkdir()
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "x.log").write_text("Step 1\n")
    (linked / "logs" / "latest").symlink_to(root / "elsewhere")
    made["a linked latest"] = linked
    made["missing"] = root / "missing"
    return made


def test_the_fast_answer_is_given_only_where_the_script_finds_nothing(tmp_path: Path) -> None:
    fast = set()
    for name, run_dir in layouts(tmp_path).items():
        if _holds_no_files(str(run_dir)):
            fast.add(name)
            answer = script_answer(run_dir)
            assert answer["logs"] == [], name
            assert not {"metrics.jsonl", "training.csv", "max_steps"} & set(answer), name
    assert fast == {"empty", "demo fresh", "missing"}
    assert not _holds_no_files("run")  # relative: resolved by the pod's shell, not here


@pytest.fixture
def fresh_demo(tmp_path: Path) -> tuple[Pod, DemoPod]:
    demo = DemoPod(root=tmp_path / "demo-pod", gpus=2, interval=0.2)
    demo.prepare(fresh=True)
    pod = Pod(name="demo", kind=PodKind.DEMO, **sandbox_paths(demo.root))  # type: ignore[arg-type]
    return pod, demo


class Recording(DemoConnection):
    """The demo pod's own connection, noting the commands run through it."""

    commands: list[str]

    async def run(self, command: str, timeout: float = 30.0, input: bytes | None = None) -> tuple[int, str, str]:
        self.commands.append(command)
        return await super().run(command, timeout, input=input)


async def first_sample(pod: Pod, commands: list[str]) -> tuple[bool, object]:
    def connector(p: Pod) -> DemoConnection:
        conn = Recording(p)
        conn.commands = commands
        return conn

    mon = MonitorService(lambda snap: None, settings=SETTINGS, connector=connector)
    mon.add(pod)
    try:
        for _ in range(400):
            snap = mon.snapshot(pod.name)
            if snap.latest is not None:
                return True, snap
            await asyncio.sleep(0.05)
        return False, mon.snapshot(pod.name)
    finally:
        await mon.aclose()


async def test_the_fresh_demo_run_dir_is_not_looked_at_by_a_process(fresh_demo) -> None:
    pod, demo = fresh_demo
    commands: list[str] = []
    got, snap = await first_sample(pod, commands)
    assert got, f"no first sample: {snap}"
    assert not [c for c in commands if "glob" in c], "the empty run dir was looked at by a process"


async def test_a_run_dir_with_a_log_is_still_looked_at(fresh_demo) -> None:
    pod, demo = fresh_demo
    log = Path(pod.run_dir or "") / "logs" / "trainer.log"
    log.write_text("Step 7/20 | loss: 0.5\n")
    os.utime(log, (0, 0))
    commands: list[str] = []
    got, snap = await first_sample(pod, commands)
    assert got, f"no first sample: {snap}"
    assert [c for c in commands if "glob" in c], "the run dir's log was not looked at"
