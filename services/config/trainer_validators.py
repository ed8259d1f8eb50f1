"""prime-rl's trainer and SFT validators (issue 32, item 8): the model's parallelism, activation
checkpointing and quantization against its implementation, the scheduler and tracing against max_steps,
the SFT data, deployment and online evals, a resume directory, and what the rl and sft launchers check
before they start (configs/trainer.py, configs/sft.py, configs/shared.py, entrypoints/ at the commit
prime_rl_fields.json follows).

Each check fires exactly when prime-rl raises, reading its defaults where the file leaves a key out and
its lax pydantic reading of a value ("4" is 4, "true" is true). None offers a fix: each of these is a
choice between two settings the user wrote, and the message says which to change.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

from services.config.findings import as_table as _table, dotted, is_set as _set
from services.config.walk import _NO, lax

# prime-rl's defaults for what these checks read (configs/trainer.py, configs/sft.py, configs/inference.py)
DEFAULT_IMPL = "auto"
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_SFT_SEQ_LEN = 128  # BaseDataConfig.seq_len
DEFAULT_SCHEDULER = {"constant": {}, "linear": {"warmup_steps": 10, "decay_steps": 10}, "cosine": {"warmup_steps": 10}}
DEFAULT_SERVER_PORT = 8000  # inference.server.port
DEFAULT_CLIENT_URL = "http://localhost:8000/v1"  # ClientConfig.base_url (configs/shared.py)
TRACE_MAX_STEPS = 10  # dont_do_massive_traces: max_steps must stay below it
STEP_DIR = re.compile(r"step_\d+")


def trainer_checks(ctx: Any) -> None:
    kind = ctx.kind
    if kind == "rl":
        shared_steps = ctx.get(("max_steps",))
        own = ctx.get(("trainer", "max_steps"))
        _trainer(ctx, ("trainer",), max_steps=own if _set(own) else shared_steps, sft=False)
        _rl_client_port(ctx)
    elif kind == "trainer":
        _trainer(ctx, (), max_steps=ctx.get(("max_steps",)), sft=False)
    elif kind == "sft":
        _trainer(ctx, (), max_steps=ctx.get(("max_steps",)), sft=True)
        _sft_data(ctx)
        _sft_deployment(ctx)
        _sft_online_eval(ctx)
        _sft_renderer(ctx)
    for path in (("resume",), ("trainer", "resume"), ("orchestrator", "resume")):
        res = _table(ctx.get(path))
        where = path + ("dir",)
        value = (res or {}).get("dir")
        if isinstance(value, str) and value != "None" and not STEP_DIR.fullmatch(_path_name(value)):
            ctx.add("xc-resume-dir", where, path=dotted(where), value=value)


def _int(value: Any) -> int | None:
    """The int pydantic's lax mode reads from ``value`` ("4", 4.0), or None (left out, or not one)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    got = lax(value, "int") if value is not None else _NO
    return None if got is _NO else int(got)


def _bool(value: Any) -> bool:
    """True only when pydantic's lax mode reads ``value`` as true ("true", 1, "yes")."""
    if isinstance(value, bool):
        return value
    return value is not None and lax(value, "bool") is True


def _path_name(value: str) -> str:
    """What pathlib's Path(value).name is: the last part, trailing slashes and "." parts ignored."""
    parts = [p for p in value.split("/") if p and p != "."]
    return parts[-1] if parts else ""


# ------------------------------------------------------------------------------------------ trainer model


