"""Panes that later issues fill. They say plainly what will be there; they never show fake data."""

from __future__ import annotations

from textual.widgets import Static

PLANNED = {
    "config": (
        "Config",
        "Validate and edit the prime-rl config of the selected pod: schema checks, known gotchas, "
        "memory estimate and version drift.",
    ),
    "offers": (
        "Offers",
        "GPU offers from Prime Intellect, Vast.ai, Lambda, RunPod and SkyPilot, ranked by the "
        "price of a finished run.",
    ),
    "bottleneck": (
        "Bottleneck",
        "Where each training step spends its time (inference, trainer, data, checkpoint) and a "
        "diagnosis of what limits throughput.",
    ),
    "checkpoints": (
        "Checkpoints",
        "The run's checkpoints on the pod and in S3: backup, restore and resume from a step.",
    ),
}


class PlannedPane(Static):
    """A pane that is not built yet."""

    def __init__(self, key: str) -> None:
        title, what = PLANNED[key]
        super().__init__(
            f"[b]{title}[/b] — not built yet.\n\nWhen it is, this pane will show: {what}\n\n"
            "Until then it shows nothing rather than made-up numbers.",
            classes="planned-pane",
        )
        self.key = key
