"""Rule implementations beyond the schema: the cross-checks prime-rl runs at start-up, the
gotcha database (rules.toml, category "gotcha") and the secret scan. Each check reads the parsed
document through :class:`validate.Context` and reports by rule id; texts live in rules.toml."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from services.config.findings import Edit, Finding, as_table as _table, dotted, is_set as _is_set, make

FORBIDDEN_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "PRL_RUN_ID",
    "PRL_RUN_NAME",
    "WANDB_RUN_ID",
    "WANDB_SHARED_MODE",
    "WANDB_SHARED_LABEL",
    "WANDB_SHARED_PRIMARY",
    "WANDB_SHARED_FINISHER",
)
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
TYPICAL_PROMPT_TOKENS = 1500  # field report: BS4 prompts were ~1300-1500 tokens
CONTEXT_MARGIN = 500
# the context-overflow fix never sets fewer completion tokens than this: below it the fix is to raise
# max_model_len (prime-rl's own CI runs 128-token completions in a 2,048 context, and the prompt
# estimate above is a typical one, not theirs)
MIN_FIX_COMPLETION_TOKENS = 512
REMOTE_RUNTIMES = {"prime", "sandbox", "remote", "modal", "daytona", "e2b", "docker-remote"}
VL_NAME = re.compile(r"(?i)(^|[-_/.])vl([-_.]|$)|vision|llava|pixtral|-omni")
BYTES_PER_PARAM_CKPT = 6  # measured: ~47 GB per 8B DCP checkpoint (field reports)


# ------------------------------------------------------------------------------------------ cross-checks


def _shared_fields() -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """(shared key, sub-config key) pairs of the rl entry point: the shared value fills the sub-config's when
    that is left out, and prime-rl rejects the file when both are set and differ (RLConfig's
    propagate_shared_fields, utils/validation.py; compared as written, before any type coercion)."""
    table = {
        "model.name": ("trainer.model.name", "inference.vllm.model", "orchestrator.model.name"),
        "model.vlm": ("trainer.model.vlm", "orchestrator.model.vlm"),
        "log.level": ("trainer.log.level", "orchestrator.log.level", "inference.log.level"),
        "log.json_logging": ("trainer.log.json_logging", "orchestrator.log.json_logging", "inference.log.json_logging"),
        "ckpt.output_dir": ("trainer.ckpt.output_dir",),
        "ckpt.interval": ("trainer.ckpt.interval", "orchestrator.ckpt.interval"),
        "ckpt.keep_last": ("trainer.ckpt.keep_last", "orchestrator.ckpt.keep_last"),
        "ckpt.keep_interval": ("trainer.ckpt.keep_interval", "orchestrator.ckpt.keep_interval"),
        **{
            f"monitors.wandb.{leaf}": (f"trainer.monitors.wandb.{leaf}", f"orchestrator.monitors.wandb.{leaf}")
            for leaf in ("project", "entity", "name", "group", "tags", "offline")
        },
        "monitors.file.path": ("trainer.monitors.file.path", "orchestrator.monitors.file.path"),
        "monitors.prime.name": ("orchestrator.monitors.prime.name",),
        "tokenizer.name": ("trainer.tokenizer.name", "orchestrator.tokenizer.name"),
        "tokenizer.trust_remote_code": (
            "trainer.tokenizer.trust_remote_code",
            "orchestrator.tokenizer.trust_remote_code",
        ),
        "tokenizer.chat_template": (
            "trainer.tokenizer.chat_template",
            "orchestrator.tokenizer.chat_template",
            "inference.vllm.chat_template",
        ),
        "rollout_transport": ("trainer.rollout_transport", "orchestrator.rollout_transport"),
        "max_steps": ("trainer.max_steps", "orchestrator.max_steps"),
        "seq_len": ("trainer.model.seq_len", "orchestrator.seq_len"),
        "slurm": ("inference.slurm",),
    }
    return tuple((tuple(shared.split(".")), tuple(sub.split("."))) for shared, subs in table.items() for sub in subs)


SHARED_FIELDS = _shared_fields()


def cross_checks(ctx: Any) -> None:
    kind = ctx.kind
    d = ctx.data
    if kind == "rl":
        _rl_checks(ctx)
        if _table(d.get("orchestrator")) is not None:
            _orchestrator_checks(ctx, ("orchestrator",), rl=True)
        if _table(d.get("trainer")) is not None:
            _trainer_model_checks(ctx, ("trainer",))
    elif kind == "orchestrator":
        _orchestrator_checks(ctx, (), rl=False)
    elif kind == "trainer":
        _trainer_model_checks(ctx, ())
    elif kind == "sft":
        _trainer_model_checks(ctx, ())
        data = _table(d.get("data")) or {}
        bs, mb = data.get("batch_size", 128), data.get("micro_batch_size", 1)
        if isinstance(bs, int) and isinstance(mb, int) and mb > 0 and bs % mb:
            ctx.add("xc-sft-micro-batch", ("data", "batch_size"), batch_size=bs, micro=mb)
        _eval_sources(ctx, ("eval",))
    elif kind == "evals":
        _eval_sources(ctx, ("eval",))
    for path in (("env_vars",), ("trainer", "env_vars"), ("orchestrator", "env_vars"), ("inference", "env_vars")):
        env = _table(ctx.get(path))
        for name in env or {}:
            if name in FORBIDDEN_ENV:
                ctx.add("xc-env-vars", path + (name,), name=name, edit=Edit("delete", path + (name,)))
    for path in (("resume",), ("trainer", "resume"), ("orchestrator", "resume")):
        res = _table(ctx.get(path))
        if res and _is_set(res.get("step")) and _is_set(res.get("dir")):
            ctx.add("xc-resume-exclusive", path + ("dir",))
    from services.config.crosschecks import startup_checks

    startup_checks(ctx)


def _shared_in_range(ctx: Any, shared: tuple, sub: tuple, value: Any) -> bool:
    """A shared value is copied into a sub-config, which checks its own bounds: ``[ckpt] interval = 0`` is
    rejected as ``trainer.ckpt.interval`` (>= 1) though the shared table itself has no bound."""
    from services.config.schema import load_schema

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    spec = load_schema().spec_at("rl", sub)
    bounded = [a for a in spec.alts if a.kind in ("int", "float")] if spec is not None else []
    if bounded and not any(a.in_range(value) for a in bounded):
        ctx.add(
            "xc-shared-range",
            shared,
            shared=dotted(shared),
            value=_lit(value),
            sub=dotted(sub),
            bound=bounded[0].bound(),
        )
        return False
    return True


def _rl_checks(ctx: Any) -> None:
    d = ctx.data
    tr = _table(d.get("trainer")) or {}
    orch = _table(d.get("orchestrator")) or {}
    inf = _table(d.get("inference"))
    tmodel = _table(tr.get("model")) or {}
    omodel = _table(orch.get("model")) or {}
    shared_model = _table(d.get("model"))

    # shared keys fill sub-configs only when unset; different explicit values are errors
    out_of_range: set[tuple] = set()  # said once per shared key, for the first sub-config it fills
    for shared, sub in SHARED_FIELDS:
        s, v = ctx.get(shared), ctx.get(sub)
        if s is not None and v is None and shared not in out_of_range and not _shared_in_range(ctx, shared, sub, s):
            out_of_range.add(shared)
        if s is not None and v is not None and s != v:
            ctx.add(
                "xc-shared-conflict",
                sub,
                shared=dotted(shared),
                shared_value=_lit(s),
                sub=dotted(sub),
                sub_value=_lit(v),
            )

    seq_shared = d.get("seq_len") if _is_set(d.get("seq_len")) else None
    t_seq = tmodel.get("seq_len", seq_shared) or 2048
    o_seq = orch.get("seq_len", seq_shared) or 2048
    if isinstance(t_seq, int) and isinstance(o_seq, int) and t_seq < o_seq:
        where = ("trainer", "model", "seq_len") if "seq_len" in tmodel else ("orchestrator", "seq_len")
        ctx.add(
            "xc-seq-len",
            where,
            trainer=t_seq,
            orchestrator=o_seq,
            edit=Edit("set", ("trainer", "model", "seq_len"), value=o_seq),
        )

    if not _is_set(d.get("max_steps")):
        t_ms, o_ms = tr.get("max_steps"), orch.get("max_steps")
        if _is_set(t_ms) and _is_set(o_ms) and t_ms != o_ms:
            ctx.add("xc-max-steps", ("orchestrator", "max_steps"), trainer=t_ms, orchestrator=o_ms)

    shared_ckpt = _table(d.get("ckpt"))
    t_ck, o_ck = _table(tr.get("ckpt")), _table(orch.get("ckpt"))
    t_on, o_on = shared_ckpt is not None or t_ck is not None, shared_ckpt is not None or o_ck is not None
    if t_on != o_on:
        path: tuple[str, ...] = ("trainer", "ckpt") if t_ck is not None else ("orchestrator", "ckpt")
        ctx.add(
            "xc-ckpt-both", path, on="trainer" if t_on else "orchestrator", off="orchestrator" if t_on else "trainer"
        )
    elif t_on:
        base = (shared_ckpt or {}).get("interval")
        ti = (t_ck or {}).get("interval", base)
        oi = (o_ck or {}).get("interval", base)
        if _is_set(ti) and _is_set(oi) and ti != oi or (_is_set(ti) != _is_set(oi)):
            path = (
                ("orchestrator", "ckpt", "interval") if o_ck and "interval" in o_ck else ("trainer", "ckpt", "interval")
            )
            ctx.add("xc-ckpt-interval", path, trainer=_lit(ti), orchestrator=_lit(oi))

    shared_name = (shared_model or {}).get("name", DEFAULT_MODEL if shared_model is not None else None)
    o_name = omodel.get("name", shared_name or DEFAULT_MODEL)
    if inf is not None:
        # the older [inference.model] name (renamed into [inference.vllm], its own finding) names it too
        old_name = (_table(inf.get("model")) or {}).get("name")
        i_name = (_table(inf.get("vllm")) or {}).get("model", old_name or shared_name or DEFAULT_MODEL)
        if i_name != o_name and not str(o_name).startswith("Jackmin108/"):
            ctx.add(
                "xc-model-name",
                ("inference", "vllm", "model") if "vllm" in inf else ("orchestrator", "model", "name"),
                a_path="inference.vllm.model",
                a=i_name,
                b_path="orchestrator.model.name",
                b=o_name,
            )
    else:
        t_name = tmodel.get("name", shared_name or DEFAULT_MODEL)
        if t_name != o_name and not str(o_name).startswith("Jackmin108/"):
            ctx.add(
                "xc-model-name",
                ("trainer", "model", "name"),
                a_path="trainer.model.name",
                a=t_name,
                b_path="orchestrator.model.name",
                b=o_name,
            )

    if _table(tmodel.get("lora")) is not None:
        for path in (("weight_broadcast",), ("trainer", "weight_broadcast")):
            wb = _table(ctx.get(path))
            if wb and wb.get("type") in ("nccl", "nixl"):
                ctx.add(
                    "xc-lora-broadcast",
                    path + ("type",),
                    type=wb["type"],
                    edit=Edit("set", path + ("type",), value="filesystem"),
                )

    wandb = _table(ctx.get(("monitors", "wandb")))
    if wandb and wandb.get("offline") is True:
        ctx.add(
            "xc-wandb-offline", ("monitors", "wandb", "offline"), edit=Edit("delete", ("monitors", "wandb", "offline"))
        )

    dep = _table(d.get("deployment")) or {}
    if dep.get("type", "single_node") == "single_node":
        n_train, n_infer = dep.get("num_train_gpus", 1), dep.get("num_infer_gpus", 1)
        per_node = dep.get("gpus_per_node", 8)
        if all(isinstance(x, int) for x in (n_train, n_infer, per_node)):
            if n_train + n_infer > per_node:
                ctx.add("xc-gpus-per-node", ("deployment",), train=n_train, infer=n_infer, per_node=per_node)
            tp = ctx.get(("inference", "vllm", "tensor_parallel_size"), 1)
            if inf is not None and isinstance(tp, int) and tp > 0 and n_infer % tp:
                ctx.add("xc-infer-tp", ("inference", "vllm", "tensor_parallel_size"), infer=n_infer, tp=tp)


def _orchestrator_checks(ctx: Any, base: tuple, rl: bool) -> None:
    orch = _table(ctx.get(base)) if base else ctx.data
    orch = orch or {}
    bs, tbs = orch.get("batch_size"), orch.get("token_batch_size")
    group = orch.get("group_size", 1)
    if _is_set(bs) and _is_set(tbs):
        ctx.add("xc-batch-exclusive", base + ("token_batch_size",))
    batch = bs if _is_set(bs) else (128 if not _is_set(tbs) else None)
    if isinstance(batch, int) and isinstance(group, int) and group > 0 and batch % group:
        suggested = -(-batch // group) * group  # round up: never fewer rollouts than asked
        ctx.add(
            "xc-batch-group",
            base + ("batch_size",) if _is_set(bs) else base + ("group_size",),
            batch_size=batch,
            group_size=group,
            suggested=suggested,
            edit=Edit("set", base + ("batch_size",), value=suggested),
        )
    conc = _table(orch.get("concurrency")) or {}
    if isinstance(group, int):
        for key in ("max_inflight", "initial_inflight"):
            v = conc.get(key)
            if isinstance(v, int) and v < group:
                ctx.add(
                    "xc-inflight-group",
                    base + ("concurrency", key),
                    key=key,
                    value=v,
                    group_size=group,
                    edit=Edit("set", base + ("concurrency", key), value=group),
                )
    train = _table(orch.get("train")) or {}
    if not train.get("source"):
        ctx.add("xc-no-train-source", base + ("train",) if "train" in orch else base)
    _eval_sources(ctx, base + ("eval",))


def _eval_sources(ctx: Any, path: tuple) -> None:
    ev = _table(ctx.get(path))
    if ev is not None and not ev.get("source"):
        ctx.add("xc-eval-sources", path, path=dotted(path))


def _trainer_model_checks(ctx: Any, base: tuple) -> None:
    model = _table(ctx.get(base + ("model",))) or {}
    optim_off = model.get("optim_cpu_offload", True)
    fix = Edit("set", base + ("model", "optim_cpu_offload"), value=False)
    full = model.get("full_offload")
    if full not in (None, False, "None") and optim_off is True:
        ctx.add("xc-offload", base + ("model", "full_offload"), what="full_offload", edit=fix)
    if full not in (None, False, "None"):
        optim = (_table(ctx.get(base + ("optim",))) or {}).get("type", "adamw")
        if optim not in ("adamw", "sign_sgd"):
            ctx.add(
                "xc-full-offload-optim",
                base + ("optim", "type"),
                optim=optim,
                edit=Edit("set", base + ("optim", "type"), value="adamw"),
            )
    if model.get("fsdp_cpu_offload") is True and optim_off is True:
        ctx.add("xc-offload", base + ("model", "fsdp_cpu_offload"), what="fsdp_cpu_offload", edit=fix)


def _lit(v: Any) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


# ------------------------------------------------------------------------------------------ gotchas


def _train_gpus(ctx: Any, gpus: int | None) -> int:
    dep = _table(ctx.get(("deployment",))) or {}
    if dep.get("type") == "multi_node":
        nodes = dep.get("num_train_nodes", 1)
        return (nodes if isinstance(nodes, int) else 1) * dep.get("gpus_per_node", 8)
    n = dep.get("num_train_gpus")
    if isinstance(n, int):
        return n
    if ctx.kind == "sft" and gpus:
        return gpus
    return 1


def gotchas(ctx: Any, *, gpus: int | None = None, sources: bool = True) -> None:
    """The gotcha rules; ``sources=False`` leaves out the one that reads inside each train source
    (:func:`remote_executor`, which the editor's cache runs per source)."""
    from services.config.memory import lookup_model

    d = ctx.data
    kind = ctx.kind
    tm = ("trainer", "model") if kind == "rl" else ("model",)
    model_tbl = _table(ctx.get(tm)) or {}
    name = model_tbl.get("name") or ctx.get(("model", "name")) or ctx.get(("inference", "vllm", "model"))
    name_path = tm + ("name",) if "name" in model_tbl else ("model", "name")
    if kind == "inference":
        name = ctx.get(("vllm", "model"))
        name_path = ("vllm", "model")
    shape = lookup_model(name) if isinstance(name, str) else None

    # LoRA with FSDP on several GPUs
    lora = _table(model_tbl.get("lora"))
    if lora is not None and kind in ("rl", "trainer", "sft"):
        n = _train_gpus(ctx, gpus)
        if n > 1:
            ctx.add("gotcha-lora-fsdp", tm + ("lora",), gpus=n)

    # VL model name without a VLM setup
    if isinstance(name, str) and kind in ("rl", "trainer", "sft", "orchestrator"):
        vl = shape.vl if shape is not None else bool(VL_NAME.search(name.split("/")[-1]))
        has_vlm = any(
            _table(ctx.get(p)) is not None for p in (tm + ("vlm",), ("model", "vlm"), ("orchestrator", "model", "vlm"))
        )
        if vl and not has_vlm:
            ctx.add("gotcha-vl-model", name_path, model=name)
        if shape is not None and shape.known_issue:
            ctx.add(
                "gotcha-known-model-issue",
                name_path,
                model=name,
                issue=shape.known_issue,
                recommendation=shape.known_fix,
            )

    # max_completion_tokens + prompt + margin > max_model_len
    if kind == "rl":
        mcl_path = ("orchestrator", "train", "sampling", "max_completion_tokens")
        mml = ctx.get(("inference", "vllm", "max_model_len"))
        mct = ctx.get(mcl_path)
        if isinstance(mml, int) and isinstance(mct, int):
            total = mct + TYPICAL_PROMPT_TOKENS + CONTEXT_MARGIN
            if total > mml:
                suggested = mml - TYPICAL_PROMPT_TOKENS - CONTEXT_MARGIN
                sane = MIN_FIX_COMPLETION_TOKENS <= suggested < mct
                ctx.add(
                    "gotcha-context-overflow",
                    mcl_path,
                    completion=mct,
                    prompt=TYPICAL_PROMPT_TOKENS,
                    margin=CONTEXT_MARGIN,
                    total=total,
                    max_model_len=mml,
                    suggested=suggested,
                    edit=Edit("set", mcl_path, value=suggested) if sane else None,
                )
                if not sane:  # lowering would leave too few tokens to answer in: advise the other way
                    f = ctx.findings[-1]
                    ctx.findings[-1] = replace(
                        f,
                        fix=f"raise inference.vllm.max_model_len to at least {total} (lowering "
                        f"max_completion_tokens would leave fewer than {MIN_FIX_COMPLETION_TOKENS})",
                    )

    # remote tool executor in a tool-calling environment
    if sources:
        for i, src in enumerate(train_sources(ctx)):
            remote_executor(ctx, i, src)

    # one GPU shared by trainer and inference
    if kind == "rl" and _table(d.get("inference")) is not None:
        dep = _table(d.get("deployment")) or {}
        single = gpus == 1 or (dep.get("gpus_per_node") == 1 and dep.get("type", "single_node") == "single_node")
        util_path = ("inference", "vllm", "gpu_memory_utilization")
        util = ctx.get(util_path, 0.9)
        if single and isinstance(util, (int, float)) and util > 0.5:
            ctx.add(
                "gotcha-single-gpu",
                util_path if ctx.get(util_path) is not None else ("inference",),
                value=util,
                edit=Edit("set", util_path, value=0.5),
            )

    # checkpoints with no pruning
    for ck_path in (("ckpt",), ("trainer", "ckpt")) if kind == "rl" else (("ckpt",),):
        ck = _table(ctx.get(ck_path))
        if ck is None or kind not in ("rl", "trainer", "sft"):
            continue
        interval = ck.get("interval")
        if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval < 1:
            continue  # saves nothing (and is refused as out of range): no disk to fill
        if _is_set(interval) and not _prunes(ck):
            # the trainer prunes: a keep setting in [ckpt] or [trainer.ckpt] (or the older `keep`) is enough
            if kind == "rl" and any(_prunes(_table(ctx.get(p)) or {}) for p in (("ckpt",), ("trainer", "ckpt"))):
                continue
            size = (
                f"~{shape.params * BYTES_PER_PARAM_CKPT / 1e9:.0f} GB each for {name}"
                if shape is not None
                else "~47 GB each for an 8B model, ~300 GB for 32B"
            )
            ctx.add(
                "gotcha-ckpt-keep",
                ck_path + ("interval",),
                interval=interval,
                size=size,
                model=name or "this model",
                edit=Edit("set", ck_path + ("keep_last",), value=2),
            )
            break

    # VLLM_USE_V1 in env vars
    for path in (("env_vars",), ("trainer", "env_vars"), ("orchestrator", "env_vars"), ("inference", "env_vars")):
        env = _table(ctx.get(path)) or {}
        if "VLLM_USE_V1" in env:
            ctx.add("gotcha-vllm-v1", path + ("VLLM_USE_V1",), edit=Edit("delete", path + ("VLLM_USE_V1",)))

    # orchestrator keep_last / keep_interval do nothing
    ock = (
        _table(ctx.get(("orchestrator", "ckpt") if kind == "rl" else ("ckpt",)))
        if kind in ("rl", "orchestrator")
        else None
    )
    for key in ("keep_last", "keep_interval"):
        if ock and _is_set(ock.get(key)):
            base = ("orchestrator", "ckpt") if kind == "rl" else ("ckpt",)
            ctx.add("gotcha-orch-keep", base + (key,), key=key)


def _prunes(ck: dict) -> bool:
    return any(_is_set(ck.get(key)) for key in ("keep_last", "keep_interval", "keep"))


def train_sources(ctx: Any) -> list:
    sources = ctx.get(("orchestrator", "train", "source") if ctx.kind == "rl" else ("train", "source")) or []
    return sources if isinstance(sources, list) else []


def remote_executor(ctx: Any, i: int, src: Any) -> None:
    """A tool-calling environment of train source ``i`` that runs its tools remotely."""
    src_base = ("orchestrator", "train", "source") if ctx.kind == "rl" else ("train", "source")
    env = _table((src or {}).get("env")) or {}
    for role, agent in env.items():
        agent = _table(agent)
        if not agent or "harness" not in agent:
            continue
        runtime = _table(agent.get("runtime")) or {}
        backend = str(runtime.get("type", "")).lower()
        executor = str(env.get("executor_backend", agent.get("executor_backend", ""))).lower()
        if backend in REMOTE_RUNTIMES or executor in REMOTE_RUNTIMES:
            path = (
                src_base + (i, "env", role, "runtime", "type") if backend in REMOTE_RUNTIMES else src_base + (i, "env")
            )
            env_name = (src or {}).get("name") or ((_table(env.get("taskset")) or {}).get("id", "?"))
            ctx.add("gotcha-remote-executor", path, env=env_name)


# ------------------------------------------------------------------------------------------ secrets

_SECRET_PATTERNS = [  # (literal prefixes that must occur, pattern, what, where it belongs)
    (("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "a Hugging Face token", "HF_TOKEN"),
    (("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id", "AWS_ACCESS_KEY_ID"),
    (("sk-",), re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}"), "an API key", "OPENAI_API_KEY"),
    (("pit_",), re.compile(r"\bpit_[A-Za-z0-9]{20,}"), "a Prime Intellect API key", "PRIME_API_KEY"),
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
        "a GitHub token",
        "GITHUB_TOKEN",
    ),
]
_HINT_WORDS = ("key", "token", "secret", "passw", "auth", "wandb")
_SECRET_KEY = r"(?:api[_-]?key|token|secret|passw(?:or)?d|access[_-]?key|auth)"
# one pass over the text: `key = "value"` lines whose key names a secret (or mentions wandb)
_KV = re.compile(r"""(?m)^[ \t]*["']?([A-Za-z0-9_\-.]+)["']?[ \t]*=[ \t]*(["'])(.*?)\2""")
_SECRET_KEY_RE = re.compile(_SECRET_KEY, re.I)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$|^local-[0-9a-f]{40,}$")
# in a comment: `<secret word>: value` / `= value`, or a W&B key (40 hex) on a line that names wandb
_COMMENT_SECRET = re.compile(
    r"""(?i)(wandb|api[_ -]?key|token|secret|passw(?:or)?d|access[_ -]?key|auth\w*)"""
    r"""[^:=\n]{0,30}[:=][ \t]*["']?([A-Za-z0-9_\-./+]{16,})"""
)
_HEX40_ANY = re.compile(r"(?<![0-9A-Za-z])(?:local-)?[0-9a-f]{40,}(?![0-9A-Za-z])")


def _mask(secret: str) -> str:
    return f"{secret[:4]}…{len(secret)} chars"


def _env_for(key: str) -> str:
    k = key.lower()
    if "wandb" in k:
        return "WANDB_API_KEY"
    if "aws" in k or "secret_access" in k:
        return "AWS_SECRET_ACCESS_KEY"
    if k.startswith("hf") or "hugging" in k:
        return "HF_TOKEN"
    return "an environment variable"


def scan_secrets(text: str) -> list[Finding]:
    """Secrets pasted into the file, found on the raw text (works when the TOML does not parse).

    A few whole-text regex passes (no per-line Python loop): this runs on every keystroke."""
    import bisect

    starts: list[int] = []

    def where(offset: int) -> tuple[int, int]:
        if not starts:  # line starts, computed only when something matched
            starts.append(0)
            starts.extend(m.end() for m in re.finditer("\n", text))
        line = bisect.bisect_right(starts, offset)
        return line, offset - starts[line - 1] + 1

    out: list[Finding] = []
    hit_lines: set[int] = set()
    for prefixes, pattern, what, env in _SECRET_PATTERNS:
        if not any(p in text for p in prefixes):  # substring tests are far cheaper than the regex
            continue
        for m in pattern.finditer(text):
            pos = where(m.start())
            if pos[0] in hit_lines:
                continue
            hit_lines.add(pos[0])
            out.append(make("secret", pos, what=what, masked=_mask(m.group(0)), env=env))
    low = text.lower()
    begins: set[int] = set()
    for word in _HINT_WORDS:  # only lines mentioning a secret-ish word get a closer look
        at = low.find(word)
        while at >= 0:
            begins.add(low.rfind("\n", 0, at) + 1)
            at = low.find(word, at + 1)
    for begin in sorted(begins):
        end = text.find("\n", begin)
        end = len(text) if end < 0 else end
        _comment_secret(text, begin, end, where, hit_lines, out)
        kv = _KV.match(text, begin, end)
        if kv is None:
            continue
        key, value = kv.group(1), kv.group(3)
        pos = where(kv.start(3))
        if pos[0] in hit_lines:
            continue
        last = key.split(".")[-1]
        low = last.lower()
        if low.endswith(("_var", "_env", "_vars", "_file", "_path", "_dir")) or "from_env" in low:
            continue
        is_wandb = "wandb" in key.lower() and bool(_HEX40.match(value))
        if (
            _SECRET_KEY_RE.search(last)
            and len(value) >= 8
            and not _ENV_NAME.match(value)
            and not value.startswith(("$", "${"))
            and value != "None"
        ) or is_wandb:
            what = "a W&B API key" if "wandb" in key.lower() else f"a secret ({last})"
            hit_lines.add(pos[0])
            out.append(make("secret", pos, what=what, masked=_mask(value), env=_env_for(key)))
    return out


def _comment_secret(text: str, begin: int, end: int, where: Any, hit_lines: set[int], out: list[Finding]) -> None:
    """A key pasted into a comment (``# wandb key: 0123...``) leaks as surely as one in a value. A comment
    starts at a ``#`` outside a string (a ``#`` inside quotes is text)."""
    line = text[begin:end]
    hash_at = _comment_start(line)
    if hash_at < 0:
        return
    comment = line[hash_at + 1 :]
    found = None
    m = _COMMENT_SECRET.search(comment)
    if m is not None:
        value = m.group(2)
        if (
            any(c.isdigit() for c in value)
            and any(c.isalpha() for c in value)
            and not _ENV_NAME.match(value)
            and not value.startswith(("http", "/", "./"))
        ):
            found = (m.start(2), value, m.group(1))
    if found is None and "wandb" in comment.lower():
        h = _HEX40_ANY.search(comment)
        if h is not None:
            found = (h.start(), h.group(0), "wandb")
    if found is None:
        return
    offset, value, word = found
    pos = where(begin + hash_at + 1 + offset)
    if pos[0] in hit_lines:
        return
    hit_lines.add(pos[0])
    is_wandb = "wandb" in word.lower() or ("wandb" in comment.lower() and bool(_HEX40.match(value)))
    what = "a W&B API key in a comment" if is_wandb else f"a secret ({word.lower()}) in a comment"
    out.append(make("secret", pos, what=what, masked=_mask(value), env="WANDB_API_KEY" if is_wandb else _env_for(word)))


def _comment_start(line: str) -> int:
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#":
            return i
        i += 1
    return -1
