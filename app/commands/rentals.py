"""``prime-train-tui rentals [--json] [--terminate NAME [--yes]] [--watch [--interval S]] [--history]
[--budget NAME USD] [--sweep]``: the pods rented
from the Offers pane that are still open (from the audit log), what they have cost so far and their
deadlines; terminate one; or run the deadline watch in the foreground — the deadline is only enforced
while the app or this watch runs, so on a machine that stays on, ``rentals --watch`` in tmux/systemd keeps
enforcing it after the laptop is closed. A rental whose create answer was lost (or whose app died
mid-create) is listed as "creating?" and looked for by name at the provider first. ``--history``: the spend
ledger (services/offers/spend.py: every rental's cost, per run and per day). ``--budget NAME USD`` sets a
rental's budget (0: none): ``prime-train-tui watch`` warns at 80 % of it and, with ``[watch]
terminate_over_budget = true``, terminates the pod at 100 % after a final backup. ``--sweep``: every pod at
every provider with a key, from the providers' lists, joined with the audit log (services/offers/sweep.py).
Exit 0 on success, 1 when a termination failed or the sweep finds a pod terminated here still listed, 2 on
usage."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail, say


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rentals",
        help="pods rented here: cost so far, deadlines, terminate, watch",
        description="Pods rented from the Offers pane and not terminated yet (from the audit log).",
    )
    p.add_argument("--terminate", metavar="NAME", help="terminate this rented pod (asks first)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask (required without a terminal)")
    p.add_argument(
        "--watch",
        action="store_true",
        help="enforce deadlines in the foreground: warn 15 min before, terminate at the deadline",
    )
    p.add_argument("--interval", type=float, default=30.0, help="seconds between deadline checks (--watch)")
    p.add_argument(
        "--history", action="store_true", help="the spend ledger: every rented pod's cost, per run and per day"
    )
    p.add_argument(
        "--budget",
        nargs=2,
        metavar=("NAME", "USD"),
        help="set a rental's budget in $ (0: none); the watcher warns at 80 %% and may terminate at 100 %%",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="every pod at every provider with a key, joined with the audit log: rented here and open, "
        "terminated here but still billing, created elsewhere, gone (exit 1 when one may be billing)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _audit():
    from app.settings import data_dir
    from services.offers.rentals import AUDIT_NAME, AuditLog

    return AuditLog(data_dir() / AUDIT_NAME)


def providers_from_settings():
    """The providers' clients with the keys and base URLs of settings.toml and the environment."""
    from app.settings import load_offer_settings
    from services.offers.launch import Providers

    return Providers.configured(load_offer_settings())


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        return fail("--interval must be positive", code=EXIT_USAGE)
    audit = _audit()
    if args.history:
        return _history(audit, args.json)
    if args.budget:
        return _budget(audit, *args.budget)
    if args.sweep:
        return asyncio.run(_sweep(audit, args.json))
    if args.watch:
        return asyncio.run(_watch(audit, args.interval))
    if any(r.provisional for r in audit.open_rentals()):
        asyncio.run(_resolve(audit))
    if args.terminate:
        return asyncio.run(_terminate(audit, args))
    now = time.time()
    rentals = audit.open_rentals()
    if args.json:
        say(
            json.dumps(
                {
                    "rentals": [
                        {
                            **r.to_json(),
                            "spent": round(r.spent(now), 2),
                            "status": "creating?" if r.provisional else "rented",
                            "overdue": r.deadline is not None and r.deadline <= now,
                        }
                        for r in rentals
                    ]
                },
                indent=2,
            )
        )
        return EXIT_OK
    if not rentals:
        say("no open rentals")
        return EXIT_OK
    say(f"{'name':<26}{'provider':<16}{'pod id':<28}{'$/hr':>7}{'spent':>9}  deadline")
    for r in rentals:
        when = "none" if r.deadline is None else datetime.fromtimestamp(r.deadline).strftime("%a %H:%M")
        late = "  OVERDUE" if r.deadline is not None and r.deadline <= now else ""
        pod = "creating?" if r.provisional else r.pod_id[:27]
        say(f"{r.name:<26}{r.provider:<16}{pod:<28}{r.price_hr:>7.2f}{r.spent(now):>9.2f}  {when}{late}")
    return EXIT_OK


async def _sweep(audit, as_json: bool) -> int:
    from services.offers.sweep import describe, keyed, sweep

    async with providers_from_settings() as providers:
        if not keyed(providers):
            return fail(
                "no provider key is configured: nothing to sweep",
                "set PRIME_API_KEY (or `prime login`), VAST_API_KEY or LAMBDA_API_KEY",
            )
        result = await sweep(providers, audit, time.time())
    if as_json:
        say(json.dumps(result.to_json(), indent=2))
    else:
        say(f"swept {', '.join(result.swept) or 'no provider'}: {len(result.rows)} pod(s)")
        for row in result.rows:
            say(describe(row))
        for provider, why in result.errors.items():
            say(f"not swept: {provider}: {why}")
        if result.billing:
            say(
                f"\n{len(result.billing)} pod(s) terminated here are still listed: check the provider's console, "
                "or terminate them again there"
            )
    return EXIT_FAIL if result.billing else EXIT_OK


