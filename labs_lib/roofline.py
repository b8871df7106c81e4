"""The decode roofline, two roofs. Memory: one decode step reads every weight and each sequence's KV cache
once, so tokens/s <= bandwidth / bytes per step x batch. Compute: each token costs about 2 FLOPs per
weight, so tokens/s <= FLOP/s / (2 x parameters), whatever the batch. Decode runs under the lower one;
batching raises the memory roof (the weights are read once for the whole batch) until compute caps it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .catalogs import gpu_spec
from .errors import BadInput
from .gpu import catalogued_card

if TYPE_CHECKING:  # the GPU smoke check's bare image has numpy, not pandas: the claims' tables import it when called
    import pandas as pd


@dataclass(frozen=True)
class Bandwidth:
    bytes_per_s: float  # DRAM read bandwidth, best of the repeats, all cores
    median_bytes_per_s: float
    copy_bytes_per_s: float  # read + write of a single-threaded copy (STREAM "copy" convention), for reference
    buffer_bytes: int
    threads: int
    repeats: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9


CACHE_MULTIPLE = 3  # a buffer streamed over is this many times the last-level cache: nearly no pass hits it


def last_level_cache_bytes() -> int:
    """The largest CPU cache of this machine (bytes, from Linux's sysfs; 0 where unreadable). Server CPUs carry
    hundreds of MiB of L3 (this project's Intel machines report 480 MiB): a buffer or a model that fits in it is
    read from the cache, not from DRAM."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        with contextlib.suppress(OSError, ValueError):
            text = entry.read_text().strip().upper()
            sizes.append(int(text.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1))
    return max(sizes, default=0)


def streamed_buffer_mib(asked_mib: int) -> int:
    """The buffer measure_bandwidth streams over (MiB): what was asked, or CACHE_MULTIPLE x the last-level cache."""
    return max(int(asked_mib), -(-CACHE_MULTIPLE * last_level_cache_bytes() // 2**20))


def measure_bandwidth(buffer_mib: int = 512, repeats: int = 5, threads: int | None = None) -> Bandwidth:
    """DRAM read bandwidth of this machine, the traffic a decode step makes (it reads weights and KV).

    Each thread sums its share of a buffer much larger than the caches (at least CACHE_MULTIPLE x the last-level
    cache, whatever buffer_mib asks) in one numpy call, which releases the GIL and writes nothing: all the traffic
    is reads, and no per-call overhead is timed. (Copying 256-KiB chunks instead read 40% slower on this project's
    Intel machines, below what a torch decode step reaches: see docs/performance.md section 4.)"""
    threads = threads or os.cpu_count() or 1
    buffer_mib = streamed_buffer_mib(buffer_mib)
    src = np.ones(buffer_mib * 2**20 // 8, dtype=np.float64)
    parts = np.array_split(src, threads)

    def read(part: np.ndarray) -> None:
        np.add.reduce(part)

    rates = []
    for _ in range(repeats):
        workers = [threading.Thread(target=read, args=(p,)) for p in parts]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rates.append(src.nbytes / (time.perf_counter() - t))
    # one half copied onto the other: read + write of the buffer's size, without a second buffer to fault in (first
    # touch of fresh memory runs at ~0.4 GB/s on this project's VMs)
    half = src.size // 2
    copies = []
    for _ in range(max(2, repeats // 2)):
        t = time.perf_counter()
        np.copyto(src[half : 2 * half], src[:half])
        copies.append(2 * half * src.itemsize / (time.perf_counter() - t))
    return Bandwidth(max(rates), float(np.median(rates)), max(copies), src.nbytes, threads, repeats)


def decode_bandwidth(device: str, *, buffer_mib: int = 512) -> tuple[float, str]:
    """(bytes/s of the memory a decode step reads, where the figure comes from). On a GPU the weights and KV
    cache are in the card's memory: the catalogue's bandwidth for the card NVML names (data/gpus.json);
    on the CPU, or a card the catalogue lacks, this machine's DRAM read bandwidth, measured now."""
    name = catalogued_card()[1] if device != "cpu" else None  # the card the engine computes on (CUDA_VISIBLE_DEVICES)
    if name:
        return gpu_spec(name)["bandwidth_gb_per_s"] * 1e9, f"{name}'s memory bandwidth (catalogue, data/gpus.json)"
    bw = measure_bandwidth(buffer_mib=buffer_mib)
    return bw.bytes_per_s, f"this machine's DRAM read bandwidth, measured ({bw.threads} threads)"


def decode_bytes_per_step(weight_bytes: int, kv_bytes_per_token: int, context_tokens: int, batch: int = 1) -> int:
    """Bytes one decode step must read: every weight once, plus each sequence's KV cache so far."""
    return weight_bytes + batch * kv_bytes_per_token * context_tokens


def bound_tokens_per_s(bandwidth_bytes_per_s: float, bytes_per_step: int, batch: int = 1) -> float:
    """Upper bound on output tokens/s (all sequences together) when decode is bandwidth-bound."""
    return bandwidth_bytes_per_s / bytes_per_step * batch


def compute_bound_tokens_per_s(flops_per_s: float, params: float) -> float:
    """Upper bound on tokens/s (all sequences together) when decode is compute-bound: ~2 FLOPs per weight per token."""
    return flops_per_s / (2 * params)


def _attended(t: np.ndarray, window: int | None, cumulative: bool) -> np.ndarray:
    """Tokens one layer attends to at position t (a sliding layer: at most its window), or their sum over 1..t."""
    if not cumulative:
        return t if window is None else np.minimum(t, window)
    if window is None:
        return t * (t + 1) / 2
    inside = np.minimum(t, window)
    return inside * (inside + 1) / 2 + np.maximum(t - window, 0) * window


def decode_step_flops(spec, context_tokens, *, cached: bool = True) -> np.ndarray | float:
    """FLOPs of one decode step that produces the token at position `context_tokens` (1-based; an int or an array).

    Each token through the model costs ~2 x params for the matrix products (for a mixture of experts that counts
    every expert: an upper bound) plus attention's scores and weighted sum, 4 x q_heads x head_dim per attended
    token per layer (a sliding layer attends to at most its window; MLA in its absorbed form, kv_lora_rank +
    qk_rope_head_dim per head). With the KV cache the step runs one token; without it, the whole forward pass
    runs again over every token so far, not only the K/V projections."""
    if not spec.params:
        raise BadInput(f"{spec.name}: params", spec.params, "allowed: a model whose parameter count is known")
    t = np.asarray(context_tokens, dtype=float)
    per_head = spec.head_dim or (spec.kv_lora_rank + spec.qk_rope_head_dim)
    windows = [spec.sliding_window if i in spec.sliding_layers else None for i in range(spec.num_layers)]
    attended = sum(_attended(t, w, cumulative=not cached) for w in windows)
    tokens_run = 1 if cached else t
    flops = 2 * spec.params * tokens_run + 4 * spec.num_q_heads * per_head * attended
    return float(flops) if np.ndim(flops) == 0 else flops


def roofline_row(
    what: str,
    weight_bytes: int,
    kv_bytes_per_token: int,
    context_tokens: int,
    bandwidth_bytes_per_s: float,
    tpot_ms: float | None = None,
    *,
    batch: int = 1,
    compute_tokens_per_s: float | None = None,
) -> dict:
    """One configuration against its roofs, `batch` sequences decoding together: bytes per step, the memory roof,
    the compute roof when known (tokens/s), the lower of the two (`bound`), and measured tokens/s of the batch
    (batch x 1000 / TPOT ms) against it."""
    step = decode_bytes_per_step(weight_bytes, kv_bytes_per_token, context_tokens, batch)
    memory = bound_tokens_per_s(bandwidth_bytes_per_s, step, batch)
    bound = min(memory, compute_tokens_per_s) if compute_tokens_per_s else memory
    measured = batch * 1000 / tpot_ms if tpot_ms else None
    return {
        "what": what,
        "batch": batch,
        "bytes_per_step": step,
        "bandwidth_GB_s": bandwidth_bytes_per_s / 1e9,
        "memory_bound_tokens_per_s": memory,
        "compute_bound_tokens_per_s": compute_tokens_per_s,
        "bound_tokens_per_s": bound,
        "limited_by": "compute" if compute_tokens_per_s and compute_tokens_per_s < memory else "memory",
        "measured_tokens_per_s": measured,
        "measured_vs_bound": measured / bound if measured else None,
    }


def measured_rows(
    what: str,
    weight_bytes: int,
    kv_bytes_per_token: int,
    context_tokens: int,
    bandwidth_bytes_per_s: float,
    tpot_ms_by_batch: dict[int, float],
    compute_tokens_per_s: float | None = None,
) -> list[dict]:
    """roofline_row for each batch size an engine was measured at (batch -> median TPOT, ms)."""
    return [
        roofline_row(
            what,
            weight_bytes,
            kv_bytes_per_token,
            context_tokens,
            bandwidth_bytes_per_s,
            tpot,
            batch=batch,
            compute_tokens_per_s=compute_tokens_per_s,
        )
        for batch, tpot in tpot_ms_by_batch.items()
    ]


def catalogue_rows(
    model: str = "llama-3.1-8b",
    gpus: tuple[str, ...] = ("L4", "A100-80GB", "H100-SXM", "H200"),
    batches: tuple[int, ...] = (1, 64),
    context_tokens: int = 2048,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
) -> list[dict]:
    """The roofs of `model` on catalogue cards, its weights and KV cache in the dtypes given: the card's bandwidth
    and dense bf16 FLOP/s (with 8-bit weights the compute roof is at least this: fp8 tensor cores, where a card has
    them, are faster), nothing measured."""
    from .kv_math import kv_cache, weight_bytes
    from .models import load_model

    spec = load_model(model)
    dtypes = weight_dtype if weight_dtype == kv_dtype else f"{weight_dtype} weights, {kv_dtype} KV"
    rows = []
    for gpu in gpus:
        card = gpu_spec(gpu)
        # 2 FLOPs per parameter per token; a model whose parameter count is unknown gets no compute roof
        compute = compute_bound_tokens_per_s(card["bf16_dense_tflops"] * 1e12, spec.params) if spec.params else None
        for batch in batches:
            rows.append(
                roofline_row(
                    f"{gpu}, {spec.name} {dtypes}",
                    weight_bytes(spec, weight_dtype),
                    kv_cache(spec, 1, 1, kv_dtype).kv_bytes_per_token,
                    context_tokens,
                    card["bandwidth_gb_per_s"] * 1e9,
                    batch=batch,
                    compute_tokens_per_s=compute,
                )
            )
    return rows


def article_claims_table() -> pd.DataFrame:
    """The articles' claims about decode's bottleneck, judged by the two roofs of catalogue_rows (the appendix)."""
    import pandas as pd

    return pd.DataFrame(
        [
            _batch1_utilization_row(),
            *_decode_bound_rows(),
            *_kv_complexity_rows(),
            _prefill_bound_row(),
            _batch_oom_row(),
            _recompute_row(),
        ]
    )


def _roof_rows(c: dict, batches: tuple[int, ...]) -> pd.DataFrame:
    """Decode's two roofs (lab 03's section 8) for the claim's model on its cards."""
    import pandas as pd

    return pd.DataFrame(catalogue_rows(c["model"], tuple(c["gpus"]), batches=batches, context_tokens=c["context_tokens"]))


def _batch1_utilization_row() -> dict:
    """The best a batch-1 decode can use of a card's arithmetic: its speed at the memory roof over the compute roof."""
    from . import claims  # here, not at the top: claims needs pandas, which the bare GPU image lacks

    c = claims.claim("s003-batch1-under-10pct")
    roofs = _roof_rows(c, (1,))
    used = 100 * roofs.bound_tokens_per_s / roofs.compute_bound_tokens_per_s
    return claims.row(
        "s003-batch1-under-10pct",
        f"{used.min():.2f}-{used.max():.2f}",
        f"% of the compute roof at most ({claims.load_model(c['model']).name}, batch 1, {c['context_tokens']:,} tokens)",
        bool((used < c["value"]).all()),
        "at the memory roof (every byte of weights and KV read once per token at the card's full bandwidth) on "
        + ", ".join(c["gpus"])
        + "; a real decode is slower still, so its share of the arithmetic is lower",
    )


def _decode_bound_rows() -> list[dict]:
    """Which roof is lower for decode, at batch 1 and at a batch of 64, per card: memory-bound where the memory roof is."""
    from . import claims

    rows = []
    for cid in ("s003-decode-memory-bound", "s004-decode-memory-bound"):
        c = claims.claim(cid)
        roofs = _roof_rows(c, tuple(c["batches"]))
        memory = roofs.limited_by == "memory"
        rows.append(
            claims.row(
                cid,
                f"memory-bound at {int(memory.sum())} of {len(roofs)} (card, batch) points",
                f"{claims.load_model(c['model']).name}, batches {' and '.join(map(str, c['batches']))}",
                bool(memory.all()) or None,
                "on a GPU the memory roof is the lower one until the batch is large (the weights are read once per step for "
                "the whole batch); on the 2-core CPU these labs run on, lab 03 measured the compute roof as low or lower",
            )
        )
    return rows


def growth_exponent(flops_at, tokens: int) -> float:
    """How FLOPs grow with the token count around `tokens`: the slope of log FLOPs against log tokens between
    tokens/2 and 2 x tokens (2: quadratic, 1: linear, 0: constant). `flops_at` maps an array of counts to FLOPs."""
    low, high = flops_at(np.array([tokens // 2, 2 * tokens]))
    return float(np.log(high / low) / np.log(4))


def attention_equals_weights_tokens(spec) -> int:
    """The position where one cached decode step's attention FLOPs equal its matrix products' (2 x params): below
    it the cached step costs about the same at every position, above it the step grows with the position."""
    return int(np.searchsorted(_step_attention(spec, np.arange(1, 10**7, 64)), 2 * spec.params) * 64)


def _step_attention(spec, positions: np.ndarray) -> np.ndarray:
    return decode_step_flops(spec, positions) - 2 * spec.params


def _flops_at(spec, cached: bool, total: bool):
    """FLOPs against a token count n, for growth_exponent: of the step at position n, or (total) of all n steps."""
    if not total:
        return lambda n: decode_step_flops(spec, n, cached=cached)
    return lambda n: np.cumsum(decode_step_flops(spec, np.arange(1, max(n) + 1), cached=cached))[np.asarray(n) - 1]


def _kv_complexity_rows() -> list[dict]:
    """Seed 000's "O(N^2) to O(N)" (all N tokens' FLOPs) and seed 002's "O(n*d) to O(d)" (one step's), from
    decode_step_flops with and without the cache: the growth exponents at the article's length."""
    from . import claims

    rows = []
    for cid, total in (("s000-kv-n2-to-n", True), ("s002-kv-step-nd-to-d", False)):
        c = claims.claim(cid)
        spec = claims.load_model(c["model"])
        said_without, said_with = c["value"]
        without, with_cache = (growth_exponent(_flops_at(spec, cached, total), c["tokens"]) for cached in (False, True))
        holds = abs(without - said_without) <= 0.25 and abs(with_cache - said_with) <= 0.25
        turn = attention_equals_weights_tokens(spec)
        rows.append(
            claims.row(
                cid,
                f"{without:.2f} without, {with_cache:.2f} with",
                f"growth exponent ({spec.name}, around {c['tokens']:,} tokens)",
                holds,
                f"counted with decode_step_flops (lab 03): without the cache every step reruns the whole model over the "
                f"tokens so far; with it a step runs one token, and only attention still grows with the position. The "
                f"exponents the article gives hold while attention is small beside the matrix products: up to about "
                f"{turn:,} tokens for {spec.name}, where a cached step's attention equals them; beyond, the cached "
                f"{'total grows towards N^2' if total else 'step grows with n'} and the uncached one faster still",
            )
        )
    return rows


def _prefill_bound_row() -> dict:
    """Seed 000's "prefill is compute-bound": a prompt of P tokens reads the weights once for P tokens, like a batch
    of P decodes, so the roofs of catalogue_rows at batch P say which bound it meets."""
    import pandas as pd

    from . import claims

    c = claims.claim("s000-prefill-compute-bound")
    roofs = pd.DataFrame(catalogue_rows(c["model"], tuple(c["gpus"]), batches=tuple(c["prompt_tokens"]), context_tokens=1))
    compute = roofs.limited_by == "compute"
    spec = claims.load_model(c["model"])
    crossings = []
    for gpu in c["gpus"]:
        card = gpu_spec(gpu)
        crossings.append(f"{gpu} {card['bf16_dense_tflops'] * 1e12 / (card['bandwidth_gb_per_s'] * 1e9):.0f}")
    return claims.row(
        "s000-prefill-compute-bound",
        f"compute-bound at {int(compute.sum())} of {len(roofs)} (card, prompt) points",
        f"{spec.name}, prompts of {' and '.join(f'{p:,}' for p in c['prompt_tokens'])} tokens",
        bool(compute.all()) or (None if compute.any() else False),
        "a prompt's tokens share one read of the weights, so prefill meets the compute roof once the prompt has more "
        "tokens than the card has bf16 FLOP/s per byte/s of memory ("
        + ", ".join(crossings)
        + "); shorter prompts are memory-bound like decode. At the roof is the most it can use: real prefills reach "
        "a fraction of the card's peak",
    )


def _card_terms(spec, gpu: str) -> tuple[float, float, int, int]:
    """A card's bf16 FLOP/s and bytes/s, and the model's bf16 weight bytes and KV bytes per token."""
    from .kv_math import kv_cache, weight_bytes

    card = gpu_spec(gpu)
    return (
        card["bf16_dense_tflops"] * 1e12,
        card["bandwidth_gb_per_s"] * 1e9,
        weight_bytes(spec, "bf16"),
        kv_cache(spec, 1, 1, "bf16").kv_bytes_per_token,
    )


def compute_bound_batch(spec, gpu: str, context_tokens: int) -> float:
    """The smallest batch whose decode step takes as long to compute as to read (weights once, each sequence's
    KV): inf where each sequence adds more reading than arithmetic, so no batch reaches the compute roof."""
    flops_per_s, bytes_per_s, weights, kv_per_token = _card_terms(spec, gpu)
    compute_s = float(decode_step_flops(spec, context_tokens)) / flops_per_s  # per sequence
    read_s = context_tokens * kv_per_token / bytes_per_s  # per sequence, beside the weights' read
    return weights / bytes_per_s / (compute_s - read_s) if compute_s > read_s else float("inf")


def _batch_oom_row() -> dict:
    """Seed 003's "a batch large enough to use the compute runs out of memory": the batch that reaches the compute
    roof against the batch lab 01's planner fits, per card."""
    from . import claims
    from .kv_math import plan_capacity

    c = claims.claim("s003-batch-oom")
    spec = claims.load_model(c["model"])
    said = []
    outcomes = []
    for gpu in c["gpus"]:
        needed = compute_bound_batch(spec, gpu, c["context_tokens"])
        fits = plan_capacity(spec, c["context_tokens"], gpu=gpu, kv_dtype="bf16", weight_dtype="bf16").max_concurrency
        outcomes.append(needed > fits)
        said.append(f"{gpu}: fits {fits:.0f}, compute-bound {'never' if needed == float('inf') else f'from {needed:.0f}'}")
    return claims.row(
        "s003-batch-oom",
        "; ".join(said),
        f"sequences of {c['context_tokens']:,} tokens ({spec.name} bf16)",
        all(outcomes) or (None if any(outcomes) else False),
        "a larger batch shares each read of the weights, but each sequence adds its own KV cache to read and to hold: "
        "where that reading outweighs the sequence's arithmetic, no batch reaches the compute roof, and the pool "
        "(lab 01's planner, vLLM's default fraction) is full long before. At short contexts the compute roof comes "
        "first",
    )


def _recompute_row() -> dict:
    """Seed 001's "without a working cache every token recomputes the history: latency multiplies several times",
    by the two roofs: each step's time the larger of its arithmetic and its reading, with and without the cache."""
    from . import claims

    c = claims.claim("s001-recompute-multiplies")
    spec = claims.load_model(c["model"])
    positions = np.arange(c["prompt_tokens"] + 1, c["prompt_tokens"] + c["output_tokens"] + 1)
    ratios = {}
    for gpu in c["gpus"]:
        flops_per_s, bytes_per_s, weights, kv_per_token = _card_terms(spec, gpu)
        cached = np.maximum(decode_step_flops(spec, positions) / flops_per_s, (weights + positions * kv_per_token) / bytes_per_s)
        uncached = np.maximum(decode_step_flops(spec, positions, cached=False) / flops_per_s, weights / bytes_per_s)
        ratios[gpu] = float(uncached.sum() / cached.sum())
    return claims.row(
        "s001-recompute-multiplies",
        ", ".join(f"{gpu} {r:.1f}x" for gpu, r in ratios.items()),
        f"decode time without / with the cache ({spec.name}, {c['output_tokens']} tokens after {c['prompt_tokens']})",
        True if min(ratios.values()) >= c["value"] else (None if max(ratios.values()) >= c["value"] else False),
        "each uncached step reruns the model over every token so far (compute-bound once there are a few hundred); "
        "each cached step reads the weights and the cache once (memory-bound): at the roofs, the slowdown is the "
        f"ratio shown ('several times' taken as at least {c['value']}x). On a CPU, where the compute roof is far "
        "lower, it is larger: lab 02 times both in numpy",
    )
