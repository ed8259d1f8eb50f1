"""DemoPod: the simulated pod's directory, its whole world (fake nvidia-smi, simulated /proc, its home, the
lifecycle helper's state, the run dir and a demo config).

Layout of the root::

    bin/nvidia-smi      the fake (runs services/demo/nvidia_smi.py in this interpreter), first on PATH
    proc/               the simulated /proc (stat, meminfo; rewritten by the fake nvidia-smi each tick)
    home/               HOME of everything run there (the lifecycle helper starts the run in ~)
    state/              the lifecycle helper's state dir (the demo Pod's probe_dir): run registry, action lock
    run/                the run dir
    tmp/                TMPDIR
    rl.toml             a demo config (services.config.wizard; validates clean)
    demo.json           how the simulated GPUs and trainer behave, for every process that uses the sandbox
    owner.json          the app that owns the demo ({"pid", "start"}): its run stops by itself once that
                        process ended, even killed (a headless start has no owner: its run keeps going)
    .ptt-demo-sandbox   the mark: only a directory that carries it is ever cleared

Two uses:

- A SANDBOX at a fixed root (the app's ``<data dir>/demo-pod``): the run is launched, killed, resumed and
  cleaned up through ``services.lifecycle`` exactly as on a real pod (the demo never imports it: it says how
  its trainer runs in :meth:`DemoPod.lifecycle_overrides`). A fixed root lets a headless command reach the
  run a running TUI owns. The demo is a simulation, so the TUI starts it fresh: :meth:`prepare` with
  ``fresh=True`` kills a trainer a crashed TUI left behind and clears run/ and state/.
- Standalone (``root=None``): a temp dir that :meth:`stop` deletes, whose trainer :meth:`start_trainer`
  spawns itself (a monitor used without the app: tests, embedding).

    async with DemoPod(seed=0, gpus=8, scenario="training") as pod:
        await pod.start_trainer()
        proc = await asyncio.create_subprocess_exec(*pod.probe_command(), env=pod.env(), ...)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from services.demo import nvidia_smi
from services.errors import ConnectError
from services.pod import agent

if TYPE_CHECKING:
    from services.models import Pod


DEMO_DIR = Path(__file__).resolve().parent
PROBE_PATH = agent.PROBE
# the fake nvidia-smi imported (its bytecode cached) rather than run as a script (compiled on every call); isolated
# (-I: no cwd, PYTHON* or user site on its path) and without site (-S): it needs the standard library only
FAKE_SMI_RUN = (
    f"import sys; sys.argv[0] = 'nvidia-smi'; sys.path.insert(0, {str(DEMO_DIR)!r}); "
    "import nvidia_smi; nvidia_smi.run()"
)
TRAINER_PATH = DEMO_DIR / "trainer.py"
MARK = ".ptt-demo-sandbox"
OPTIONS_FILE = "demo.json"
OWNER_FILE = "owner.json"
CONFIG_NAME = "rl.toml"
DEMO_MODEL = "Qwen/Qwen3-0.6B"
# what a command run in the sandbox keeps of this machine's environment: nothing secret, nothing that
# points elsewhere (HOME, TMPDIR and PATH's first entry are the sandbox's)
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "SYSTEMROOT")
OPTION_KEYS = (
    "seed",
    "gpus",
    "scenario",
    "max_ticks",
    "interval",
    "gpu_name",
    "step_seconds",
    "max_steps",
    "ckpt_interval",
    "runbook",
)


class DemoPod:
    def __init__(
        self,
        *,
        root: Path | str | None = None,
        seed: int = 0,
        gpus: int = 8,
        scenario: str = "training",
        max_ticks: int | None = None,
        interval: float = 1.0,
        gpu_name: str | None = None,
        step_seconds: float = 2.0,
        max_steps: int = 0,
        ckpt_interval: int = 10,
        runbook: bool = False,
    ) -> None:
        if scenario not in nvidia_smi.SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; one of {nvidia_smi.SCENARIOS}")
        self.seed, self.gpus, self.scenario = seed, gpus, scenario
        self.max_ticks, self.interval, self.gpu_name = max_ticks, interval, gpu_name
        self.step_seconds, self.max_steps, self.ckpt_interval = step_seconds, max_steps, ckpt_interval
        self.runbook = runbook  # a plain script writing training.csv instead of prime-rl's logs
        self.standalone = root is None
        self.root = Path(tempfile.mkdtemp(prefix="ptt-demo-pod-")) if root is None else Path(root).absolute()
        self.bin_dir = self.root / "bin"
        self.proc_root = self.root / "proc"
        self.home = self.root / "home"
        self.state_dir = self.root / "state"
        self.run_dir = self.root / "run"
        self.tmp_dir = self.root / "tmp"
        self.config = self.root / CONFIG_NAME
        self.owner_file = self.root / OWNER_FILE
        self.trainer: asyncio.subprocess.Process | None = None
        self._closed = False
        if self.standalone:
            self.prepare(fresh=True)

    @classmethod
    def at(cls, root: Path | str, **defaults: Any) -> DemoPod:
        """The sandbox at ``root`` with the options saved there (``demo.json``), else ``defaults``."""
        saved = load_options(Path(root))
        opts = {k: v for k, v in {**defaults, **saved}.items() if k in OPTION_KEYS}
        return cls(root=root, **opts)

    def options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in OPTION_KEYS}

    # ------------------------------------------------------------------ the directory
    def prepare(self, fresh: bool = False) -> None:
        """Make the layout (idempotent). ``fresh``: first kill any trainer still working in this sandbox (a
        crashed TUI's) and clear run/ and state/ — the demo starts over. A directory that holds files but
        not the sandbox's mark is never touched (ConnectError)."""
        root = self.root
        if root.exists() and not (root / MARK).is_file():
            if not root.is_dir() or any(root.iterdir()):
                raise ConnectError(
                    f"{root} is not a demo sandbox: it holds other files, which the demo never touches",
                    hint="move them away, or point PRIME_TRAIN_TUI_DATA_DIR elsewhere",
                )
        try:
            root.mkdir(parents=True, exist_ok=True)
            (root / MARK).write_text("the prime-train-tui demo pod's sandbox: cleared when a demo starts\n")
            if fresh:
                self.stop_runs(signal.SIGKILL, wait=2.0)
                for d in (self.run_dir, self.state_dir, self.tmp_dir):
                    shutil.rmtree(d, ignore_errors=True)
            for d in (
                self.bin_dir,
                self.proc_root,
                self.home,
                self.state_dir,
                self.tmp_dir,
                self.run_dir / "logs",
                self.run_dir / "checkpoints",
            ):
                d.mkdir(parents=True, exist_ok=True)
            smi = self.bin_dir / "nvidia-smi"
            text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S -c {shlex.quote(FAKE_SMI_RUN)} "$@"\n'
            if not smi.is_file() or smi.read_text() != text:
                smi.write_text(text)
            smi.chmod(0o755)
            if fresh or not (self.proc_root / "stat").is_file():  # tick-0 "hardware" before anything reads it
                nvidia_smi.write_proc(nvidia_smi.Config(self.fake_env()), 0, str(self.proc_root))
            if not self.standalone and (fresh or not (root / OPTIONS_FILE).is_file()):
                _write_json(root / OPTIONS_FILE, self.options())
                if not self.config.is_file():
                    self.config.write_text(demo_config(self.gpus, self.max_steps, self.ckpt_interval))
        except OSError as exc:
            raise ConnectError(f"cannot prepare the demo sandbox {root}: {exc.strerror or exc}") from None

    # ------------------------------------------------------------------ environment
    def fake_env(self) -> dict[str, str]:
        """Only the PTT_FAKE_* variables."""
        env = {
            "PTT_FAKE_GPUS": str(self.gpus),
            "PTT_FAKE_SEED": str(self.seed),
            "PTT_FAKE_SCENARIO": self.scenario,
            "PTT_FAKE_PROC_ROOT": str(self.proc_root),
            "PTT_FAKE_RUN_DIR": str(self.run_dir),
        }
        if self.gpu_name:
            env["PTT_FAKE_GPU_NAME"] = self.gpu_name
        if self.max_ticks is not None:
            env["PTT_FAKE_MAX_TICKS"] = str(self.max_ticks)
        return env

    def env(self) -> dict[str, str]:
        """The complete environment of what runs in the sandbox: a few harmless variables of this machine
        (no secrets reach the simulated run), PATH with bin/ first, HOME and TMPDIR in the sandbox, PTT_FAKE_*."""
        env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith("LC_")}
        env["PATH"] = str(self.bin_dir) + os.pathsep + os.environ.get("PATH", os.defpath)
        env["HOME"] = str(self.home)
        env["TMPDIR"] = str(self.tmp_dir)
        env.update(self.fake_env())
        return env

    def path(self, remote: str) -> Path:
        """A pod path in the sandbox: ``~`` is its home, a relative path is under its root."""
        if remote == "~" or remote.startswith("~/"):
            return self.home / remote[2:]
        p = Path(remote)
        return p if p.is_absolute() else self.root / p

    # ------------------------------------------------------------------ the probe
    def probe_args(self) -> list[str]:
        return [
            "--backend",
            "nvidia-smi",
            "--proc-root",
            str(self.proc_root),
            "--run-dir",
            str(self.run_dir),
            "--interval",
            str(self.interval),
            "--ckpt-scan",
            f"{max(1.0, 5 * self.interval):g}",  # tiny checkpoints: the table keeps up
            # the fake prints one line per simulated GPU: the first sample goes out at its last line, not after
            # the silence that ends a batch of unknown size (a quarter of a second of the demo's first look)
            *(["--gpu-count", str(self.gpus)] if self.gpus > 0 else []),
        ]

    def probe_command(self) -> list[str]:
        return [sys.executable, "-u", str(PROBE_PATH), *self.probe_args()]

    # ------------------------------------------------------------------ the trainer
    def trainer_args(self) -> list[str]:
        return [
            "--seed",
            str(self.seed),
            "--step-seconds",
            f"{self.step_seconds:g}",
            "--max-steps",
            str(self.max_steps),
            "--ckpt-interval",
            str(self.ckpt_interval),
            *(["--runbook"] if self.runbook else []),
        ]

    def trainer_command(self, head_start: int = 0) -> str:
        """The launch command template for the lifecycle ({run_dir} and {config} are filled in on the pod);
        a kill leaves a half-written checkpoint, as a real run killed mid-save can."""
        words = [
            shlex.quote(sys.executable),
            "-u",
            shlex.quote(str(TRAINER_PATH)),
            "--run-dir",
            "{run_dir}",
            "--config",
            "{config}",
            *self.trainer_args(),
            "--torn-save",
            "--owner-file",
            shlex.quote(str(self.owner_file)),
        ]
        if head_start > 0:
            words += ["--head-start", str(int(head_start))]
        return " ".join(words)

    def lifecycle_overrides(self, head_start: int = 0) -> dict[str, Any]:
        """The lifecycle settings of the demo pod, as plain values (services.lifecycle builds its settings
        from them): the simulated trainer as the launch command, its --resume-step, a detached start that
        needs no tmux, no CUDA check, limits any laptop meets, no secrets passed, 2 checkpoints kept."""
        return {
            "command": self.trainer_command(head_start),
            "resume_args": "--resume-step {step}",
            "tmux": "setsid",
            "cuda_check": False,
            "min_nofile": 256,
            "min_free_bytes": 16 * 2**20,
            "expected_ckpts": 3,
            "grace_seconds": 5.0,
            "start_watch_seconds": 0.5,
            "keep_last": 2,
            "secrets": (),
            "env": {"PYTHONUNBUFFERED": "1"},
            "checks": (),
            "cleanup_pods": (),
            "auto_resume": False,
        }

    async def start_trainer(self) -> asyncio.subprocess.Process:
        """Standalone only: the trainer as a child of this process (the sandbox's run is the lifecycle's)."""
        if not self.standalone:
            raise RuntimeError("a sandbox's run is started through the lifecycle (launch), not here")
        if self.trainer is not None and self.trainer.returncode is None:
            return self.trainer
        self.trainer = await asyncio.create_subprocess_exec(
            sys.executable,
            str(TRAINER_PATH),
            "--run-dir",
            str(self.run_dir),
            *self.trainer_args(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env=self.env(),
            cwd=str(self.home),
        )
        return self.trainer

    async def stop_trainer(self) -> None:
        proc, self.trainer = self.trainer, None
        if proc is None or proc.returncode is not None:
            return
        proc.kill()
        await proc.wait()

    def claim(self, pid: int | None = None) -> None:
        """This process (or ``pid``) owns the demo from now on: its runs stop once it has ended."""
        pid = os.getpid() if pid is None else pid
        _write_json(self.owner_file, {"pid": pid, "start": _start_time(pid)})

    def release(self) -> None:
        """Give up the ownership this process holds (another owner's file stays)."""
        try:
            if json.loads(self.owner_file.read_text()).get("pid") == os.getpid():
                self.owner_file.unlink()
        except (OSError, ValueError, AttributeError):
            pass

    def drop_stale_owner(self) -> None:
        """An owner that has ended (a killed app) owns nothing: a run started now must not stop for it."""
        from services.demo.trainer import owner_gone

        if owner_gone(str(self.owner_file)):
            try:
                self.owner_file.unlink()
            except OSError:
                pass

    def trainer_pids(self) -> list[int]:
        """Live processes running the simulated trainer on this sandbox's run dir (from /proc; [] without)."""
        return [pid for pid, _ in _trainers(str(self.run_dir))]

    def stop_runs(self, sig: int = signal.SIGTERM, wait: float = 0.0) -> list[int]:
        """Signal every trainer working in this sandbox, with the group it leads (the run's leader shell),
        never this process's own group; wait up to ``wait`` s for them to go. Returns the pids signalled."""
        found = _trainers(str(self.run_dir))
        own = os.getpgrp()
        for pid, pgid in found:
            try:
                if pgid != own and pgid > 1:
                    os.killpg(pgid, sig)
                else:
                    os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + wait
        while wait and found and time.monotonic() < end and _trainers(str(self.run_dir)):
            time.sleep(0.02)
        return [pid for pid, _ in found]

    async def stop(self) -> None:
        """Standalone: kill the trainer and delete the temp dir. Idempotent. A sandbox stays as it is."""
        await self.stop_trainer()
        if not self._closed and self.standalone:
            self._closed = True
            shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> DemoPod:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# ---------------------------------------------------------------------------------------------- helpers


class SandboxPaths(TypedDict):
    run_dir: str
    probe_dir: str


def sandbox_paths(root: Path | str) -> SandboxPaths:
    """The Pod fields that make a demo pod use the sandbox at ``root``: its run dir and its state dir
    (the lifecycle helper's, as probe_dir)."""
    root = Path(root).absolute()
    return {"run_dir": str(root / "run"), "probe_dir": str(root / "state")}


def sandbox_root(pod: Pod) -> Path | None:
    """The sandbox a demo pod carries (see :func:`sandbox_paths`), or None."""
    if not getattr(pod, "simulated", False) or not pod.probe_dir or not pod.run_dir:
        return None
    state = Path(pod.probe_dir)
    if state.name != "state" or not state.is_absolute() or Path(pod.run_dir) != state.parent / "run":
        return None
    return state.parent


def load_options(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / OPTIONS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if k in OPTION_KEYS} if isinstance(data, dict) else {}


def demo_config(gpus: int, max_steps: int, ckpt_interval: int) -> str:
    """A small model's rl config from the wizard, with the demo's checkpoint interval."""
    from services.config.findings import ConfigError
    from services.config.wizard import WizardChoices, generate

    steps = max_steps if max_steps > 0 else 100
    try:
        text = generate(WizardChoices(model=DEMO_MODEL, preset="h100-80gb", gpus=max(1, gpus), max_steps=steps)).text
    except ConfigError:
        text = generate(WizardChoices(model=DEMO_MODEL, preset="h100-80gb", gpus=8, max_steps=steps)).text
    if ckpt_interval > 0:
        text = re.sub(r"(?m)^interval = \d+", f"interval = {ckpt_interval}", text, count=1)
    return (
        "# The demo pod's config (SIMULATED): launched on the demo, the simulated trainer runs in its place.\n" + text
    )


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
        return int(data[data.rfind(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _trainers(run_dir: str) -> list[tuple[int, int]]:
    """(pid, pgid) of live processes running trainer.py with ``--run-dir run_dir``."""
    found: list[tuple[int, int]] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
            # the stat only of a match: every TUI start scans all of /proc, and two reads per process doubled it
            if not any(a.endswith(TRAINER_PATH.name) for a in argv[:4]) or not any(
                a == "--run-dir" and b == run_dir for a, b in zip(argv, argv[1:])
            ):
                continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        if rest and rest[0] != "Z":
            found.append((int(name), int(rest[2])))
    return found
