"""The incident corpus's runner: every scenario replayed at once on a real sshd pod, watched by the product.

One sshd (tests/conftest.py's ``SshServer``) serves every scenario but the lost pod (which has its own, to kill).
Each scenario launches the stand-in (``standin.py``) on the pod through the product's run target (the calls the
``launch``/``kill``/``resume`` commands make: ``services.lifecycle.targets.target_for(pod)``), one
``MonitorService`` watches every scenario's pod as the App does, and every alert is recorded with the time it
first showed. The stand-in records its incident's onset (``.standin/onset.json``); a user action's moment is
the harness's. Time to detect = the alert's first showing - the onset.

Speed: the stand-in steps about once a second and the stall rule's budget is scaled by ``SCALED`` (the real
defaults need minutes: floor 300 s, start 900 s, cap 2700 s), keeping its shape (k x the step time, clamped;
the start budget 3 x the floor, the cap 9 x). Rules whose target is absolute (a dead inference server < 60 s,
a broadcast stall < 90 s once overdue) keep their defaults. ``nofile_min`` is lowered because this test
machine's hard limit (20000) is below the real minimum and cannot be raised: that rule has its own tests.
``status POD --json`` and ``watch --once`` (the command line, as a subprocess, with the same thresholds in
settings.toml) are asked about the kill, finish and resume scenarios at the end: they must show no alert.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.models import Pod, PodSnapshot, PodState
from services.monitor.health import HealthSettings
from services.monitor.service import MonitorService
from services.monitor.worker import MonitorSettings
from tests.conftest import ClientHome, SshServer, _make_server

STANDIN = Path(__file__).resolve().with_name("standin.py")
REPO = Path(__file__).resolve().parents[2]

# HealthSettings scaled for a ~1 s step (see the module docstring); names not (yet) in HealthSettings are
# skipped, so a rule's own settings can be added here before it exists.
SCALED: dict[str, float] = {
    "stall_floor_s": 8.0,
    "stall_start_s": 24.0,
    "stall_cap_s": 72.0,
    "nofile_min": 1024,
    "broadcast_floor_s": 8.0,
}
STEP_S = 1.0
ANY = "*"  # must_not: no alert at all


def scaled_health() -> HealthSettings:
    names = {f.name for f in dataclasses.fields(HealthSettings)}
    return HealthSettings(**{k: v for k, v in SCALED.items() if k in names})  # type: ignore[arg-type]


def stall_budget_s() -> float:
    h = scaled_health()
    return min(h.stall_cap_s, max(h.stall_floor_s, h.stall_k * STEP_S))


@dataclass(frozen=True)
class Scenario:
    name: str
    normal: bool  # a normal operation (zero alerts) or an incident
    what: str  # one line for the table
    must: dict[str, float] = field(default_factory=dict)  # alert id -> max seconds from the onset
    must_not: frozenset[str] = frozenset({ANY})
    incident: str = ""  # the stand-in's --incident
    at_step: int = 3
    hold: float = 0.0
    max_steps: int = 1000
    ckpt_interval: int = 2
    metrics_server: bool = False
    action: str = ""  # kill | resume | finish | pod-lost | disk
    watch_s: float = 0.0  # how long to watch after the onset (an incident: until its alerts came, at most this)
    cli: bool = False  # ask status/watch --once at the end
    ckpt_kib: int = 64


def _budget() -> float:
    return stall_budget_s()


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "kill", True, "the user kills the run (launch, 3 steps, kill)", action="kill", watch_s=_budget() * 2, cli=True
    ),
    Scenario(
        "finish",
        True,
        "the run reaches max_steps and exits 0",
        max_steps=5,
        action="finish",
        watch_s=_budget() * 2,
        cli=True,
    ),
    Scenario(
        "resume",
        True,
        "kill at step 4, resume from checkpoint step_4",
        action="resume",
        watch_s=_budget() * 2,
        cli=True,
    ),
    Scenario(
        "long-save",
        True,
        "a checkpoint save takes 3 x the stall budget",
        incident="long-save",
        at_step=4,
        hold=_budget() * 3,
        watch_s=_budget() * 3 + 4,
    ),
    Scenario(
        "eval",
        True,
        "an eval holds training for 2 x the stall budget",
        incident="eval",
        at_step=3,
        hold=_budget() * 2,
        watch_s=_budget() * 2 + 4,
    ),
    Scenario(
        "slow-start",
        True,
        "inference loads for 1.5 x the stall budget before step 1",
        incident="slow-start",
        hold=_budget() * 1.5,
        watch_s=_budget() * 1.5 + 6,
    ),
    Scenario(
        "inference-died",
        False,
        "the inference server is killed (SIGKILL) at step 3",
        incident="inference-dies",
        must={"inference-down": 60.0},
        must_not=frozenset({"run-crashed"}),
        watch_s=65.0,
    ),
    Scenario(
        "broadcast-stall",
        False,
        "NCCL_READY never comes for step 3's weights",
        incident="broadcast-stall",
        must={"broadcast-stall": 90.0},
        must_not=frozenset({"run-crashed"}),
        watch_s=95.0,
    ),
    Scenario(
        "trainer-hung",
        False,
        "the trainer stops after step 3; its metrics server still answers",
        incident="trainer-hung",
        metrics_server=True,
        must={"trainer-hung": _budget() + 20.0},
        must_not=frozenset({"run-crashed"}),
        watch_s=_budget() + 15.0,
    ),
    Scenario(
        "env-lag",
        False,
        "the event-loop lag grows ~60 s per second from step 3",
        incident="env-lag",
        must={"loop-lag": 30.0},
        must_not=frozenset({"run-crashed", "no-progress"}),
        watch_s=35.0,
    ),
    Scenario(
        "trainer-oom",
        False,
        "the trainer dies at step 3 with torch.OutOfMemoryError",
        incident="oom",
        must={"log:cuda-oom": 20.0, "run-crashed": 20.0},
        must_not=frozenset({"no-progress"}),
        watch_s=_budget() * 2,
    ),
    Scenario(
        "disk-fill",
        False,
        "checkpoints fill a 40 MiB run volume (a real tmpfs)",
        action="disk",
        ckpt_interval=1,
        ckpt_kib=3072,
        must={"disk": 10.0},
        must_not=frozenset({"run-crashed"}),
        watch_s=15.0,
    ),
    Scenario(
        "pod-lost",
        False,
        "the pod's sshd and its sessions die at step 3 (the run goes on, unseen)",
        action="pod-lost",
        must_not=frozenset({ANY}),
        watch_s=_budget() * 2,
    ),
)
BY_NAME = {s.name: s for s in SCENARIOS}
# Times to detect: the absolute targets as they are (inference down 60 s, a broadcast stall 90 s); the
# hung trainer within the stall budget plus 20 s (its metrics server is asked every 10 s, and the corpus runs its
# 13 pods at once on 2 shared cores), a crash within 20 s.


@dataclass
class Result:
    scenario: Scenario
    onset: float | None = None  # epoch seconds
    first_seen: dict[str, float] = field(default_factory=dict)  # alert id -> epoch seconds it first showed
    offline_at: float | None = None  # pod-lost: when the pod showed offline
    cli: dict[str, list[str]] = field(default_factory=dict)  # "status"/"watch" -> alert ids they reported
    error: str = ""
    # what the pod's snapshots went through (state, alerts, samples taken / dropped / malformed), and the last log
    # lines seen: said with a failure, so a run that failed on a loaded machine says why
    trail: list[str] = field(default_factory=list)
    tail: tuple[str, ...] = ()
    where: str = ""  # the pod's watching task at the end (_where)
    _last: tuple = ()

    def detect_s(self, alert_id: str) -> float | None:
        at = self.first_seen.get(alert_id)
        return None if at is None or self.onset is None else at - self.onset

    def problems(self) -> list[str]:
        """What this scenario got wrong; empty when it passed."""
        s, out = self.scenario, []
        if self.error:
            out.append(self.error)
        for aid, limit in s.must.items():
            dt = self.detect_s(aid)
            if dt is None:
                out.append(f"{aid} not raised within {s.watch_s:.0f} s")
            elif dt > limit:
                out.append(f"{aid} raised after {dt:.1f} s (target {limit:g} s)")
        bad = [a for a in self.first_seen if a not in s.must and (ANY in s.must_not or a in s.must_not)]
        out += [f"raised {a} ({self._when(a)})" for a in sorted(bad)]
        if s.action == "pod-lost" and self.offline_at is None:
            out.append("the pod never showed offline")
        for front, ids in sorted(self.cli.items()):
            if ids:
                out.append(f"`{front}` reported {', '.join(ids)}")
        if out:
            out.append("snapshots: " + " | ".join(self.trail[-12:]) + " || last log lines: " + " / ".join(self.tail))
            out.append(self.where)
        return out

    def record(self, snap: PodSnapshot, now: float) -> None:
        state = (
            snap.status.state.value,
            snap.status.reason[:60],
            tuple(sorted(a.id for a in snap.alerts)),
            snap.dropped_total,
            snap.malformed_total,
            len(snap.gaps),
        )
        if state != self._last:
            self._last = state
            at = f"{now - self.onset:+.1f}s" if self.onset else "before"
            self.trail.append(
                f"{at} {state[0]} {state[1]!r} alerts={','.join(state[2])} samples={snap.samples_total}"
                f" dropped={state[3]} malformed={state[4]} gaps={state[5]}"
            )
        self.tail = tuple(line[:100] for line in snap.log_tail[-4:])

    def _when(self, aid: str) -> str:
        dt = self.detect_s(aid)
        return "before the onset" if dt is None or dt < 0 else f"{dt:.1f} s after the onset"


# ------------------------------------------------------------------------------------------------ the pod
@dataclass
class Env:
    root: Path
    server: SshServer
    home: Path
    data: Path
    config_dir: Path

    def pod(self, name: str, run_dir: Path, server: SshServer | None = None) -> Pod:
        return (server or self.server).pod(
            f"inc-{name}", run_dir=str(run_dir), probe_dir=str(self.root / name / "podstate")
        )


@contextlib.contextmanager
def environment(root: Path) -> Iterator[Env]:
    """One sshd and a client HOME trusting it (this process's HOME and app dirs point there meanwhile)."""
    server = _make_server(root / "sshd", env={"PTT_FAKE_GPUS": "2"})
    server.start()
    home = root / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    client = ClientHome(home=home, server=server)
    client.write_ssh_config()
    client.trust()
    config_dir, data = home / ".config" / "prime-train-tui", root / "data"
    config_dir.mkdir(parents=True)
    (config_dir / "settings.toml").write_text(
        "[health]\n" + "".join(f"{k} = {v}\n" for k, v in dataclasses.asdict(scaled_health()).items() if k in SCALED)
    )
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(config_dir),
        "PRIME_TRAIN_TUI_DATA_DIR": str(data),
        "PRIME_TRAIN_TUI_CACHE_DIR": str(root / "cache"),
    }
    saved = {k: os.environ.get(k) for k in [*env, "SSH_AUTH_SOCK"]}
    os.environ.update(env)
    os.environ.pop("SSH_AUTH_SOCK", None)
    try:
        yield Env(root, server, home, data, config_dir)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.kill()


