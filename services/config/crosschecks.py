"""More of prime-rl's start-up checks (issue 16, item 4): the model validators of its trainer model
(VLM, remote code, attention), LoRA between trainer and orchestrator, multi-node deployment, EPLB and
quantized weight transfer, KV-cache offload, and a max_steps that trains nothing.

Each check reads prime-rl's defaults where the file leaves a key out, as prime-rl would, and reports
by rule id (texts and the prime-rl source of each in rules.toml).
"""

from __future__ import annotations

from typing import Any

from services.config.findings import Edit, as_table as _table, dotted, is_set as _set

# prime-rl's defaults for what these checks read (configs/trainer.py: ModelConfig, LoRAConfig)
DEFAULT_IMPL = "auto"
DEFAULT_ATTN = "auto"
DEFAULT_LORA = {"rank": 16, "alpha": 32.0}


def startup_checks(ctx: Any) -> None:
    kind = ctx.kind
    if kind == "rl":
        _model_checks(ctx, ("trainer", "model"), shared_vlm=("model", "vlm"))
        _rl_checks(ctx)
    elif kind in ("trainer", "sft"):
        _model_checks(ctx, ("model",), shared_vlm=None)
    if kind == "sft":
        _multi_node_slurm(ctx)
    if kind == "inference":
        _inference_deployment(ctx, (), has_slurm=_table(ctx.get(("slurm",))) is not None)
    paths = {"rl": (("max_steps",), ("trainer", "max_steps"), ("orchestrator", "max_steps")),
             "trainer": (("max_steps",),), "orchestrator": (("max_steps",),), "sft": (("max_steps",),)}
    for path in paths.get(kind, ()):
        value = ctx.get(path)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            ctx.add("xc-max-steps-range", path, path=dotted(path), value=value)


def _model_checks(ctx: Any, base: tuple, shared_vlm: tuple | None) -> None:
    model = _table(ctx.get(base)) or {}
    impl = model.get("impl", DEFAULT_IMPL)
    vlm_path = base + ("vlm",) if _table(model.get("vlm")) is not None else shared_vlm
    if vlm_path is not None and _table(ctx.get(vlm_path)) is not None and impl != "custom":
        ctx.add("xc-vlm-impl", base + ("impl",) if "impl" in model else vlm_path, vlm=dotted(vlm_path),
                path=dotted(base + ("impl",)), impl=impl, edit=Edit("set", base + ("impl",), value="custom"))
    if model.get("trust_remote_code") is True and impl not in ("hf", "auto"):
        ctx.add("xc-trust-remote-custom", base + ("trust_remote_code",), path=dotted(base),
                edit=Edit("delete", base + ("trust_remote_code",)))
    attn = model.get("attn", DEFAULT_ATTN)
    if impl == "hf" and attn in ("flash_attention_4", "auto"):
        # only the implicit "auto" is changed for the user; an explicit FA4 is their choice to revisit
        edit = Edit("set", base + ("attn",), value="flash_attention_2") if "attn" not in model else None
        ctx.add("xc-attn-impl", base + ("attn",) if "attn" in model else base + ("impl",), path=dotted(base),
                attn=attn, edit=edit)


def _inference_deployment(ctx: Any, base: tuple, *, has_slurm: bool) -> None:
    """InferenceConfig's own checks of a multi-node or disaggregated inference (configs/inference.py):
    it runs under SLURM and needs its router (``base`` is () for an inference file, ("inference",) in rl)."""
    dep_type = (_table(ctx.get(base + ("deployment",))) or {}).get("type", "single_node")
    if dep_type not in ("multi_node", "disaggregated"):
        return
    what = "a multi-node" if dep_type == "multi_node" else "a disaggregated"
    if not has_slurm:
        ctx.add("xc-inference-slurm", base + ("deployment", "type"), what=what, path=dotted(base + ("deployment",)))
    if ctx.get(base + ("router",)) == "None":
        ctx.add("xc-multinode-router", base + ("router",), edit=Edit("delete", base + ("router",)))


def _multi_node_slurm(ctx: Any) -> bool:
    dep = _table(ctx.get(("deployment",))) or {}
    if dep.get("type") == "multi_node" and _table(ctx.get(("slurm",))) is None:
        ctx.add("xc-multinode-slurm", ("deployment", "type"))
    return dep.get("type") == "multi_node"


