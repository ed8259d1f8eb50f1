"""prime-rl's remaining validators of its algorithm, orchestrator, evals and inference configs and of the rl
entry point's deployment (issue 32, item 8): each check fires exactly when prime-rl's own validator raises
(configs/algorithm.py, orchestrator.py, evals.py, inference.py, rl.py at the commit prime_rl_fields.json
follows), reading prime-rl's defaults where the file leaves a key out and reading values as pydantic's lax
mode does ("128" is 128, "false" is False). Texts and the prime-rl source of each rule are in rules.toml.

None of these offers an automatic fix: each one asks the user to choose (which of two values, which model
to sample from, which directory), so the message says what to change.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from services.config.findings import as_table as _table, dotted
from services.config.walk import _NO, lax

# configs/algorithm.py: the algorithms whose action loss is rl or ref_kl (every one but sft) sample from the
# live policy; the discriminator's default is grpo
ON_POLICY_ALGOS = ("grpo", "echo", "max_rl", "rae", "hierarchical_grpo", "opd", "opsd")
DEFAULT_ALGO = "grpo"
ECHO_ROLES = ("system", "user", "assistant", "tool")

# configs/inference.py: KNOWN_SCORERS (the llm-d EPP scorers prime-rl accepts)
KNOWN_SCORERS = frozenset(
    {
        "prefix-cache-scorer",
        "precise-prefix-cache-scorer",
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "active-request-scorer",
        "load-aware-scorer",
        "running-requests-size-scorer",
        "token-load-scorer",
        "latency-scorer",
        "session-affinity-scorer",
        "lora-affinity-scorer",
    }
)
SCORER_TABLES = ("scorers", "prefill_scorer_overrides", "decode_scorer_overrides")

# configs/orchestrator.py: ConcurrencyConfig's defaults
DEFAULT_MIN_INFLIGHT = 1
DEFAULT_MAX_INFLIGHT = 1024

# configs/inference.py / rl.py deployment defaults
DEFAULT_INFER_NUM_NODES = 2  # MultiNodeInferenceDeploymentConfig.num_nodes
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_OUTPUT_DIR = "outputs"


def _value(value: Any, kind: str) -> Any:
    """``value`` as prime-rl reads it for a field of ``kind`` ("int", "float", "bool"); None when it is left
    out, is prime-rl's "None", or is not one pydantic accepts (the schema check reports that one)."""
    if value is None or value == "None":
        return None
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    got = lax(value, kind)
    return None if got is _NO else got


def _present(value: Any) -> bool:
    return value is not None and value != "None"


def rl_validator_checks(ctx: Any) -> None:
    kind = ctx.kind
    orch = {"rl": ("orchestrator",), "orchestrator": ()}.get(kind)
    if orch is not None:
        _algorithms(ctx, orch)
        _train_sources(ctx, orch)
        _concurrency(ctx, orch + ("concurrency",))
    evals = {"rl": ("orchestrator", "eval"), "orchestrator": ("eval",), "evals": ("eval",), "sft": ("eval",)}
    if kind in evals and _table(ctx.get(evals[kind])) is not None:
        _sources(ctx, evals[kind] + ("source",), "evaluation")
        if kind in ("evals", "sft"):  # EvalsEvalConfig has its own concurrency
            _concurrency(ctx, ("eval", "concurrency"))
    if kind == "evals":
        skip = _value(ctx.get(("eval", "skip_first_step")), "bool")
        if skip is True and _table(ctx.get(("online",))) is None:
            ctx.add("xc-skip-first-step", ("eval", "skip_first_step"))
    if kind == "inference":
        _inference(ctx, ())
    elif kind in ("rl", "sft") and _table(ctx.get(("inference",))) is not None:
        _inference(ctx, ("inference",))
    if kind == "rl":
        _rl_deployment(ctx)
        _run_dir(ctx)


# ------------------------------------------------------------------------------------------ algorithm


def _algorithms(ctx: Any, orch: tuple) -> None:
    """Each algorithm table: the top-level one, and each train source's own (configs/algorithm.py)."""
    paths = [orch + ("algo",)]
    sources = ctx.get(orch + ("train", "source"))
    if isinstance(sources, list):
        paths += [orch + ("train", "source", i, "algo") for i in range(len(sources))]
    for path in paths:
        algo = _table(ctx.get(path))
        if algo is None:
            continue
        algo_type = algo.get("type", DEFAULT_ALGO)
        sampling = _table(algo.get("sampling")) or {}
        source = sampling.get("source", "policy")
        source_path = path + ("sampling", "source")
        if algo_type in ON_POLICY_ALGOS and _table(source) is not None:
            ctx.add("xc-algo-frozen-source", source_path, algo=algo_type, path=dotted(source_path))
        if algo_type == "sft" and source == "policy":
            at = source_path if "source" in sampling else path + ("type",)
            ctx.add("xc-sft-algo-source", at, path=dotted(source_path))
        roles = _table(algo.get("roles"))
        if algo_type == "echo" and roles is not None and not any(_present(roles.get(r)) for r in ECHO_ROLES):
            ctx.add("xc-echo-roles", path + ("roles",), path=dotted(path + ("roles",)))


