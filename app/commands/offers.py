"""``prime-train-tui offers [--config FILE] [--model M] [--split T+I] [--gpus N] [--max-price X]
[--spot | --no-spot] [--provider P ...] [--all] [--steps N] [--json]``: GPU offers from Prime Intellect, Vast.ai,
Lambda and RunPod ranked by estimated $ per completed run (services/offers/ranking.py), spot and on-demand in
one list (``--spot`` / ``--no-spot``: only one kind); a spot offer by its expected $ with preemptions priced in
(services/offers/spot_risk.py; per-provider rates from settings.toml ``[offers] spot_interruptions_per_hour``);
``--config`` prices the run a prime-rl config describes
(model, max_steps, batch and sequence length). Keys from PRIME_API_KEY / VAST_API_KEY / LAMBDA_API_KEY /
RUNPOD_API_KEY, the providers' CLI files or settings.toml (services/offers/keys.py; never printed); base URLs
from PRIME_TRAIN_TUI_{PRIME,VAST,LAMBDA,RUNPOD}_URL or settings.toml. The answer is cached for the Offers
pane. A provider that fails is reported and the others still show. RunPod offers are listed and ranked but
not rented from here. Exit 0 when any offer was listed, 1 when none, 2 on usage.

``--json``: ``{"offers": [{"provider", "id", "gpu_type", "gpu_count", "vram_gb", "price_hr", "spot",
"region", "fits", "est_hours", "est_cost", "est_cost_no_preemption", "est_hours_no_preemption",
"interruptions_per_hr", "expected_preemptions", "hours_lost_per_preemption", "spot_note"}], "errors":
[{"provider", "message"}]}`` (est_* of a spot offer: expected, preemptions included; on-demand: no risk), plus
``"skipped": [{"provider", "count", "why"}]`` when offers with an impossible price (not finite, below $0.001 or over
$1,000 per GPU-hour)
were left out; always valid JSON (never NaN/Infinity). A provider answering garbage (wrongly shaped, nested
too deep, over 20 MB) is its error line: "unexpected answer: …"."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail, say

PROVIDER_NAMES = ("primeintellect", "vast", "lambda", "runpod")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "offers",
        help="GPU offers ranked by $ per completed run",
        description="GPU offers across providers, ranked by estimated $ per completed run.",
    )
    p.add_argument("--config", type=Path, help="price the run this prime-rl config describes")
    p.add_argument(
        "--model",
        help="model to fit and price (default Qwen/Qwen3-0.6B); with --config it sizes "
        "the config's run as this model (for models the registry does not know)",
    )
    p.add_argument("--gpus", type=int, help="only offers with exactly N GPUs")
    p.add_argument(
        "--split",
        metavar="TRAIN+INFER",
        type=_split,
        help="prime-rl's GPU split of the run, e.g. 2+6 (default: the config's [deployment], else "
        "1+1 for rl); 8+0 is a run without an inference server (sft)",
    )
    p.add_argument("--max-price", type=float, help="only offers at most this many $/hr")
    p.add_argument(
        "--spot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only spot/interruptible offers (Lambda has none); --no-spot: only on-demand "
        "(default: both, spot priced with its expected preemptions)",
    )
    p.add_argument(
        "--provider",
        nargs="+",
        action="extend",
        choices=PROVIDER_NAMES,
        metavar="P",
        help=f"only these providers ({', '.join(PROVIDER_NAMES)}; several, or repeated)",
    )
    p.add_argument(
        "--steps", type=int, help="training steps of the run to price (default: the config's max_steps, else 500)"
    )
    p.add_argument("--all", action="store_true", help="also list offers the model does not fit")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per provider")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _split(text: str) -> tuple[int, int]:
    train, plus, infer = text.partition("+")
    try:
        t, i = int(train), int(infer) if plus else 0
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not TRAIN+INFER, e.g. 2+6") from None
    if t < 1 or i < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1 training GPU, no negative counts")
    return t, i


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from services.offers.ranking import DEFAULT_MODEL, RunSpec, run_spec_from_config
    from services.offers.sizing import size_hint, size_note, sizing_model

    if args.gpus is not None and args.gpus < 1:
        return fail("--gpus must be at least 1", code=EXIT_USAGE)
    if args.steps is not None and args.steps < 1:
        return fail("--steps must be at least 1", code=EXIT_USAGE)
    if args.config is not None:
        import tomllib

        from services.config.findings import ConfigError
        from services.config.validate import read_config
        from services.tomlfile import depth_problem

        try:
            text = read_config(args.config)
            if (deep := depth_problem(text)) is not None:  # tomllib would recurse until RecursionError
                return fail(f"{args.config}: {deep}: not a prime-rl config", code=EXIT_USAGE)
            data = tomllib.loads(text)
        except ConfigError as exc:
            return fail(str(exc), code=EXIT_USAGE)
        except tomllib.TOMLDecodeError as exc:
            return fail(f"{args.config} is not valid TOML: {exc}", "run `prime-train-tui validate` on it", EXIT_USAGE)
        if not isinstance(data, dict):
            return fail(f"{args.config} is not a prime-rl config", code=EXIT_USAGE)
        spec, notes = run_spec_from_config(data)
        if args.model:  # a size override: the config's steps, tokens and GPU split, sized as this model
            notes.append(f"{spec.model} sized as {args.model} (--model)")
            spec = replace(spec, model=args.model)
    else:
        spec, notes = RunSpec(model=args.model or DEFAULT_MODEL), []
    if args.steps is not None:
        spec = replace(spec, steps=args.steps)
    if args.split is not None:
        train, infer = args.split
        spec = replace(
            spec, train_gpus=train, infer_gpus=infer, gen_tokens_per_step=spec.gen_tokens_per_step if infer else 0
        )
    if sizing_model(spec.model) is None:
        what = "--model" if args.model else "the config's model" if args.config else "the model"
        return fail(
            f"{spec.model} ({what}) is not in the model registry and no registry model is named like it",
            size_hint(spec.model),
            EXIT_USAGE,
        )
    if note := size_note(spec.model):
        notes.append(note)
    for note in notes:
        say(f"note: {note}", file=sys.stderr)
    return asyncio.run(_offers(args, spec))


async def _offers(args: argparse.Namespace, spec) -> int:
    import time

    from app.settings import cache_dir, load_offer_settings
    from services.errors import PrimeTrainError
    from services.offers import cache
    from services.offers.calibration import NAME as OBSERVED, ObservationLog
    from services.offers.fetch_all import fetch_all
    from services.offers.keys import find_keys, find_urls
    from services.offers.ranking import rank

    try:
        settings = load_offer_settings()
    except PrimeTrainError as exc:
        return fail(str(exc), exc.hint)
    keys = {name: k.key for name, k in find_keys(settings=settings).items()}
    result = await fetch_all(
        keys=keys, urls=find_urls(settings=settings), spot=args.spot, providers=args.provider, timeout=args.timeout
    )
    if result.offers and args.provider is None:
        from services.offers.models import FetchResult

        try:  # one cache per kind (the pane's): both kinds fetched fill both
            for kind in (False, True) if args.spot is None else (args.spot,):
                cache.save(
                    cache_dir(), kind, FetchResult(tuple(o for o in result.offers if o.spot == kind)), time.time()
                )
        except OSError:
            pass  # a cache that cannot be written costs a refetch, nothing else
    from app.settings import data_dir

    observed = ObservationLog(data_dir() / OBSERVED).load()  # this user's steps/hr, as in the Offers pane
    from services.offers.spend import measured_spot_rates
    from services.offers.spot_risk import interruption_rates

    ranked = rank(
        result.offers,
        spec,
        max_price=args.max_price,
        spot=args.spot,
        gpus=args.gpus,
        include_misfits=args.all,
        observed=observed,
        spot_rates=interruption_rates(settings.spot_interruptions_per_hour, measured_spot_rates(data_dir())),
    )
    for s in result.skipped:
        say(
            f"note: {s.provider}: {s.count} offer{'s' if s.count > 1 else ''} skipped as impossible ({s.why})",
            file=sys.stderr,
        )
    if args.json:
        from services.offers.ranking import RISK_KEYS

        fields = (
            "provider",
            "id",
            "gpu_type",
            "gpu_count",
            "vram_gb",
            "price_hr",
            "spot",
            "region",
            "fits",
            "est_hours",
            "est_cost",
            *RISK_KEYS,
        )
        doc: dict = {
            "offers": [{k: r.to_json()[k] for k in fields} for r in ranked],
            "errors": [{"provider": e.provider, "message": e.message} for e in result.errors],
        }
        if result.skipped:
            doc["skipped"] = [{"provider": s.provider, "count": s.count, "why": s.why} for s in result.skipped]
        say(json.dumps(_finite(doc), indent=2, allow_nan=False))
    else:
        say(
            f"{'provider':<15}{'id':<26}{'GPU':<12}{'n':>3}{'VRAM':>7}{'$/hr':>9} {'spot':<5}"
            f"{'Est. time':>10}{'Est. $':>10}  fit (spot: $ if not preempted – expected)"
        )
        for r in ranked:
            o = r.offer
            say(
                f"{o.provider:<15}{o.id[:25]:<26}{o.gpu_type:<12}{o.gpu_count:>3}{o.vram_gb:>6.0f}G"
                f"{o.price_hr:>9.2f} {'yes' if o.spot else '':<5}{r.est_hours:>9.1f}h{r.est_cost:>10.2f}"
                f"  {'ok' if r.fits else 'NO: ' + r.reason}{_spot_text(r)}"
            )
        for e in result.errors:
            say(f"! {e.provider}: {e.message}")
        if ranked and ranked[0].fits:
            b = ranked[0]
            say(
                f"best $/completion: {b.offer.provider} {b.offer.gpu_count}× {b.offer.gpu_type} "
                f"${b.est_cost:.2f} in {b.est_hours:.1f} h"
            )
    return EXIT_OK if ranked else EXIT_FAIL


def _spot_text(r) -> str:
    """ " · spot 21.30–24.10, 0.4 preemptions expected" (+ the provider's note) for a spot row."""
    if r.risk is None:
        return ""
    text = f" · spot {r.base_cost:.2f}–{r.est_cost:.2f}, {r.risk.preemptions:.1f} preemptions expected"
    return text + (f" ({r.risk.note})" if r.risk.note else "")


def _finite(value):
    """The document with every NaN/±Infinity as null: ``--json`` is JSON every reader accepts (json.dumps
    would write the bare words NaN/Infinity, which are not JSON)."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
