"""Item 7: odd step_N directory names (digits that str.isdigit() accepts but are not ASCII, a sign) are
skipped by every pod-side script, never fatal, and never mistaken for another step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.pod.agent.common import parse_step, step_dirs

AGENT = Path(__file__).resolve().parents[2] / "services" / "pod" / "agent"
# step_010 is step 10 under another name: "step_%d" % 10 (how every script names step 10) would miss it
ODD = ("step_²", "step_١٢", "step_-1", "step_+3", "step_ 4", "step_4 ", "step_", "step_1_2", "step_٣", "step_010")


def make_run(root: Path) -> Path:
    """A run dir whose checkpoints/ and broadcasts/ hold odd step names beside one good step_10."""
    run = root / "run"
    for base in ("checkpoints", "broadcasts"):
        for name in (*ODD, "step_10"):
            d = run / base / name
            (d / "trainer").mkdir(parents=True)
            (d / "trainer" / ".metadata").write_bytes(b"m")
            (d / "trainer" / "w.bin").write_bytes(b"w" * 100)
    return run


def run_script(script: str, *args: str) -> list[dict]:
    """Run a pod-side script as the pod does (by path, its siblings beside it); its JSON lines."""
    proc = subprocess.run([sys.executable, "-u", str(AGENT / script), *args], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("odd-steps"))


@pytest.mark.parametrize(
    "name, step",
    [
        ("step_10", 10),
        ("step_0", 0),
        ("step_1234567", 1234567),
        ("step_007", None),
        *[(n, None) for n in ODD],
        ("step_" + "9" * 40, None),
        ("STEP_1", None),
        ("xstep_1", None),
    ],
)
def test_parse_step_accepts_ascii_digits_only(name, step):
    assert parse_step(name) == step


def test_step_dirs_lists_only_the_good_step(run):
    assert step_dirs(str(run / "checkpoints")) == {10: str(run / "checkpoints" / "step_10")}


def test_probe_lists_only_step_10(run):
    [sample] = run_script("probe.py", "--once", "--backend", "none", "--run-dir", str(run))
    assert [c["step"] for c in sample["ckpts"]] == [10]
    assert sample["ckpts"][0]["complete"] is True and sample["ckpts"][0]["path"].endswith("step_10")
    assert not [e for e in sample["errors"] if "ckpt" in e], sample["errors"]


def test_lifecycle_helper_ckpts_and_survey_list_only_step_10(run):
    [ans] = run_script("lifecycle.py", "ckpts", "--ckpt-dir", str(run / "checkpoints"), "--run-dir", str(run))
    assert ans["ok"] and [c["step"] for c in ans["ckpts"]] == [10]
    [ans] = run_script(
        "lifecycle.py",
        "survey",
        "--ckpt-dir",
        str(run / "checkpoints"),
        "--run-dir",
        str(run),
        "--keep-broadcasts",
        "0",
    )
    assert ans["ok"] and [c["step"] for c in ans["ckpts"]] == [10]
    # the broadcasts' odd names are not leftovers either: only step_10 is ever a candidate for pruning
    assert {c["path"] for c in ans["leftovers"]} <= {str(run / "broadcasts" / "step_10")}


def test_backup_agent_lists_only_step_10(run):
    [ans] = run_script("backup.py", "list", str(run))
    assert ans["event"] == "list" and [c["step"] for c in ans["ckpts"]] == [10]
