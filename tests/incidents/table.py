"""Run the incident corpus and print docs/alerts.md's table: ``python -m tests.incidents.table`` (needs sshd, root
for the tmpfs of the disk scenario)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tests.incidents.harness import SCENARIOS, Result, run_corpus, stall_budget_s


def table(results: dict[str, Result]) -> str:
    rows = ["| scenario | what happens | expected | raised (s after the onset) | verdict |", "|---|---|---|---|---|"]
    for s in SCENARIOS:
        r = results.get(s.name)
        if r is None:
            continue
        expected = ", ".join(f"`{a}` ≤ {t:g} s" for a, t in s.must.items()) or "no alert"
        raised = (
            ", ".join(
                f"`{a}` {r.detect_s(a):.1f}" if r.detect_s(a) is not None else f"`{a}`"
                for a in sorted(r.first_seen, key=lambda a: r.first_seen[a])
            )
            or "none"
        )
        if s.action == "pod-lost" and r.offline_at is not None and r.onset is not None:
            raised += f"; offline after {r.offline_at - r.onset:.1f}"
        problems = r.problems()
        rows.append(
            f"| {s.name} | {s.what} | {expected} | {raised} | "
            f"{'pass' if not problems else 'FAIL: ' + '; '.join(problems)} |"
        )
    return "\n".join(rows)


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ptt-incidents-", ignore_cleanup_errors=True) as tmp:
        results = run_corpus(Path(tmp), sys.argv[1:] or None)
    print(table(results))
    print(f"\n{len(results)} scenarios in {time.monotonic() - started:.0f} s (stall budget {stall_budget_s():g} s)")
    return 0 if all(not r.problems() for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
