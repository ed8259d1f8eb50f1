"""Keystroke → next frame in the Config pane's editor, a 1,000-line config, p50/p95.

Run: python tests/benchmarks/editor_latency.py [--n 200]
The headless app (160x48, no pods) opens a generated 1,000-line prime-rl config in its Config pane; the cursor
sits in the middle of the file and characters are typed one at a time. For each key the time from the
press to the app's next drawn frame (the app's display call) is taken, with the CPU the process spent
until the app was idle again. The baseline is the same run on the config's first 60 lines (same
process): the ratio shows what the file's length costs. The pane's debounced re-validation is not in
these figures (see validate_latency.py). The app's settings and data directories are fresh temporary
ones (none of this machine's pods, rentals or settings). Target: p50 < 33 ms (one frame at 30 fps).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from textual.widgets import TextArea  # noqa: E402

from app.tui import PrimeTrainApp  # noqa: E402
from tests.benchmarks.validate_latency import pct, thousand_lines  # noqa: E402


class Bench(PrimeTrainApp):
    """The app, noting when each frame is drawn."""

    def __init__(self, path: Path) -> None:
        super().__init__([], config_path=path)
        self.drawn: list[float] = []  # (not "frames": the App has a part of that name)

    def _display(self, screen, renderable) -> None:  # type: ignore[no-untyped-def]
        self.drawn.append(time.perf_counter())
        super()._display(screen, renderable)


async def run(path: Path, n: int) -> tuple[list[float], list[float]]:
    app = Bench(path)
    wall: list[float] = []
    cpu: list[float] = []
    async with app.run_test(size=(160, 48)) as pilot:
        while not app.screen_stack[0].query("#config-editor"):  # the panes besides Monitor mount after the first screen
            await pilot.pause(0.01)
        app.action_show_pane("config")
        editor = app.query_one("#config-editor", TextArea)
        for _ in range(100):
            await pilot.pause(0.02)
            if editor.document.line_count > 10:
                break
        editor.focus()
        middle = editor.document.line_count // 2
        editor.move_cursor((middle, 0), center=True)
        await pilot.pause()
        for i in range(n):
            key = "abcdefgh"[i % 8]
            app.drawn.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            await pilot.press(key)
            for _ in range(50):
                if app.drawn:
                    break
                await asyncio.sleep(0.001)
            if app.drawn:
                wall.append(app.drawn[0] - t0)
                cpu.append(time.process_time() - c0)
            await pilot.pause()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    import tempfile

    text = thousand_lines()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("CONFIG", "DATA", "CACHE"):  # the app's own directories, empty: this machine's stay out
            os.environ[f"PRIME_TRAIN_TUI_{name}_DIR"] = f"{tmp}/{name.lower()}"
        results = {}
        for label, lines in (
            ("first 60 lines (baseline)", text.splitlines()[:60]),
            (f"{text.count(chr(10)):,} lines", text.splitlines()),
        ):
            path = Path(tmp) / "rl.toml"
            path.write_text("\n".join(lines) + "\n")
            results[label] = asyncio.run(run(path, args.n))
    print(f"keystroke -> next frame in the Config pane, {args.n} keys typed mid-file (ms)")
    print(f"{'config':<28} {'p50':>7} {'p95':>7} {'cpu p50':>8} {'frames':>7}")
    for label, (wall, cpu) in results.items():
        print(
            f"{label:<28} {statistics.median(wall) * 1e3:7.1f} {pct(wall, 0.95) * 1e3:7.1f} "
            f"{statistics.median(cpu) * 1e3:8.1f} {len(wall):7d}"
        )
    (base, base_cpu), (ours, our_cpu) = results.values()
    print(
        f"{'ratio long/short':<28} {statistics.median(ours) / statistics.median(base):7.2f} "
        f"{pct(ours, 0.95) / pct(base, 0.95):7.2f} {statistics.median(our_cpu) / statistics.median(base_cpu):8.2f}"
    )
    print("target: p50 < 33 ms")


if __name__ == "__main__":
    main()
