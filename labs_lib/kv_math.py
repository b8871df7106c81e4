"""KV-cache and weight memory, exact to the byte.

Definitions (stated once; every lab uses these functions):
- Per token, a standard attention layer caches one K and one V vector per KV head:
  2 x kv_heads x head_dim values. An MLA layer (DeepSeek-V2/V3) caches one latent of
  kv_lora_rank + qk_rope_head_dim values instead, with no factor 2 (vLLM MLAAttentionSpec).
- A sliding-window layer needs only the last `sliding_window` tokens: min(seq_len, window).
- Bytes for n values of a dtype: ceil(n / block_values) x block_bytes; block formats such as
  q8_0 (34 bytes per 32 values) and q4_0 (18 per 32) carry their scales.
- Tensor parallelism splits KV heads across ranks: kv_heads_per_rank = max(1, kv_heads // tp);
  with tp > kv_heads each head is replicated. Every rank holds the whole MLA latent.
- "Per token" figures count every layer (windows ignored: the marginal cost of one more token
  of context while the context is shorter than the window).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .errors import BadInput, fraction, positive_int, positive_number
from .models import ModelSpec, load_model
from .vllm_memory import startup_overhead

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class DType:
    """A storage format: `block_bytes` bytes hold `block_values` values (scales included)."""

    name: str
    block_values: int
    block_bytes: int

    def nbytes(self, n_values: int) -> int:
        return -(-n_values // self.block_values) * self.block_bytes

    @property
    def bits_per_value(self) -> float:
        return 8 * self.block_bytes / self.block_values


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp32", 1, 4),
        DType("fp16", 1, 2),
        DType("bf16", 1, 2),
        DType("fp8", 1, 1),
        DType("int8", 1, 1),
        DType("int4", 2, 1),  # two values per byte, no scales (the articles' "0.5 bytes")
        DType("q8_0", 32, 34),  # llama.cpp blocks: 32 int8 + one fp16 scale
        DType("q4_0", 32, 18),  # 32 x 4 bits + one fp16 scale
        DType("q4_1", 32, 20),  # + fp16 min
        DType("q5_0", 32, 22),
        DType("q5_1", 32, 24),
        DType("iq4_nl", 32, 18),
    )
}
DTYPE_ALIASES = {
    "f32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "f16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "float8": "fp8",
    "i8": "int8",
    "i4": "int4",
}
# llama.cpp's names for the same formats (its --cache-type-k/v vocabulary).
LLAMACPP_NAMES = {
    "fp32": "f32",
    "fp16": "f16",
    "bf16": "bf16",
    "q8_0": "q8_0",
    "q4_0": "q4_0",
    "q4_1": "q4_1",
    "q5_0": "q5_0",
    "q5_1": "q5_1",
    "iq4_nl": "iq4_nl",
}


# model families vLLM 0.33 will not serve in float16 (vllm/config/model.py, _FLOAT16_NOT_SUPPORTED_MODELS: "Numerical
# instability"); matched against the catalogue's names and Hugging Face ids
NO_FLOAT16_FAMILIES = ("gemma-2", "gemma-3", "gemma2", "gemma3", "gemma3_text", "glm-4", "glm4")


def served_dtype(model: str | ModelSpec, compute_capability: tuple[int, int] | None) -> str:
    """The dtype vLLM 0.33 serves a bf16 checkpoint in with dtype "auto" on a card of this compute capability (None:
    a card with bf16): bf16 from 8.0 on (platforms/cuda.py, check_if_supports_dtype); below it (T4 7.5, V100 7.0)
    the first of float16, float32 the model allows (config/model.py, _resolve_auto_dtype): float32 for Gemma 2 and
    3, whose float16 vLLM refuses, so their weights and KV cache take twice the bytes."""
    if compute_capability is None or tuple(compute_capability) >= (8, 0):
        return "bf16"
    spec = load_model(model)
    names = f"{spec.name} {spec.hf_id or ''}".lower()
    return "fp32" if any(family in names for family in NO_FLOAT16_FAMILIES) else "fp16"


def dtype(name: str | DType) -> DType:
    """The DType called `name` (aliases such as f16, float16, fp8_e4m3 accepted)."""
    if isinstance(name, DType):
        return name
    key = str(name).strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise BadInput("kv/weight dtype", name, "allowed: " + ", ".join(DTYPES))
    return DTYPES[key]


# ---------------------------------------------------------------- per token, per layer


def check_tp(model: ModelSpec, tp: int) -> int:
    """Validate a tensor-parallel size the way vLLM does (heads must split evenly)."""
    tp = positive_int("tp", tp, maximum=1024)
    if model.num_q_heads % tp:
        raise BadInput("tp", tp, f"allowed: a divisor of {model.name}'s {model.num_q_heads} attention heads")
    kv = model.num_kv_heads
    if not model.is_mla and (kv % tp if kv >= tp else tp % kv):
        raise BadInput("tp", tp, f"allowed: a divisor or multiple of {model.name}'s {kv} KV heads")
    return tp


def kv_heads_per_rank(model: ModelSpec, tp: int = 1) -> int:
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token_per_layer(model: ModelSpec, kv_dtype: str | DType = "fp16", tp: int = 1) -> int:
    """Bytes one rank stores for one token in one layer."""
    dt = dtype(kv_dtype)
    if model.is_mla:
        return dt.nbytes((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0))  # both set for MLA (ModelSpec checks)
    return 2 * dt.nbytes(kv_heads_per_rank(model, tp) * (model.head_dim or 0))  # set for every non-MLA model


def tokens_held(model: ModelSpec, layer: int, seq_len: int) -> int:
    """Tokens of a seq_len-long sequence that layer `layer` must keep."""
    return min(seq_len, model.sliding_window or seq_len) if model.is_sliding(layer) else seq_len


def _layer_token_sum(model: ModelSpec, seq_len: int, round_to: int = 1) -> int:
    """Sum over layers of tokens held, each rounded up to a multiple of round_to."""
    full = model.num_full_layers * (-(-seq_len // round_to) * round_to)
    if not model.num_sliding_layers:
        return full
    held = min(seq_len, model.sliding_window or seq_len)
    return full + model.num_sliding_layers * (-(-held // round_to) * round_to)


# ---------------------------------------------------------------- sequences and batches


@dataclass(frozen=True)
class KVEstimate:
    """KV-cache bytes for `batch` sequences of `seq_len` tokens. Totals count all TP ranks."""

    model: str
    attention: str
    kv_dtype: str
    seq_len: int
    batch: int
    tp: int
    kv_bytes_per_token_per_layer: int  # one rank
    kv_bytes_per_token: int  # one token, all layers, all ranks
    kv_bytes_per_sequence: int  # one sequence, windows applied, all ranks
    kv_bytes_per_rank: int  # whole batch, one rank
    kv_bytes: int  # whole batch, all ranks
    block_size: int | None = None
    kv_bytes_paged: int | None = None  # whole blocks of block_size tokens per layer
    paged_waste_bytes: int | None = None
    max_len: int | None = None
    kv_bytes_contiguous: int | None = None  # every sequence preallocated to max_len
    contiguous_waste_bytes: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def kv_cache(
    model: str | ModelSpec,
    seq_len: int,
    batch: int = 1,
    kv_dtype: str | DType = "fp16",
    tp: int = 1,
    block_size: int | None = None,
    max_len: int | None = None,
) -> KVEstimate:
    """Exact KV bytes; with block_size, paged storage; with max_len, contiguous preallocation."""
    spec = load_model(model)
    seq_len = positive_int("seq_len", seq_len, maximum=10_000_000)
    batch = positive_int("batch", batch, maximum=1_000_000)
    dt = dtype(kv_dtype)
    tp = check_tp(spec, tp)
    per_layer = kv_bytes_per_token_per_layer(spec, dt, tp)
    per_rank_seq = per_layer * _layer_token_sum(spec, seq_len)
    fields: dict = {}
    if block_size is not None:
        block_size = positive_int("block_size", block_size, maximum=65_536)
        paged = per_layer * _layer_token_sum(spec, seq_len, block_size) * batch * tp
        fields.update(block_size=block_size, kv_bytes_paged=paged, paged_waste_bytes=paged - per_rank_seq * batch * tp)
    if max_len is not None:
        max_len = positive_int("max_len", max_len, maximum=10_000_000)
        if max_len < seq_len:
            raise BadInput("max_len", max_len, f"allowed: an integer >= seq_len ({seq_len})")
        contiguous = per_layer * _layer_token_sum(spec, max_len) * batch * tp
        fields.update(
            max_len=max_len, kv_bytes_contiguous=contiguous, contiguous_waste_bytes=contiguous - per_rank_seq * batch * tp
        )
    return KVEstimate(
        model=spec.name,
        attention=spec.attention,
        kv_dtype=dt.name,
        seq_len=seq_len,
        batch=batch,
        tp=tp,
        kv_bytes_per_token_per_layer=per_layer,
        kv_bytes_per_token=per_layer * spec.num_layers * tp,
        kv_bytes_per_sequence=per_rank_seq * tp,
        kv_bytes_per_rank=per_rank_seq * batch,
        kv_bytes=per_rank_seq * batch * tp,
        **fields,
    )


def weight_bytes(model: str | ModelSpec, weight_dtype: str | DType = "bf16") -> int:
    """Bytes of all weights stored in one format (llama.cpp keeps norms in f32: a small error)."""
    spec = load_model(model)
    if not spec.params:
        raise BadInput("model", spec.name, "allowed: a model whose parameter count is known")
    return dtype(weight_dtype).nbytes(spec.params)


# ---------------------------------------------------------------- vLLM capacity planner


def _non_negative(what: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0 <= number < float("inf"):
        raise BadInput(what, value, "allowed: a number >= 0")
    return number


VLLM_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's default gpu_memory_utilization since 0.32 (0.9 before): vllm/config/cache.py, CacheConfig."""


