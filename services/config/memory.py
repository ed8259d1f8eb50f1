"""GPU memory estimates for training (ZeRO model states, activations, LoRA) and inference (KV cache).

Model states follow Rajbhandari et al. 2020 (ZeRO): with mixed-precision Adam a model of Ψ parameters
holds 2Ψ bytes of bf16 weights, 2Ψ of bf16 gradients and KΨ = 12Ψ of fp32 optimizer state (master
weights, momentum, variance). Sharding over N GPUs divides the optimizer states ("os"), also the
gradients ("os+g") or everything ("full", = FSDP / ZeRO-3). prime-rl trains with FSDP (full) and,
by default, keeps optimizer states on the CPU (``optim_cpu_offload = true``).

Activations (bf16, flash attention, Korthikanti et al. 2022): ~34·h bytes per token per layer without
checkpointing; with full activation checkpointing 2·h per token per layer plus one layer's 34·h.
KV cache: layers × kv_heads × head_dim × 2 (K and V) × bytes × tokens.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from services.config.findings import ConfigError, Finding, make

GB = 10**9
GIB = 1024**3
MIB = 1024**2
SHARDINGS = ("none", "os", "os+g", "full")
ADAM_K = 12  # fp32 master weights + momentum + variance, bytes per trainable parameter


@dataclass(frozen=True)
class ModelShape:
    name: str
    params: float
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0
    intermediate: int = 0
    active_params: float | None = None
    experts: int = 0
    experts_active: int = 0
    vl: bool = False
    tools: bool = False
    known_issue: str = ""
    known_fix: str = ""
    gated: bool = False  # the hub serves it only to accounts that accepted its licence (needs HF_TOKEN)

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 K and V for every layer (what vLLM's paged cache holds per token)."""
        return self.layers * self.kv_heads * self.head_dim * 2 * 2

    def lora_params(self, rank: int) -> float:
        """Adapter parameters for rank r on the attention and MLP projections of every layer."""
        q_out = self.heads * self.head_dim
        kv_out = self.kv_heads * self.head_dim
        h, inter = self.hidden, self.intermediate
        per_layer = (h + q_out) + 2 * (h + kv_out) + (q_out + h) + 2 * (h + inter) + (inter + h)
        if self.experts:  # LoRA on every expert's MLP too
            per_layer += (self.experts - 1) * (2 * (h + inter) + (inter + h))
        return float(rank * per_layer * self.layers)


