"""More of prime-rl's start-up checks (issue 16, item 4): the model validators of its trainer model
(VLM, remote code, attention), LoRA between trainer and orchestrator, multi-node deployment, EPLB and
quantized weight transfer, KV-cache offload, and a max_steps that trains nothing.

Each check reads prime-rl's defaults where the file leaves a key out, as prime-rl would, and reports
by rule id (texts and the prime-rl source of each in rules.toml).
"""

from __future__ import annotations

from typing import Any

from services.config.findings import Edit, as_table as _table, dotted, is_set as _set
from services.config.rl_validators import rl_validator_checks
from services.config.trainer_validators import trainer_checks

# prime-rl's defaults for what these checks read (configs/trainer.py: ModelConfig, LoRAConfig)
DEFAULT_IMPL = "auto"
DEFAULT_ATTN = "auto"
DEFAULT_LORA = {"rank": 16, "alpha": 32.0}
DEFAULT_DTYPE = "float32"  # ModelConfig.optimization_dtype / reduce_dtype
DEFAULT_CP_STYLE = "ring"
DEFAULT_TRANSPORT = "zmq"  # rollout_transport.type (trainer.py, orchestrator.py: ZMQTransportConfig())
DEFAULT_WANDB_PROJECT = "prime-rl"


def startup_checks(ctx: Any) -> None:
    kind = ctx.kind
    if kind == "rl":
        _model_checks(ctx, ("trainer", "model"), shared_vlm=("model", "vlm"))
        _rl_checks(ctx)
        _sub_config_agreement(ctx)
    elif kind in ("trainer", "sft"):
        _model_checks(ctx, ("model",), shared_vlm=None)
    if kind == "sft":
        _multi_node_slurm(ctx)
    if kind == "inference":
        _inference_deployment(ctx, (), has_slurm=_table(ctx.get(("slurm",))) is not None)
    paths = {
        "rl": (("max_steps",), ("trainer", "max_steps"), ("orchestrator", "max_steps")),
        "trainer": (("max_steps",),),
        "orchestrator": (("max_steps",),),
        "sft": (("max_steps",),),
    }
    for path in paths.get(kind, ()):
        value = ctx.get(path)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            ctx.add("xc-max-steps-range", path, path=dotted(path), value=value)
    rl_validator_checks(ctx)
    trainer_checks(ctx)


def _model_checks(ctx: Any, base: tuple, shared_vlm: tuple | None) -> None:
    model = _table(ctx.get(base)) or {}
    impl = model.get("impl", DEFAULT_IMPL)
    vlm_path = base + ("vlm",) if _table(model.get("vlm")) is not None else shared_vlm
    if vlm_path is not None and _table(ctx.get(vlm_path)) is not None and impl != "custom":
        ctx.add(
            "xc-vlm-impl",
            base + ("impl",) if "impl" in model else vlm_path,
            vlm=dotted(vlm_path),
            path=dotted(base + ("impl",)),
            impl=impl,
            edit=Edit("set", base + ("impl",), value="custom"),
        )
    if model.get("trust_remote_code") is True and impl not in ("hf", "auto"):
        ctx.add(
            "xc-trust-remote-custom",
            base + ("trust_remote_code",),
            path=dotted(base),
            edit=Edit("delete", base + ("trust_remote_code",)),
        )
    if vlm_path is not None and _table(ctx.get(vlm_path)) is not None:
        _vlm_checks(ctx, base, vlm_path, model)
    attn = model.get("attn", DEFAULT_ATTN)
    if impl == "hf" and attn in ("flash_attention_4", "auto"):
        # only the implicit "auto" is changed for the user; an explicit FA4 is their choice to revisit
        edit = Edit("set", base + ("attn",), value="flash_attention_2") if "attn" not in model else None
        ctx.add(
            "xc-attn-impl",
            base + ("attn",) if "attn" in model else base + ("impl",),
            path=dotted(base),
            attn=attn,
            edit=edit,
        )


def _vlm_checks(ctx: Any, base: tuple, vlm_path: tuple, model: dict) -> None:
    """What prime-rl asks of a vision-language model's training (a [model.vlm] table, or rl's shared one)."""
    for key in ("optimization_dtype", "reduce_dtype"):
        value = model.get(key, DEFAULT_DTYPE)
        if value != "bfloat16":
            # left out, the key's float32 default is what prime-rl rejects: say so, as nothing in the file shows it
            default = " (the default when it is left out)" if key not in model else ""
            ctx.add(
                "xc-vlm-bf16",
                base + (key,) if key in model else vlm_path,
                vlm=dotted(vlm_path),
                path=dotted(base + (key,)),
                value=value,
                default=default,
                edit=Edit("set", base + (key,), value="bfloat16"),
            )
    vlm = _table(ctx.get(vlm_path)) or {}
    lora = base + ("lora",)
    if vlm.get("freeze_vision_encoder") is False and _table(ctx.get(lora)) is not None:
        ctx.add(
            "xc-vlm-lora-freeze",
            vlm_path + ("freeze_vision_encoder",),
            path=dotted(vlm_path + ("freeze_vision_encoder",)),
            lora=dotted(lora),
        )
    cp, style = model.get("cp", 1), model.get("cp_style", DEFAULT_CP_STYLE)
    if isinstance(cp, int) and cp > 1 and style != "ulysses":
        ctx.add(
            "xc-vlm-cp",
            base + ("cp_style",) if "cp_style" in model else base + ("cp",),
            path=dotted(base),
            cp=cp,
            style=style,
            edit=Edit("set", base + ("cp_style",), value="ulysses"),
        )
    if ctx.kind == "sft":
        for data in (("data",), ("val", "data")):
            if data == ("val", "data") and _table(ctx.get(("val",))) is None:
                continue
            micro = ctx.get(data + ("micro_batch_size",), 1)
            if isinstance(micro, int) and micro != 1:
                path = data + ("micro_batch_size",)
                ctx.add("xc-vlm-micro-batch", path, path=dotted(path), value=micro)