@dataclass(frozen=True)
class CapacityPlan:
    """vLLM's KV pool for one model on one GPU (per rank, all ranks alike)."""

    model: str
    kv_dtype: str
    block_size: int
    tp: int
    max_model_len: int
    available_kv_bytes: int  # per rank
    page_bytes: int  # one block of one layer on one rank (vLLM page_size_bytes)
    num_blocks: int  # = available // (page_bytes x layers sharing a block index: all, or one hybrid group's)
    kv_cache_tokens: int  # = int(max_concurrency x max_model_len), as vLLM 0.32/0.33 log "KV cache size"
    blocks_per_request: int  # a request at max_model_len, summed over hybrid groups
    max_concurrency: float  # = num_blocks / blocks_per_request
    max_concurrency_low: float  # at the high end of the overhead's estimate (= max_concurrency when the pool is given)
    max_concurrency_high: float  # at its low end
    fits_one_request: bool
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    requested_bytes: int | None = None  # memory vLLM may use = total x utilization
    weight_dtype: str | None = None
    weight_bytes_per_rank: int | None = None
    overhead_bytes: int | None = None  # non-torch + activation peak + CUDA graphs: the central estimate, or as given
    overhead_low_bytes: int | None = None  # the estimate's ends (vllm_memory.startup_overhead); equal when given
    overhead_high_bytes: int | None = None
    overhead_parts: dict | None = None  # vllm_memory.StartupOverhead.to_dict(), when estimated
    max_num_batched_tokens: int | None = None  # the step budget assumed (vLLM's default for the card unless given)
    max_num_seqs: int | None = None  # likewise; it sizes the dummy sampler run
    # tokens scheduled but not yet settled: 2 x max_num_batched_tokens under async scheduling (on by default on one
    # CUDA GPU), 1 x without it (CPU); a sliding-window layer reserves its window - 1 + these per request
    max_in_flight_tokens: int | None = None
    problem: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def vllm_batch_defaults(device_memory_bytes: int, device_name: str = "", *, on_cpu: bool = False, world_size: int = 1) -> dict:
    """vLLM's defaults for `vllm serve` (the OpenAI API server) when max_num_batched_tokens and max_num_seqs are not
    given, by card: what the planner assumes and lab 04 states. vLLM 0.33.0, vllm/engine/arg_utils.py,
    EngineArgs.get_batch_defaults: 160 GiB and more (B200, B300) 16,384 tokens and 1,024 sequences; 70 GiB and
    more except A100s (H100, H200) 8,192 and 1,024; other cards 2,048 and 256; CPU 2,048 and 128 per rank.
    (The LLM class uses larger token budgets; vLLM 0.32 has the same table.)"""
    if on_cpu:
        tokens, seqs = 2048 * world_size, 128 * world_size
    elif device_memory_bytes >= 160 * GIB:
        tokens, seqs = 16384, 1024
    elif device_memory_bytes >= 70 * GIB and "a100" not in device_name.lower():
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    return {
        "max_num_batched_tokens": tokens,
        "max_num_seqs": seqs,
        "source": "vLLM 0.33.0 vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OpenAI API server)",
    }