def _settings(env: Env, s: Scenario) -> Any:
    from services.lifecycle.preflight import LifecycleSettings

    knobs = f" --incident {s.incident}" if s.incident else ""
    knobs += f" --at-step {s.at_step} --hold {s.hold:g} --step-seconds {STEP_S:g} --ckpt-kib {s.ckpt_kib}"
    return LifecycleSettings(
        command=f"python3 {STANDIN} @ {{config}} --output-dir {{run_dir}}{knobs}",
        min_nofile=1024,
        min_free_bytes=1,
        cuda_check=False,
        tmux="setsid",
        grace_seconds=3.0,
        dry_run="off",
        runs_dir=env.data / "runs",
        start_watch_seconds=0.3,
    )


def _config(env: Env, s: Scenario, inference_port: int, metrics_port: int) -> Path:
    path = env.root / s.name / "rl.toml"
    text = (
        f'max_steps = {s.max_steps}\n\n[model]\nname = "Qwen/Qwen3-0.6B"\n\n'
        f"[ckpt]\ninterval = {s.ckpt_interval}\n\n[trainer]\n\n"
        "[orchestrator]\nbatch_size = 16\ngroup_size = 8\n\n"
        # the orchestrator's client on the inference server's port (prime-rl's rl launcher refuses another)
        f'[orchestrator.model.client]\nbase_url = "http://localhost:{inference_port}/v1"\n\n'
        "[[orchestrator.train.source]]\n"
        'name = "reverse-text"\n\n[orchestrator.train.source.env.taskset]\nid = "reverse-text"\n\n'
        f"[inference.server]\nport = {inference_port}\n"
    )
    if s.metrics_server:
        text += f"\n[trainer.metrics_server]\nport = {metrics_port}\n"
    path.write_text(text)
    return path


