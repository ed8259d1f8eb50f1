"""The "did you mean" of an unknown key: the schema field it is a misspelling of, and only a misspelling."""

from __future__ import annotations

import difflib
import functools
from typing import Any


def did_you_mean(key: str, candidates: Any, table: dict[str, Any]) -> str | None:
    """The field ``key`` is a misspelling of, or None. Only a typo counts: the same words with a letter
    or two wrong, swapped, abbreviated (len/length) or run together. A different word
    (num_prefill_nodes / num_prefill_replicas) or an extra one (micro_batch_size / batch_size) names
    another setting; a key the table already sets is never suggested (the rename would overwrite it)."""
    return _closest(key, tuple(c for c in candidates if c not in table))


@functools.lru_cache(maxsize=4096)
def _closest(key: str, free: tuple[str, ...]) -> str | None:
    """Memoized: the pane re-validates the same keys on every keystroke, and a taskset's own settings
    (passed through, but compared with the known ones) repeat in every source."""
    for cand in difflib.get_close_matches(key, free, n=5, cutoff=0.6):
        if _typo_of(key, cand):
            return cand
    return None


def _typo_of(typed: str, field_name: str) -> bool:
    a, b = typed.lower().replace("-", "_"), field_name.lower()
    if a.replace("_", "") == b.replace("_", ""):
        return True
    wa, wb = [w for w in a.split("_") if w], [w for w in b.split("_") if w]
    if sorted(wa) == sorted(wb):
        return True
    if len(wa) != len(wb):
        return _near(a.replace("_", ""), b.replace("_", ""))
    pairs = list(zip(wa, wb))
    if all(
        x == y or _near(x, y) or (min(len(x), len(y)) >= 3 and (x.startswith(y) or y.startswith(x))) for x, y in pairs
    ):
        return True
    # short words (seq_lne / seq_len): one word, of the rest the same, has two neighbouring letters swapped.
    # Only a swap: the same letters typed out of order; a letter changed in a short word names another
    # setting (top_k / top_p).
    differing = [(x, y) for x, y in pairs if x != y]
    return len(differing) == 1 and len(a) >= 5 and _swapped(*differing[0])


def _swapped(x: str, y: str) -> bool:
    """``x`` is ``y`` with two neighbouring letters swapped."""
    if len(x) != len(y) or len(x) < 2:
        return False
    diff = [i for i in range(len(x)) if x[i] != y[i]]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and x[diff[0]] == y[diff[1]] and x[diff[1]] == y[diff[0]]


def _near(x: str, y: str) -> bool:
    """At most one edit (insert, delete, replace or swap of neighbours) apart, for words of 4+ letters."""
    if min(len(x), len(y)) < 4 or abs(len(x) - len(y)) > 1:
        return False
    if len(x) == len(y):
        diff = [i for i in range(len(x)) if x[i] != y[i]]
        return len(diff) <= 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and x[diff[0]] == y[diff[1]] and x[diff[1]] == y[diff[0]]
        )
    if len(x) > len(y):
        x, y = y, x
    return any(y[:i] + y[i + 1 :] == x for i in range(len(y)))
