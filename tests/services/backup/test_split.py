"""Backup and restore of a checkpoint whose trainer half lives in a separate [ckpt] output_dir: the
trainer writes ``X/checkpoints/step_N/trainer``, the orchestrator still writes
``<run_dir>/checkpoints/step_N/orchestrator``. The backup holds both halves (same shape as a normal one),
the restore puts each back where it belongs, and the lifecycle's resume judges the result complete.
Over the real sshd "pod" and moto's S3 server."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from services.backup.s3 import BackupError
from services.backup.transfer import backup_checkpoint, pod_checkpoints, restore_checkpoint
from services.lifecycle.records import checkpoints
from services.lifecycle.shell import PodShell
from services.pod.ssh import SSHConnection
from tests.services.backup.fixtures import *  # noqa: F403 (fixtures)
from tests.services.lifecycle.test_actions import make_settings

SERVICES = Path(__file__).resolve().parents[3] / "services"


def put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def split_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run whose resolved configs send the trainer's checkpoints to a separate volume. Step 4 whole
    (trainer half there, orchestrator half in the run dir); step 6 has only its orchestrator half."""
    run, vol = tmp_path / "outputs" / "myrun", tmp_path / "volume"
    trainer = {"output_dir": str(run), "ckpt": {"output_dir": str(vol)}}
    put(run / "configs" / "trainer.json", json.dumps(trainer).encode())
    put(run / "configs" / "orchestrator.json", json.dumps({"output_dir": str(run), "ckpt": {}}).encode())
    put(vol / "checkpoints/step_4/trainer/__0_0.distcp", os.urandom(200 * 1024))
    put(vol / "checkpoints/step_4/trainer/.metadata", b"dcp-metadata-4")
    put(run / "checkpoints/step_4/orchestrator/progress.pt", b"progress 4")
    put(run / "checkpoints/step_6/orchestrator/progress.pt", b"progress 6")
    return run, vol / "checkpoints"