@dataclass(frozen=True)
class Preset:
    id: str
    name: str
    memory_mib: int
    fp8: bool = False

    @property
    def memory(self) -> int:
        return self.memory_mib * MIB


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU. ``total`` = weights + gradients + optimizer + activations + kv_cache."""

    model: str
    params: float
    trainable_params: float
    gpus: int
    sharding: str
    lora: bool
    seq_len: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    kv_cache: int
    cpu_optimizer: int = 0  # optimizer state kept in host RAM (optim_cpu_offload)
    checkpointing: bool = True  # activation checkpointing
    optim_cpu_offload: bool = False
    micro_batch: int = 1
    lora_rank: int | None = None

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache

    def assumptions(self) -> dict[str, Any]:
        """What the figure assumes: two estimates agree exactly when these agree (``init``, ``estimate``
        and ``validate --preset`` all go through :func:`estimate`)."""
        return {
            "sharding": self.sharding,
            "fsdp_gpus": self.gpus if self.sharding == "full" else None,
            "gpus": self.gpus,
            "optimizer": "host RAM" if self.optim_cpu_offload else "GPU memory",
            "activation_checkpointing": self.checkpointing,
            "seq_len": self.seq_len,
            "micro_batch": self.micro_batch,
            "lora_rank": self.lora_rank if self.lora else None,
        }

    def assumptions_text(self) -> str:
        """ "FSDP over 2 GPUs · optimizer states in host RAM (optim_cpu_offload = true) · …" in words."""
        n = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        shard = {
            "full": f"FSDP over {n}",
            "os+g": f"ZeRO-2 over {n} (optimizer states and gradients sharded)",
            "os": f"ZeRO-1 over {n} (optimizer states sharded)",
            "none": f"no sharding ({n}, a full copy each)",
        }
        parts = [
            shard.get(self.sharding, self.sharding),
            "optimizer states in host RAM (optim_cpu_offload = true)"
            if self.optim_cpu_offload
            else "optimizer states in GPU memory (optim_cpu_offload = false)",
            "activation checkpointing" if self.checkpointing else "no activation checkpointing",
            f"seq_len {self.seq_len}",
            f"micro-batch {self.micro_batch}",
        ]
        if self.lora:
            parts.append(f"LoRA rank {self.lora_rank}" if self.lora_rank else "LoRA")
        if self.kv_cache:
            parts.append("an inference KV cache")
        return " · ".join(parts)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        per_gpu = {k: d.pop(k) for k in ("weights", "gradients", "optimizer", "activations", "kv_cache")}
        per_gpu["total"] = self.total
        return {"per_gpu": per_gpu, **d, "assumptions": self.assumptions()}


def _data(name: str) -> dict[str, Any]:
    # beside this module, not through importlib.resources (its first use imports zipfile: 3-8 ms of the first
    # offers ranking, offers_rank cold); the package is installed as files, never zipped
    return tomllib.loads(Path(__file__).with_name(name).read_text(encoding="utf-8"))


@functools.cache
def registry() -> dict[str, ModelShape]:
    return {
        name: ModelShape(name=name, **{k: v for k, v in spec.items()}) for name, spec in _data("models.toml").items()
    }


@functools.cache
def presets() -> dict[str, Preset]:
    return {pid: Preset(pid, **spec) for pid, spec in _data("presets.toml").items()}


def preset(pid: str) -> Preset:
    try:
        return presets()[pid]
    except KeyError:
        raise ConfigError(f"unknown hardware preset {pid!r}", hint=f"one of {', '.join(presets())}") from None


@functools.lru_cache(maxsize=64)
def _exact(name: str) -> ModelShape | None:
    """The registry model named exactly ``name``, read from its own table only: the whole registry (~30
    models) is 3-4 ms of tomllib, paid by the first offers ranking in a process (offers_rank, cold) for the one
    model it prices. None when the file has no ``["name"]`` table (the caller then looks through them all)."""
    text = Path(__file__).with_name("models.toml").read_text(encoding="utf-8")
    head = f'\n["{name}"]\n'
    start = text.find(head)
    if start < 0 or '"' in name or "\\" in name:
        return None
    end = text.find("\n[", start + len(head))  # the next table (every table of the file is one model's)
    spec = tomllib.loads(text[start:] if end < 0 else text[start:end]).get(name)
    return ModelShape(name=name, **spec) if isinstance(spec, dict) else None


def lookup_model(name: str) -> ModelShape | None:
    """A registry model by exact id, case-insensitively, or by its basename (``Qwen3-8B``)."""
    shape = _exact(name)
    if shape is not None:
        return shape
    reg = registry()
    if name in reg:
        return reg[name]
    low = name.lower()
    for key, shape in reg.items():
        if key.lower() == low or key.split("/")[-1].lower() == low.split("/")[-1]:
            return shape
    return None


def closest_models(name: str, n: int = 6) -> list[str]:
    """Registry ids that look like ``name`` (by full id and by basename), best first; [] when none does."""
    import difflib

    ids = list(registry())
    by_base = {key.split("/")[-1].lower(): key for key in ids}
    low = name.lower()
    found = difflib.get_close_matches(low, [key.lower() for key in ids], n=n, cutoff=0.6)
    found += difflib.get_close_matches(low.split("/")[-1], list(by_base), n=n, cutoff=0.6)
    out: list[str] = []
    for hit in found:
        key = by_base.get(hit) or next(k for k in ids if k.lower() == hit)
        if key not in out:
            out.append(key)
    return out[:n]


def known_models_text(name: str) -> str:
    """For an unknown model: the closest registry models, or every one when none is close."""
    close = closest_models(name)
    if close:
        return "the closest known models: " + ", ".join(close)
    return f"the {len(registry())} known models: " + ", ".join(registry())


def shape_from_hf_config(name: str, cfg: dict[str, Any]) -> ModelShape:
    """A ModelShape from a Hugging Face ``config.json`` (text config of VL models included)."""
    vl = "vision_config" in cfg
    text = cfg.get("text_config", cfg) if vl else cfg
    layers = int(text["num_hidden_layers"])
    hidden = int(text["hidden_size"])
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads", heads))
    head_dim = int(text.get("head_dim") or hidden // heads)
    vocab = int(text.get("vocab_size", 0))
    inter = int(text.get("moe_intermediate_size") or text.get("intermediate_size") or 4 * hidden)
    experts = int(text.get("num_experts") or text.get("n_routed_experts") or text.get("num_local_experts") or 0)
    attn = hidden * heads * head_dim + 2 * hidden * kv * head_dim + heads * head_dim * hidden
    mlp = 3 * hidden * inter * max(experts, 1)
    params = layers * (attn + mlp) + vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return ModelShape(
        name=name,
        params=float(params),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        vocab=vocab,
        intermediate=inter,
        experts=experts,
        vl=vl,
    )


def lookup_online(name: str, cache_dir: Path, *, client: Any = None, timeout: float = 10.0) -> ModelShape:
    """Fetch ``config.json`` from the Hugging Face hub (cached in ``cache_dir``). Raises ConfigError
    when offline or unknown; never guesses."""
    from services.atomic import atomic_write_text

    cache = Path(cache_dir) / "hf-configs" / (name.replace("/", "__") + ".json")
    if cache.exists():
        return shape_from_hf_config(name, json.loads(cache.read_text(encoding="utf-8")))
    import httpx

    url = f"https://huggingface.co/{name}/resolve/main/config.json"
    try:
        if client is None:
            with httpx.Client(timeout=timeout, follow_redirects=True) as c:
                resp = c.get(url)
        else:
            resp = client.get(url)
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"cannot reach the Hugging Face hub for {name}: {exc}",
            hint="offline: pass --params, or add the model to the registry",
        ) from None
    if resp.status_code != 200:
        raise ConfigError(
            f"{name}: the hub answered {resp.status_code} for config.json",
            hint="check the model id (gated models need HF_TOKEN)",
        )
    cfg = resp.json()
    atomic_write_text(cache, json.dumps(cfg))
    return shape_from_hf_config(name, cfg)


def model_states(params: float, gpus: int, sharding: str, trainable: float | None = None) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU under ZeRO stage ``sharding``."""
    if sharding not in SHARDINGS:
        raise ConfigError(f"unknown sharding {sharding!r}", hint=f"one of {', '.join(SHARDINGS)}")
    t = params if trainable is None else trainable
    n = max(1, gpus)
    weights = 2 * params / (n if sharding == "full" else 1)
    grads = 2 * t / (n if sharding in ("os+g", "full") else 1)
    optim = ADAM_K * t / (n if sharding != "none" else 1)
    return weights, grads, optim