def _trainer(ctx: Any, base: tuple, *, max_steps: Any, sft: bool) -> None:
    """ModelConfig's validators and TrainerConfig's / SFTConfig's own (the same ones in both)."""
    mpath = base + ("model",)
    model = _table(ctx.get(mpath)) or {}
    impl = model.get("impl", DEFAULT_IMPL)
    at_impl = mpath + ("impl",)

    def needs_custom(what: str, at: tuple) -> None:
        ctx.add("xc-impl-custom", at, what=what, path=dotted(mpath))

    ac = _table(model.get("ac"))
    if ac is not None and ac.get("mode") == "selective":
        targets = ac.get("targets")
        if isinstance(targets, list) and not targets:
            ctx.add("xc-ac-targets", mpath + ("ac", "targets"), path=dotted(mpath + ("ac",)))
        if impl == "hf":
            needs_custom('selective activation checkpointing (ac.mode = "selective")', at_impl)
    cp = _int(model.get("cp"))
    if cp is not None and cp > 1 and impl == "hf":
        needs_custom(f"context parallelism (cp = {cp})", at_impl)
    quant = _table(model.get("quantization"))
    qtype = (quant or {}).get("type", "fp8")
    if quant is not None and impl == "hf":
        needs_custom(f"{qtype} training ([{dotted(mpath + ('quantization',))}])", at_impl)
    ep_raw = model.get("ep", "auto")
    ep = None if ep_raw == "auto" else _int(ep_raw)
    if ep is not None and ep != 1 and impl == "hf":
        needs_custom(f"expert parallelism (ep = {ep})", at_impl)
    backend = model.get("ep_comm_backend", "torch")
    if backend == "deepep" and ep is not None and ep <= 1:
        at = mpath + ("ep_comm_backend",)
        ctx.add("xc-ep-backend", at, path=dotted(mpath), ep=ep)
    if quant is not None and qtype == "mxfp8" and backend == "deepep":
        ctx.add("xc-mxfp8-backend", mpath + ("ep_comm_backend",), path=dotted(mpath))
    if not sft and _bool(ctx.get(base + ("enable_router_replay",))) and impl == "hf":
        needs_custom("router replay (enable_router_replay)", base + ("enable_router_replay",))

    optim = (_table(ctx.get(base + ("optim",))) or {}).get("type", "adamw")
    if optim == "muon" and _bool(model.get("fsdp_cpu_offload")):
        ctx.add("xc-muon-fsdp-offload", base + ("optim", "type"), path=dotted(mpath))

    steps = _int(max_steps) if _set(max_steps) else None
    steps_path = dotted(base + ("max_steps",)) if base and _set(ctx.get(base + ("max_steps",))) else "max_steps"
    trace = ctx.get(base + ("trace_path",))
    if _set(trace):
        at = base + ("trace_path",)
        if steps is None:
            ctx.add("xc-trace-steps", at, why="needs max_steps set")
        elif steps >= TRACE_MAX_STEPS:
            ctx.add(
                "xc-trace-steps",
                at,
                why=f"needs max_steps below {TRACE_MAX_STEPS} ({steps_path} = {steps}): a longer trace is too large",
            )
    _scheduler(ctx, base, steps, steps_path)


def _scheduler(ctx: Any, base: tuple, steps: int | None, steps_path: str) -> None:
    """configs/trainer.py's validate_scheduler: the scheduler's phases against max_steps."""
    spath = base + ("scheduler",)
    sched = _table(ctx.get(spath))
    if sched is None:
        return
    stype = sched.get("type", "constant")
    defaults = DEFAULT_SCHEDULER.get(stype) if isinstance(stype, str) else None
    if not defaults:
        return
    warm = _int(sched.get("warmup_steps", defaults["warmup_steps"]))
    decay = _int(sched.get("decay_steps", defaults.get("decay_steps", 0)))
    w_note = "" if "warmup_steps" in sched else ", the default"
    d_note = "" if "decay_steps" in sched else ", the default"
    if warm is None or decay is None:
        return  # a value pydantic refuses: the schema's own finding
    where = spath + ("warmup_steps",) if "warmup_steps" in sched else spath + ("type",) if "type" in sched else spath
    name = dotted(spath)

    def add(why: str, at: tuple = where) -> None:
        ctx.add("xc-scheduler-steps", at, path=name, type=stype, why=why)

    if stype == "linear":
        if warm == 0 and decay == 0:
            add("needs warmup_steps > 0 or decay_steps > 0 (with neither, use the constant scheduler)")
        elif decay > 0 and steps is None:
            add(f"with decay_steps ({decay}{d_note}) needs max_steps set")
        elif decay > 0 and steps is not None and warm + decay > steps:
            add(f"needs warmup_steps ({warm}{w_note}) + decay_steps ({decay}{d_note}) within {steps_path} ({steps})")
    elif stype == "cosine":
        if steps is None:
            add("needs max_steps set")
        elif warm >= steps:
            add(f"needs warmup_steps ({warm}{w_note}) below {steps_path} ({steps})")


# ------------------------------------------------------------------------------------------ sft


