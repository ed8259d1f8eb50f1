"""The whole App at a given terminal size with deterministic content, for the layout tests.

Pods are parked (they never connect: tests.app.helpers.Parked) and fed hand-made snapshots through the
App's own ``on_snapshot``; the clock is fixed; the Config pane opens a fixture config; the Offers pane
gets the SIMULATED offers (services/demo/offers.py, fixed rows); the Checkpoints pane gets a bucket
listing as if it had just been listed (no worker goes to the network).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from textual.pilot import Pilot

from app.tui import PrimeTrainApp
from services.backup.manifest import BucketCheckpoint, PodCheckpoint, RunSource
from services.backup.s3 import BackupSettings
from services.models import CheckpointInfo, Pod, PodKind, PodSnapshot, PodState, PodStatus
from tests.app.helpers import parked_app, wait_for
from tests.app.monitor.test_fleet import pod_snapshot

NOW = 1_700_000_000.0
GIB = 1024**3
REPO = Path(__file__).resolve().parents[2]
RUN_DIR = "/workspace/rl-qwen3-8b"
KEY_ENVS = (
    "PRIME_API_KEY",
    "VAST_API_KEY",
    "LAMBDA_API_KEY",
    "RUNPOD_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_PROFILE",
    "PRIME_TRAIN_TUI_BUCKET",
    "PRIME_TRAIN_TUI_S3_ENDPOINT",
)
CONFIG = """\
max_steps = 200

[model]
name = "Qwen/Qwen3-0.6B"

[trainer]

[orchestrator]
batch_size = 16
group_size = 8

[[orchestrator.train.source]]
name = "reverse-text"

[orchestrator.train.source.env.taskset]
id = "reverse-text"

[inference]
"""

TRAINING = Pod(name="h100-a", kind=PodKind.SSH, host="10.0.0.1", price_per_hr=23.92, run_dir=RUN_DIR)
OFFLINE = Pod(name="h100-b", kind=PodKind.SSH, host="10.0.0.2", price_per_hr=23.92)
DEMO = Pod(name="demo", kind=PodKind.DEMO)


def isolate(tmp_path: Path, monkeypatch) -> None:
    """HOME, config and data dirs in tmp_path; no provider or AWS key from the environment; UTC; the
    working directory is tmp_path (the Config pane shows its file's path)."""
    import time

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CACHE_DIR", str(tmp_path / "cache"))
    for name in KEY_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rl.toml").write_text(CONFIG, encoding="utf-8")


def layout_app(pods: list[Pod] | None = None, *, config: bool = True) -> PrimeTrainApp:
    pods = [TRAINING, OFFLINE] if pods is None else pods
    return parked_app(pods, NOW, config_path=Path("rl.toml") if config else None)


def training_snapshot(pod: Pod = TRAINING, steps: int = 12) -> PodSnapshot:
    """Four H100s, a run at step ``steps`` with its log tail, checkpoints (two complete, one writing)."""
    snap = pod_snapshot(pod, steps)
    ckpts = (
        CheckpointInfo(5, f"{RUN_DIR}/checkpoints/step_5", 16 * GIB, NOW - 210, True),
        CheckpointInfo(10, f"{RUN_DIR}/checkpoints/step_10", 16 * GIB, NOW - 60, True),
        CheckpointInfo(12, f"{RUN_DIR}/checkpoints/step_12", 3 * GIB, NOW - 5, False),
    )
    last = replace(snap.history[-1], ckpts=ckpts)
    return replace(snap, history=(*snap.history[:-1], last))


def offline_snapshot(pod: Pod = OFFLINE) -> PodSnapshot:
    return PodSnapshot(
        pod=pod, status=PodStatus(PodState.OFFLINE, "connection refused", since=NOW - 95, next_retry=NOW + 25)
    )


def bucket_listing(app: PrimeTrainApp, pod: Pod = TRAINING) -> None:
    """The Checkpoints pane as if it had listed its bucket a moment ago (no worker goes to the network)."""
    from app.panes.checkpoints import CheckpointsPane

    pane = app.screen_stack[0].query_one(CheckpointsPane)
    pane.settings = BackupSettings(bucket="team-ckpts", prefix="prime-train/")
    mine = RunSource(pod.name, RUN_DIR, "r7")
    pane._bucket_at[pod.name] = NOW
    pane.sources[pod.name] = mine
    pane.on_pod[pod.name] = {
        5: PodCheckpoint(5, f"{RUN_DIR}/checkpoints/step_5", 16 * GIB, NOW - 210, True, fingerprint="f5")
    }
    never = ("no manifest: the backup never finished",)
    pane.bucket[pod.name] = (
        BucketCheckpoint(5, 16 * GIB, 13 * GIB, True, (), NOW - 150, mine, "f5"),
        BucketCheckpoint(10, 16 * GIB, 6 * GIB, False, never),
    )


def metrics_snapshot(tmp_path: Path, pod: Pod = TRAINING) -> PodSnapshot:
    """The training snapshot plus 20 steps of metrics.jsonl from the simulated trainer (seed 0): the
    Bottleneck pane's breakdown."""
    run = tmp_path / "metrics-run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run),
            "--step-seconds",
            "0.001",
            "--max-steps",
            "20",
            "--profile",
            "latency-bound",
            "--seed",
            "0",
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    lines = tuple((run / "metrics.jsonl").read_text().splitlines())
    return replace(training_snapshot(pod), metrics=lines, metrics_total=len(lines))


PANES = {"config": "1", "offers": "2", "monitor": "3", "bottleneck": "4", "checkpoints": "5"}


async def prepare(pilot: Pilot, *, metrics, key: str | None, pod: str = "h100-a", bucket: bool = True) -> None:
    """Every pane fed, then the one asked for shown, with no toast and no timer left in the picture.
    (As few pauses as can be: each one renders the whole App.)"""
    from app.panes.config import ConfigPane
    from services.demo.offers import demo_offers

    app = pilot.app
    assert isinstance(app, PrimeTrainApp)
    await pilot.pause()
    if bucket:
        bucket_listing(app)
    offers = app.offers_pane
    assert offers is not None

    async def simulated(spot: bool):
        return demo_offers(spot)

    offers.fetcher = simulated
    offers.action_refresh_offers()
    app.on_snapshot(metrics)
    app.on_snapshot(offline_snapshot())
    app.pod_list.select(pod)
    config = app.screen_stack[0].query_one(ConfigPane)
    await wait_for(
        pilot,
        lambda: bool(offers.ranked) and config.report is not None and pod in app.snapshots and not app.frame_pending,
    )  # the snapshots fed above on screen (not only the first, connecting)
    if key is not None:
        await pilot.press(key)
    app.clear_notifications()  # (the screenshot's own pauses follow)


async def settle(pilot: Pilot) -> None:
    """The snapshots fed so far on screen (they reach it once per frame: app/frames.py FRAME_S), animations
    done."""
    await wait_for(pilot, lambda: not getattr(pilot.app, "frame_pending", False))
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


def screen_text(pilot: Pilot) -> list[str]:
    """The screen as the user sees it: one string per terminal row."""
    return [strip.text for strip in pilot.app.screen._compositor.render_strips()]