# ------------------------------------------------------------------------------------------ orchestrator


def _train_sources(ctx: Any, orch: tuple) -> None:
    base = orch + ("train", "source")
    _sources(ctx, base, "training")
    sources = ctx.get(base)
    for i, src in enumerate(sources if isinstance(sources, list) else []):
        curriculum = _table((_table(src) or {}).get("curriculum"))
        if curriculum is None:
            continue
        cpath = base + (i, "curriculum")
        sampler = _table(curriculum.get("sampler"))
        if sampler is not None and sampler.get("type") == "difficulty_pool" and "pools" in sampler:
            _pools(ctx, cpath + ("sampler", "pools"), sampler.get("pools"))
        for name, gate in (_table(curriculum.get("gates")) or {}).items():
            gate = _table(gate)
            if gate is None or gate.get("type", "advantage_range") != "advantage_range":
                continue
            low = _value(gate.get("reject_min", 0.0), "float")
            high = _value(gate.get("reject_max", 0.0), "float")
            if low is not None and high is not None and low > high:
                gpath = cpath + ("gates", name)
                at = gpath + ("reject_min",) if "reject_min" in gate else gpath + ("reject_max",)
                ctx.add("xc-gate-range", at, path=dotted(gpath), low=low, high=high)


def _pools(ctx: Any, path: tuple, pools: Any) -> None:
    """DifficultyPoolSamplerConfig.validate_pools: one pool at least, distinct thresholds, a positive weight."""
    pools = _table(pools)
    if pools is None:
        return
    if not pools:
        ctx.add("xc-difficulty-pools", path, path=dotted(path), problem="has no pool")
        return
    thresholds = [_value((_table(p) or {}).get("threshold"), "float") for p in pools.values()]
    weights = [_value((_table(p) or {}).get("weight"), "float") for p in pools.values()]
    if None in thresholds or None in weights:  # a pool missing its required keys: the schema reports it
        return
    if len(set(thresholds)) != len(thresholds):
        ctx.add("xc-difficulty-pools", path, path=dotted(path), problem="has two pools with the same threshold")
    elif not any(w > 0 for w in weights):
        ctx.add("xc-difficulty-pools", path, path=dotted(path), problem="gives no pool a positive weight")


def _env_id(src: dict) -> str:
    """verifiers' EnvConfig.env_id: the taskset id, prefixed by the paired env id ("env+taskset")."""
    env = _table(src.get("env")) or {}
    env_id = str(env.get("id", "") or "")
    taskset = str((_table(env.get("taskset")) or {}).get("id", "") or "")
    return f"{env_id}+{taskset}" if env_id and taskset else taskset or env_id


def _given_name(src: dict) -> str:
    name = src.get("name")
    return str(name) if _present(name) and name else ""


def _sources(ctx: Any, base: tuple, what: str) -> None:
    """EnvConfig.validate_env for each source, and TrainConfig / EvalConfig.validate_unique_env_names."""
    sources = ctx.get(base)
    seen: dict[str, int] = {}
    for i, src in enumerate(sources if isinstance(sources, list) else []):
        src = _table(src)
        if src is None:
            continue
        if not _env_id(src):  # EnvConfig.validate_env: neither a taskset id nor an env id
            ctx.add("xc-env-none", base + (i,), path=f"{dotted(base)}[{i}]")
            continue
        name = _given_name(src) or _env_id(src)  # EnvConfig.resolved_name
        if name == "agg":  # EnvConfig.validate_env: the name of the metrics summed over every env
            ctx.add("xc-env-agg", base + (i, "name") if _given_name(src) else base + (i,), path=f"{dotted(base)}[{i}]")
        if name in seen:
            at = base + (i, "name") if "name" in src else base + (i,)
            ctx.add("xc-env-names-unique", at, what=what, name=name, first=seen[name], second=i, base=dotted(base))
        else:
            seen[name] = i


