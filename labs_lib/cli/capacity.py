"""`capacity`: vLLM's KV blocks, tokens and maximum concurrency for a model on a GPU or a KV pool."""

from __future__ import annotations

import argparse

from .common import fmt_bytes, print_json, print_table


def add_parser(sub) -> None:
    p = sub.add_parser("capacity", help="vLLM's KV blocks, tokens and maximum concurrency")
    p.add_argument("--model", required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--gpu", help="a GPU from data/gpus.json")
    where.add_argument("--available-kv-gib", help="the KV pool itself, in GiB")
    p.add_argument("--gpu-memory-utilization", default=0.92, help="vLLM 0.33's default 0.92 (0.90 in older releases)")
    p.add_argument("--max-model-len", required=True)
    p.add_argument("--kv-dtype", default="bf16")
    p.add_argument("--block-size", default=16, help="tokens per block: 16 on GPU, 128 for vLLM on CPU")
    p.add_argument("--tp", default=1)
    p.add_argument("--weight-dtype", default="bf16", help="format of the weights (default bf16)")
    p.add_argument("--weight-gib", help="weights in GiB, instead of params x weight dtype")
    p.add_argument(
        "--overhead-gib", help="non-torch + activation peak + CUDA graphs (default: estimated part by part, with its range)"
    )
    p.add_argument(
        "--max-num-batched-tokens",
        help="the step budget, which sizes sliding-window layers (default: vLLM's for the card: 8192 on H100/H200, 16384 from 160 GiB, else 2048)",
    )
    p.add_argument(
        "--max-num-seqs", help="sizes the start-up sampler run (default: vLLM's for the card: 1024 from 70 GiB, else 256)"
    )
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs, so no graph memory")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..kv_math import plan_capacity

    plan = plan_capacity(
        args.model,
        args.max_model_len,
        kv_dtype=args.kv_dtype,
        block_size=args.block_size,
        tp=args.tp,
        available_kv_gib=args.available_kv_gib,
        gpu=args.gpu,
        gpu_memory_utilization=args.gpu_memory_utilization,
        weight_dtype=args.weight_dtype,
        weight_gib=args.weight_gib,
        overhead_gib=args.overhead_gib,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        cuda_graphs=not args.enforce_eager,
    )
    if args.json:
        print_json(plan.to_dict())
        return 0
    rows = [("model", plan.model), ("KV dtype / block size / tp", f"{plan.kv_dtype} / {plan.block_size} / {plan.tp}")]
    rows.append(("max_num_batched_tokens", f"{plan.max_num_batched_tokens:,} (sizes sliding-window layers' blocks)"))
    rows.append(("max_num_seqs", f"{plan.max_num_seqs:,} (sizes the start-up sampler run)"))
    if plan.gpu:
        rows += [
            (
                "GPU",
                f"{plan.gpu}: {fmt_bytes(plan.gpu_memory_bytes)} x {plan.gpu_memory_utilization} = {fmt_bytes(plan.requested_bytes)}",
            ),
            ("weights per rank", f"{fmt_bytes(plan.weight_bytes_per_rank)} ({plan.weight_dtype})"),
            ("overhead", _overhead(plan)),
        ]
    rows += [
        ("available for KV", fmt_bytes(plan.available_kv_bytes)),
        ("page (block x layer)", fmt_bytes(plan.page_bytes)),
        ("num_blocks", f"{plan.num_blocks:,}"),
        ("kv_cache_tokens", f"{plan.kv_cache_tokens:,}"),
        (f"max_concurrency at {plan.max_model_len:,}", f"{plan.max_concurrency:.2f}x"),
    ]
    if plan.max_concurrency_low != plan.max_concurrency_high:
        rows.append(("  over the overhead's range", f"{plan.max_concurrency_low:.2f}x to {plan.max_concurrency_high:.2f}x"))
    if plan.problem:
        rows.append(("problem", plan.problem))
    print_table(rows)
    return 0


def _overhead(plan) -> str:
    """The overhead as given, or its estimate: central value, range and parts."""
    parts = plan.overhead_parts
    if not parts:
        return f"{fmt_bytes(plan.overhead_bytes)} (given)"
    text = (
        f"{fmt_bytes(plan.overhead_bytes)} estimated ({fmt_bytes(plan.overhead_low_bytes)} to {fmt_bytes(plan.overhead_high_bytes)}): "
        f"non-torch {fmt_bytes(parts['non_torch_bytes'])}, forward peak {fmt_bytes(parts['forward_peak_bytes'])}, "
        f"sampler up to {fmt_bytes(parts['sampler_peak_bytes'])}, CUDA graphs {fmt_bytes(parts['cudagraph_bytes'])}"
    )
    return text + (f"; {parts['note']}" if parts["note"] else "")
