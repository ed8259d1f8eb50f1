"""action_latency: key press → first log line of the run in the app, and key press → processes gone for kill.

The headless app (Pilot) watches one pod over a real loopback sshd (the probe at 0.5 s); the "trainer" is
the simulated one (services/demo/trainer.py). Each round: ``L`` → the launch modal's plan (SSH connect)
→ click Launch → pre-flight + upload + detached start → the run's first log line in the app's snapshot
of the pod (the monitor's tail of the run's logs); then ``k`` → plan → click Kill → SIGTERM to the group
→ no process of the run left (watched in /proc from a thread).

The trainer's own start (python start-up until its first log line, run here without the app) is measured
separately and subtracted: launch overhead = confirm → first line in the app − trainer start. The run's
command names this interpreter by its absolute path, as the solo start does: a bare ``python3`` would
resolve through the pod's login PATH, which can be a shim (pyenv on this machine: ~0.15 s more per start)
— the trainer's cost, not the launch's.

The pod's shell rc is empty (its HOME an empty directory, as monitor_load.py's pod): this machine's own rc runs
``pyenv init`` on every SSH exec (0.3-0.8 s each on two loaded cores, twice per launch: the plan and the helper),
a cost of this machine's shell that would otherwise be the largest part of the figure; ``--login-rc`` keeps it.

    python tests/benchmarks/action_latency.py [--rounds 5] [--login-rc]

The confirm is ``Button.press()`` (what a click posts), timed from the call: ``pilot.click`` first waits for
every widget's message queue to drain, which with the live monitor redrawing took up to ~3 s here and was
counted as the action's latency (the kill's "click → gone" of ~3.3 s while the kill itself took 0.4 s).

Targets: launch overhead < 1 s; kill < 2 s + the grace period (the simulated trainer honours SIGTERM, so
no grace is spent). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import ClientHome, _make_server  # noqa: E402

TRAINER = REPO / "services" / "demo" / "trainer.py"
FIRST = "Starting from step"  # the simulated trainer's first log line (prime-rl's wording)


def trainer_start(tmp: Path, n: int = 5) -> list[float]:
    """Seconds from exec to the first line in logs/trainer.log, without the app or SSH."""
    out = []
    for i in range(n):
        run = tmp / f"solo{i}"
        log = run / "logs" / "trainer.log"
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, str(TRAINER), "--run-dir", str(run), "--step-seconds", "0.5"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not (log.exists() and FIRST in log.read_text(errors="replace")):
            if time.perf_counter() - t0 > 30:
                raise TimeoutError(f"the trainer wrote no {FIRST!r} line in {log}")
            time.sleep(0.002)
        out.append(time.perf_counter() - t0)
        p.terminate()
        p.wait()
    return out


def pids_of(run_dir: Path) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and str(TRAINER).encode() in cmd and str(run_dir).encode() in cmd:
            found.append(int(name))
    return found


async def until(pilot, pred, timeout: float = 30.0) -> float:
    end = time.perf_counter() + timeout
    while not pred():
        if time.perf_counter() > end:
            raise TimeoutError("timed out")
        await pilot.pause(0.005)
    return time.perf_counter()


async def one_round(server, tmp: Path, cfg: Path, i: int) -> dict[str, float]:
    from app.screens.lifecycle import LifecycleScreen
    from app.tui import PrimeTrainApp
    from services.models import PodState
    from services.monitor.worker import MonitorSettings

    run = tmp / f"run{i}"
    pod = server.pod(name="bench", run_dir=str(run), probe_dir=str(tmp / "podstate"))
    app = PrimeTrainApp([pod], settings=MonitorSettings(interval=0.5), config_path=cfg)
    r: dict[str, float] = {}
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: (s := app.snapshots.get("bench")) is not None and s.status.state is PodState.ONLINE)
        app.pod_list.select("bench")
        await pilot.pause()

        def first_line() -> bool:
            s = app.snapshots.get("bench")
            return s is not None and any(FIRST in line for line in s.log_tail)

        t_key = time.perf_counter()
        await pilot.press("L")
        screen = await _modal(pilot, LifecycleScreen)
        go = screen.query_one("#lc-go")
        t_plan = await until(pilot, lambda: not go.disabled)
        t_go = time.perf_counter()
        go.press()  # see the module docstring: not pilot.click
        # the first line is watched from the click, not from "done": done comes after the start watch
        # (start_watch_seconds: a run that dies at once is reported as an error), while the run is already
        # writing its log
        t_log = await until(pilot, first_line)
        t_done = await until(pilot, lambda: screen.result is not None)
        assert screen.result.kind == "done", screen.result.message
        r.update(
            launch_plan=t_plan - t_key,
            launch_action=t_done - t_go,
            launch_first_line=t_log - t_key,
            launch_confirm_to_line=t_log - t_go,
            line_to_done=t_done - t_log,
        )
        await pilot.press("escape")
        await pilot.pause()

        gone_at: list[float] = []
        stop = threading.Event()
        watched = pids_of(run)

        def alive(pid: int) -> bool:
            try:
                return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        def watch() -> None:  # the run's known pids, from a thread, every 5 ms (cheap: no /proc scan)
            while not stop.is_set():
                if not any(alive(p) for p in watched):
                    gone_at.append(time.perf_counter())
                    return
                time.sleep(0.005)

        assert watched, "the run is not running"
        t_key = time.perf_counter()
        await pilot.press("k")
        screen = await _modal(pilot, LifecycleScreen)
        go = screen.query_one("#lc-go")
        t_plan = await until(pilot, lambda: not go.disabled)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        t_go = time.perf_counter()
        go.press()  # see the module docstring: not pilot.click
        t_done = await until(pilot, lambda: screen.result is not None)
        stop.set()
        watcher.join(5)
        assert screen.result.kind == "done", screen.result.message
        r.update(
            kill_plan=t_plan - t_key,
            kill_gone=(gone_at[0] if gone_at else t_done) - t_key,
            kill_confirm_to_gone=(gone_at[0] if gone_at else t_done) - t_go,
            kill_action=t_done - t_go,
        )
        await pilot.press("escape")
        await pilot.pause()
    return r


async def _modal(pilot, kind):
    await until(pilot, lambda: isinstance(pilot.app.screen, kind))
    return pilot.app.screen


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--login-rc",
        action="store_true",
        help="the pod's shell reads this machine's own rc files (here: pyenv init on every exec) instead of empty ones",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ptt-bench-"))
    pod_env = {"PTT_FAKE_GPUS": "8"}
    if not args.login_rc:  # as monitor_load.py: no per-exec start-up of this machine's shell in the figure
        pod_home = tmp / "pod-home"
        pod_home.mkdir()
        (pod_home / ".bashrc").write_text("")
        (pod_home / ".profile").write_text("")
        pod_env["HOME"] = str(pod_home)
    server = _make_server(tmp / "sshd", env=pod_env)
    server.start()
    home_dir = tmp / "home"
    (home_dir / ".ssh").mkdir(parents=True, mode=0o700)
    cfg_dir = tmp / "cfg"
    cfg_dir.mkdir()
    (cfg_dir / "settings.toml").write_text(
        "[lifecycle]\n"
        f'command = "{sys.executable} {TRAINER} --run-dir {{run_dir}} --step-seconds 0.5 --ckpt-interval 0"\n'
        'min_nofile = 1024\nmin_free_bytes = 1\ncuda_check = false\ntmux = "setsid"\ngrace_seconds = 10\n'
    )
    os.environ.update(
        HOME=str(home_dir), PRIME_TRAIN_TUI_CONFIG_DIR=str(cfg_dir), PRIME_TRAIN_TUI_DATA_DIR=str(tmp / "data")
    )
    os.environ.pop("SSH_AUTH_SOCK", None)
    home = ClientHome(home=home_dir, server=server)
    home.write_ssh_config()
    home.trust()
    config = tmp / "rl.toml"
    config.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-0.6B"\n')
    try:
        solo = trainer_start(tmp)
        rounds = [await one_round(server, tmp, config, i) for i in range(args.rounds)]
    finally:
        server.kill()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    worst = {k: max(r[k] for r in rounds) for k in rounds[0]}
    start = statistics.median(solo)
    print(
        f"action_latency: {args.rounds} rounds over a loopback sshd, headless app, probe at 0.5 s; the pod's shell "
        f"rc {'this machine’s own' if args.login_rc else 'empty'}; {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'figure':<52} {'median s':>9} {'max s':>8}")
    rows = [
        ("L → launch plan shown (SSH connect)", "launch_plan"),
        ("Launch click → done (pre-flight, upload, start, watch)", "launch_action"),
        ("first log line in the app → done (the start watch)", "line_to_done"),
        ("Launch click → first log line in the app", "launch_confirm_to_line"),
        ("L → first log line in the app (incl. the confirm)", "launch_first_line"),
        ("k → kill plan shown", "kill_plan"),
        ("Kill click → every process of the run gone", "kill_confirm_to_gone"),
        ("k → every process gone (incl. the confirm)", "kill_gone"),
        ("Kill click → kill done (incl. the GPU check)", "kill_action"),
    ]
    for label, key in rows:
        print(f"{label:<52} {med[key]:>9.3f} {worst[key]:>8.3f}")
    print(f"{'trainer own start (exec → first line, no app)':<52} {start:>9.3f} {max(solo):>8.3f}")
    overhead = med["launch_confirm_to_line"] - start
    print(
        f"launch overhead excluding the trainer's start: {overhead:.3f} s (target < 1 s: "
        f"{'met' if overhead < 1 else 'MISSED'}); includes up to one probe interval (0.5 s) of log tailing"
    )
    print(
        f"kill, click → processes gone: {med['kill_confirm_to_gone']:.3f} s (target < 2 s + grace: "
        f"{'met' if med['kill_confirm_to_gone'] < 2 else 'MISSED'})"
    )


if __name__ == "__main__":
    asyncio.run(main())
