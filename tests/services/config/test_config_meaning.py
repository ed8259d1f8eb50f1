"""Issue 32: fixes changed what a config means, and some mistakes prime-rl rejects went unseen.

What was broken: removed settings that prime-rl replaced (rollout filters, the difficulty buffer, toml_files,
the async level) were deleted "with no replacement"; a file that builds on others validated clean once
toml_files was gone; the checkpoint warning's fix set [ckpt] keep_last = 2 beside [trainer.ckpt]
keep_last = 3 (prime-rl then rejects the file); conflict fixes chose silently which user value survives;
shared log level, W&B project and keep_last conflicts were not caught. What must hold now: each is
reported, a replaced setting says with what and is moved by hand, and no fix picks between two values.
"""

from __future__ import annotations

from services.config.validate import validate_text
from tests.services.config.test_fix_safety import assert_fix_is_safe
from tests.services.config.test_rules import RL_BASE


def findings(text: str) -> dict[str, tuple]:
    return {
        f.path: (f.id, f.severity.value, f.message, f.fix, f.edit)
        for f in validate_text(text, filename="rl.toml").findings
    }


def test_replaced_settings_say_with_what_and_are_not_deleted() -> None:
    filters = findings(RL_BASE + '[[orchestrator.pre_batch_filters]]\ntype = "zero_advantage"\nenforce = true\n')
    rid, _, message, fix, edit = filters["orchestrator.pre_batch_filters"]
    assert rid == "mig-batch-filters" and edit is None
    assert "advantage_range" in message and "no replacement" not in message and fix.startswith("by hand")
    buffer = findings(RL_BASE + "[orchestrator.buffer]\neasy_threshold = 0.9\n")["orchestrator.buffer"]
    assert buffer[0] == "mig-buffer" and "difficulty_pool" in buffer[2] and buffer[4] is None
    asynclevel = findings(RL_BASE.replace("group_size = 8", "group_size = 8\nmax_async_level = 2"))
    rid, _, message, fix, edit = asynclevel["orchestrator.max_async_level"]
    assert edit is None and "max_off_policy_steps" in message and "it is 2" in fix


def test_a_file_that_builds_on_others_is_checked_as_an_override() -> None:
    override = 'toml_files = ["base.toml"]\n\n[orchestrator]\nbatch_size = 64\n'
    got = findings(override)
    by_id = {f.id: f for f in validate_text(override, filename="rl.toml").findings}
    assert by_id["mig-toml-files"].edit is None and "base.toml" in by_id["override-file"].message
    assert "trainer" not in got  # left to the file it builds on
    alone = findings("[orchestrator]\nbatch_size = 64\n")  # the same file without toml_files: incomplete
    assert alone["trainer"][0] == "missing-required" and alone["trainer"][1] == "error"


def test_keep_last_in_the_trainer_is_enough_and_no_fix_conflicts() -> None:
    assert findings(RL_BASE + "[ckpt]\ninterval = 10\n\n[trainer.ckpt]\nkeep_last = 3\n") == {}
    old_key = findings(RL_BASE + "[ckpt]\ninterval = 10\nkeep = 3\n")
    assert [v[0] for v in old_key.values()] == ["mig-ckpt-keep"] and old_key["ckpt.keep"][4] is not None
    orch = findings(RL_BASE + "[ckpt]\ninterval = 10\n\n[orchestrator.ckpt]\nkeep_last = 5\n")
    rid, _, _, fix, edit = orch["ckpt.interval"]
    assert rid == "gotcha-ckpt-keep" and edit is None and "conflicts with orchestrator.ckpt.keep_last" in fix


def test_conflicts_ask_which_value_to_keep() -> None:
    got = findings("seq_len = 4096\n" + RL_BASE.replace("[trainer]\n", "[trainer.model]\nseq_len = 16384\n"))
    rid, _, _, fix, edit = got["trainer.model.seq_len"]
    assert rid == "xc-shared-conflict" and edit is None and "4096" in fix and "16384" in fix


def test_shared_conflicts_prime_rl_rejects() -> None:
    cases = {
        "trainer.log.level": RL_BASE + '[log]\nlevel = "debug"\n\n[trainer.log]\nlevel = "info"\n',
        "orchestrator.monitors.wandb.project": RL_BASE + '[monitors.wandb]\nproject = "a"\n\n'
        '[orchestrator.monitors.wandb]\nproject = "b"\n',
        "trainer.ckpt.keep_last": RL_BASE + "[ckpt]\nkeep_last = 2\n\n[trainer.ckpt]\nkeep_last = 3\n",
    }
    for path, text in cases.items():
        got = findings(text)
        assert got[path][0] == "xc-shared-conflict" and got[path][1] == "error", (path, got)
    same = RL_BASE + '[log]\nlevel = "debug"\n\n[trainer.log]\nlevel = "debug"\n'  # equal values pass
    assert findings(same) == {}


def test_the_older_inference_model_table_names_the_model() -> None:
    """Item 6: the inference model under [inference.model] was compared as if left out (the default)."""
    text = (
        RL_BASE.replace('name = "Qwen/Qwen3-0.6B"', 'name = "Qwen/Qwen3-4B"')
        + '[inference.model]\nname = "Qwen/Qwen3-4B"\n'
    )
    assert [v[0] for v in findings(text).values()] == ["mig-inference-model"]
    other = text.replace('[inference.model]\nname = "Qwen/Qwen3-4B"', '[inference.model]\nname = "Qwen/Qwen3-8B"')
    assert "xc-model-name" in {v[0] for v in findings(other).values()}


def test_use_renderer_says_what_replaced_it_and_only_true_is_deleted() -> None:
    """Item 8: use_renderer was reported as removed with no replacement; the typed [orchestrator.renderer]
    replaced it and rollouts always use a renderer, so true is safe to delete and false is moved by hand."""
    on = RL_BASE.replace("group_size = 8", "group_size = 8\nuse_renderer = true")
    rid, _, message, fix, edit = findings(on)["orchestrator.use_renderer"]
    assert rid == "mig-use-renderer" and "no replacement" not in message and "[orchestrator.renderer]" in message
    assert edit is not None and "always does" in message and "nothing changes" in fix
    fixed = assert_fix_is_safe(on, next(f for f in validate_text(on, kind="rl").findings), "rl")
    assert validate_text(fixed, kind="rl").findings == ()
    off = findings(RL_BASE.replace("group_size = 8", "group_size = 8\nuse_renderer = false"))
    rid, _, message, fix, edit = off["orchestrator.use_renderer"]
    assert rid == "mig-use-renderer" and edit is None and fix.startswith("by hand") and "renderer" in fix
