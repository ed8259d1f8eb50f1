"""The TUI on this machine's `local` pod for scripts/gpu_session.sh: waits for ~10 samples of the real GPUs
(and the launched run's progress, if any), then saves the Monitor pane as SVG and prints its text.

    python scripts/gpu_screen.py OUT.svg
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.tui import PrimeTrainApp  # noqa: E402
from services.models import Pod, PodKind  # noqa: E402
from services.monitor.service import MonitorSettings  # noqa: E402


async def main(out: Path) -> None:
    app = PrimeTrainApp([Pod(name="local", kind=PodKind.LOCAL)], settings=MonitorSettings(interval=0.5),
                        pods_path=out.parent / "pods.toml")
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(300):
            snap = app.snapshots.get("local")
            if snap is not None and snap.samples_total >= 12:
                break
            await pilot.pause(0.1)
        await pilot.pause(0.5)
        snap = app.snapshots.get("local")
        print(f"samples {snap.samples_total if snap else 0}")
        app.save_screenshot(filename=out.name, path=str(out.parent))
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
