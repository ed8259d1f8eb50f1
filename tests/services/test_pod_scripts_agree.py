"""The scripts that run on a pod are single stdlib files (each uploaded alone), so the rule "is this
checkpoint complete?" is written in each of them. They must never disagree: resume, cleanup, backup and
the UI would act on different answers."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"
SCRIPTS = ("probe.py", "lifecycle_agent.py", "backup_agent.py")
PARTS = ("trainer/__0_0.distcp", "trainer/.metadata", "orchestrator/progress.pt",
         "orchestrator/progress.pt.tmp", "STABLE", "model.safetensors")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"pod_{name[:-3]}", SERVICES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.checkpoint_complete


@pytest.fixture(scope="module")
def rules():
    return {name: load(name) for name in SCRIPTS}


def test_every_pod_script_judges_every_layout_alike(rules, tmp_path: Path) -> None:
    verdicts = []
    for n in range(len(PARTS) + 1):
        for combo in itertools.combinations(PARTS, n):
            d = tmp_path / f"step_{len(verdicts)}"
            d.mkdir()
            for part in combo:
                (d / part).parent.mkdir(parents=True, exist_ok=True)
                (d / part).write_bytes(b"x")
            answers = {name: bool(rule(str(d))) for name, rule in rules.items()}
            assert len(set(answers.values())) == 1, f"{combo}: {answers}"
            verdicts.append(answers["probe.py"])
    assert any(verdicts) and not all(verdicts)  # the layouts cover both answers
