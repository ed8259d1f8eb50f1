"""Regenerate docs/screenshot.svg: the demo pod after ~40 samples, saved by the app itself. With --local: this
machine's real GPUs (the `local` pod) at 160x48 after ~12 samples, as scripts/gpu_session.sh saves them.

    python scripts/screenshot.py [OUT.svg]
    python scripts/screenshot.py --local OUT.svg
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
from services.monitor.worker import MonitorSettings  # noqa: E402


async def shoot(out: Path, pods: list[Pod], settings: MonitorSettings, size: tuple[int, int], samples: int) -> None:
    """The App with ``pods`` until the first pod has ``samples`` samples (at most ~40 s), saved to ``out``."""
    app = PrimeTrainApp(pods, settings=settings, pods_path=Path(tempfile.mkdtemp()) / "pods.toml")
    async with app.run_test(size=size) as pilot:
        for _ in range(400):
            snap = app.snapshots.get(pods[0].name)
            if snap is not None and snap.samples_total >= samples:
                break
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        snap = app.snapshots.get(pods[0].name)
        print(f"{pods[0].name}: {snap.samples_total if snap else 0} samples")
        app.save_screenshot(filename=out.name, path=str(out.parent))
    print(f"wrote {out}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--local"]:
        pods = [Pod(name="local", kind=PodKind.LOCAL)]
        asyncio.run(shoot(Path(argv[1]), pods, MonitorSettings(interval=0.5), (160, 48), 12))
        return
    pods = [
        Pod(name="demo", kind=PodKind.DEMO),
        Pod(name="h100-b", kind=PodKind.SSH, host="127.0.0.1", port=1, user="root"),
    ]
    out = Path(argv[0]) if argv else REPO / "docs" / "screenshot.svg"
    asyncio.run(shoot(out, pods, MonitorSettings(interval=0.2, demo_seed=7), (150, 36), 45))


if __name__ == "__main__":
    main(sys.argv[1:])