def _concurrency(ctx: Any, path: tuple) -> None:
    conc = _table(ctx.get(path))
    if conc is None:
        return
    high = conc.get("max_inflight", DEFAULT_MAX_INFLIGHT)
    high = None if high == "None" else _value(high, "int")
    if high is None:  # no ceiling
        return
    for key, default in (("initial_inflight", None), ("min_inflight", DEFAULT_MIN_INFLIGHT)):
        value = _value(conc.get(key, default), "int")
        if value is not None and value > high:
            at = path + (key,) if key in conc else path + ("max_inflight",)
            ctx.add("xc-concurrency-bounds", at, key=dotted(path + (key,)), value=value, high=high)


# ------------------------------------------------------------------------------------------ inference


def _inference(ctx: Any, base: tuple) -> None:
    """InferenceConfig and its parts (configs/inference.py); ``base`` is () for an inference file."""
    vllm = _table(ctx.get(base + ("vllm",))) or {}
    if _table(ctx.get(base + ("kv_cache_offload",))) is not None:
        if _value(vllm.get("enable_prefix_caching"), "bool") is False:
            path = base + ("vllm", "enable_prefix_caching")
            ctx.add("xc-kv-offload-prefix-caching", path, path=dotted(path))
    router = _table(ctx.get(base + ("router",)))
    if router is None or router.get("type") != "llm-d":
        return
    # validate_router_deployment: the llm-d router is launched by the SLURM templates only
    dep_type = (_table(ctx.get(base + ("deployment",))) or {}).get("type", "single_node")
    if dep_type == "single_node":
        path = base + ("router", "type")
        ctx.add("xc-llmd-single-node", path, path=dotted(path), deployment=dotted(base + ("deployment", "type")))
    for table in SCORER_TABLES:
        for name in _table(router.get(table)) or {}:
            if name not in KNOWN_SCORERS:
                path = base + ("router", table, name)
                ctx.add("xc-llmd-scorers", path, name=name, known=", ".join(sorted(KNOWN_SCORERS)))
    routed = _value(vllm.get("enable_return_routed_experts"), "bool") is True
    replay = ctx.kind == "rl" and _value(ctx.get(("trainer", "enable_router_replay")), "bool") is True
    if routed or replay:
        at = base + ("vllm", "enable_return_routed_experts") if routed else ("trainer", "enable_router_replay")
        ctx.add("xc-llmd-routed-experts", at, path=dotted(at), router=dotted(base + ("router", "type")))


# ------------------------------------------------------------------------------------------ rl deployment


def _rl_deployment(ctx: Any) -> None:
    """RLConfig's deployment checks (configs/rl.py) beyond SLURM and the router (crosschecks.py)."""
    dep = _table(ctx.get(("deployment",))) or {}
    dep_type = dep.get("type", "single_node")
    inf = _table(ctx.get(("inference",)))
    infer_dep = _table((inf or {}).get("deployment")) or {}
    infer_type = infer_dep.get("type", "single_node")
    if dep_type == "single_node":
        # validate_enough_devices_for_nccl reads [trainer.weight_broadcast] as written (the shared table is
        # applied to it only by a later validator)
        if ctx.get(("trainer", "weight_broadcast", "type")) == "nccl":
            train = _value(dep.get("num_train_gpus", 1), "int")
            infer = _value(dep.get("num_infer_gpus", 1), "int")
            if train is not None and infer is not None and train + infer < 2:
                ctx.add("xc-nccl-devices", ("trainer", "weight_broadcast", "type"), gpus=train + infer)
        return
    if dep_type != "multi_node":
        return
    # auto_setup_infer_nodes: left out, the inference nodes per replica follow [inference.deployment]
    inferred: int | None
    if inf is None:
        inferred = 0
    elif infer_type == "multi_node":
        inferred = _value(infer_dep.get("num_nodes", DEFAULT_INFER_NUM_NODES), "int")
    elif infer_type == "disaggregated":
        inferred = _disaggregated_nodes(infer_dep)
    else:
        inferred = 1
    written = dep.get("num_infer_nodes")
    explicit = _value(written, "int")
    at = ("deployment", "num_infer_nodes")
    # an explicit 0 beside [inference] is validate_deployment's finding below (one finding for one mistake)
    if explicit and inf is not None and infer_type == "multi_node" and inferred is not None:
        if explicit != inferred:
            ctx.add("xc-infer-nodes", at, nodes=explicit, inferred=inferred, what="inference.deployment.num_nodes")
    if explicit and inf is not None and infer_type == "disaggregated" and inferred is not None:
        if explicit != inferred:  # auto_setup_disaggregated_inference
            ctx.add(
                "xc-infer-nodes",
                at,
                nodes=explicit,
                inferred=inferred,
                what="the disaggregated inference's nodes per replica (prefill plus decode)",
            )
    if _present(written) and explicit is None:  # not a number: the schema check reports it
        return
    nodes = explicit if explicit is not None else inferred
    if nodes is None:
        return
    # validate_deployment: inference nodes need [inference]; none need no [inference], and fake data
    if nodes > 0 and inf is None:
        ctx.add(
            "xc-deployment-inference", at, problem=f"asks for {nodes} inference node(s) but there is no [inference]"
        )
    if nodes == 0 and inf is not None:
        ctx.add(
            "xc-deployment-inference",
            at,
            problem="is 0 but there is an [inference] table: set num_infer_nodes above 0 or remove [inference]",
        )
    if nodes == 0 and _table(ctx.get(("trainer", "data", "fake"))) is None:
        where = at if _present(written) else ("deployment", "type")
        ctx.add(
            "xc-deployment-inference",
            where,
            problem="is 0 (no inference, no orchestrator), so the trainer needs fake data: add [trainer.data.fake]",
        )
    if nodes > 0:  # no inference nodes beside [inference] is the finding above; the sizes follow from it
        _expert_parallel(ctx, dep, inf, infer_type, nodes)


