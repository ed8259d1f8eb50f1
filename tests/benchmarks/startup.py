"""Start-up: the import of the app and the first frame of ``--demo``, against a minimal Textual app with tabs.

Each figure is a fresh interpreter (spawned from here, so the baseline and ours share the machine's load),
timed from spawn to the first paint (the first full screen Textual writes, headless driver, 160x48) and to
"ready" (the first screen up and the app idle: what it mounts after the first paint included). Bytecode is written and
warmed first (this environment may set PYTHONDONTWRITEBYTECODE,
which would time the compiler instead of the import). Prints the median of N runs of each and the ratio.

The user's figure: ``prime-train-tui --demo`` through its real entry point (``app.cli.main``, the real terminal
driver on a pseudo-terminal of 160x48) from spawn to the first frame with the demo pod's GPU rows on screen;
anchor, the same way: the minimal app's first frame (``App.run()`` on the same pseudo-terminal).

    python tests/benchmarks/startup.py [--runs 7]

Targets: spawn -> GPU rows on screen < 2x the minimal app's first frame; first frame of --demo < 1.5x the minimal
app; the import of the app: only what the first screen needs (the backup/S3 chain, httpx, asyncssh, boto3, wandb
not imported).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """
from textual.app import App
from textual.widgets import Footer, Header, Label, TabbedContent, TabPane
class Minimal(App):
    def compose(self):
        yield Header()
        with TabbedContent():
            for name in ("Config", "Offers", "Monitor", "Bottleneck", "Checkpoints"):
                with TabPane(name):
                    yield Label(name)
        yield Footer()
app = Minimal()
"""

OURS = """
from app.cli import build_parser, tui_app
argv = ["--demo"]  # as app.cli.main builds and runs it for this command line
app = tui_app(build_parser(argv).parse_args(argv))
"""

IMPORT_ONLY = "import app.tui\n"

FIRST_FRAME = """
import asyncio, os, sys
async def main():
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        sys.stdout.write("FRAME\\n"); sys.stdout.flush()
        os._exit(0)  # the frame is what is timed, not the shutdown
asyncio.run(main())
"""

# the first screen the terminal gets: the first full update Textual writes (App._display, Textual 8), whatever
# the app still does after it (the hidden panes it mounts once the first screen is up)
FIRST_PAINT = """
import asyncio, os, sys
import textual.app
_display = textual.app.App._display
def _first(self, screen, renderable):
    _display(self, screen, renderable)
    if renderable is not None:
        sys.stdout.write("FRAME\\n"); sys.stdout.flush()
        os._exit(0)
textual.app.App._display = _first
async def main():
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
asyncio.run(main())
"""

# through the real entry point on a pseudo-terminal: "FRAME" goes to fd PTT_MARK_FD when a frame is written that
# shows what is waited for (the minimal app: any; --demo: the demo pod's GPUs, put on screen by SnapshotFrames)
ON_TTY = """
import os, sys
import textual.app
_fd, _want = int(os.environ["PTT_MARK_FD"]), os.environ["PTT_WANT"]
_display = textual.app.App._display
def _hook(self, screen, renderable):
    _display(self, screen, renderable)
    if renderable is None:
        return
    if _want == "gpus":
        book = getattr(self, "book", None)
        if book is None or not any(s.latest is not None and s.latest.gpus for s in book.snapshots.values()):
            return
    os.write(_fd, b"FRAME\\n")
    os._exit(0)
textual.app.App._display = _hook
if _want == "gpus":
    from app.cli import main
    sys.exit(main(["--demo"]))
