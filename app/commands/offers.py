"""``prime-train-tui offers [--model M] [--gpus N] [--max-price X] [--spot] [--provider P ...] [--all]
[--steps N] [--json]``: GPU offers from Prime Intellect, Vast.ai and Lambda ranked by estimated $ per
completed run (services/offers/ranking.py). Keys from PRIME_API_KEY / VAST_API_KEY / LAMBDA_API_KEY
(never printed); base URLs from PRIME_TRAIN_TUI_{PRIME,VAST,LAMBDA}_URL. A provider that fails is
reported and the others still show. Exit 0 when any offer was listed, 1 when none, 2 on usage.

``--json``: ``{"offers": [{"provider", "id", "gpu_type", "gpu_count", "vram_gb", "price_hr", "spot",
"region", "fits", "est_hours", "est_cost"}], "errors": [{"provider", "message"}]}``."""

from __future__ import annotations

import argparse
import asyncio
import json

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail

PROVIDER_NAMES = ("primeintellect", "vast", "lambda")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("offers", help="GPU offers ranked by $ per completed run",
                       description="GPU offers across providers, ranked by estimated $ per completed run.")
    p.add_argument("--model", default="Qwen/Qwen3-0.6B", help="model to fit and price (default Qwen/Qwen3-0.6B)")
    p.add_argument("--gpus", type=int, help="only offers with exactly N GPUs")
    p.add_argument("--max-price", type=float, help="only offers at most this many $/hr")
    p.add_argument("--spot", action=argparse.BooleanOptionalAction, default=False,
                   help="spot/interruptible offers (Lambda has none)")
    p.add_argument("--provider", action="append", choices=PROVIDER_NAMES, help="only this provider (repeatable)")
    p.add_argument("--steps", type=int, default=500, help="training steps of the run to price (default 500)")
    p.add_argument("--all", action="store_true", help="also list offers the model does not fit")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per provider")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.config.memory import lookup_model
    from services.offers.ranking import RunSpec

    if args.gpus is not None and args.gpus < 1:
        return fail("--gpus must be at least 1", code=EXIT_USAGE)
    if args.steps < 1:
        return fail("--steps must be at least 1", code=EXIT_USAGE)
    if lookup_model(args.model) is None:
        return fail(f"{args.model} is not in the model registry", "see services/config/models.toml", EXIT_USAGE)
    return asyncio.run(_offers(args, RunSpec(model=args.model, steps=args.steps)))


async def _offers(args: argparse.Namespace, spec) -> int:
    from services.offers.fetch_all import api_keys, base_urls, fetch_all
    from services.offers.ranking import rank

    result = await fetch_all(keys=api_keys(), urls=base_urls(), spot=args.spot, providers=args.provider,
                             timeout=args.timeout)
    ranked = rank(result.offers, spec, max_price=args.max_price, spot=args.spot, gpus=args.gpus,
                  include_misfits=args.all)
    if args.json:
        keys = ("provider", "id", "gpu_type", "gpu_count", "vram_gb", "price_hr", "spot", "region", "fits",
                "est_hours", "est_cost")
        doc = {"offers": [{k: r.to_json()[k] for k in keys} for r in ranked],
               "errors": [{"provider": e.provider, "message": e.message} for e in result.errors]}
        print(json.dumps(doc, indent=2))
    else:
        print(f"{'provider':<15}{'id':<26}{'GPU':<12}{'n':>3}{'VRAM':>7}{'$/hr':>9} {'spot':<5}"
              f"{'Est. time':>10}{'Est. $':>10}  fit")
        for r in ranked:
            o = r.offer
            print(f"{o.provider:<15}{o.id[:25]:<26}{o.gpu_type:<12}{o.gpu_count:>3}{o.vram_gb:>6.0f}G"
                  f"{o.price_hr:>9.2f} {'yes' if o.spot else '':<5}{r.est_hours:>9.1f}h{r.est_cost:>10.2f}"
                  f"  {'ok' if r.fits else 'NO: ' + r.reason}")
        for e in result.errors:
            print(f"! {e.provider}: {e.message}")
        if ranked and ranked[0].fits:
            b = ranked[0]
            print(f"best $/completion: {b.offer.provider} {b.offer.gpu_count}× {b.offer.gpu_type} "
                  f"${b.est_cost:.2f} in {b.est_hours:.1f} h")
    return EXIT_OK if ranked else EXIT_FAIL