def plan_capacity(
    model: str | ModelSpec,
    max_model_len: int,
    *,
    kv_dtype: str | DType = "auto",
    block_size: int = 16,
    tp: int = 1,
    available_kv_gib: float | None = None,
    gpu: str | None = None,
    gpu_memory_gib: float | None = None,
    gpu_memory_utilization: float = VLLM_GPU_MEMORY_UTILIZATION,
    weight_dtype: str | DType = "auto",
    weight_gib: float | None = None,
    overhead_gib: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    cuda_graphs: bool = True,
    on_cpu: bool = False,
    async_scheduling: bool | None = None,
    pipeline_parallel: int = 1,
) -> CapacityPlan:
    """Blocks, KV tokens and maximum concurrency as vLLM computes them. Give the KV pool directly (available_kv_gib), or a GPU (catalogue name, or its memory in GiB) with
    gpu_memory_utilization: pool = total x utilization - weights/tp - overhead. The overhead (non-torch memory,
    activation peak, CUDA graphs; cuda_graphs=False for --enforce-eager) is estimated part by part with its low
    and high ends (vllm_memory.startup_overhead) unless overhead_gib gives it. max_num_batched_tokens and
    max_num_seqs (the profile run's sizes; the first also sizes a sliding-window layer's blocks): None takes vLLM's
    defaults for the card (vllm_batch_defaults; 2,048 and 256 without a card; a card named beside available_kv_gib
    gives its defaults). `on_cpu`: vLLM's CPU backend. A sliding-window layer reserves window - 1 +
    max_in_flight_tokens per request: max_num_batched_tokens x in_flight_batches (2 under async scheduling, on by
    default on a CUDA GPU; `async_scheduling` None takes vLLM's default, `pipeline_parallel` its stages).
    """
    spec = load_model(model)
    max_model_len = positive_int("max_model_len", max_model_len, maximum=10_000_000)
    block_size = positive_int("block_size", block_size, maximum=65_536)
    tp = check_tp(spec, tp)
    named = _card(gpu, gpu_memory_gib) if available_kv_gib is None or gpu is not None else None
    kv_dtype, weight_dtype, no_bf16 = _served_dtypes(spec, gpu if named else None, kv_dtype, weight_dtype)
    dt = dtype(kv_dtype)
    page_bytes = block_size * kv_bytes_per_token_per_layer(spec, dt, tp)
    card = named if available_kv_gib is None else None  # the card's memory sizes the pool unless the pool is given
    defaults = vllm_batch_defaults(named[1] if named else 0, named[0] if named else "", on_cpu=on_cpu)
    given = {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs}
    tokens, seqs = (positive_int(k, defaults[k] if v is None else v, maximum=10_000_000) for k, v in given.items())
    in_flight = tokens * in_flight_batches(on_cpu=on_cpu, async_scheduling=async_scheduling, pipeline_parallel=pipeline_parallel)
    extra: dict[str, Any] = {"max_num_batched_tokens": tokens, "max_num_seqs": seqs, "max_in_flight_tokens": in_flight}
    extra |= {"problem": no_bf16} if no_bf16 else {}
    if card is None:
        available = int(positive_number("available_kv_gib", available_kv_gib) * GIB)
        ends = (available, available)
    else:
        available, ends = _card_pool(
            spec, tp, card, gpu_memory_utilization, weight_dtype, weight_gib, overhead_gib, cuda_graphs, extra
        )
    num_blocks, blocks_per_request = _blocks(spec, page_bytes, available, max_model_len, block_size, in_flight)
    max_concurrency = num_blocks / blocks_per_request
    low, high = (_blocks(spec, page_bytes, pool, max_model_len, block_size, in_flight)[0] / blocks_per_request for pool in ends)
    fits = max_concurrency >= 1
    if not fits and "problem" not in extra:
        need = blocks_per_request * page_bytes * spec.num_layers
        extra["problem"] = (
            f"one request of max_model_len {max_model_len:,} needs {need / GIB:.2f} GiB of KV cache, "
            f"more than the {available / GIB:.2f} GiB available: vLLM refuses to start"
        )
    return CapacityPlan(
        model=spec.name,
        kv_dtype=dt.name,
        block_size=block_size,
        tp=tp,
        max_model_len=max_model_len,
        available_kv_bytes=available,
        page_bytes=page_bytes,
        num_blocks=num_blocks,
        kv_cache_tokens=int(max_concurrency * max_model_len),
        blocks_per_request=blocks_per_request,
        max_concurrency=round(max_concurrency, 4),
        max_concurrency_low=round(low, 4),
        max_concurrency_high=round(high, 4),
        fits_one_request=fits,
        **extra,
    )


