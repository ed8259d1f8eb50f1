"""Fixes go through tomlkit and keep the user's comments and formatting."""

from __future__ import annotations

import pytest

from services.config.findings import ConfigError, Edit
from services.config.fixes import apply_edit, apply_fix
from services.config.validate import validate_text
from tests.services.config.test_rules import RL_BASE


def test_set_keeps_comments_and_other_lines() -> None:
    text = RL_BASE.replace("batch_size = 16", "# how many rollouts\nbatch_size = 20  # per step")
    (f,) = validate_text(text, kind="rl").findings
    assert f.id == "xc-batch-group"
    fixed = apply_fix(text, f)
    assert "# how many rollouts\nbatch_size = 24  # per step" in fixed
    assert fixed.replace("batch_size = 24", "batch_size = 20") == text
    assert validate_text(fixed, kind="rl").findings == ()


def test_set_creates_missing_tables() -> None:
    text = RL_BASE + "[ckpt]\ninterval = 10  # often\n"
    (f,) = validate_text(text, kind="rl").findings
    fixed = apply_fix(text, f)
    assert "interval = 10  # often\nkeep_last = 2" in fixed
    assert validate_text(fixed, kind="rl").findings == ()


def test_delete_and_no_fix() -> None:
    text = RL_BASE + '[inference.env_vars]\nVLLM_USE_V1 = "0"\nOTHER = "1"  # keep me\n'
    (f,) = validate_text(text, kind="rl").findings
    fixed = apply_fix(text, f)
    assert "VLLM_USE_V1" not in fixed and 'OTHER = "1"  # keep me' in fixed
    bad = validate_text(RL_BASE + "[orchestrator.eval]\n", kind="rl").findings[0]
    with pytest.raises(ConfigError, match="no automatic fix"):
        apply_fix(RL_BASE, bad)


def test_fix_refused_while_the_file_does_not_parse() -> None:
    with pytest.raises(ConfigError, match="does not parse"):
        apply_edit("a = = 1\n", Edit("delete", ("a",)))