def _stop_run_here(run_dir: Path) -> None:
    """The run's process group, from its leader's record, stopped on this machine (the test's "pod")."""
    import signal

    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        leader = json.loads((run_dir / ".ptt" / "leader.json").read_text())
        os.killpg(int(leader["pgid"]), signal.SIGKILL)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _events(gen: Any) -> list[Any]:
    return [ev async for ev in gen]


async def _launch(pod: Pod, config: Path, settings: Any, run_dir: Path) -> None:
    from services.lifecycle.targets import target_for
    from services.pod.ssh import SSHConnection

    async with SSHConnection(pod) as conn:
        events = await _events(target_for(pod).launch(conn, config, settings=settings, run_dir=str(run_dir)))
    if not events or events[-1].kind != "done":
        raise RuntimeError("launch failed: " + " | ".join(e.message for e in events))


async def _kill(pod: Pod, settings: Any) -> None:
    from services.lifecycle.targets import target_for
    from services.pod.ssh import SSHConnection

    async with SSHConnection(pod) as conn:
        target = target_for(pod)
        plan = await target.plan_kill(conn, settings)
        if plan is None:
            raise RuntimeError("kill: no active run on the pod")
        events = await _events(target.kill(conn, plan, settings=settings))
    if not events or events[-1].kind != "done":
        raise RuntimeError("kill failed: " + " | ".join(e.message for e in events))


