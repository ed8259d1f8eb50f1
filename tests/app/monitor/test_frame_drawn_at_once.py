"""A snapshot's frame is drawn by the handler that brings it (app/compositor.py ``LineScreen.paint_now``, called at
the end of ``SnapshotFrames.flush``), not at the screen's next update tick: the update the terminal gets is sent
before ``flush`` returns, and it holds the new figures. Under a dialog nothing is drawn behind it (as Textual's
timer would not), and the frame comes when the dialog closes."""

from __future__ import annotations

from app.screens.help import HelpScreen
from app.tui import PrimeTrainApp
from services.models import GpuSample, HostSample, Pod, PodKind, PodSnapshot, PodState, PodStatus, Sample
from tests.app.helpers import parked_app, shown, wait_for

GIB = 1024**3
NOW = 1_700_000_000.0
POD = Pod(name="pod00", kind=PodKind.SSH, host="10.0.0.1", price_per_hr=23.92)


def snap(power: float, samples: int) -> PodSnapshot:
    gpus = tuple(GpuSample(i, "NVIDIA H100 80GB HBM3", 90.0, 60 * GIB, 80 * GIB, power, 60.0) for i in range(8))
    return PodSnapshot(
        pod=POD,
        status=PodStatus(PodState.ONLINE, "via nvml", since=NOW - 60),
        history=(Sample(t=NOW, gpus=gpus, host=HostSample(), source="nvml"),),
        samples_total=samples,
        last_received=NOW,
    )


def sent_text(update: object) -> str:
    """What an update sends to the terminal, as text (a partial update's changed pieces, or a whole screen's)."""
    chops = getattr(update, "chops", None)
    if chops is not None:
        return "\n".join("".join(s.text for s in line.values() if s is not None) for line in chops)
    lines = getattr(update, "strips", [])  # a whole screen's: per line its strip, or its pieces
    return "\n".join(
        line.text if hasattr(line, "text") else "".join(s.text for s in line if s is not None) for line in lines
    )


def recording(app: PrimeTrainApp) -> list[str]:
    """The text of every update the App sends to the terminal from now on."""
    sent: list[str] = []
    display = app._display

    def recorded(screen, update) -> None:  # type: ignore[no-untyped-def]
        sent.append(sent_text(update))
        display(screen, update)

    app._display = recorded  # type: ignore[method-assign]
    return sent


async def test_the_frame_is_sent_before_flush_returns() -> None:
    app = parked_app([POD], NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        app.on_snapshot(snap(512.0, 1))
        await shown(pilot)
        sent = recording(app)
        app.frames.queue(snap(634.0, 2))
        app.frames.flush()  # no await: nothing else of the App runs in between
        assert sent, "flush returned before the frame was sent"
        assert "634" in sent[-1] and "512" not in sent[-1]


async def test_nothing_is_drawn_behind_a_dialog_and_the_frame_comes_when_it_closes() -> None:
    app = parked_app([POD], NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        app.on_snapshot(snap(512.0, 1))
        await shown(pilot)
        app.call_later(app.action_help)
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        sent = recording(app)
        app.frames.queue(snap(634.0, 2))
        app.frames.flush()
        assert not any("634" in text for text in sent)  # (the pane updates while hidden, as before)
        app.pop_screen()
        await wait_for(pilot, lambda: any("634" in text for text in sent))
