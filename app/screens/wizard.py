"""The config wizard: model → environment → hardware preset → GPU count → preview and save.

A modal, step by step with Back/Next. The config itself comes from services/config/wizard.py (the
same generator as ``prime-train-tui init``), so what is previewed validates with zero errors; the
preview shows the memory estimate and the findings beside the text. Saving writes atomically (an
existing file is kept as ``.bak``) in a worker and dismisses with the path, for the Config pane to
open.
"""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, ContentSwitcher, Input, Label, Select, Static, TextArea

from services.config.findings import ConfigError
from services.config.memory import human, presets, registry
from services.config.wizard import ENVIRONMENTS, WizardChoices, WizardResult, generate
from services.text import plain

STEPS = ("step-model", "step-env", "step-preset", "step-gpus", "step-preview")
TITLES = ("1/5 Model", "2/5 Environment", "3/5 GPU type", "4/5 How many GPUs", "5/5 Preview and save")


class WizardScreen(ModalScreen["Path | None"]):
    """Dismisses with the saved file's path, or None when cancelled."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="wizard.cancel"),
        Binding("ctrl+n", "next", "Next", id="wizard.next"),
        Binding("ctrl+b", "back", "Back", id="wizard.back"),
    ]

    DEFAULT_CSS = """
    WizardScreen { align: center middle; }
    WizardScreen #wizard { width: 110; max-width: 100%; height: 34; max-height: 100%; border: thick $primary;
    background: $surface; padding: 0 1; }
    WizardScreen #wizard-title { text-style: bold; height: 1; }
    WizardScreen #wizard-help { color: $text-muted; height: 2; }
    WizardScreen ContentSwitcher { height: 1fr; }
    WizardScreen #wizard-preview { height: 1fr; }
    WizardScreen #wizard-estimate { height: 2; }
    WizardScreen #wizard-buttons { height: 3; align-horizontal: right; }
    WizardScreen #wizard-error { color: $error; height: 1; }
    WizardScreen #wizard-keys { height: 1; color: $text-muted; }
    """

    def __init__(
        self, output: Path | None = None, *, model: str = "Qwen/Qwen3-4B", preset: str = "h100-80gb", gpus: int = 2
    ) -> None:
        super().__init__()
        self.output = output or Path("rl.toml")
        self._defaults = (model, preset, gpus)
        self.step = 0
        self.result: WizardResult | None = None

    def compose(self) -> ComposeResult:
        model, preset, gpus = self._defaults
        with Vertical(id="wizard"):
            yield Label("", id="wizard-title")
            yield Static("", id="wizard-help")
            with ContentSwitcher(initial=STEPS[0]):
                with Vertical(id="step-model"):
                    yield Select(
                        [(self._model_label(n), n) for n in registry()],
                        value=model,
                        allow_blank=False,
                        id="wizard-model",
                    )
                with Vertical(id="step-env"):
                    yield Select(
                        [(f"{k}: {v[4]}", k) for k, v in ENVIRONMENTS.items()],
                        value="reverse-text",
                        allow_blank=False,
                        id="wizard-env",
                    )
                with Vertical(id="step-preset"):
                    yield Select(
                        [(f"{p.id} ({p.name}, {human(p.memory)})", p.id) for p in presets().values()],
                        value=preset,
                        allow_blank=False,
                        id="wizard-preset",
                    )
                with Vertical(id="step-gpus"):
                    yield Input(str(gpus), type="integer", id="wizard-gpus", placeholder="GPUs on the pod")
                with Vertical(id="step-preview"):
                    yield Static("", id="wizard-estimate")
                    yield TextArea.code_editor("", language="toml", read_only=True, id="wizard-preview")
                    yield Input(str(self.output), id="wizard-output", placeholder="save as")
            yield Label("", id="wizard-error")
            yield Static("ctrl+n next · ctrl+b back · escape cancels", id="wizard-keys", markup=False)
            with Horizontal(id="wizard-buttons"):
                yield Button("Cancel", id="wizard-cancel")
                yield Button("Back", id="wizard-back")
                yield Button("Next", id="wizard-next", variant="primary")

    @staticmethod
    def _model_label(name: str) -> str:
        shape = registry()[name]
        tags = [f"{shape.params / 1e9:g}B"]
        if shape.experts:
            tags.append("MoE")
        if shape.vl:
            tags.append("VL")
        if shape.tools:
            tags.append("tools")
        if shape.known_issue:
            tags.append("known issue")
        return f"{name} ({', '.join(tags)})"

    def on_mount(self) -> None:
        self._show()

    def _show(self) -> None:
        self.query_one(ContentSwitcher).current = STEPS[self.step]
        self.query_one("#wizard-title", Label).update(f"New prime-rl config · {TITLES[self.step]}")
        help_text = (
            "The model to train (shapes from the public model cards; VL models need a VLM setup).",
            "Tool-calling environments run their tools locally (remote executors are latency-bound).",
            "The GPU type decides how much fits per GPU.",
            "Half the GPUs serve inference (vLLM), the rest train (FSDP); 1 GPU shares it at 50/50.",
            "Every choice is commented in the file. Save writes atomically (an existing file is kept as .bak).",
        )[self.step]
        self.query_one("#wizard-help", Static).update(help_text)
        self.query_one("#wizard-back", Button).disabled = self.step == 0
        self.query_one("#wizard-next", Button).label = "Save" if self.step == len(STEPS) - 1 else "Next"
        self.query_one("#wizard-error", Label).update("")

    def choices(self) -> WizardChoices:
        gpus_text = self.query_one("#wizard-gpus", Input).value.strip()
        if not gpus_text.isdigit() or int(gpus_text) < 1:
            raise ConfigError("the GPU count must be a whole number ≥ 1")
        return WizardChoices(
            model=str(self.query_one("#wizard-model", Select).value),
            preset=str(self.query_one("#wizard-preset", Select).value),
            gpus=int(gpus_text),
            environment=str(self.query_one("#wizard-env", Select).value),
        )

    def _preview(self) -> bool:
        from services.config.validate import validate_text

        try:
            c = self.choices()
            result = generate(c)
        except ConfigError as exc:
            self.query_one("#wizard-error", Label).update(Content(plain(f"{exc} {exc.hint}".strip())))
            return False
        report = validate_text(result.text, kind="rl", preset=c.preset, gpus=c.gpus)
        self.result = result
        self.query_one("#wizard-preview", TextArea).load_text(result.text)
        notes = "; ".join(result.notes)
        self.query_one("#wizard-estimate", Static).update(
            f"{result.train_gpus} train + {result.infer_gpus} inference GPU(s) · trainer ~{human(result.trainer_bytes)}"
            f" per GPU{' · LoRA' if result.lora else ''} · {report.errors} error(s), {report.warnings} warning(s)"
            + (f"\n{notes}" if notes else "")
        )
        return True

    def action_next(self) -> None:
        if self.step == len(STEPS) - 1:
            self._save_clicked()
            return
        if self.step == len(STEPS) - 2 and not self._preview():
            return
        self.step += 1
        self._show()

    def action_back(self) -> None:
        if self.step > 0:
            self.step -= 1
            self._show()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        {"wizard-next": self.action_next, "wizard-back": self.action_back, "wizard-cancel": self.action_cancel}[
            event.button.id or ""
        ]()

    def _save_clicked(self) -> None:
        if self.result is None:
            return
        target = Path(self.query_one("#wizard-output", Input).value.strip() or "rl.toml").expanduser()
        self._save(target, self.result.text)

    @work(thread=True, exclusive=True, group="wizard-save")
    def _save(self, target: Path, text: str) -> None:
        from services.atomic import atomic_write_text

        try:
            atomic_write_text(target, text, backup=True)
        except OSError as exc:
            self.app.call_from_thread(
                self.query_one("#wizard-error", Label).update, f"cannot write {target}: {exc.strerror}"
            )
            return
        self.app.call_from_thread(self.dismiss, target)
