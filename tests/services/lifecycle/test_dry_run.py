"""Pre-flight asks the pod's own prime-rl (issue 16): ``<launch command> --dry-run`` on the real sshd pod,
with a stand-in ``rl`` that behaves like prime-rl's entry point (``rl @ config.toml``: with ``--dry-run`` it
validates and exits 0, or prints pydantic's validation errors and exits 1; without it, it "trains"). Its
errors come back mapped to the lines of the user's file and refuse the launch (force still starts it)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from services.lifecycle import dry_run
from services.lifecycle.actions import launch
from services.lifecycle.preflight import LifecycleSettings
from services.pod.ssh import SSHConnection

pytestmark = pytest.mark.ssh
SECRET = "hf-secret-" + os.urandom(6).hex()

STAND_IN = r'''#!/usr/bin/env python3
"""A stand-in for prime-rl's `rl` entry point: `rl @ config.toml [--dry-run]`."""
import os, sys, time, tomllib
args = sys.argv[1:]
cfg = tomllib.load(open(args[args.index("@") + 1], "rb"))
if os.environ.get("STAND_IN_CRASH"):
    print("Traceback (most recent call last):\nModuleNotFoundError: No module named 'prime_rl'"); sys.exit(2)
if "--dry-run" in args:
    if os.environ.get("STAND_IN_HANG"):
        time.sleep(60)
    errors = []
    temp = cfg.get("orchestrator", {}).get("train", {}).get("sampling", {}).get("temperature", 1.0)
    if temp > 1.5:
        errors.append(("orchestrator.train.sampling.temperature",
                       "Input should be less than or equal to 1.5 [type=less_than_equal, input_value=%s, "
                       "input_type=float]" % temp))
    if cfg.get("max_steps", 1) == 7:
        errors.append(("", "Value error, this prime-rl refuses 7 steps (the token is %s)"
                       % os.environ.get("HF_TOKEN", "")))
    if errors:
        print("2026-11-25 10:00:00 | INFO | resolving the config")
        print("%d validation error%s for RLConfig" % (len(errors), "s" if len(errors) > 1 else ""), file=sys.stderr)
        for loc, msg in errors:
            if loc:
                print(loc, file=sys.stderr)
            print("  " + msg, file=sys.stderr)
            print("    For further information visit https://errors.pydantic.dev/2.11/v/x", file=sys.stderr)
        sys.exit(1)
    print("Dry run complete. To start an RL run locally, remove --dry-run from your command.")
    sys.exit(0)
open(os.path.join(os.path.dirname(os.path.abspath(args[args.index("@") + 1])), "..", "..", "..", "trained"),
     "w").write("yes")
