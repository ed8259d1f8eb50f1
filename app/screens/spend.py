"""The Spend view (``$``): the spend ledger (services/offers/spend.py) — every pod rented here, open or
closed, its cost from creation to termination (≈: price x time, not a provider's bill), its budget, the
totals per run and per day — and whether a watcher is enforcing budgets now. Read when opened; the
closed rentals the audit log shows are written to the ledger then, as ``rentals --history`` does. Below,
the sweep (services/offers/sweep.py) asks every provider with a key for its pods: one terminated here but
still listed is said first, in red; pods created elsewhere are shown with their price and age."""

from __future__ import annotations

import time
from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from services.text import plain

COLUMNS = ("name", "run", "provider", "$/hr", "cost", "budget", "until")


class SpendScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    SpendScreen .dialog { width: 110; max-height: 90%; }
    SpendScreen DataTable { height: auto; max-height: 14; }
    SpendScreen #spend-totals, SpendScreen #spend-watcher, SpendScreen #spend-sweep { height: auto; margin-top: 1; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close", id="spend_close"),
        Binding("dollar_sign", "close", "Close", show=False, id="spend_close_dollar"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Static(
                "[b]Spend[/b] · every pod rented here (≈: price x time) · escape closes", classes="dialog-title"
            )
            yield DataTable(id="spend-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="spend-totals", markup=False)
            yield Static("", id="spend-watcher", markup=False)
            yield Static("", id="spend-sweep", markup=False)

    def on_mount(self) -> None:
        from app.settings import data_dir
        from services.offers.rentals import AUDIT_NAME, AuditLog
        from services.offers.spend import LEDGER_NAME, SpendLedger, totals
        from services.watch.state import watcher_status

        table = self.query_one(DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        now, failed = time.time(), ""
        try:
            spends = SpendLedger(data_dir() / LEDGER_NAME).sync(AuditLog(data_dir() / AUDIT_NAME), now)
        except OSError as exc:
            spends, failed = [], plain(f"cannot read the spend ledger in {data_dir()}: {exc.strerror or exc}")
        for s in spends:
            until = "running" if s.end is None else datetime.fromtimestamp(s.end).strftime("%m-%d %H:%M")
            # Text, not str: a DataTable reads a str cell as markup; names come from providers and runs
            table.add_row(
                Text(plain(s.name, oneline=True)),
                Text(plain(s.run, oneline=True)),
                Text(plain(s.provider, oneline=True)),
                f"{s.price_hr:.2f}",
                ("" if s.basis == "billed" else "≈") + f"{s.cost:.2f}",
                "-" if s.budget_usd is None else f"{s.budget_usd:.2f}",
                until,
                key=f"{s.provider}/{s.pod_id}",
            )
        if spends:
            t = totals(spends, now)
            self.query_one("#spend-totals", Static).update(
                f"total ${t['total']:.2f} · billing now ${t['per_hour_now']:.2f}/hr\n"
                "per run: " + ", ".join(f"{k} ${v:.2f}" for k, v in t["runs"].items()) + "\n"
                "per day: " + ", ".join(f"{k} ${v:.2f}" for k, v in list(t["days"].items())[-7:])
            )
        else:
            self.query_one("#spend-totals", Static).update(
                failed or "Nothing rented yet: pods rented from the Offers pane are listed here with what they cost."
            )
        self.query_one("#spend-watcher", Static).update(watcher_status(data_dir()))
        table.focus()
        self.run_worker(self._sweep(), name="sweep", group="spend-sweep", exit_on_error=False)

    # ------------------------------------------------------------------ the sweep
    async def _sweep(self) -> None:
        """Every pod at every provider with a key, joined with the audit log (services/offers/sweep.py):
        what may be billing first, then pods created elsewhere (left alone), then ours."""
        from app.settings import data_dir
        from services.offers.rentals import AUDIT_NAME, AuditLog
        from services.offers.sweep import describe, keyed, sweep

        box = self.query_one("#spend-sweep", Static)
        rentals = getattr(self.app, "rentals", None)
        if rentals is None:
            return
        try:
            async with rentals.providers() as providers:
                if not keyed(providers):
                    box.update("Other pods: no provider key is set, so no provider's pods can be looked at.")
                    return
                box.update("Other pods: asking the providers for every pod of the account…")
                result = await sweep(providers, AuditLog(data_dir() / AUDIT_NAME), time.time())
        except Exception as exc:  # noqa: BLE001 - the view stays; the providers are asked again when it opens
            box.update(plain(f"Other pods: the providers could not be asked ({exc})", oneline=True))
            return
        lines = []
        if result.billing:
            lines.append(
                f"{len(result.billing)} pod(s) terminated here are STILL LISTED by their provider and may "
                "be billing: terminate them in the provider's console."
            )
        lines += [describe(row) for row in result.rows if row.kind != "open"]
        lines += [f"not looked at: {provider}: {why}" for provider, why in result.errors.items()]
        head = f"Other pods ({', '.join(result.swept) or 'no provider'} asked): " + (
            "none beyond the rentals above." if len(lines) == len(result.errors) else ""
        )
        text = Text(plain(head + "\n" + "\n".join(lines) if lines else head))
        if result.billing:
            text.stylize("bold red", 0, len(lines[0]) + len(head) + 1)
        box.update(text)

    def action_close(self) -> None:
        self.dismiss(None)
