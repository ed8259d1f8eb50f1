"""The monitor's first look at a run dir on this machine (the demo pod's, the local pod's).

Before the probe starts, the monitor looks at the run dir's log tails (services/pod/agent/tails.py, run on a pod as
a Python process: services/monitor/progress.py TAIL_SCRIPT). On this machine that process (~40 ms alone, ~130 ms on
loaded cores) held back the probe's start and the demo's first GPUs on screen. What must hold now: a run dir on
this machine is looked at by the script's own function, in-process, with the script's answer for every layout
(real files; relative paths under the directory the script would run in), and never by a process."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from services.demo.connection import DemoConnection
from services.demo.pod import DemoPod, sandbox_paths
from services.models import Pod, PodKind
from services.monitor.progress import TAIL_SCRIPT
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from services.pod.agent.tails import look

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


def same(answer: dict, script: dict) -> dict:
    """The answer with the script's clock and uptime (read a moment apart) where they are close enough."""
    assert abs(answer["now"] - script["now"]) < 60 and abs(answer.get("uptime", 0) - script.get("uptime", 0)) < 60
    return {**answer, "now": script["now"], **({"uptime": script["uptime"]} if "uptime" in script else {})}


def test_the_in_process_look_answers_what_the_script_does(tmp_path: Path) -> None:
    made = layouts(tmp_path)
    big = tmp_path / "a long log"
    (big / "logs").mkdir(parents=True)
    (big / "logs" / "trainer.log").write_bytes(b"".join(b"Step %d | loss 0.5 \xff\n" % i for i in range(20000)))
    made["a long log"] = big
    for name, run_dir in made.items():
        script = script_answer(run_dir)
        assert same(look(str(run_dir)), script) == script, name
    assert script_answer(big)["logs"][0]["lines"][-1] == "Step 19999 | loss 0.5 \ufffd"  # (the layout is read)


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
    assert not [c for c in commands if "glob" in c], "the run dir was looked at by a process"


async def test_a_run_dir_with_a_log_is_looked_at_in_process(fresh_demo) -> None:
    """The look's answer reaches the pod's history as the script's did: the log's last lines, before the probe
    (which reads the log from its end, the look having found it) sends anything of it."""
    pod, demo = fresh_demo
    log = Path(pod.run_dir or "") / "logs" / "trainer.log"
    log.write_text("Step 7/20 | loss: 0.5\n")
    os.utime(log, (0, 0))
    commands: list[str] = []
    got, snap = await first_sample(pod, commands)
    assert got, f"no first sample: {snap}"
    assert not [c for c in commands if "glob" in c], "the run dir was looked at by a process"
    assert any("Step 7/20" in line for line in snap.log_tail), snap.log_tail


async def test_a_relative_run_dir_is_looked_at_where_the_script_would_run(fresh_demo) -> None:
    """The demo's connection runs commands in its sandbox: a relative run dir is under it, as for the script."""
    pod, demo = fresh_demo
    log = Path(pod.run_dir or "") / "logs" / "trainer.log"
    log.write_text("Step 3/20 | loss: 0.5\n")
    conn = DemoConnection(pod)
    await conn.connect()
    try:
        relative = os.path.relpath(pod.run_dir or "", conn.cwd())
        assert not os.path.isabs(relative) and not relative.startswith("..")
        code, out, err = await conn.run(f"{sys.executable} -c {shlex.quote(TAIL_SCRIPT)} {shlex.quote(relative)}")
        assert code == 0, err
        script = json.loads(out)
        assert script["logs"] and same(look(os.path.join(conn.cwd(), relative)), script) == script
    finally:
        await conn.close()


async def test_the_probe_starts_before_the_back_fill_which_comes_before_its_first_sample(fresh_demo) -> None:
    """Nothing waits before the probe's process starts (a thread's hop let the loop's queued work, a layout of
    the first screen, go first): the look's back-fill (the rental's lookup, the tails into the history) runs
    while it starts, and is in the history when its first sample is read."""
    pod, demo = fresh_demo
    log = Path(pod.run_dir or "") / "logs" / "trainer.log"
    log.write_text("Step 7/20 | loss: 0.5\n")
    os.utime(log, (0, 0))
    order: list[str] = []

    class Noting(DemoConnection):
        async def start_probe(self, args: list[str]):
            order.append("probe")
            return await super().start_probe(args)

    def rented_at(p: Pod) -> None:
        order.append("back-fill")

    def seen(snap) -> None:
        if snap.latest is not None and "sample" not in order:
            order.append("sample")
            assert any("Step 7/20" in line for line in snap.log_tail), snap.log_tail

    mon = MonitorService(seen, settings=SETTINGS, connector=lambda p: Noting(p))
    mon.rented_at = rented_at
    mon.add(pod)
    try:
        for _ in range(400):
            if "sample" in order:
                break
            await asyncio.sleep(0.05)
    finally:
        await mon.aclose()
    assert order == ["probe", "back-fill", "sample"]