'''

CONFIG = (
    'max_steps = {steps}\n\n[model]\nname = "Qwen/Qwen3-0.6B"\n\n'
    "[orchestrator.train.sampling]\ntemperature = {t}\n\n"
    # the rest of a whole rl config (prime-rl requires [trainer] and [orchestrator]), after line 7
    "[trainer]\n\n[orchestrator]\nbatch_size = 16\ngroup_size = 8\n\n[[orchestrator.train.source]]\n"
    'name = "reverse-text"\n\n[orchestrator.train.source.env.taskset]\nid = "reverse-text"\n'
)


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    rl = tmp_path / "bin" / "rl"
    rl.parent.mkdir()
    rl.write_text(STAND_IN)
    rl.chmod(0o755)
    return rl


def settings(stand_in: Path, **kw) -> LifecycleSettings:
    base = dict(
        command=f"{stand_in} @ {{config}}",
        min_nofile=1024,
        min_free_bytes=1,
        cuda_check=False,
        tmux="setsid",
        grace_seconds=2.0,
        start_watch_seconds=0.3,
        secrets=("HF_TOKEN",),
        dry_run_timeout=30.0,
    )
    return LifecycleSettings(**(base | kw))


async def launch_events(pod, tmp_path: Path, s: LifecycleSettings, steps: int = 10, t: float = 1.0, **kw):
    cfg = tmp_path / "rl.toml"
    cfg.write_text(CONFIG.format(steps=steps, t=t))
    async with SSHConnection(pod) as conn:
        events = [
            ev
            async for ev in launch(
                conn, cfg, settings=s, run_dir=str(tmp_path / "run"), environ={"HF_TOKEN": SECRET}, **kw
            )
        ]
    checks = {ev.check.name: ev.check for ev in events if ev.check is not None}
    return events, checks


async def test_the_pods_prime_rl_refuses_a_setting_and_the_launch_names_its_line(pod, tmp_path, stand_in):
    events, checks = await launch_events(pod, tmp_path, settings(stand_in), t=1.8)
    check = checks[dry_run.NAME]
    assert check.status == "fail"
    assert "line 7: orchestrator.train.sampling.temperature: Input should be less than or equal to 1.5" in check.detail
    assert "[type=" not in check.detail and check.fix
    assert events[-1].kind == "error" and "pre-flight failed" in events[-1].message
    assert not (tmp_path / "run" / ".ptt" / "run.json").exists() and not (tmp_path / "run" / "trained").exists()


async def test_a_config_it_accepts_is_launched(pod, tmp_path, stand_in):
    events, checks = await launch_events(pod, tmp_path, settings(stand_in))
    assert checks[dry_run.NAME].status == "ok"
    assert events[-1].kind == "done", [e.message for e in events]
    for _ in range(100):  # started detached: it "trains" (the dry run alone does not)
        if (tmp_path / "run" / "trained").exists():
            break
        await asyncio.sleep(0.05)
    assert (tmp_path / "run" / "trained").read_text() == "yes"


async def test_force_starts_despite_the_refusal_and_a_whole_config_error_has_no_line(pod, tmp_path, stand_in):
    events, checks = await launch_events(pod, tmp_path, settings(stand_in), steps=7, force=True)
    check = checks[dry_run.NAME]
    assert check.status == "fail" and "Value error, this prime-rl refuses 7 steps" in check.detail
    assert "line" not in check.detail.split("rejects", 1)[1]
    assert SECRET not in check.detail and "***" in check.detail  # the pod's output is masked
    assert events[-1].kind == "done"


async def test_a_crashing_dry_run_shows_its_output_and_a_hanging_one_is_not_judged(pod, tmp_path, stand_in):
    crash = settings(stand_in, env={"STAND_IN_CRASH": "1"})
    events, checks = await launch_events(pod, tmp_path, crash)
    assert checks[dry_run.NAME].status == "fail"
    assert "exited with code 2: ModuleNotFoundError: No module named 'prime_rl'" in checks[dry_run.NAME].detail
    assert any(e.kind == "warn" and e.message == "dry run: Traceback (most recent call last):" for e in events)

    hang = settings(stand_in, env={"STAND_IN_HANG": "1"}, dry_run_timeout=2.0)
    (tmp_path / "hang").mkdir()
    events, checks = await launch_events(pod, tmp_path / "hang", hang)
    assert checks[dry_run.NAME].status == "warn" and "did not finish within 2 s" in checks[dry_run.NAME].detail
    assert events[-1].kind == "done"


async def test_another_trainer_is_not_asked_unless_told(pod, tmp_path, stand_in):
    other = f"python3 {stand_in.parent / 'train.py'} --config {{config}}"
    (stand_in.parent / "train.py").write_text("import sys\n")
    events, checks = await launch_events(pod, tmp_path, settings(stand_in, command=other))
    assert dry_run.NAME not in checks and events[-1].kind == "done"
    assert dry_run.wanted("auto", "uv run rl @ cfg.toml") and dry_run.wanted("auto", "uv run sft @cfg.toml")
    assert not dry_run.wanted("auto", "python train.py --cfg a@b") and dry_run.wanted("on", "python train.py")
    assert not dry_run.wanted("off", "uv run rl @ x")
