"""An unknown key that belongs in another table says where (issue 32 item 7): before, LoRA settings under
[trainer] or [model] and an rl-style [trainer.optim] in an SFT file got "remove it", dropping the setting."""

from __future__ import annotations

import tomllib

from services.config.fixes import apply_fix
from services.config.validate import validate_text
from tests.services.config.test_rules import RL_BASE, SFT_BASE


def unknown(text: str, kind: str):
    return [f for f in validate_text(text, kind=kind).findings if f.id == "unknown-key"]


def test_lora_under_trainer_is_moved_to_its_table_keeping_the_value() -> None:
    text = RL_BASE.replace("[trainer]\n", "[trainer]\nlora_alpha = 16\n")
    (f,) = unknown(text, "rl")
    assert "it belongs in [trainer.model.lora] as 'alpha'" in f.message and "remove" not in f.fix
    fixed = apply_fix(text, f)
    assert tomllib.loads(fixed)["trainer"]["model"]["lora"]["alpha"] == 16
    assert unknown(fixed, "rl") == []


def test_a_move_onto_a_value_the_user_set_is_by_hand() -> None:
    text = RL_BASE.replace("[trainer]\n", "[trainer]\nlora_alpha = 16\n[trainer.model.lora]\nalpha = 32\n")
    (f,) = unknown(text, "rl")
    assert f.edit is None and "by hand" in f.fix and "trainer.model.lora.alpha is set there already" in f.fix


def test_lora_under_the_shared_model_names_both_sides_and_moves_nothing() -> None:
    text = RL_BASE.replace('name = "Qwen/Qwen3-0.6B"\n', 'name = "Qwen/Qwen3-0.6B"\nlora_rank = 8\n', 1)
    (f,) = unknown(text, "rl")
    assert "[trainer.model.lora] or [orchestrator.model.lora] as 'rank'" in f.message and f.edit is None


def test_an_rl_style_optimizer_table_in_an_sft_file_says_where_it_goes() -> None:
    text = SFT_BASE + "[trainer.optim]\nlr = 1e-5\n"
    (f,) = unknown(text, "sft")
    assert "its settings belong in [optim]" in f.message and "by hand" in f.fix and "remove" not in f.fix