def activations(
    shape: ModelShape | None,
    seq_len: int,
    *,
    checkpointing: bool = True,
    micro_batch: int = 1,
    lm_head_chunk: int = 8192,
) -> float:
    if shape is None or not shape.layers:
        return 0.0
    tokens = seq_len * micro_batch
    per_layer = 34 * shape.hidden * tokens
    body = (2 * shape.hidden * tokens * shape.layers + per_layer) if checkpointing else per_layer * shape.layers
    logits = min(tokens, lm_head_chunk) * shape.vocab * 4  # fp32 logits of one chunk
    return float(body + logits)


def estimate(
    *,
    model: str | None = None,
    params: float | None = None,
    shape: ModelShape | None = None,
    gpus: int = 1,
    sharding: str = "full",
    lora: bool = False,
    lora_rank: int = 16,
    seq_len: int = 2048,
    checkpointing: bool = True,
    optim_cpu_offload: bool = False,
    kv_tokens: int = 0,
    micro_batch: int = 1,
) -> MemoryEstimate:
    """Per-GPU training memory; ``kv_tokens`` adds an inference KV cache for that many tokens."""
    if shape is None and model is not None:
        shape = lookup_model(model)
        if shape is None and params is None:
            raise ConfigError(
                f"{model} is not in the model registry",
                hint="pass --params N (e.g. 8e9) or --online to read its config.json",
            )
    if params is None:
        if shape is None:
            raise ConfigError("give a model or a parameter count")
        params = shape.params
    trainable = params
    if lora:
        trainable = shape.lora_params(lora_rank) if shape is not None and shape.layers else params * 0.01
    weights, grads, optim = model_states(params, gpus, sharding, trainable)
    if lora:  # adapters: bf16 copies next to the frozen base
        weights += 2 * trainable / (max(1, gpus) if sharding == "full" else 1)
    cpu_optim = 0.0
    if optim_cpu_offload:
        cpu_optim, optim = optim, 0.0
    act = activations(shape, seq_len, checkpointing=checkpointing, micro_batch=micro_batch)
    kv = shape.kv_bytes_per_token * kv_tokens if shape is not None and kv_tokens else 0
    return MemoryEstimate(
        model=model or (shape.name if shape else ""),
        params=params,
        trainable_params=trainable,
        gpus=gpus,
        sharding=sharding,
        lora=lora,
        seq_len=seq_len,
        weights=round(weights),
        gradients=round(grads),
        optimizer=round(optim),
        activations=round(act),
        kv_cache=round(kv),
        cpu_optimizer=round(cpu_optim),
        checkpointing=checkpointing,
        optim_cpu_offload=optim_cpu_offload,
        micro_batch=micro_batch,
        lora_rank=lora_rank if lora else None,
    )


