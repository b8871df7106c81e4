"""`kv`: exact KV-cache bytes for a model (ideal math, or llama.cpp's allocation)."""

from __future__ import annotations

import argparse

from ..errors import BadInput
from .common import fmt_bytes, print_json, print_table


def add_parser(sub) -> None:
    p = sub.add_parser("kv", help="exact KV-cache bytes for a model")
    p.add_argument("--model", required=True, help="catalogue id or alias, config.json, or .gguf")
    p.add_argument("--seq-len", help="tokens of context per sequence")
    p.add_argument("--batch", default=1, help="concurrent sequences (default 1)")
    p.add_argument("--kv-dtype", help="fp16 (default), bf16, fp32, fp8, int8, int4, q8_0, q4_0, …")
    p.add_argument("--tp", default=1, help="tensor-parallel ranks (default 1)")
    p.add_argument("--block-size", help="also report paged storage in blocks of this many tokens")
    p.add_argument("--max-len", help="also report contiguous preallocation to this length")
    p.add_argument("--engine", choices=list(ALLOCATIONS), default="ideal", help="ideal math, or llama.cpp's allocation")
    p.add_argument("--ctx", help="llamacpp: total context cells (n_ctx)")
    p.add_argument("--parallel", default=1, help="llamacpp: slots (n_parallel)")
    p.add_argument("--ubatch", default=512, help="llamacpp: n_ubatch (default 512)")
    p.add_argument("--batch-size", default=2048, help="llamacpp: n_batch (default 2048)")
    p.add_argument("--kv-dtype-v", help="llamacpp: V cache type when it differs from K")
    p.add_argument("--kv-unified", action="store_true", help="llamacpp: one KV stream shared by all slots")
    p.add_argument("--swa-full", action="store_true", help="llamacpp: full-size sliding-window cache")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _ideal(args: argparse.Namespace) -> int:
    """The bytes the math gives for this model, length, batch, dtype and TP (kv_math.kv_cache)."""
    from ..kv_math import kv_cache

    if args.seq_len is None:
        raise BadInput("--seq-len", None, "allowed: the tokens of context per sequence, e.g. --seq-len 2048")
    est = kv_cache(args.model, args.seq_len, args.batch, args.kv_dtype or "fp16", args.tp, args.block_size, args.max_len)
    if args.json:
        print_json(est.to_dict())
        return 0
    rows = [
        ("model", f"{est.model} ({est.attention})"),
        ("KV dtype", est.kv_dtype),
        ("seq_len x batch", f"{est.seq_len:,} x {est.batch:,}"),
        ("tensor parallel", est.tp),
        ("per token per layer (1 rank)", fmt_bytes(est.kv_bytes_per_token_per_layer)),
        ("per token (all layers)", fmt_bytes(est.kv_bytes_per_token)),
        ("per sequence", fmt_bytes(est.kv_bytes_per_sequence)),
        ("per rank (whole batch)", fmt_bytes(est.kv_bytes_per_rank)),
        ("kv_bytes (whole batch)", fmt_bytes(est.kv_bytes)),
    ]
    if est.block_size:
        rows += [
            (f"paged, block {est.block_size}", fmt_bytes(est.kv_bytes_paged)),
            ("paged waste", fmt_bytes(est.paged_waste_bytes)),
        ]
    if est.max_len:
        rows += [
            (f"contiguous to {est.max_len:,}", fmt_bytes(est.kv_bytes_contiguous)),
            ("contiguous waste", fmt_bytes(est.contiguous_waste_bytes)),
        ]
    print_table(rows)
    return 0


def _llamacpp(args: argparse.Namespace) -> int:
    """The cells llama.cpp allocates for this context and slots (kv_math.llamacpp_layout)."""
    from ..kv_math import llamacpp_layout

    if args.ctx is None:
        raise BadInput(
            "--ctx", None, "allowed: the engine's total context in cells, e.g. --ctx 4096 (needed with --engine llamacpp)"
        )
    layout = llamacpp_layout(
        args.model,
        args.ctx,
        args.parallel,
        ubatch=args.ubatch,
        batch=args.batch_size,
        type_k=args.kv_dtype or "f16",
        type_v=args.kv_dtype_v,
        kv_unified=args.kv_unified,
        swa_full=args.swa_full,
    )
    if args.json:
        print_json(layout.to_dict())
        return 0
    print_table(
        [
            ("model", layout.model),
            ("n_ctx (padded)", f"{layout.n_ctx:,}"),
            ("n_ctx per slot", f"{layout.n_ctx_seq:,}"),
            ("slots", layout.n_parallel),
            ("n_ubatch", layout.n_ubatch),
            ("K / V type", f"{layout.type_k} / {layout.type_v}"),
        ]
    )
    for c in layout.caches:
        print(
            f"  {c.kind:<4} cache: {c.cells:,} cells x {c.layers} layers x {c.streams} streams = {fmt_bytes(c.kv_bytes)} "
            f"(K {c.k_bytes / 2**20:.2f} MiB, V {c.v_bytes / 2**20:.2f} MiB)"
        )
    print(f"kv_bytes  {fmt_bytes(layout.kv_bytes)}")
    return 0


# --engine: whose rules size the cache (the math's, or llama.cpp's allocator)
ALLOCATIONS = {"ideal": _ideal, "llamacpp": _llamacpp}


def run(args: argparse.Namespace) -> int:
    return ALLOCATIONS[args.engine](args)
