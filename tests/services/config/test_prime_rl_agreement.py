"""Three disagreements with prime-rl a held-out set of realistic mistakes found (issue 32): each case's verdict
was taken from prime-rl's own loader at the commit the schema follows.

- ``[ckpt] interval = 0`` in an rl file: the shared table has no bound, but prime-rl copies the value into
  ``trainer.ckpt`` and ``orchestrator.ckpt``, whose ``interval`` must be >= 1: rejected. We said nothing but a
  keep_last warning about "checkpoints every 0 steps".
- ``[orchestrator.algo] type = "opd"`` without a ``teacher`` (and ``hierarchical_grpo`` without
  ``episode_agents``): a variant's own required key. We said nothing.
- ``max_steps = -5``: prime-rl accepts it (no bound); we called it an error. What prime-rl accepts is never an
  error: a warning (the run trains nothing while its GPUs bill).
"""

from __future__ import annotations

import pytest

from services.config.validate import validate_text
from tests.services.config.test_rules import RL_BASE, SFT_BASE, marked_line

ALGO_AT = "[[orchestrator.train.source]]"

MISTAKES = [
    ("xc-shared-range", RL_BASE + "[ckpt]\ninterval = 0  # <-\n"),
    ("missing-required", RL_BASE.replace(ALGO_AT, '[orchestrator.algo]  # <-\ntype = "opd"\n\n' + ALGO_AT)),
    (
        "missing-required",
        RL_BASE.replace(ALGO_AT, '[orchestrator.algo]  # <-\ntype = "hierarchical_grpo"\n\n' + ALGO_AT),
    ),
]

ACCEPTED = [
    RL_BASE + "[ckpt]\ninterval = 1\nkeep_last = 2\n",
    # the sub-configs set their own interval: the shared table fills nothing
    RL_BASE + "[ckpt]\nkeep_last = 2\n[trainer.ckpt]\ninterval = 5\n[orchestrator.ckpt]\ninterval = 5\n",
    RL_BASE.replace(
        ALGO_AT,
        '[orchestrator.algo]\ntype = "opd"\n\n[orchestrator.algo.teacher]\nname = "Qwen/Qwen3-8B"\n'
        'base_url = "http://localhost:8001/v1"\n\n' + ALGO_AT,
    ),
]


@pytest.mark.parametrize("rule_id,text", MISTAKES, ids=["shared-interval-0", "opd-no-teacher", "hgrpo-no-agents"])
def test_what_prime_rl_rejects_is_one_error_at_its_key(rule_id: str, text: str) -> None:
    report = validate_text(text, kind="rl")
    assert [(f.id, f.line) for f in report.findings] == [(rule_id, marked_line(text))]
    assert report.findings[0].severity.value == "error"


@pytest.mark.parametrize("text", ACCEPTED, ids=["interval-1", "sub-intervals", "opd-with-teacher"])
def test_what_prime_rl_accepts_gets_no_finding(text: str) -> None:
    assert validate_text(text, kind="rl").findings == ()


@pytest.mark.parametrize(
    "kind,bad,good",
    [
        ("rl", RL_BASE.replace("max_steps = 20", "max_steps = -5"), RL_BASE),
        ("trainer", "max_steps = 0\n", "max_steps = 1\n"),
        ("sft", "max_steps = -1\n" + SFT_BASE, "max_steps = 5\n" + SFT_BASE),
    ],
    ids=["rl", "trainer", "sft"],
)
def test_a_max_steps_that_trains_nothing_is_a_warning_not_an_error(kind: str, bad: str, good: str) -> None:
    report = validate_text(bad, kind=kind)
    assert [(f.id, f.severity.value, f.line) for f in report.findings] == [("xc-max-steps-range", "warning", 1)]
    assert validate_text(good, kind=kind).findings == ()
