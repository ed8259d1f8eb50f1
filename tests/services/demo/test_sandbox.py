"""The demo pod's sandbox: its layout and config, a connection confined to it, the simulated trainer's
resume / kill / head start / owner, and the fake nvidia-smi following the run. Real processes, real files."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.config.validate import validate_file
from services.demo import nvidia_smi as fake
from services.demo.connection import DemoConnection, DemoOptions
from services.demo.pod import DemoPod, sandbox_paths, sandbox_root
from services.errors import ConnectError
from services.models import Pod, PodKind

REPO = Path(__file__).resolve().parents[3]
TRAINER = REPO / "services" / "demo" / "trainer.py"


def trainer(run: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TRAINER), "--run-dir", str(run), "--step-seconds", "0.01", "--ckpt-interval", "2", *args],
        capture_output=True,
        text=True,
        timeout=30,
        **kw,
    )


def step_lines(run: Path) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"SUCCESS Step (\d+) ", (run / "logs" / "trainer.log").read_text())]


def complete(run: Path) -> list[int]:
    return sorted(
        int(p.name[5:])
        for p in (run / "checkpoints").iterdir()
        if (p / "trainer" / ".metadata").is_file() and (p / "orchestrator" / "progress.pt").is_file()
    )


def wait(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {cond}"
        time.sleep(0.02)


# ------------------------------------------------------------------------------------ the trainer


def test_resume_step_continues_after_the_checkpoint_appending(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert trainer(run, "--max-steps", "6").returncode == 0
    metrics_before = (run / "metrics.jsonl").read_text().splitlines()
    out = trainer(run, "--max-steps", "9", "--resume-step", "4")
    assert out.returncode == 0, out.stderr
    assert step_lines(run) == [1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9]  # appended, from step_4 + 1
    assert "Resuming from checkpoint step_4: starting from step 5" in (run / "logs" / "trainer.log").read_text()
    rows = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[: len(metrics_before)] == list(range(1, 7)) and rows[len(metrics_before) :] == [5, 6, 7, 8, 9]
    # the simulated clock goes on from the checkpoint's step, never back to 14:00:00
    slow = tmp_path / "slow"
    assert trainer(slow, "--step-seconds", "30", "--head-start", "6", "--max-steps", "6").returncode == 0
    assert trainer(slow, "--step-seconds", "30", "--resume-step", "4", "--max-steps", "4").returncode == 0
    log = (slow / "logs" / "trainer.log").read_text().splitlines()
    step4 = next(ln[:8] for ln in log if "SUCCESS Step 4 " in ln)
    assert step4 > "14:02:00" and next(ln[:8] for ln in log if "Resuming" in ln) == step4


def test_resume_step_refuses_a_missing_or_half_written_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert trainer(run, "--max-steps", "4").returncode == 0
    (run / "checkpoints" / "step_3" / "trainer").mkdir(parents=True)
    for step in ("3", "5"):
        out = trainer(run, "--max-steps", "8", "--resume-step", step)
        assert out.returncode == 1 and f"no complete checkpoint step_{step}" in out.stderr
    assert step_lines(run) == [1, 2, 3, 4]


def test_sigterm_with_torn_save_leaves_the_next_checkpoint_half_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TRAINER),
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.05",
            "--ckpt-interval",
            "2",
            "--torn-save",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait(lambda: (run / "logs" / "trainer.log").exists() and len(step_lines(run)) >= 5)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(10)
    assert code == 143
    last = step_lines(run)[-1]
    log = (run / "logs" / "trainer.log").read_text()
    assert f"Received SIGTERM: the run stops after step {last}" in log
    torn = run / "checkpoints" / f"step_{last + 1}"
    assert (torn / "trainer" / "model.bin").is_file() and not (torn / "trainer" / ".metadata").exists()
    assert last + 1 not in complete(run) and complete(run)[-1] == last - last % 2
    # without --torn-save a kill leaves no half-written checkpoint
    other = tmp_path / "plain"
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), "--run-dir", str(other), "--step-seconds", "0.05", "--ckpt-interval", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait(lambda: (other / "logs" / "trainer.log").exists() and len(step_lines(other)) >= 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert sorted(int(p.name[5:]) for p in (other / "checkpoints").iterdir()) == complete(other)


def test_head_start_writes_the_first_steps_at_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TRAINER),
            "--run-dir",
            str(run),
            "--step-seconds",
            "60",
            "--ckpt-interval",
            "5",
            "--head-start",
            "12",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait(lambda: (run / "logs" / "trainer.log").exists() and len(step_lines(run)) >= 12)
        assert step_lines(run) == list(range(1, 13)) and complete(run) == [5, 10]
    finally:
        proc.kill()
        proc.wait(10)


def test_the_run_stops_by_itself_once_its_owner_has_ended(tmp_path: Path) -> None:
    run, owner = tmp_path / "run", tmp_path / "owner.json"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner.write_text(json.dumps({"pid": gone.pid, "start": None}))
    out = trainer(run, "--owner-file", str(owner), "--max-steps", "0")  # would run forever
    assert out.returncode == 0
    assert "The app that owned this demo run ended" in (run / "logs" / "trainer.log").read_text()
    owner.write_text(json.dumps({"pid": os.getpid()}))  # a live owner: the run goes on
    assert trainer(tmp_path / "run2", "--owner-file", str(owner), "--max-steps", "3").returncode == 0
    assert step_lines(tmp_path / "run2") == [1, 2, 3]


def test_an_owned_run_stops_when_its_owner_file_goes_away(tmp_path: Path) -> None:
    """The sandbox deleted under a run whose owner is alive (a test's or a benchmark's temporary home): the run
    stops within a step instead of going on for hours; a run that had no owner file at start has no owner."""
    run, owner = tmp_path / "run", tmp_path / "owner.json"
    owner.write_text(json.dumps({"pid": os.getpid()}))
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TRAINER),
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.05",
            "--ckpt-interval",
            "0",
            "--max-steps",
            "0",
            "--owner-file",
            str(owner),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait(lambda: (run / "logs" / "trainer.log").exists() and len(step_lines(run)) >= 3)
        owner.unlink()
        assert proc.wait(10) == 0
        assert "The app that owned this demo run ended" in (run / "logs" / "trainer.log").read_text()
    finally:
        proc.kill()
        proc.wait(10)
    assert trainer(tmp_path / "run3", "--owner-file", str(tmp_path / "none.json"), "--max-steps", "3").returncode == 0
    assert step_lines(tmp_path / "run3") == [1, 2, 3]


# ------------------------------------------------------------------------------------ the sandbox


def test_prepare_makes_the_layout_and_a_config_that_validates_clean(tmp_path: Path) -> None:
    root = tmp_path / "demo-pod"
    demo = DemoPod(root=root, gpus=4, ckpt_interval=2, max_steps=300, step_seconds=0.5)
    demo.prepare(fresh=True)
    for d in ("bin", "proc", "home", "state", "run", "tmp"):
        assert (root / d).is_dir()
    assert os.access(root / "bin" / "nvidia-smi", os.X_OK) and (root / "proc" / "stat").is_file()
    report = validate_file(root / "rl.toml")
    assert report.kind == "rl" and not [f for f in report.findings if f.severity.value == "error"]
    assert re.search(r"(?m)^interval = 2\b", (root / "rl.toml").read_text())
    assert json.loads((root / "demo.json").read_text())["ckpt_interval"] == 2
    # the options saved there are what a later process gets (a headless command)
    again = DemoPod.at(root, ckpt_interval=10, step_seconds=2.0)
    assert (again.ckpt_interval, again.step_seconds, again.gpus) == (2, 0.5, 4)
    pod = Pod(name="demo", kind=PodKind.DEMO, **sandbox_paths(root))
    assert sandbox_root(pod) == root and sandbox_root(Pod(name="demo", kind=PodKind.DEMO)) is None


def test_prepare_never_touches_a_directory_that_is_not_a_sandbox(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    (root / "run").mkdir(parents=True)
    (root / "run" / "precious.txt").write_text("keep me")
    with pytest.raises(ConnectError, match="not a demo sandbox"):
        DemoPod(root=root).prepare(fresh=True)
    assert (root / "run" / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in root.iterdir()) == ["run"]


def test_a_fresh_start_kills_a_leftover_trainer_and_clears_run_and_state(tmp_path: Path) -> None:
    root = tmp_path / "demo-pod"
    demo = DemoPod(root=root)
    demo.prepare(fresh=True)
    (root / "state" / "runs").mkdir()
    (root / "state" / "runs" / "old.json").write_text("{}")
    elsewhere = tmp_path / "other-run"  # a trainer on another run dir is not the demo's
    procs = [
        subprocess.Popen(
            [sys.executable, str(TRAINER), "--run-dir", str(d), "--step-seconds", "0.05"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for d in (demo.run_dir, elsewhere)
    ]
    try:
        wait(lambda: (demo.run_dir / "logs" / "trainer.log").exists())
        assert demo.trainer_pids() == [procs[0].pid]
        demo.prepare(fresh=True)
        assert procs[0].wait(5) == -signal.SIGKILL
        assert procs[1].poll() is None
        assert demo.trainer_pids() == []
        assert not (root / "state" / "runs").exists() and not (demo.run_dir / "logs" / "trainer.log").exists()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_trainer_scan_reads_the_stat_of_its_trainers_only(tmp_path: Path, monkeypatch) -> None:
    """Every TUI start with the demo scans all of /proc for a leftover trainer, on the event loop before the demo's
    first sample: it read each process's cmdline and stat, twice the reads it needs (~57 ms against ~27 ms for
    ~200 processes on two loaded cores). The stat is read only for a trainer on this run dir (its group, its
    state), and that trainer is still found."""
    import services.demo.pod as pod_module

    demo = DemoPod(root=tmp_path / "demo-pod")
    demo.prepare(fresh=True)
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), "--run-dir", str(demo.run_dir), "--step-seconds", "0.05"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    stats: list[str] = []
    real_open = open

    def counting_open(path, *args, **kwargs):  # the real open; counts the /proc/<pid>/stat reads
        if str(path).startswith("/proc/") and str(path).endswith("/stat"):
            stats.append(str(path))
        return real_open(path, *args, **kwargs)

    try:
        wait(lambda: (demo.run_dir / "logs" / "trainer.log").exists())
        monkeypatch.setattr(pod_module, "open", counting_open, raising=False)
        assert demo.trainer_pids() == [proc.pid]
        assert stats == [f"/proc/{proc.pid}/stat"]
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------------------------ the connection


async def test_a_sandbox_connection_runs_everything_inside_it(tmp_path: Path, monkeypatch) -> None:
    root, user_home = tmp_path / "demo-pod", tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value")
    pod = Pod(name="demo", kind=PodKind.DEMO, **sandbox_paths(root))
    conn = DemoConnection(pod, DemoOptions(gpus=2))
    await conn.connect()
    try:
        code, out, _ = await conn.run(
            'pwd; echo "$HOME"; echo "${WANDB_API_KEY:-none}"; echo "$TMPDIR"; '
            "command -v nvidia-smi; nvidia-smi -L | wc -l; touch made-here; touch ~/in-home"
        )
        assert code == 0
        lines = out.split()
        assert lines[:4] == [str(root), str(root / "home"), "none", str(root / "tmp")]
        assert lines[4] == str(root / "bin" / "nvidia-smi") and lines[5] == "2"
        assert (root / "made-here").exists() and (root / "home" / "in-home").exists()
        await conn.put_file(b"x", "rel/file.txt")
        await conn.put_file(b"y", "~/.cache/f")
        assert (root / "rel" / "file.txt").read_bytes() == b"x"
        assert (root / "home" / ".cache" / "f").read_bytes() == b"y"
        assert await conn.exists("rel/file.txt") and not await conn.exists("nope")
        proc = await conn.start("pwd")
        assert (await proc.readline()).decode().strip() == str(root)
        await proc.wait()
        assert conn.demo is not None and conn.demo.trainer_pids() == []  # it starts no trainer itself
    finally:
        await conn.close()
    assert list(user_home.iterdir()) == []  # nothing landed in this machine's home
    assert root.is_dir()  # a sandbox stays after close


# ------------------------------------------------------------------------------------ the fake nvidia-smi


def test_the_fake_gpus_follow_the_run_leader_and_list_its_processes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / ".ptt").mkdir(parents=True)
    env = {**os.environ, "PTT_FAKE_GPUS": "2", "PTT_FAKE_RUN_DIR": str(run)}
    cfg = fake.Config(env)
    assert fake.effective(cfg) is cfg  # no run yet: the scenario as given
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        (run / ".ptt" / "leader.json").write_text(json.dumps({"pid": leader.pid, "sid": leader.pid}))
        out = subprocess.run(
            [
                sys.executable,
                str(REPO / "services" / "demo" / "bin" / "nvidia-smi"),
                "--query-compute-apps=pid,process_name,used_memory",
                "--format=csv,noheader",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert out.returncode == 0 and out.stdout.split(",")[0] == str(leader.pid)
        assert fake.effective(cfg).scenario == "training"
    finally:
        leader.kill()
        leader.wait()
    stopped = fake.effective(cfg)
    assert stopped.scenario == "idle" and fake.gpu_values(stopped, 1, 0)["utilization.gpu"] == 0
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "services" / "demo" / "bin" / "nvidia-smi"),
            "--query-compute-apps=pid",
            "--format=csv,noheader",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode == 0 and out.stdout == ""


def _imports(argv: list[str], env: dict[str, str]) -> tuple[str, set[str]]:
    """What a python command prints, and the modules it imports (-X importtime, on stderr)."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return out.stdout, {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}


