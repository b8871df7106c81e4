"""Lab 01's build-its: the KV bytes of one sequence, a paged block allocator (the mechanism: then replayed on a
request mix against contiguous allocation), and the requests a paged pool holds at once."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..kv_math import GIB, kv_cache, plan_capacity
from ..models import ModelSpec, load_model
from ..paging import BlockAllocator
from .base import Case, Core


def kv_bytes_per_sequence(model: ModelSpec, seq_len: int, bytes_per_value: float) -> float:
    """KV bytes one sequence of seq_len tokens keeps on one device. Every layer keeps K and V for each token it
    attends to (a sliding layer: at most the last sliding_window tokens), num_kv_heads x head_dim values each; an
    MLA layer keeps one latent of kv_lora_rank + qk_rope_head_dim values per token instead."""
    if model.is_mla:
        per_token_per_layer = ((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) * bytes_per_value
    else:
        per_token_per_layer = 2 * model.num_kv_heads * (model.head_dim or 0) * bytes_per_value
    total = 0.0
    for layer in range(model.num_layers):
        held = min(seq_len, model.sliding_window or seq_len) if model.is_sliding(layer) else seq_len
        total += held * per_token_per_layer
    return total


def _kv_reference(model: ModelSpec, seq_len: int, bytes_per_value: float) -> float:
    """kv_cache()'s bytes per sequence (lab 01's calculator), for a cache of 1 or 2 bytes per value."""
    return kv_cache(model, seq_len, 1, {1: "fp8", 2: "fp16"}[int(bytes_per_value)]).kv_bytes_per_sequence


def _kv_cases() -> list[Case]:
    m = load_model
    return [
        Case((m("llama-2-7b"), 4096, 2), "Llama-2-7B (MHA), 4,096 tokens, fp16", "per token per layer: K and V, each num_kv_heads x head_dim values"),
        Case((m("llama-3.1-8b"), 4096, 2), "Llama-3.1-8B (GQA), 4,096 tokens, fp16", "GQA caches the KV heads (8), not the query heads (32)"),
        Case((m("llama-3.1-8b"), 4096, 1), "Llama-3.1-8B, fp8", "bytes_per_value scales every value"),
        Case((m("gemma-3-270m"), 256, 2), "Gemma-3-270M (MQA), 256 tokens (inside its window)", "head_dim is the config's (256), not hidden_size / num_q_heads (160)"),
        Case((m("gemma-3-270m"), 8192, 2), "Gemma-3-270M, 8,192 tokens", "a sliding layer (15 of 18 here) keeps at most sliding_window (512) tokens"),
        Case((m("deepseek-v3"), 4096, 2), "DeepSeek-V3 (MLA), 4,096 tokens", "MLA keeps one latent of kv_lora_rank + qk_rope_head_dim values per token and layer: no heads, no separate K and V"),
    ]  # fmt: skip


def max_concurrency(model: ModelSpec, pool_bytes: int, max_model_len: int, block_size: int, bytes_per_value: float) -> float:
    """Requests of max_model_len tokens a paged KV pool of pool_bytes holds at once, for a model whose every layer
    attends to the whole context: the pool is cut into blocks of block_size tokens of every layer (a partial block
    is no block), and a request takes whole blocks (its last one partly filled)."""
    block_bytes = block_size * 2 * model.num_kv_heads * (model.head_dim or 0) * bytes_per_value * model.num_layers
    num_blocks = pool_bytes // block_bytes
    blocks_per_request = math.ceil(max_model_len / block_size)
    return num_blocks / blocks_per_request


def _concurrency_reference(
    model: ModelSpec, pool_bytes: int, max_model_len: int, block_size: int, bytes_per_value: float
) -> float:
    """plan_capacity()'s blocks in the pool / blocks per request (lab 01's planner, vLLM's count), unrounded."""
    kv_dtype = {1: "fp8", 2: "bf16"}[int(bytes_per_value)]
    plan = plan_capacity(model, max_model_len, kv_dtype=kv_dtype, block_size=block_size, available_kv_gib=pool_bytes / GIB)
    return plan.num_blocks / plan.blocks_per_request