def plan_this_card(
    model: str | ModelSpec, max_model_len: int, *, fallback_gpu: str, **plan_args: Any
) -> tuple[CapacityPlan, str]:
    """plan_capacity for the card an engine started now would compute on (NVML's memory, the catalogue's name for
    vLLM's batch defaults: an A100 is not planned as an H100), else for the catalogue GPU `fallback_gpu`; with a
    line saying which card was planned and why."""
    from .gpu import catalogued_card

    card, name, why_not = catalogued_card()
    if card is None:
        plan = plan_capacity(model, max_model_len, gpu=fallback_gpu, **plan_args)
        return plan, f"{why_not}: planned for the catalogue GPU {fallback_gpu} instead"
    memory_gib = card.memory_total_bytes / GIB
    plan = plan_capacity(model, max_model_len, gpu=name, gpu_memory_gib=memory_gib, **plan_args)
    return plan, f"found {card.name}: {memory_gib:.1f} GiB total, {card.memory_free_bytes / GIB:.1f} GiB free"


def _served_dtypes(
    spec: ModelSpec, gpu: str | None, kv_dtype: str | DType, weight_dtype: str | DType
) -> tuple[str | DType, str | DType, str | None]:
    """(KV dtype, weight dtype, a problem or None): "auto" is what vLLM serves the model in on the named card
    (served_dtype: float32 for Gemma 3 on a T4); bf16 asked of a card without it is a problem (vLLM refuses)."""
    from .catalogs import compute_capability

    capability = compute_capability(gpu) if gpu else None
    auto = served_dtype(spec, capability)
    kv, weights = (auto if str(d).lower() == "auto" else d for d in (kv_dtype, weight_dtype))
    asked_bf16 = any(not isinstance(d, DType) and dtype(d).name == "bf16" for d in (kv, weights))
    problem = None
    if asked_bf16 and capability is not None and auto != "bf16":
        problem = (
            f"the {gpu} has no bf16 (compute capability {capability[0]}.{capability[1]}): vLLM refuses dtype bfloat16 there; "
            f"with dtype auto it serves {spec.name} in {auto}"
        )
    return kv, weights, problem


