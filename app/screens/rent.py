"""The confirmation before renting a pod: price, the max price sent to the provider, the estimated
total, the auto-terminate deadline and the worst case. Dismisses with a :class:`LaunchPlan` (the user's
cap and deadline applied) or None. Launch stays disabled while the inputs make no sense."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from widgets.format import duration, set_label

if TYPE_CHECKING:
    from services.offers.launch import LaunchPlan

CAP_NOTE = {
    "primeintellect": "sent as maxPrice: Prime Intellect will not start the pod above it",
    "vast": "bid = the offer's minimum bid (never above the cap); checked again once the pod runs",
    "lambda": "Lambda takes no cap: the fixed price is checked before and after the create",
}


class RentScreen(ModalScreen["LaunchPlan | None"]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="rent_cancel")]

    DEFAULT_CSS = """
    RentScreen .rent-row { height: 3; }
    RentScreen .rent-row Label { width: 26; padding: 1 1 0 0; }
    RentScreen .rent-row Input { width: 14; }
    RentScreen .rent-row .rent-hint { width: 1fr; padding: 1 0 0 1; color: $text-muted; }
    RentScreen .rent-note { color: $text-muted; padding: 0 0 1 0; }
    RentScreen #rent-worst { padding: 1 0 0 0; text-style: bold; }
    RentScreen #rent-problem { color: $error; height: auto; }
    RentScreen #rent-spot { color: $warning; height: auto; }
    """

    def __init__(self, plan: LaunchPlan, *, clock=time.time) -> None:
        super().__init__(classes="dialog-screen")
        self.plan, self.clock = plan, clock
        self.result_plan: LaunchPlan | None = plan

    def compose(self) -> ComposeResult:
        p, o = self.plan, self.plan.offer
        hours = (p.deadline - self.clock()) / 3600 if p.deadline is not None else 0
        with Vertical(classes="dialog -wide -danger"):
            memory = "" if "GB" in o.gpu_name.upper() else f", {o.vram_gb:.0f} GB per GPU"
            yield Static(f"Rent {o.title} — {o.gpu_name}{memory}", classes="dialog-question", markup=False)
            yield Static(
                f"Listed price ${o.price_hr:.2f}/hr · estimated run {duration(p.est_hours * 3600)} "
                f"≈ ${p.est_cost:.2f}\nPod name {p.name}",
                markup=False,
            )
            with Horizontal(classes="rent-row"):
                yield Label("Max price ($/hr)")
                yield Input(f"{p.max_price:.2f}", id="rent-cap", type="number")
                yield Static(f"listed ${o.price_hr:.2f}", classes="rent-hint")
            yield Static(CAP_NOTE.get(o.provider, ""), classes="rent-note")
            with Horizontal(classes="rent-row"):
                yield Label("Auto-terminate after (h)")
                yield Input(f"{hours:.2f}", id="rent-hours", type="number")
                yield Static("", id="rent-at", classes="rent-hint")
            yield Static("", id="rent-worst")
            if o.spot:
                yield Static(
                    "Spot: the provider may take this pod back at any time. Turn on auto backup "
                    "(Checkpoints) so a checkpoint survives it.",
                    id="rent-spot",
                )
            yield Static("", id="rent-problem")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Rent and start billing", id="yes", variant="error")
                yield Button("Cancel", id="no", variant="primary")

    def on_mount(self) -> None:
        self._update()
        self.query_one("#no", Button).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._update()

    def _update(self) -> None:
        o, now = self.plan.offer, self.clock()
        problems: list[str] = []
        try:
            cap = float(self.query_one("#rent-cap", Input).value)
        except ValueError:
            cap = 0.0
        if cap < o.price_hr:
            problems.append(f"the max price must be at least the listed ${o.price_hr:.2f}/hr")
        text = self.query_one("#rent-hours", Input).value.strip()
        try:
            hours = float(text) if text else 0.0
        except ValueError:
            hours = -1.0
        if hours < 0:
            problems.append("the deadline must be a number of hours (0 = no auto-terminate)")
        deadline = now + hours * 3600 if hours > 0 else None
        if deadline is not None:
            set_label(
                self.query_one("#rent-at", Static),
                f"→ at {datetime.fromtimestamp(deadline).strftime('%a %H:%M')}, warned 15 min before",
            )
            if hours < self.plan.est_hours:
                problems.append(
                    "the deadline is shorter than the estimated run "
                    f"({duration(self.plan.est_hours * 3600)})"
                    " — allowed, but the run will be cut off"
                )
        else:
            set_label(self.query_one("#rent-at", Static), "no deadline: the pod bills until you press T")
        worst = (
            f"Worst case before the deadline: ${cap * hours:.2f} (cap × hours)"
            if deadline
            else f"No upper bound: ${cap:.2f} per hour until terminated"
        )
        set_label(self.query_one("#rent-worst", Static), worst)
        blocking = [p for p in problems if "allowed" not in p]
        set_label(self.query_one("#rent-problem", Static), "\n".join(problems))
        self.query_one("#yes", Button).disabled = bool(blocking)
        self.result_plan = None if blocking else replace(self.plan, max_price=round(cap, 4), deadline=deadline)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(self.result_plan if event.button.id == "yes" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)
