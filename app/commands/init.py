"""``prime-train-tui init --model M --preset P --gpus N [--env E] [-o FILE]``: the wizard, headless.

Writes a complete prime-rl ``rl`` config sized for the hardware (stdout without ``-o``). An existing
file is only replaced with ``--force`` and then kept as ``FILE.bak``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="generate a prime-rl config for a model and GPUs",
        description="Generate a complete prime-rl rl config (the wizard, non-interactive).",
    )
    p.add_argument("--model", required=True, help="a model id from the registry, e.g. Qwen/Qwen3-4B")
    p.add_argument("--preset", required=True, help="hardware preset, e.g. h100-80gb")
    p.add_argument("--gpus", type=int, required=True, help="GPUs on the pod")
    p.add_argument("--env", default="reverse-text", help="environment: reverse-text, alphabet-sort, wiki-search")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument(
        "--lora",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force LoRA on/off (default: only when full fine-tuning does not fit)",
    )
    p.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    p.add_argument("--force", action="store_true", help="replace an existing file (a .bak is kept)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.atomic import atomic_write_text
    from services.config.findings import ConfigError
    from services.config.memory import known_models_text, lookup_model
    from services.config.validate import validate_text
    from services.config.wizard import WizardChoices, generate

    if lookup_model(args.model) is None:
        return fail(
            f"{args.model} is not in the model registry; {known_models_text(args.model)}",
            "init sizes the run from the model's shape: pick one of these",
            EXIT_USAGE,
        )
    try:
        result = generate(
            WizardChoices(
                model=args.model,
                preset=args.preset,
                gpus=args.gpus,
                environment=args.env,
                max_steps=args.max_steps,
                lora=args.lora,
            )
        )
    except ConfigError as exc:
        return fail(str(exc), exc.hint, EXIT_USAGE)
    report = validate_text(result.text, kind="rl", preset=args.preset, gpus=args.gpus)
    if report.errors:  # never hand out a config we know prime-rl would reject
        msgs = "; ".join(f.message for f in report.findings if f.severity.value == "error")
        return fail(f"the generated config does not validate: {msgs}")
    memory_note(args, result)
    if args.output is None:
        sys.stdout.write(result.text)
        return EXIT_OK
    if args.output.exists() and not args.force:
        return fail(f"{args.output} exists", "pass --force to replace it (a .bak is kept)", EXIT_USAGE)
    try:
        atomic_write_text(args.output, result.text, backup=True)
    except OSError as exc:
        return fail(f"cannot write {args.output}: {exc.strerror}", code=EXIT_FAIL)
    print(
        f"wrote {args.output} ({result.train_gpus} train + {result.infer_gpus} inference GPU(s)"
        + (", LoRA" if result.lora else "")
        + f"; {report.warnings} warning(s))",
        file=sys.stderr,
    )
    return EXIT_OK


def memory_note(args: argparse.Namespace, result: object) -> None:
    """On stderr: the trainer's memory figure and what it assumes, and the ``estimate`` command that
    gives the same figure (init sizes the run as prime-rl runs it: optimizer states in host RAM)."""
    import re

    from services.config.memory import estimate, human, lookup_model, preset

    found = re.search(r"^seq_len = (\d+)", getattr(result, "text", ""), re.M)
    seq = int(found.group(1)) if found else 2048
    gpus, lora = getattr(result, "train_gpus", 1), bool(getattr(result, "lora", False))
    est = estimate(
        shape=lookup_model(args.model), gpus=gpus, sharding="full", lora=lora, seq_len=seq, optim_cpu_offload=True
    )
    hw = preset(args.preset)
    same = f"prime-train-tui estimate --model {args.model} --gpus {gpus} --optim-cpu-offload --seq-len {seq}" + (
        " --lora" if lora else ""
    )
    print(
        f"memory: trainer ~{human(est.total)} per GPU of {human(hw.memory)} on {hw.id} — assumes "
        f"{est.assumptions_text()}\n  the same figure: {same}",
        file=sys.stderr,
    )