def in_flight_batches(*, on_cpu: bool = False, async_scheduling: bool | None = None, pipeline_parallel: int = 1) -> int:
    """How many batches vLLM 0.33 keeps in flight (VllmConfig.max_concurrent_batches): 2 under async scheduling with
    one pipeline stage, else one per pipeline stage. Async scheduling by default (None): on for a CUDA GPU without
    pipeline parallelism, off on CPU (platforms/cpu.py) and with pipeline parallelism (the V1 model runner)."""
    pp = positive_int("pipeline_parallel", pipeline_parallel, maximum=1024)
    on = (not on_cpu and pp == 1) if async_scheduling is None else bool(async_scheduling)
    return 2 if on and pp == 1 else pp


def _card_pool(
    spec: ModelSpec,
    tp: int,
    card: tuple[str, int],
    gpu_memory_utilization: float,
    weight_dtype: str | DType,
    weight_gib: float | None,
    overhead_gib: float | None,
    cuda_graphs: bool,
    extra: dict,
) -> tuple[int, tuple[int, int]]:
    """(the KV pool per rank at the central overhead, the pools at the high and the low overhead): requested = total x
    utilization, pool = requested - weights/tp - overhead. The plan's card, weight and overhead fields go into `extra`
    (which holds the step budgets)."""
    util = fraction("gpu_memory_utilization", gpu_memory_utilization)
    requested = math.ceil(card[1] * util)
    if weight_gib is not None:
        weights = int(positive_number("weight_gib", weight_gib) * GIB) // tp
        extra["weight_dtype"] = "given"
    else:
        weights = weight_bytes(spec, weight_dtype) // tp
        extra["weight_dtype"] = dtype(weight_dtype).name
    extra.update(
        gpu=card[0],
        gpu_memory_bytes=card[1],
        gpu_memory_utilization=util,
        requested_bytes=requested,
        weight_bytes_per_rank=weights,
    )
    if overhead_gib is not None:
        overhead = low = high = int(_non_negative("overhead_gib", overhead_gib) * GIB)
    else:
        estimate = startup_overhead(
            spec,
            tp=tp,
            max_num_batched_tokens=extra["max_num_batched_tokens"],
            max_num_seqs=extra["max_num_seqs"],
            cuda_graphs=cuda_graphs,
        )
        overhead, low, high = estimate.central_bytes, estimate.low_bytes, estimate.high_bytes
        extra["overhead_parts"] = estimate.to_dict()
    available = max(0, requested - weights - overhead)
    extra.update(overhead_bytes=overhead, overhead_low_bytes=low, overhead_high_bytes=high)
    if available == 0:
        extra["problem"] = (
            f"weights ({weights / GIB:.2f} GiB per rank) + overhead ({overhead / GIB:.2f} GiB) "
            f"exceed what vLLM may use ({requested / GIB:.2f} GiB): no room for KV blocks"
        )
    return available, (max(0, requested - weights - high), max(0, requested - weights - low))