async def _resolve(audit) -> None:
    """Look for "creating?" rentals by name (found: a real rental; none after the grace period: closed)."""
    from services.offers.launch import resolve_provisional

    async with providers_from_settings() as providers:
        for r, outcome in await resolve_provisional(providers, audit, time.time()):
            if outcome == "found":
                say(f"note: {r.name} found at {r.provider} as pod {r.pod_id}", file=sys.stderr)
            elif outcome == "none":
                say(f"note: {r.name}: {r.provider} lists no such pod; the create did not start one", file=sys.stderr)
            elif outcome != "waiting":
                say(
                    f"warning: {r.name} is 'creating?' and {r.provider} could not be asked ({outcome})", file=sys.stderr
                )


async def _terminate(audit, args: argparse.Namespace) -> int:
    from app.commands.launch import confirm
    from services.offers.launch import terminate_rental
    from services.offers.models import ProviderFailure

    rental = next((r for r in audit.open_rentals() if args.terminate in (r.name, r.pod_id)), None)
    if rental is None:
        return fail(f"no open rental named {args.terminate}", "`prime-train-tui rentals` lists them", EXIT_USAGE)
    if rental.provisional:
        return fail(
            f"{rental.name} is 'creating?': {rental.provider} does not list a pod with that name yet",
            f"try again in a minute, or check the {rental.provider} console",
        )
    asked = confirm(
        args,
        f"terminate {rental.title} ({rental.provider} pod {rental.pod_id}), "
        f"≈ ${rental.spent(time.time()):.2f} so far? Everything on its disk is lost.",
    )
    if asked is not None:
        return asked
    try:
        async with providers_from_settings() as providers:
            outcome = await terminate_rental(providers, rental, audit, reason="user (CLI)")
    except ProviderFailure as exc:
        return fail(f"terminating {rental.name} failed: {exc}", "try again, or use the provider's console")
    say(f"{rental.name}: {outcome}")
    return EXIT_OK


async def _watch(audit, interval: float) -> int:
    from services.offers.launch import DeadlineWatch

    watch = DeadlineWatch(audit)
    failed = False

    def show(ev) -> None:
        nonlocal failed
        failed = failed or ev.kind == "failed"
        say(f"{datetime.now().strftime('%H:%M:%S')} {ev.kind}: {ev.message}", flush=True)

    say(f"watching {len(audit.open_rentals())} open rental(s) every {interval:g} s (ctrl+c stops)", flush=True)
    try:
        await watch.run(providers_from_settings, show, interval=interval)
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    return EXIT_FAIL if failed else EXIT_OK


def _history(audit, as_json: bool) -> int:
    from app.settings import data_dir
    from services.offers.spend import LEDGER_NAME, SpendLedger, totals

    now = time.time()
    try:
        spends = SpendLedger(data_dir() / LEDGER_NAME).sync(audit, now)
    except OSError as exc:
        return fail(f"cannot write the spend ledger in {data_dir()}: {exc.strerror or exc}")
    sums = totals(spends, now)
    if as_json:
        say(json.dumps({"spend": [s.to_json() for s in spends], "totals": sums}, indent=2))
        return EXIT_OK
    if not spends:
        say("nothing rented yet (the ledger lists pods rented from the Offers pane)")
        return EXIT_OK
    say(f"{'name':<24}{'run':<20}{'provider':<15}{'$/hr':>7}{'cost':>9}{'budget':>9}  from → to")
    for s in spends:
        start = datetime.fromtimestamp(s.start).strftime("%Y-%m-%d %H:%M")
        end = "running" if s.end is None else datetime.fromtimestamp(s.end).strftime("%Y-%m-%d %H:%M")
        budget = "-" if s.budget_usd is None else f"{s.budget_usd:.2f}"
        est = "" if s.basis == "billed" else "≈"
        say(
            f"{s.name[:23]:<24}{s.run[:19]:<20}{s.provider[:14]:<15}{s.price_hr:>7.2f}{est:>1}{s.cost:>8.2f}"
            f"{budget:>9}  {start} → {end}"
        )
    say(
        f"\ntotal ${sums['total']:.2f} (≈: price x time, not a provider's bill); "
        f"billing now ${sums['per_hour_now']:.2f}/hr"
    )
    say("per run: " + ", ".join(f"{k} ${v:.2f}" for k, v in sums["runs"].items()))
    say("per day: " + ", ".join(f"{k} ${v:.2f}" for k, v in sums["days"].items()))
    return EXIT_OK


def _budget(audit, name: str, amount: str) -> int:
    try:
        usd = float(amount)
    except ValueError:
        usd = float("nan")
    if not (usd == usd and 0 <= usd < 1e9):
        return fail(f"--budget needs a positive amount in $ (0: no budget), not {amount[:40]!r}", code=EXIT_USAGE)
    rental = next((r for r in audit.open_rentals() if name in (r.name, r.pod_id) and not r.provisional), None)
    if rental is None:
        return fail(f"no open rental named {name}", "`prime-train-tui rentals` lists them", EXIT_USAGE)
    audit.append("budget", provider=rental.provider, pod_id=rental.pod_id, name=rental.name, budget_usd=usd or None)
    say(
        f"{rental.name}: "
        + (f"budget ${usd:.2f} (≈ ${rental.spent(time.time()):.2f} spent so far)" if usd else "no budget")
    )
    return EXIT_OK