def _sub_config_agreement(ctx: Any) -> None:
    """rl's checks that trainer and orchestrator (and inference) agree, beyond the shared keys that fill them
    (those are xc-shared-conflict): W&B on both or neither and in one project, one rollout transport, one chat
    template. Each side reads the shared value when it leaves the key out, as prime-rl propagates it."""

    def resolved(sub: tuple, shared: tuple, default: Any) -> Any:
        value = ctx.get(sub)
        return value if value is not None else ctx.get(shared, default)

    shared_wandb = _table(ctx.get(("monitors", "wandb"))) is not None
    on = {
        side: shared_wandb or _table(ctx.get((side, "monitors", "wandb"))) is not None
        for side in ("trainer", "orchestrator")
    }
    if on["trainer"] != on["orchestrator"]:
        side, off = ("trainer", "orchestrator") if on["trainer"] else ("orchestrator", "trainer")
        ctx.add("xc-wandb-one-side", (side, "monitors", "wandb"), on=side, off=off)
    elif on["trainer"]:
        a = resolved(
            ("trainer", "monitors", "wandb", "project"), ("monitors", "wandb", "project"), DEFAULT_WANDB_PROJECT
        )
        b = resolved(
            ("orchestrator", "monitors", "wandb", "project"), ("monitors", "wandb", "project"), DEFAULT_WANDB_PROJECT
        )
        if a != b:
            _mismatch(
                ctx,
                ("trainer", "monitors", "wandb", "project"),
                ("orchestrator", "monitors", "wandb", "project"),
                a,
                b,
                "log both to one W&B project: set it once in [monitors.wandb]",
            )
    ta = resolved(("trainer", "rollout_transport", "type"), ("rollout_transport", "type"), DEFAULT_TRANSPORT)
    tb = resolved(("orchestrator", "rollout_transport", "type"), ("rollout_transport", "type"), DEFAULT_TRANSPORT)
    if ta != tb:
        _mismatch(
            ctx,
            ("trainer", "rollout_transport", "type"),
            ("orchestrator", "rollout_transport", "type"),
            ta,
            tb,
            "set the transport once in a shared [rollout_transport] table, or give both the same type",
        )
    tmpl = ("tokenizer", "chat_template")
    ca = resolved(("trainer",) + tmpl, tmpl, None)
    cb = resolved(("orchestrator",) + tmpl, tmpl, None)
    fix = "set chat_template once in the shared [tokenizer] table"
    if ca != cb:
        _mismatch(ctx, ("trainer",) + tmpl, ("orchestrator",) + tmpl, ca, cb, fix)
    elif _table(ctx.get(("inference",))) is not None:
        ci = resolved(("inference", "vllm", "chat_template"), tmpl, None)
        if ci != ca:
            _mismatch(ctx, ("inference", "vllm", "chat_template"), ("trainer",) + tmpl, ci, ca, fix)


def _mismatch(ctx: Any, a_path: tuple, b_path: tuple, a: Any, b: Any, fix: str) -> None:
    def shown(v: Any) -> str:
        return "not set" if v is None else f'"{v}"' if isinstance(v, str) else str(v)

    # a sub-config value that differs from the shared one is already its own finding (prime-rl stops there)
    if any(f.id == "xc-shared-conflict" and f.path in (dotted(a_path), dotted(b_path)) for f in ctx.findings):
        return
    # the finding sits on a key the file wrote (the one left out only inherits)
    at = b_path if ctx.get(b_path) is not None and ctx.get(a_path) is None else a_path
    if ctx.get(at) is None:
        at = at[:-1]
    ctx.add("xc-sub-mismatch", at, a_path=dotted(a_path), a=shown(a), b_path=dotted(b_path), b=shown(b), fix=fix)


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
    eplb = next(
        (p for p in (("inference", "vllm", "enable_eplb"), ("inference", "enable_eplb")) if ctx.get(p) is not None),
        None,
    )
    if inf is not None and eplb is not None and ctx.get(eplb) is True:
        if wb_type != "nccl" or not quantized:
            have = (f"sent through the {wb_type}" if wb_type != "nccl" else "sent by NCCL unquantized") + (
                " by default" if shared_wb is None else ""
            )
            ctx.add("xc-eplb-transfer", eplb, have=have)
    if shared_wb is not None and wb_type == "nccl" and quantized:
        at = ("weight_broadcast", "quantize_in_weight_transfer")
        impl = ctx.get(("trainer", "model", "impl"), DEFAULT_IMPL)
        if inf is None:
            ctx.add(
                "xc-quantized-transfer",
                at,
                need="an [inference] table (the launcher's inference server)",
                fix="add [inference], or remove quantize_in_weight_transfer",
            )
        elif impl != "custom":
            ctx.add(
                "xc-quantized-transfer",
                at,
                need=f'trainer.model.impl = "custom", not "{impl}"',
                fix='set trainer.model.impl = "custom"',
                edit=Edit("set", ("trainer", "model", "impl"), value="custom"),
            )

    offload = _table((inf or {}).get("kv_cache_offload"))
    if offload is not None:
        if slurm is None and offload.get("type") == "mooncake":
            ctx.add("xc-mooncake-slurm", ("inference", "kv_cache_offload", "type"))
        if ctx.get(("trainer", "enable_router_replay")) is True:
            ctx.add("xc-router-replay-offload", ("trainer", "enable_router_replay"))