def _card(gpu: str | None, gpu_memory_gib: float | None) -> tuple[str, int]:
    """(the card's name, or "given"; its memory in bytes). A catalogue name with gpu_memory_gib: that card (its
    name decides vLLM's batch defaults: an A100 is not planned as an H100) with the memory NVML reports."""
    from .catalogs import gpu_spec

    if gpu is not None:
        spec = gpu_spec(gpu)
        memory_gib = spec["memory_gib"] if gpu_memory_gib is None else positive_number("gpu_memory_gib", gpu_memory_gib)
        return spec["name"], int(memory_gib * GIB)
    if gpu_memory_gib is not None:
        return "given", int(positive_number("gpu_memory_gib", gpu_memory_gib) * GIB)
    raise BadInput("capacity", "no memory given", "allowed: --available-kv-gib X, or --gpu NAME")


def _blocks(
    spec: ModelSpec, page_bytes: int, available: int, max_model_len: int, block_size: int, max_in_flight_tokens: int
) -> tuple[int, int]:
    """(blocks in the pool, blocks one request at max_model_len takes), as vLLM's allocator counts them."""
    full_blocks = -(-max_model_len // block_size)
    if not (spec.num_sliding_layers and spec.num_full_layers):
        return available // (page_bytes * spec.num_layers), full_blocks
    # vLLM's hybrid allocator (kv_cache_utils, 0.32/0.33): layers of each type are split into groups of
    # `group_size` layers; one block index holds one page of each of group_size layers, and a request
    # takes its blocks from every group. A sliding group needs window - 1 + in-flight tokens (+1 block).
    full, swa = spec.num_full_layers, spec.num_sliding_layers
    group_size = max(full, swa) if max(full, swa) < 1.5 * min(full, swa) else min(full, swa)
    swa_tokens = min((spec.sliding_window or max_model_len) - 1 + max_in_flight_tokens, max_model_len)
    swa_blocks = -(-swa_tokens // block_size) + 1
    num_blocks = available // (page_bytes * group_size)
    blocks_per_request = -(-full // group_size) * full_blocks + -(-swa // group_size) * swa_blocks
    return num_blocks, blocks_per_request


# ---------------------------------------------------------------- llama.cpp's own layout


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class LlamaCppCache:
    """One of llama.cpp's KV caches (full attention, or sliding window)."""

    kind: str  # "full" or "swa"
    cells: int  # per stream
    layers: int
    streams: int
    k_bytes: int
    v_bytes: int

    @property
    def kv_bytes(self) -> int:
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True)
class LlamaCppLayout:
    """What llama.cpp allocates for a context (llama-context.cpp, llama-kv-cache-iswa.cpp)."""

    model: str
    n_ctx: int  # after padding to 256 and rounding to a multiple of n_parallel
    n_ctx_seq: int  # context of one slot
    n_parallel: int
    n_ubatch: int  # effective: min(n_ctx, n_batch, n_ubatch)
    kv_unified: bool
    swa_full: bool
    type_k: str
    type_v: str
    caches: tuple[LlamaCppCache, ...]

    @property
    def kv_bytes(self) -> int:
        return sum(c.kv_bytes for c in self.caches)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["kv_bytes"] = self.kv_bytes
        out["caches"] = [dict(asdict(c), kv_bytes=c.kv_bytes) for c in self.caches]
        return out


LLAMACPP_CELL_PAD = 256  # current builds pad n_ctx, n_ctx_seq and the SWA cache to 256 cells


def llamacpp_layout(
    model: str | ModelSpec,
    ctx: int,
    parallel: int = 1,
    *,
    ubatch: int = 512,
    batch: int = 2048,
    type_k: str | DType = "f16",
    type_v: str | DType | None = None,
    kv_unified: bool = False,
    swa_full: bool = False,
) -> LlamaCppLayout:
    """The KV caches llama.cpp's server allocates for `ctx` total cells shared by `parallel` slots."""
    spec = load_model(model)
    if spec.is_mla:
        raise BadInput("model", spec.name, "allowed: a model without MLA for the llama.cpp layout")
    ctx = positive_int("ctx", ctx, maximum=1 << 31)
    parallel = positive_int("parallel", parallel, maximum=256)
    ubatch = positive_int("ubatch", ubatch, maximum=1 << 20)
    batch = positive_int("batch", batch, maximum=1 << 20)
    tk, tv = dtype(type_k), dtype(type_v if type_v is not None else type_k)
    for which, dt in (("type_k", tk), ("type_v", tv)):
        if dt.name not in LLAMACPP_NAMES:
            raise BadInput(which, dt.name, "allowed: " + ", ".join(LLAMACPP_NAMES.values()))
    n_ctx = _pad(ctx, LLAMACPP_CELL_PAD)
    if kv_unified:
        n_ctx_seq, streams, size_base = n_ctx, 1, n_ctx
    else:
        n_ctx_seq = _pad(n_ctx // parallel, LLAMACPP_CELL_PAD)
        n_ctx, streams, size_base = n_ctx_seq * parallel, parallel, n_ctx_seq
    n_batch = min(n_ctx, batch)
    n_ubatch = min(n_batch, ubatch)
    row = spec.num_kv_heads * (spec.head_dim or 0)  # n_embd_k_gqa: one cell of one layer

    def cache(kind: str, cells: int, layers: int) -> LlamaCppCache:
        count = layers * streams * cells
        return LlamaCppCache(kind, cells, layers, streams, count * tk.nbytes(row), count * tv.nbytes(row))

    caches = []
    if spec.num_full_layers:
        caches.append(cache("full", size_base, spec.num_full_layers))
    if spec.num_sliding_layers:
        if swa_full:
            size_swa = size_base
        else:
            size_swa = _pad(
                min(size_base, (spec.sliding_window or size_base) * (parallel if kv_unified else 1) + n_ubatch), LLAMACPP_CELL_PAD
            )
        caches.append(cache("swa", size_swa, spec.num_sliding_layers))
    return LlamaCppLayout(
        model=spec.name,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_parallel=parallel,
        n_ubatch=n_ubatch,
        kv_unified=kv_unified,
        swa_full=swa_full,
        type_k=LLAMACPP_NAMES[tk.name],
        type_v=LLAMACPP_NAMES[tv.name],
        caches=tuple(caches),
    )


def allocation_utilization(lengths: list[int], *, max_len: int, block_size: int = 16) -> dict[str, float]:
    """Fraction of allocated KV slots holding real tokens, for a set of sequence lengths.

    contiguous: every sequence preallocated to max_len (static batching, HF generate);
    paged: whole blocks of block_size tokens (vLLM's PagedAttention).
    """
    if not lengths:
        raise BadInput("lengths", lengths, "allowed: a non-empty list of sequence lengths")
    used = sum(lengths)
    if max(lengths) > max_len:
        raise BadInput("max_len", max_len, f"allowed: >= the longest sequence ({max(lengths)})")
    paged = sum(-(-n // block_size) * block_size for n in lengths)
    return {"contiguous": used / (len(lengths) * max_len), "paged": used / paged}