def _rl_checks(ctx: Any) -> None:
    trainer_lora = _table(ctx.get(("trainer", "model", "lora")))
    orch_lora = _table(ctx.get(("orchestrator", "model", "lora")))
    if trainer_lora is not None and orch_lora is not None:
        for key, default in DEFAULT_LORA.items():
            mine, theirs = orch_lora.get(key), trainer_lora.get(key, default)
            if _set(mine) and isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and mine != theirs:
                path = ("orchestrator", "model", "lora", key)
                ctx.add("xc-lora-mismatch", path, key=key, orchestrator=mine, trainer=theirs)

    inf = _table(ctx.get(("inference",)))
    slurm = _table(ctx.get(("slurm",)))
    dep = _table(ctx.get(("deployment",))) or {}
    if inf is not None:  # [slurm] reaches the inference it runs (utils/validation.py propagates it)
        _inference_deployment(ctx, ("inference",), has_slurm=slurm is not None or _table(inf.get("slurm")) is not None)
    inf_multi = (_table((inf or {}).get("deployment")) or {}).get("type") in ("multi_node", "disaggregated")
    if _multi_node_slurm(ctx):
        # left out = the default vllm-router; a multi-node inference already had its finding above
        if inf is not None and inf.get("router") == "None" and not inf_multi:
            ctx.add("xc-multinode-router", ("inference", "router"), edit=Edit("delete", ("inference", "router")))
        nodes, group = dep.get("num_train_nodes"), dep.get("nodes_per_fsdp_group")
        if isinstance(nodes, int) and isinstance(group, int) and group > 0 and nodes % group:
            ctx.add("xc-fsdp-group", ("deployment", "nodes_per_fsdp_group"), nodes=nodes, group=group)

    # the shared [weight_broadcast] decides the trainer's (RLConfig.auto_setup_weight_broadcast overwrites
    # [trainer.weight_broadcast]); left out, it is NCCL unquantized, or the filesystem with LoRA or no inference
    shared_wb = _table(ctx.get(("weight_broadcast",)))
    default_type = "filesystem" if trainer_lora is not None or inf is None else "nccl"
    wb = shared_wb if shared_wb is not None else {}
    wb_type = wb.get("type", default_type if shared_wb is None else "filesystem")
    quantized = wb.get("quantize_in_weight_transfer") is True
    # the older flat spelling (inference.enable_eplb, renamed into [inference.vllm]) asks for EPLB too:
    # moving it must not reveal an error that was there all along
    eplb = next((p for p in (("inference", "vllm", "enable_eplb"), ("inference", "enable_eplb"))
                 if ctx.get(p) is not None), None)
    if inf is not None and eplb is not None and ctx.get(eplb) is True:
        if wb_type != "nccl" or not quantized:
            have = (f"sent through the {wb_type}" if wb_type != "nccl" else "sent by NCCL unquantized") + (
                " by default" if shared_wb is None else "")
            ctx.add("xc-eplb-transfer", eplb, have=have)
    if shared_wb is not None and wb_type == "nccl" and quantized:
        at = ("weight_broadcast", "quantize_in_weight_transfer")
        impl = ctx.get(("trainer", "model", "impl"), DEFAULT_IMPL)
        if inf is None:
            ctx.add("xc-quantized-transfer", at, need="an [inference] table (the launcher's inference server)",
                    fix="add [inference], or remove quantize_in_weight_transfer")
        elif impl != "custom":
            ctx.add("xc-quantized-transfer", at, need=f'trainer.model.impl = "custom", not "{impl}"',
                    fix='set trainer.model.impl = "custom"',
                    edit=Edit("set", ("trainer", "model", "impl"), value="custom"))

    offload = _table((inf or {}).get("kv_cache_offload"))
    if offload is not None:
        if slurm is None and offload.get("type") == "mooncake":
            ctx.add("xc-mooncake-slurm", ("inference", "kv_cache_offload", "type"))
        if ctx.get(("trainer", "enable_router_replay")) is True:
            ctx.add("xc-router-replay-offload", ("trainer", "enable_router_replay"))