def human(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


# ------------------------------------------------------------------------------------------ fit findings


def fit_findings(ctx: Any, *, preset: str | None, gpus: int | None) -> list[Finding]:
    """Memory-fit findings for a parsed config on ``gpus`` × ``preset`` (validate --preset --gpus)."""
    out: list[Finding] = []
    if preset is None:
        return out
    if preset not in presets():
        import difflib

        close = difflib.get_close_matches(preset, list(presets()), n=1)
        out.append(
            make(
                "preset-unknown",
                (1, 1),
                preset=preset,
                suggestion=f" — did you mean '{close[0]}'?" if close else "",
                presets=", ".join(presets()),
            )
        )
        return out
    p = presets()[preset]
    kind = ctx.kind
    if kind not in ("rl", "trainer", "sft"):
        return out
    tm = ("trainer", "model") if kind == "rl" else ("model",)
    name = ctx.get(tm + ("name",)) or ctx.get(("model", "name")) or "Qwen/Qwen3-0.6B"
    shape = lookup_model(name)
    name_path = tm + ("name",) if ctx.get(tm + ("name",)) else ("model", "name")
    if shape is None:
        out.append(make("memory-unknown-model", ctx.pos(name_path), name_path, model=name))
        return out
    dep = ctx.get(("deployment",)) or {}
    multi = dep.get("type") == "multi_node"
    per_node = dep.get("gpus_per_node", gpus or 8)
    if kind == "rl":
        n_train = dep.get("num_train_nodes", 1) * per_node if multi else dep.get("num_train_gpus", 1)
        n_infer = dep.get("num_infer_gpus", 1)
    else:
        n_train = dep.get("num_train_gpus", gpus or 1) if not multi else dep.get("num_train_nodes", 1) * per_node
        n_infer = 0
    colocated = kind == "rl" and gpus == 1
    if colocated:
        n_train = 1
    seq_len = ctx.get(tm + ("seq_len",)) or ctx.get(("seq_len",)) or ctx.get(("data", "seq_len")) or 2048
    lora_table = ctx.get(tm + ("lora",))
    lora = isinstance(lora_table, dict)
    rank = lora_table.get("rank", 16) if lora else 16
    model_tbl = ctx.get(tm) or {}
    offload = model_tbl.get("optim_cpu_offload", True) is True or bool(model_tbl.get("full_offload"))
    ckpt_on = model_tbl.get("ac", {}) != "None"
    est = estimate(
        shape=shape,
        gpus=n_train,
        sharding="full",
        lora=lora,
        lora_rank=rank,
        seq_len=int(seq_len),
        checkpointing=ckpt_on,
        optim_cpu_offload=offload,
    )
    have = p.memory
    need = est.total
    infer_share = 0.0
    if colocated and ctx.get(("inference",)) is not None:
        util = ctx.get(("inference", "vllm", "gpu_memory_utilization"), 0.9)
        if isinstance(util, (int, float)):
            infer_share = util * have
    budget = have - infer_share
    if need > budget:
        advice = _advice(shape, est, p, budget, lora, offload, int(seq_len), colocated)
        where = "trainer (next to vLLM's share)" if colocated else "trainer"
        out.append(
            make(
                "memory-fit",
                ctx.pos(name_path),
                name_path,
                component=where,
                need=human(need),
                preset=p.id,
                have=human(budget),
                over=human(need - budget),
                advice=advice,
            )
        )
    else:
        out.append(
            make(
                "memory-ok",
                ctx.pos(name_path),
                name_path,
                gpus=n_train,
                preset=p.id,
                train=human(need),
                have=human(budget),
            )
        )
    if kind == "rl" and ctx.get(("inference",)) is not None:
        tp = ctx.get(("inference", "vllm", "tensor_parallel_size"), 1) or 1
        util = ctx.get(("inference", "vllm", "gpu_memory_utilization"), 0.5 if colocated else 0.9)
        quant = ctx.get(("inference", "vllm", "quantization"))
        wbytes = shape.params * (1 if quant in ("fp8",) else 2) / tp
        if isinstance(util, (int, float)) and wbytes > util * have * 0.95:
            path = ("inference", "vllm", "gpu_memory_utilization")
            out.append(
                make(
                    "memory-fit",
                    ctx.pos(path),
                    path,
                    component="inference server (weights alone)",
                    need=human(wbytes),
                    preset=p.id,
                    have=human(util * have),
                    over=human(wbytes - util * have),
                    advice=f"raise tensor_parallel_size to {math.ceil(wbytes / (util * have * 0.8))}"
                    ' or use quantization = "fp8"',
                )
            )
    _ = n_infer
    return out


def _advice(
    shape: ModelShape,
    est: MemoryEstimate,
    p: Preset,
    budget: float,
    lora: bool,
    offload: bool,
    seq_len: int,
    colocated: bool,
) -> str:
    tips = []
    sharded = est.weights + est.gradients + est.optimizer
    fixed = est.activations + est.kv_cache
    if sharded > 0 and budget > fixed:
        n_needed = math.ceil(sharded * est.gpus / (budget - fixed))
        tips.append(f"train on {n_needed} GPUs (FSDP shards weights and gradients)")
    if not lora:
        tips.append("use LoRA ([trainer.model.lora] rank = 16): only adapter states are trained")
    if not offload:
        tips.append("keep optim_cpu_offload = true")
    if seq_len > 2048:
        tips.append(f"lower seq_len below {seq_len}")
    if colocated:
        tips.append("lower inference.vllm.gpu_memory_utilization")
    return "; ".join(tips) or "pick a GPU with more memory"