"""

MINIMAL_ON_TTY = ON_TTY + MINIMAL + "app.run()\n"


def spawn_tty(code: str, env: dict[str, str], want: str) -> float:
    """Seconds from spawn to the child's mark, the child on a 160x48 pseudo-terminal with the real driver."""
    import fcntl
    import pty
    import struct
    import termios
    import threading

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    r, w = os.pipe()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "PTT_MARK_FD": str(w), "PTT_WANT": want, "TERM": "xterm-256color"},
        pass_fds=(w,),
        start_new_session=True,
    )
    os.close(slave)
    os.close(w)

    def drain() -> None:  # the terminal must be read or the app blocks writing to it
        try:
            while os.read(master, 65536):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    with os.fdopen(r) as marks:
        line = marks.readline()
    elapsed = time.perf_counter() - t0
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    os.close(master)
    if line.strip() != "FRAME":
        raise SystemExit(f"the child on the terminal ({want}) ended without the frame")
    return elapsed


HEAVY = (
    "asyncssh",
    "httpx",
    "boto3",
    "botocore",
    "wandb",
    "services.backup.transfer",
    "services.backup.manifest",
    "services.backup.s3",
)


def _env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        PRIME_TRAIN_TUI_CONFIG_DIR=f"{home}/config",
        PRIME_TRAIN_TUI_DATA_DIR=f"{home}/data",
        PRIME_TRAIN_TUI_CACHE_DIR=f"{home}/cache",
        HOME=home,
    )
    return env


def spawn(code: str, env: dict[str, str]) -> float:
    """Seconds from spawn to the child's first line on stdout (or its exit)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - t0
    _, err = proc.communicate(timeout=120)
    if proc.returncode not in (0, None) or ("FRAME" in code and line.strip() != "FRAME"):
        raise SystemExit(f"the child failed:\n{err[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as home:
        env = _env(home)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "app", "services", "widgets"], cwd=REPO, env=env, check=False
        )
        cases = {
            "python alone": "pass\n",
            "import textual.app": "import textual.app\n",
            "import app.tui": IMPORT_ONLY,
            "first paint, minimal app": MINIMAL + FIRST_PAINT,
            "first paint, --demo": OURS + FIRST_PAINT,
            "ready, minimal app": MINIMAL + FIRST_FRAME,
            "ready, --demo": OURS + FIRST_FRAME,
        }
        tty_cases = {
            "terminal: minimal app's first frame": (MINIMAL_ON_TTY, "any"),
            "terminal: --demo GPU rows on screen": (ON_TTY, "gpus"),
        }
        for code in cases.values():  # warm the page cache and the bytecode
            spawn(code, env)
        for code, want in tty_cases.values():
            spawn_tty(code, env, want)
        times: dict[str, list[float]] = {name: [] for name in (*cases, *tty_cases)}
        for _ in range(runs):  # interleaved, so a burst of load hits every case alike
            for name, code in cases.items():
                times[name].append(spawn(code, env))
            for name, (code, want) in tty_cases.items():
                times[name].append(spawn_tty(code, env, want))
        loaded = subprocess.run(
            [sys.executable, "-c", f"import sys, app.tui; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        ).stdout.split()
    print(f"startup: {runs} runs of each, interleaved; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"{name:28s} median {med[name] * 1000:6.0f} ms   (min {min(ts) * 1000:.0f}, max {max(ts) * 1000:.0f})")
    print(f"import app.tui / import textual.app: {med['import app.tui'] / med['import textual.app']:.2f}x")
    ratio = med["first paint, --demo"] / med["first paint, minimal app"]
    print(f"first paint (first frame), --demo / minimal app: {ratio:.2f}x (target < 1.5x)")
    print(
        f"ready (first screen up, the app idle), --demo / minimal app: "
        f"{med['ready, --demo'] / med['ready, minimal app']:.2f}x"
    )
    gpus = med["terminal: --demo GPU rows on screen"] / med["terminal: minimal app's first frame"]
    print(
        f"SPAWN -> GPU ROWS ON SCREEN (prime-train-tui --demo, real entry point and driver) / the minimal app's "
        f"first frame (anchor, same way): {gpus:.2f}x (target <= 2x)"
    )
    print("heavy modules imported by app.tui: " + (", ".join(loaded) or "none"))


if __name__ == "__main__":
    main()