def _concurrency_cases() -> list[Case]:
    llama3, llama2 = load_model("llama-3.1-8b"), load_model("llama-2-7b")
    return [
        Case((llama3, 8 * GIB, 8192, 16, 2), "Llama-3.1-8B, an 8 GiB pool, 8,192 tokens, blocks of 16, bf16", "blocks in the pool (one block: block_size tokens of every layer's K and V) / blocks one request takes"),
        Case((llama3, 8 * GIB, 8200, 16, 2), "the same at 8,200 tokens (not a multiple of 16)", "a request's last, partly filled block is a whole block: ceil(max_model_len / block_size), not tokens / max_model_len"),
        Case((llama3, 8 * GIB, 8192, 16, 1), "the same in fp8", "one byte per value: twice the blocks in the same pool"),
        Case((llama3, 8 * GIB + 100 * 1024, 8192, 16, 2), "a pool 100 KiB over 8 GiB (a block here is 2 MiB)", "a partial block in the pool is no block: pool_bytes // block_bytes"),
        Case((llama2, 8 * GIB, 4096, 16, 2), "Llama-2-7B (MHA: 32 KV heads), 4,096 tokens", "the KV heads set the block's bytes: MHA caches as many as it has query heads"),
        Case((llama3, GIB // 2, 8192, 16, 2), "a 0.5 GiB pool", "under one request (vLLM refuses to start), the ratio is still what it is: 0.5"),
        Case((llama3, 8 * GIB, 8200, 32, 2), "8,200 tokens in blocks of 32", "a bigger block wastes more of the last one: 257 blocks per request, not 256.25"),
    ]  # fmt: skip


def _drive_allocator(allocator_class: Callable, args: tuple) -> str:
    """Build a pool of the class (args: num_blocks, block_size, the operations) and play the operations on it:
    each one's answer, then every request's blocks and tokens and the free blocks; a block held twice, held and
    free at once, or lost from the pool is named."""
    num_blocks, block_size, operations = args
    pool = allocator_class(num_blocks, block_size)
    said = []
    for kind, rid, *tokens in operations:
        if kind == "allocate":
            line = f"allocate {rid} ({tokens[0]} tokens): {pool.allocate(rid, tokens[0])}"
        elif kind == "append":
            line = f"append to {rid}: {pool.append_token(rid)}"
        else:
            pool.free(rid)
            line = f"free {rid}"
        tables = {r: list(t) for r, t in pool.block_tables.items()}
        held = [b for t in tables.values() for b in t]
        state = ", ".join(f"{r}: {len(t)} blocks {pool.num_tokens.get(r)} tokens" for r, t in sorted(tables.items()))
        line += f" -> {state or 'no request'}; {len(pool.free_blocks)} free"
        if len(set(held)) < len(held) or set(held) & set(pool.free_blocks):
            line += "; a block given twice"
        elif len(held) + len(pool.free_blocks) != num_blocks:
            line += f"; {num_blocks - len(held) - len(pool.free_blocks)} blocks lost"
        said.append(line)
    return " | ".join(said)


def _allocator_cases() -> list[Case]:
    return [
        Case((8, 16, (("allocate", 1, 20),)), "a 20-token prompt in blocks of 16", "a request takes ceil(tokens / block_size) blocks: a partly filled block is a whole block (20 tokens: 2)"),
        Case((8, 16, (("allocate", 1, 20), *(("append", 1),) * 13)), "20 tokens, then 13 generated", "a new block only when the last one is full: 32 tokens still fit 2 blocks, the 33rd takes a third"),
        Case((8, 16, (("allocate", 1, 32), ("append", 1))), "32 tokens (2 full blocks), then one more", "num_tokens % block_size == 0 means the last block is full: the next token needs a new one"),
        Case((5, 16, (("allocate", 1, 64), ("allocate", 2, 40))), "a pool of 5 blocks: 4 taken, a request needing 3 arrives", "too few free blocks: allocate returns False and takes nothing (no half-admitted request)"),
        Case((5, 16, (("allocate", 1, 64), ("free", 1), ("allocate", 2, 80))), "a request freed, then a bigger one", "free returns every block of the request to the pool, for the next one"),
        Case((2, 16, (("allocate", 1, 32), ("append", 1))), "a full pool and a token that needs a block", "no free block: append_token returns False and changes nothing (the scheduler then preempts)"),
        Case((6, 16, (("allocate", 1, 16), ("allocate", 2, 16), ("append", 1), ("append", 2), ("free", 1), ("allocate", 3, 40))), "two requests growing side by side, one freed", "each request grows its own block table, and no block is ever in two tables or both held and free"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "kv_bytes_per_sequence": Core(_kv_reference, _kv_cases, kv_bytes_per_sequence, "from labs_lib.models import ModelSpec"),
    "BlockAllocator": Core(BlockAllocator, _allocator_cases, BlockAllocator, "import math", _drive_allocator),
    "max_concurrency": Core(
        _concurrency_reference, _concurrency_cases, max_concurrency, "import math\n\nfrom labs_lib.models import ModelSpec"
    ),
}