def files_of(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


@pytest.mark.ssh
async def test_split_layout_backup_holds_both_halves_and_restore_puts_each_back(pod, s3env, tmp_path):
    run, vol = split_run(tmp_path)
    trainer_before, orch_before = files_of(vol / "step_4"), files_of(run / "checkpoints/step_4")
    settings = s3env.settings()
    async with SSHConnection(pod) as conn:
        ckpts, _disk = await pod_checkpoints(conn, str(run))
        by_step = {c.step: c for c in ckpts}
        assert sorted(by_step) == [4, 6]  # each step once, not once per half
        four = by_step[4]
        assert four.complete and four.path == str(vol / "step_4") and four.orch_path == str(run / "checkpoints/step_4")
        assert (four.trainer_bytes, four.orch_bytes) == (200 * 1024 + 14, 10)
        assert four.bytes == four.trainer_bytes + four.orch_bytes
        assert not by_step[6].complete  # the orchestrator half alone is not a checkpoint

        with pytest.raises(BackupError, match="step_6 is incomplete.*trainer half"):
            await backup_checkpoint(conn, settings, str(run), 6)
        assert not s3env.keys("prime-train/myrun/step_6/manifest.json")

        result = await backup_checkpoint(conn, settings, str(run), 4)
        assert result.verified and not result.problems
        assert sorted(f.path for f in result.manifest.files) == [
            "orchestrator/progress.pt",
            "trainer/.metadata",
            "trainer/__0_0.distcp",
        ]
        base = "prime-train/myrun/step_4/"
        assert s3env.get(base + "trainer/__0_0.distcp") == trainer_before["trainer/__0_0.distcp"]
        assert s3env.get(base + "orchestrator/progress.pt") == b"progress 4"

        # the pod loses both halves; a half-written trainer half is left behind by a save cut short
        shutil.rmtree(vol / "step_4")
        shutil.rmtree(run / "checkpoints/step_4")
        put(vol / "step_4/trainer/__0_0.distcp", b"cut short")
        notes: list[str] = []
        placed: list[str] = []
        manifest = await restore_checkpoint(conn, settings, str(run), 4, notes=notes, placed=placed)
        assert manifest.step == 4 and placed == [str(run / "checkpoints/step_4"), str(vol / "step_4")]
        assert files_of(vol / "step_4") == trainer_before  # the trainer half back in the separate dir
        assert files_of(run / "checkpoints/step_4") == orch_before  # the orchestrator half in the run dir
        aside = [p for p in vol.iterdir() if p.name.startswith(".step_4.incomplete-")]
        assert len(aside) == 1 and (aside[0] / "trainer/__0_0.distcp").read_bytes() == b"cut short"
        assert notes and str(aside[0]) in notes[0]
        assert not [p for p in list(vol.iterdir()) + list((run / "checkpoints").iterdir()) if "restoring" in p.name]

        # the lifecycle's resume judges the restored step complete (the same call resume makes)
        lc = make_settings(tmp_path, ckpt_subdir=str(vol))
        _, found = await checkpoints(PodShell(conn), str(run), lc)
        assert {c["step"]: c["complete"] for c in found} == {4: True}
        # ... and without a matching ckpt_subdir setting: the lifecycle helper follows the run's configs,
        # the same place the probe and the backup look (no step 6: its trainer half does not exist)
        where, found = await checkpoints(PodShell(conn), str(run), make_settings(tmp_path))
        assert where == str(vol) and {c["step"]: c["complete"] for c in found} == {4: True}

        # a whole step on the pod is never overwritten
        with pytest.raises(BackupError, match="already exists on the pod and is complete"):
            await restore_checkpoint(conn, settings, str(run), 4)
    assert files_of(vol / "step_4") == trainer_before


@pytest.mark.ssh
async def test_restore_into_the_lifecycles_ckpt_dir_on_a_fresh_pod(pod, s3env, tmp_path):
    """Resume on a new pod: no configs there yet, the lifecycle names the trainer dir (ckpt_root)."""
    run, vol = split_run(tmp_path)
    settings = s3env.settings()
    fresh_run, fresh_vol = tmp_path / "b" / "myrun", tmp_path / "b-volume" / "checkpoints"
    async with SSHConnection(pod) as conn:
        assert (await backup_checkpoint(conn, settings, str(run), 4)).verified
        await restore_checkpoint(conn, settings, str(fresh_run), 4, ckpt_root=str(fresh_vol))
    assert files_of(fresh_vol / "step_4") == files_of(vol / "step_4")
    assert files_of(fresh_run / "checkpoints/step_4") == files_of(run / "checkpoints/step_4")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"split_{Path(name).stem}", SERVICES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the rule lives in common.py; lifecycle.py (the launch/resume helper) calls it itself, loaded on the pod by path
@pytest.mark.parametrize("script", ["pod/agent/common.py", "pod/agent/lifecycle.py"])
def test_the_trainer_half_dir_comes_from_the_resolved_configs(tmp_path, script):
    find = _load(script).trainer_ckpt_dir
    launch = tmp_path / "proj"
    run = launch / "outputs" / "r1"
    assert find(str(run)) == str(run / "checkpoints")  # no configs: the run dir's own
    put(
        run / "configs/rl.json",
        json.dumps({"trainer": {"output_dir": "outputs/r1", "ckpt": {"output_dir": "/vol/ckpt"}}}).encode(),
    )
    assert find(str(run)) == "/vol/ckpt/checkpoints"
    put(run / "configs/rl.json", json.dumps({"ckpt": {"output_dir": "big"}, "trainer": {"ckpt": {}}}).encode())
    assert find(str(run)) == str(launch / "big" / "checkpoints")  # relative: from the launch dir
    put(run / "configs/trainer.json", json.dumps({"output_dir": "outputs/r1", "ckpt": {"output_dir": "x/y"}}).encode())
    assert find(str(run)) == str(launch / "x/y/checkpoints")
    put(run / "configs/trainer.json", b"{not json")
    assert find(str(run)) == str(launch / "big" / "checkpoints")  # a broken file is skipped, not a crash


def test_both_pod_scripts_carry_the_same_trainer_half_rule():
    import inspect

    sources = {inspect.getsource(_load(s).trainer_ckpt_dir) for s in ("pod/agent/common.py", "pod/agent/lifecycle.py")}
    assert len(sources) == 1


def test_the_probe_shows_each_split_step_once_with_both_halves(tmp_path):
    import subprocess
    import sys

    run, vol = split_run(tmp_path)
    res = subprocess.run(
        [sys.executable, str(SERVICES / "pod/agent/probe.py"), "--once", "--backend", "none", "--run-dir", str(run)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    ckpts = {c["step"]: c for c in json.loads(res.stdout.splitlines()[-1])["ckpts"]}
    assert sorted(ckpts) == [4, 6]
    assert ckpts[4]["complete"] and ckpts[4]["path"] == str(vol / "step_4")
    assert (ckpts[4]["trainer_bytes"], ckpts[4]["orch_bytes"], ckpts[4]["bytes"]) == (
        200 * 1024 + 14,
        10,
        200 * 1024 + 24,
    )
    assert ckpts[4]["orch_path"] == str(run / "checkpoints/step_4")
    assert not ckpts[6]["complete"] and ckpts[6]["trainer_bytes"] == 0 and ckpts[6]["orch_bytes"] == 10