def test_the_fake_nvidia_smi_is_imported_from_its_bytecode_not_compiled_on_every_call(tmp_path: Path) -> None:
    """Each fake ``nvidia-smi`` ran services/demo/nvidia_smi.py as a script: compiled on every call, and (the
    tests' wrapper, through runpy) with typing imported for itself — ~30-75 ms of every call on two loaded cores,
    paid by the demo pod's first sample and every pre-flight's GPU check. Both wrappers now import the module,
    and answer as before."""
    demo = DemoPod(root=tmp_path / "demo-pod", gpus=2)
    demo.prepare(fresh=True)
    env = {**os.environ, "PTT_FAKE_GPUS": "2"}
    line = (demo.bin_dir / "nvidia-smi").read_text().splitlines()[-1]
    words = shlex.split(line)
    assert words[0] == "exec" and words[-1] == "$@"
    wrappers = {
        "the sandbox's": [*words[1:-1], "-L"],
        "the tests' (services/demo/bin)": [
            sys.executable,
            str(REPO / "services" / "demo" / "bin" / "nvidia-smi"),
            "-L",
        ],
    }
    for name, argv in wrappers.items():
        out, modules = _imports(argv, env)
        assert out.startswith("GPU 0: ") and out.count("\n") == 2, (name, out)
        assert "nvidia_smi" in modules, f"{name} wrapper ran the fake as a script (compiled on every call)"
        assert not modules & {"runpy", "pkgutil", "typing"}, (name, modules & {"runpy", "pkgutil", "typing"})
