"""Where the team's shared test data lives (``../shared/fixtures/`` beside the repo): one answer for every test.

``PRIME_TRAIN_TUI_SHARED`` overrides it; otherwise the sibling of the checkout, else ``/work/shared`` (a clone
elsewhere on the team's machines)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _shared() -> Path:
    candidates = [Path(p) for p in (os.environ.get("PRIME_TRAIN_TUI_SHARED"),) if p]
    candidates += [REPO.parent / "shared", Path("/work/shared")]
    return next((c for c in candidates if (c / "fixtures").is_dir()), candidates[-1])


SHARED = _shared()
OFFER_FIXTURES = SHARED / "fixtures" / "offers"
CONFIG_FIXTURES = SHARED / "fixtures" / "prime-rl-configs"
