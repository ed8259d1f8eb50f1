"""What this user's runs actually reached, per GPU type: the Offers pane's estimates use it when the
same model ran on the same GPU type and count before (ranking.calibrated_rates).

One JSON line per observation in ``throughput.jsonl`` (data dir), written at most once per run and
GPU shape per ``MIN_INTERVAL`` seconds while a run makes progress; garbage lines are skipped."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from services.offers.models import canonical_gpu
from services.offers.payload import loads
from services.offers.ranking import Observed

NAME = "throughput.jsonl"
MIN_INTERVAL = 600.0
MAX_LINES = 5000  # the file is rewritten with the newest half beyond this


def observation(
    model: str | None,
    gpu_names: list[str],
    gpu_mem_gb: float | None,
    steps_per_hr: float | None,
    tokens_per_step: int | None,
) -> Observed | None:
    """An observation from a pod's snapshot, or None when something needed is unknown."""
    if not model or not gpu_names or not steps_per_hr or steps_per_hr <= 0 or not tokens_per_step:
        return None
    return Observed(
        model, canonical_gpu(gpu_names[0], gpu_mem_gb), len(gpu_names), round(steps_per_hr, 3), int(tokens_per_step)
    )


class ObservationLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._last: dict[tuple[str, str, int], float] = {}

    def record(self, ob: Observed, now: float) -> bool:
        """Append unless the same (model, GPU shape) was recorded less than MIN_INTERVAL ago."""
        key = (ob.model, ob.gpu_type, ob.gpu_count)
        if now - self._last.get(key, float("-inf")) < MIN_INTERVAL:
            return False
        self._last[key] = now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"ts": round(now), **asdict(ob)}) + "\n")
        if self.path.stat().st_size > MAX_LINES * 200:
            self._trim()
        return True

    def _trim(self) -> None:
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()[-MAX_LINES // 2 :]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def load(self) -> list[Observed]:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                d = loads(line)  # a line nested 100k deep is skipped, never RecursionError
                out.append(
                    Observed(
                        str(d["model"]),
                        str(d["gpu_type"]),
                        int(d["gpu_count"]),
                        float(d["steps_per_hr"]),
                        int(d["tokens_per_step"]),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
        return out