def _sft_data(ctx: Any) -> None:
    """SFTConfig's and SFTDataConfig's checks of [data] and [val.data]: lists of one length, context
    parallelism against the sequence length and the micro batch."""
    cp = _int(ctx.get(("model", "cp")))
    paths = [("data",)] + ([("val", "data")] if _table(ctx.get(("val",))) is not None else [])
    for path in paths:
        data = _table(ctx.get(path)) or {}
        if data.get("type", "sft") == "sft":
            lists = {k: data.get(k) for k in ("subsets", "splits", "probabilities")}
            for a, b in (("subsets", "splits"), ("subsets", "probabilities"), ("splits", "probabilities")):
                la, lb = lists[a], lists[b]
                if isinstance(la, list) and isinstance(lb, list) and len(la) != len(lb):
                    at = path + (b,)
                    ctx.add("xc-sft-lists", at, a=dotted(path + (a,)), na=len(la), b=dotted(at), nb=len(lb))
                    break
        if cp is not None and cp > 1:
            seq = _int(data.get("seq_len", DEFAULT_SFT_SEQ_LEN))
            if seq is not None and seq % cp:
                at = path + ("seq_len",)
                ctx.add(
                    "xc-cp-seq-len", at if "seq_len" in data else ("model", "cp"), path=dotted(at), value=seq, cp=cp
                )
            micro = _int(data.get("micro_batch_size", 1))
            at = path + ("micro_batch_size",)
            vlm_said = any(f.id == "xc-vlm-micro-batch" and f.path == dotted(at) for f in ctx.findings)
            if micro is not None and micro != 1 and not vlm_said:
                ctx.add("xc-cp-micro-batch", at, path=dotted(at), value=micro, cp=cp)


def _sft_deployment(ctx: Any) -> None:
    dep = _table(ctx.get(("deployment",))) or {}
    if dep.get("type", "single_node") != "single_node":
        return
    train, per_node = _int(dep.get("num_train_gpus", 1)), _int(dep.get("gpus_per_node", 8))
    if train is not None and per_node is not None and train > per_node:
        at = ("deployment", "num_train_gpus") if "num_train_gpus" in dep else ("deployment", "gpus_per_node")
        ctx.add("xc-sft-train-gpus", at, train=train, per_node=per_node)


def _sft_online_eval(ctx: Any) -> None:
    """SFTConfig.auto_setup_online_eval and the sft launcher's own check: [inference] serves online evals
    only, and the weight broadcast, deployment, model and ports must fit them."""
    ev = _table(ctx.get(("eval",)))
    inf = _table(ctx.get(("inference",)))
    lora = _table(ctx.get(("model", "lora"))) is not None
    wb = _table(ctx.get(("weight_broadcast",)))
    dep = _table(ctx.get(("deployment",))) or {}
    multi = dep.get("type") == "multi_node"
    if ev is None and inf is not None:
        ctx.add("xc-sft-inference-no-eval", ("inference",))
        return
    wb_type = (wb or {}).get("type", "filesystem") if wb is not None else None
    if wb_type == "nccl" and inf is None and not (ev is not None and multi):
        ctx.add("xc-sft-nccl-no-inference", ("weight_broadcast", "type"))
    if ev is None:
        return

    resolved = wb_type or ("filesystem" if lora or inf is None else "nccl")
    wb_at = ("weight_broadcast", "type") if wb is not None else ("eval",)
    if resolved != "filesystem":
        shown = f'"{resolved}" broadcast' + (" (the default with [inference])" if wb is None else "")
        if resolved == "nixl":
            ctx.add("xc-sft-eval-broadcast", wb_at, have=shown, why="online evals do not support it")
        elif lora:
            ctx.add("xc-sft-eval-broadcast", wb_at, have=shown, why="LoRA training does not support it yet")
        elif _bool(ev.get("retrigger_on_resume")):
            ctx.add(
                "xc-sft-eval-broadcast",
                ("eval", "retrigger_on_resume"),
                have=shown,
                why="eval.retrigger_on_resume needs the filesystem broadcast",
            )

    model_name = ctx.get(("model", "name"), DEFAULT_MODEL)
    vllm = _table((inf or {}).get("vllm")) or {}
    tp = _int(vllm.get("tensor_parallel_size", 1))
    tp_at = ("inference", "vllm", "tensor_parallel_size")

    def model_matches() -> None:
        served = vllm.get("model", model_name)
        if served != model_name:
            ctx.add("xc-sft-eval-model", ("inference", "vllm", "model"), served=served, name=model_name)

    if multi:
        if inf is None:
            ctx.add("xc-sft-eval-multinode", ("eval",), need="an [inference] block (the eval job runs its inference)")
            return
        nodes = _int(dep.get("num_infer_nodes", dep.get("num_eval_nodes", 0)))
        if nodes is not None and nodes < 1:
            at = ("deployment", "num_infer_nodes") if "num_infer_nodes" in dep else ("deployment", "type")
            ctx.add("xc-sft-eval-multinode", at, need="deployment.num_infer_nodes of at least 1")
        if inf.get("router") == "None":
            ctx.add("xc-sft-eval-multinode", ("inference", "router"), need='an inference router (not router = "None")')
        model_matches()
        per_node = _int(dep.get("gpus_per_node", 8))
        if per_node is not None and tp is not None and tp > 0 and per_node % tp:
            ctx.add("xc-sft-eval-tp", tp_at, what="deployment.gpus_per_node", n=per_node, tp=tp)
        return
    if inf is None:
        return  # prime-rl warns: evals reach a server the launcher does not start

    train = _int(dep.get("num_train_gpus", 1))
    infer = _int(dep.get("num_infer_gpus", dep.get("num_eval_gpus", 1)))
    per_node = _int(dep.get("gpus_per_node", 8))
    if train is not None and infer is not None and per_node is not None and train <= per_node < train + infer:
        ctx.add("xc-sft-eval-gpus", ("deployment",), train=train, infer=infer, per_node=per_node)
    model_matches()
    dp = _int(vllm.get("data_parallel_size", 1))
    if infer is not None and tp is not None and dp is not None and tp > 0 and infer != dp * tp and infer % tp:
        ctx.add("xc-sft-eval-tp", tp_at, what="deployment.num_infer_gpus", n=infer, tp=tp)
    url = ctx.get(("eval", "client", "base_url"))
    port = _int((_table(inf.get("server")) or {}).get("port", DEFAULT_SERVER_PORT))
    if isinstance(url, str) and port is not None and _url_port(url) != port:
        ctx.add("xc-client-port", ("eval", "client", "base_url"), path="eval.client.base_url", url=url, port=port)


