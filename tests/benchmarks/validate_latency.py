"""Re-validation latency after one keystroke (the Config pane's debounce callback), p50/p95.

Run: python tests/benchmarks/validate_latency.py [--n 300]
Prints, for the largest fixture config and for a generated 1,000-line config, the full validation
time (parse + position scan + schema + cross-checks + gotchas + secrets) beside the tomlkit-only
and tomllib-only parse times as baselines. "pane" uses the incremental parser the Config pane keeps
(only the edited section is re-parsed); "CLI" parses the whole file with tomllib. Keystrokes insert
one random character at a random place, so many of them break the TOML (the parse-error path).
Target: p95 < 5 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.config.incremental import IncrementalParser  # noqa: E402
from services.config.validate import validate_text  # noqa: E402
from tests.shared_data import CONFIG_FIXTURES as FIXTURES  # noqa: E402


def thousand_lines() -> str:
    """A realistic rl config grown to 1,000 lines with train/eval sources and env vars."""
    head = (FIXTURES / "examples__advanced__glm-4.5-air__terminal.toml").read_text()
    lines = head.splitlines()
    i = 0
    while len(lines) < 1000:
        lines += [
            "",
            f"# source {i}: generated for the benchmark",
            "[[orchestrator.train.source]]",
            f'name = "env-{i}"',
            "ratio = 1.0",
            "",
            "[orchestrator.train.source.env.taskset]",
            f'id = "taskset-{i}"',
            "max_turns = 8",
            "",
            "[orchestrator.train.source.env.agent.harness]",
            'id = "bash"',
            "",
            "[orchestrator.train.source.env.agent.runtime]",
            'type = "subprocess"',
        ]
        i += 1
    return "\n".join(lines[:1000]) + "\n"


def keystrokes(text: str, n: int, seed: int = 7) -> list[str]:
    """``n`` variants of ``text``, each one typed character away (a digit changed or a letter added)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pos = rng.randrange(len(text))
        ch = rng.choice("abcdefgh0123456789 ")
        out.append(text[:pos] + ch + text[pos:])
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def timed(fn, inputs: list[str]) -> list[float]:
    out = []
    for text in inputs:
        t0 = time.perf_counter()
        fn(text)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    import tomlkit
    import tomllib

    largest = max(FIXTURES.glob("*.toml"), key=lambda p: len(p.read_text().splitlines()))
    cases = [
        (f"largest fixture ({largest.name}, {len(largest.read_text().splitlines())} lines)", largest.read_text()),
        ("generated 1,000-line config", thousand_lines()),
    ]

    def parse_ok(fn):
        def run(t):
            try:
                fn(t)
            except Exception:  # noqa: BLE001 - timed, not checked: a parse error costs its time too
                pass

        return run

    print(f"re-validate after one keystroke, {args.n} keystrokes each (ms)")
    print(f"{'config':<58} {'':>14} {'p50':>7} {'p95':>7} {'max':>7}")
    for label, text in cases:
        inputs = keystrokes(text, args.n)
        validate_text(text)  # warm the schema and rule caches
        parser = IncrementalParser()  # what the Config pane keeps per open file
        parser.loads(text)
        rows = [
            ("validate (pane)", timed(lambda t, parser=parser: validate_text(t, kind="rl", parser=parser), inputs)),
            ("validate (CLI)", timed(lambda t: validate_text(t, kind="rl"), inputs)),
            ("tomlkit parse only", timed(parse_ok(tomlkit.parse), inputs)),
            ("tomllib parse only", timed(parse_ok(tomllib.loads), inputs)),
        ]
        for name, values in rows:
            print(
                f"{label:<58} {name:>14} {statistics.median(values):7.2f} {pct(values, 0.95):7.2f} {max(values):7.2f}"
            )
            label = ""
        pane, base = rows[0][1], rows[3][1]
        print(
            f"{'':<58} {'ratio pane/tomllib':>14} {statistics.median(pane) / statistics.median(base):7.2f} "
            f"{pct(pane, 0.95) / pct(base, 0.95):7.2f}"
        )
    print("target: validate p95 < 5 ms")


if __name__ == "__main__":
    main()
