"""Regenerate docs/screenshot.svg: the demo pod after ~40 samples, saved by the app itself.

    python scripts/screenshot.py [OUT.svg]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.tui import PrimeTrainApp  # noqa: E402
from services.models import Pod, PodKind  # noqa: E402
from services.monitor.service import MonitorSettings  # noqa: E402


async def main(out: Path) -> None:
    settings = MonitorSettings(interval=0.2, demo_seed=7)
    pods = [Pod(name="demo", kind=PodKind.DEMO),
            Pod(name="h100-b", kind=PodKind.SSH, host="127.0.0.1", port=1, user="root")]
    app = PrimeTrainApp(pods, settings=settings, pods_path=Path(tempfile.mkdtemp()) / "pods.toml")
    async with app.run_test(size=(150, 36)) as pilot:
        for _ in range(400):
            snap = app.snapshots.get("demo")
            if snap is not None and snap.samples_total >= 45:
                break
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        app.save_screenshot(filename=out.name, path=str(out.parent))
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "screenshot.svg"))