def _sft_renderer(ctx: Any) -> None:
    """SFTConfig.validate_typed_renderer, the part that needs no registry: renderer.name = "default"."""
    if ctx.get(("data", "type"), "sft") == "fake" and _table(ctx.get(("val",))) is None:
        return
    if ctx.get(("renderer", "name")) == "default":
        ctx.add("xc-sft-renderer-default", ("renderer", "name"))


def _url_port(url: str) -> int | None:
    try:
        return urlparse(url).port
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------ rl launcher


def _rl_client_port(ctx: Any) -> None:
    """entrypoints/rl.py's rl_local: the orchestrator's base_url reaches the inference server it starts.
    Left out, the base_url is the server's own when no train env samples from the policy
    (RLConfig.auto_setup_inference_client), else the client's default on port 8000."""
    inf = _table(ctx.get(("inference",)))
    if inf is None or _table(ctx.get(("slurm",))) is not None:
        return
    at = ("orchestrator", "model", "client", "base_url")
    url = ctx.get(at)
    port_at = ("inference", "server", "port")
    port = _int(ctx.get(port_at, DEFAULT_SERVER_PORT))
    if port is None:
        return
    if isinstance(url, str) and _url_port(url) != port:
        ctx.add("xc-client-port", at, path=dotted(at), url=url, port=port)
    elif url is None and port != DEFAULT_SERVER_PORT and _policy_sourced(ctx):
        ctx.add("xc-client-port", port_at, path=dotted(at), url=f"{DEFAULT_CLIENT_URL}, the default", port=port)


def _policy_sourced(ctx: Any) -> bool:
    """OrchestratorConfig.any_policy_sourced: a train env whose algorithm (its own, else [orchestrator.algo])
    samples from the live policy, as sampling.source does unless it names a frozen model."""
    top = _table(ctx.get(("orchestrator", "algo"))) or {}
    sources = ctx.get(("orchestrator", "train", "source"))
    for src in sources if isinstance(sources, list) else ():
        if isinstance(src, dict):
            algo = _table(src.get("algo")) or top
            if (_table(algo.get("sampling")) or {}).get("source", "policy") == "policy":
                return True
    return False