def _disaggregated_nodes(infer_dep: dict) -> int | None:
    counts = [
        _value(infer_dep.get(key, 1), "int")
        for key in (
            "prefill_nodes_per_replica",
            "num_prefill_replicas",
            "decode_nodes_per_replica",
            "num_decode_replicas",
        )
    ]
    if None in counts:
        return None
    a, b, c, d = counts
    return a * b + c * d


def _expert_parallel(ctx: Any, dep: dict, inf: dict | None, infer_type: str, nodes: int) -> None:
    """auto_setup_deployment's multi-node expert-parallel sizes (not for a disaggregated inference)."""
    vllm = _table((inf or {}).get("vllm")) or {}
    if inf is None or infer_type == "disaggregated" or _value(vllm.get("enable_expert_parallel"), "bool") is not True:
        return
    gpus = _value(dep.get("gpus_per_node", DEFAULT_GPUS_PER_NODE), "int")
    tp = _value(vllm.get("tensor_parallel_size", 1), "int")
    dp = _value(vllm.get("data_parallel_size", 1), "int")
    if gpus is None or tp is None or dp is None or tp <= 0:
        return
    v = ("inference", "vllm")
    if gpus % tp:
        ctx.add(
            "xc-ep-sizes",
            v + ("tensor_parallel_size",),
            problem=f"deployment.gpus_per_node ({gpus}) is not divisible by inference.vllm.tensor_parallel_size ({tp})",
        )
        return
    total = nodes * gpus
    if dp * tp != total:
        ctx.add(
            "xc-ep-sizes",
            v + ("data_parallel_size",) if "data_parallel_size" in vllm else v + ("tensor_parallel_size",),
            problem=f"inference.vllm.data_parallel_size × tensor_parallel_size ({dp} × {tp} = {dp * tp}) is not the "
            f"{total} inference GPUs ({nodes} node(s) × {gpus})",
        )
        return
    local = _value(vllm.get("data_parallel_size_local"), "int")
    if local is not None and local != gpus // tp:
        ctx.add(
            "xc-ep-sizes",
            v + ("data_parallel_size_local",),
            problem=f"inference.vllm.data_parallel_size_local ({local}) is not gpus_per_node / tensor_parallel_size "
            f"({gpus // tp})",
        )


def _run_dir(ctx: Any) -> None:
    """auto_setup_run_dir: under rl, the sub-configs write to output_dir / run.dir (run.dir defaults to
    run.name, and an unset run.name is a fresh generated one each launch)."""
    run = _table(ctx.get(("run",))) or {}
    name = run.get("dir") if _present(run.get("dir")) else run.get("name")
    run_dir = PurePosixPath(str(ctx.get(("output_dir",), DEFAULT_OUTPUT_DIR))) / str(name) if _present(name) else None
    for sub in ("trainer", "orchestrator"):
        value = ctx.get((sub, "output_dir"))
        if not isinstance(value, str):
            continue
        if run_dir is None or PurePosixPath(value) != run_dir:
            shown = str(run_dir) if run_dir is not None else "output_dir / a generated run name"
            ctx.add("xc-run-dir", (sub, "output_dir"), path=f"{sub}.output_dir", value=value, run_dir=shown)