async def _resume(pod: Pod, settings: Any) -> None:
    from services.lifecycle.targets import target_for
    from services.pod.ssh import SSHConnection

    async with SSHConnection(pod) as conn:
        target = target_for(pod)
        plan = await target.plan_resume(conn, settings)
        events = await _events(target.resume(conn, plan, settings=settings))
    if not events or events[-1].kind != "done":
        raise RuntimeError("resume failed: " + " | ".join(e.message for e in events))


def _trainer_step(run_dir: Path) -> int:
    """The newest step the trainer logged (read on disk: the pod is this machine)."""
    try:
        text = (run_dir / "logs" / "latest" / "trainer.log").read_text()
    except OSError:
        return 0
    steps = [int(ln.split("Step ", 1)[1].split()[0]) for ln in text.splitlines() if " SUCCESS Step " in ln]
    return max(steps, default=0)


def _where(monitor: MonitorService, name: str) -> str:
    """Where the pod's watching task is at the scenario's end (its innermost frames) and the bytes it took: what a
    failure on a loaded machine says beside the snapshots."""
    worker = monitor._workers[name]
    task = worker.task
    chain, coro = [], task.get_coro() if task is not None and not task.done() else None
    while coro is not None and len(chain) < 12:  # the awaits, outermost first
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            chain.append(type(coro).__name__)
            break
        chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    at = " > ".join(chain)
    return f"task at {at or 'none'}; bytes={worker.bytes_total} samples={worker.samples_total}"


async def _until(pred: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def _onset_file(run_dir: Path) -> float | None:
    try:
        return float(json.loads((run_dir / ".standin" / "onset.json").read_text())["onset"])
    except (OSError, ValueError, KeyError):
        return None


# ------------------------------------------------------------------------------------------------ one scenario
async def _scenario(env: Env, monitor: MonitorService, s: Scenario, result: Result) -> None:
    base = env.root / s.name
    base.mkdir(parents=True, exist_ok=True)
    server = None
    vol = base / "vol"
    if s.action == "disk":  # a real small filesystem: the run volume fills up for real
        vol.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(vol)], check=True)
        run_dir = vol / "run"
    else:
        run_dir = base / "run"
    if s.action == "pod-lost":
        server = _make_server(base / "sshd", env={"PTT_FAKE_GPUS": "2"})
        with (server.root / "authorized_keys").open("a") as f:  # the client's key (one HOME for all)
            f.write(env.server.root.joinpath("client_ed25519.pub").read_text())
        server.start()
        (env.home / ".ssh" / "known_hosts").open("a").write(server.known_hosts_line + "\n")
    pod = env.pod(s.name, run_dir, server)
    settings = _settings(env, s)
    config = _config(env, s, _free_port(), _free_port())
    try:
        monitor.add(pod)  # watched before the launch, as in the App: the run's files are read from their start
        # ... and launched once the watching is up, as a user launches on a pod the App shows: 13 pods starting at
        # once on a loaded 2-core machine took over 30 s to their first sample (every exec there sources the
        # machine's shell rc), and the incident came and went before any probe ran
        await _until(lambda: monitor.snapshot(pod.name).samples_total > 0, 120, "the pod's first sample")
        await _launch(pod, config, settings, run_dir)
        if s.action in ("kill", "resume", "pod-lost"):
            at = 4 if s.action == "resume" else s.at_step
            await _until(lambda: _trainer_step(run_dir) >= at, 60, f"step {at}")
            if s.action == "pod-lost":
                result.onset = time.time()
                assert server is not None
                server.kill()
            else:
                result.onset = time.time()
                await _kill(pod, settings)
                if s.action == "resume":
                    await asyncio.sleep(2.0)
                    await _resume(pod, settings)
        elif s.action == "finish":
            await _until(
                lambda: "RL trainer finished!" in _read(run_dir / "logs" / "latest" / "trainer.log"),
                60,
                "the run to finish",
            )
            result.onset = time.time()
        elif s.action == "disk":
            await _until(lambda: _disk_pct(run_dir) > scaled_health().disk_pct, 60, "the disk to fill")
            result.onset = time.time()
        else:
            await _until(lambda: _onset_file(run_dir) is not None, 60, "the incident's onset")
            result.onset = _onset_file(run_dir)
        end = time.time() + s.watch_s
        while time.time() < end:
            if s.must and not s.normal and all(a in result.first_seen for a in s.must):
                await asyncio.sleep(2.0)  # a little more, for what must not follow
                break
            await asyncio.sleep(0.2)
        if s.cli:
            result.cli = await asyncio.to_thread(_cli_alerts, env, pod)
    except Exception as exc:  # noqa: BLE001 - a broken scenario is reported as its result, the others go on
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            result.where = _where(monitor, pod.name)
        with contextlib.suppress(Exception):
            await monitor.remove(pod.name)
        with contextlib.suppress(Exception):
            await _kill(pod, settings)
        if server is not None:
            server.kill()
            _stop_run_here(run_dir)  # its pod is gone: the kill above could not reach the run
        if s.action == "disk":
            subprocess.run(["umount", "-l", str(vol)], check=False)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _disk_pct(path: Path) -> float:
    st = os.statvfs(path)
    return 100.0 * (st.f_blocks - st.f_bfree) / st.f_blocks


