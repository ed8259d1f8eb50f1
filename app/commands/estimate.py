"""``prime-train-tui estimate (--model M | --params N) [--gpus N] [--sharding S] [--lora] [--seq-len L]
[--json]``: per-GPU training memory (ZeRO model states, activations, LoRA, KV cache)."""

from __future__ import annotations

import argparse
import json
import sys

from app.commands._support import EXIT_OK, EXIT_USAGE, fail


def _params(text: str) -> float:
    mult = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a parameter count: {text!r} (e.g. 7.5e9 or 8B)") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="GPU memory estimate for training a model",
        description="Per-GPU memory for training: weights, gradients, Adam states, "
        "activations and an inference KV cache.",
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", help="a model id from the registry (or with --online, any HF model)")
    who.add_argument("--params", type=_params, help="parameter count, e.g. 7.5e9 or 8B")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument(
        "--sharding",
        choices=("none", "os", "os+g", "full"),
        default="full",
        help="ZeRO stage: none, os (optimizer), os+g (+gradients), full (FSDP); default full",
    )
    p.add_argument("--lora", action="store_true", help="LoRA: only adapter states are trained")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--no-checkpointing", action="store_true", help="no activation checkpointing")
    p.add_argument("--optim-cpu-offload", action="store_true", help="optimizer states in host RAM")
    p.add_argument("--kv-tokens", type=int, default=0, help="add a KV cache for this many tokens")
    p.add_argument("--preset", help="compare with a hardware preset (e.g. h100-80gb)")
    p.add_argument("--online", action="store_true", help="read an unknown model's config.json from the hub")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.config.findings import ConfigError
    from services.config.memory import GB, estimate, human, lookup_model, lookup_online, preset

    if args.gpus < 1:
        return fail("--gpus must be at least 1", code=EXIT_USAGE)
    try:
        shape = lookup_model(args.model) if args.model else None
        if args.model and shape is None and not args.online:
            from services.config.memory import known_models_text

            return fail(
                f"{args.model} is not in the model registry; {known_models_text(args.model)}",
                "pass --params N (e.g. 8e9) or --online to read its config.json",
                EXIT_USAGE,
            )
        if args.model and shape is None and args.online:
            from app.settings import config_dir

            shape = lookup_online(args.model, config_dir() / "cache")
        est = estimate(
            model=args.model,
            params=args.params,
            shape=shape,
            gpus=args.gpus,
            sharding=args.sharding,
            lora=args.lora,
            lora_rank=args.lora_rank,
            seq_len=args.seq_len,
            checkpointing=not args.no_checkpointing,
            optim_cpu_offload=args.optim_cpu_offload,
            kv_tokens=args.kv_tokens,
        )
        hw = preset(args.preset) if args.preset else None
    except ConfigError as exc:
        return fail(str(exc), exc.hint, EXIT_USAGE)
    doc = est.to_json()
    if hw is not None:
        doc["preset"] = {
            "id": hw.id,
            "memory": hw.memory,
            "fits": est.total <= hw.memory,
            "headroom": hw.memory - est.total,
        }
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    title = f"{est.model or f'{est.params / 1e9:g}B params'} · {est.gpus} GPU(s) · sharding {est.sharding}"
    if est.lora:
        title += f" · LoRA ({est.trainable_params / 1e6:.1f}M trainable)"
    table = Table(title=title, title_justify="left")
    table.add_column("per GPU")
    table.add_column("GiB", justify="right")
    table.add_column("GB", justify="right")
    for key, value in doc["per_gpu"].items():
        table.add_row(key, f"{value / 1024**3:.2f}", f"{value / GB:.2f}")
    console = Console()
    console.print(table)
    console.print(
        f"total: {human(est.total)} per GPU — assumes {est.assumptions_text()}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if est.cpu_optimizer:
        console.print(f"optimizer states in host RAM: {human(est.cpu_optimizer)} per GPU")
    else:
        console.print(
            "prime-rl keeps the optimizer states in host RAM by default (optim_cpu_offload = true), "
            "as init and validate --preset assume: --optim-cpu-offload gives that figure.",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if hw is not None:
        verdict = "fits" if est.total <= hw.memory else f"does NOT fit ({human(est.total - hw.memory)} over)"
        console.print(f"{hw.id} ({human(hw.memory)}): {verdict}")
    return EXIT_OK