def _cli_alerts(env: Env, pod: Pod) -> dict[str, list[str]]:
    """Alert ids ``status POD --json`` and ``watch --once`` report for the pod (pods.toml names it)."""
    pods_toml = env.config_dir / "pods.toml"
    with pods_toml.open("a") as f:
        f.write(
            f'\n[pods.{pod.name}]\nhost = "127.0.0.1"\nuser = "{pod.user}"\nport = {pod.port}\n'
            f'run_dir = "{pod.run_dir}"\nprobe_dir = "{pod.probe_dir}"\n'
        )
    penv = {**os.environ, "PYTHONPATH": str(REPO)}
    out: dict[str, list[str]] = {}
    for front, args in (("status", ["status", pod.name, "--json"]), ("watch --once", ["watch", pod.name, "--once"])):
        res = subprocess.run(
            [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, env=penv, cwd=REPO, timeout=90
        )
        out[front] = (
            _ids(res.stdout, pod.name)
            if res.stdout.strip()
            else [f"<exit {res.returncode}: {res.stderr.strip()[-200:]}>"]
        )
    return out


def _ids(stdout: str, name: str) -> list[str]:
    doc = json.loads(stdout)
    pods = doc.get("pods", doc) if isinstance(doc, dict) else doc
    entries = pods.values() if isinstance(pods, dict) else pods
    found: list[str] = []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("pod", entry.get("name", name)) == name:
            for a in entry.get("alerts") or []:
                found.append(a["id"] if isinstance(a, dict) else str(a))
    return found


# ------------------------------------------------------------------------------------------------ the corpus
def run_corpus(root: Path, names: list[str] | None = None) -> dict[str, Result]:
    """Run the named scenarios (all by default) at once; their results by name."""
    chosen = [BY_NAME[n] for n in names] if names else list(SCENARIOS)
    with environment(root) as env:
        return asyncio.run(_corpus(env, chosen))


async def _corpus(env: Env, chosen: list[Scenario]) -> dict[str, Result]:
    results = {s.name: Result(s) for s in chosen}

    def on_snapshot(snap: PodSnapshot) -> None:
        r = results.get(snap.pod.name.removeprefix("inc-"))
        if r is None:
            return
        now = time.time()
        for a in snap.alerts:
            r.first_seen.setdefault(a.id, now)
        r.record(snap, now)
        if snap.status.state in (PodState.OFFLINE, PodState.STALE) and r.offline_at is None and r.onset:
            r.offline_at = now

    monitor = MonitorService(on_snapshot, settings=MonitorSettings(health=scaled_health(), wandb=False))
    try:
        await asyncio.gather(*(_scenario(env, monitor, s, results[s.name]) for s in chosen))
    finally:
        await monitor.aclose()
    shutil.rmtree(env.root / "cache", ignore_errors=True)
    return results
