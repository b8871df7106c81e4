"""`python -m labs_lib …`: the command line users and tests share.

Bad input exits 2 with one line naming the value and what is allowed.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from .errors import BadInput, LabsError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{int(n):,} B ({n / size:,.2f} {unit})"
    return f"{int(n):,} B"


def print_table(rows: list[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=str))


# ---------------------------------------------------------------- models, kv, capacity


def cmd_models(args: argparse.Namespace) -> int:
    from .models import catalogue, from_catalogue

    rows = []
    for hf_id, entry in catalogue().items():
        spec = from_catalogue(hf_id)
        rows.append({"id": hf_id, "aliases": entry["aliases"], "attention": spec.attention, "layers": spec.num_layers,
                     "q_heads": spec.num_q_heads, "kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
                     "sliding": f"{spec.num_sliding_layers}x{spec.sliding_window}" if spec.sliding_window else "",
                     "params_b": round(spec.params / 1e9, 2) if spec.params else None})
    if args.json:
        print_json(rows)
        return 0
    print(f"{'id':<34} {'attention':<9} {'layers':>6} {'q/kv heads':>10} {'head_dim':>8} {'sliding':>8} {'params':>8}  aliases")
    for r in rows:
        print(f"{r['id']:<34} {r['attention']:<9} {r['layers']:>6} {str(r['q_heads']) + '/' + str(r['kv_heads']):>10} "
              f"{str(r['head_dim'] or '-'):>8} {r['sliding']:>8} {str(r['params_b']) + 'B':>8}  {', '.join(r['aliases'])}")
    return 0


def cmd_kv(args: argparse.Namespace) -> int:
    from .kv_math import kv_cache, llamacpp_layout

    if args.engine == "llamacpp":
        if args.ctx is None:
            raise BadInput("--ctx", None, "allowed: the engine's total context in cells, e.g. --ctx 4096 (needed with --engine llamacpp)")
        layout = llamacpp_layout(args.model, args.ctx, args.parallel, ubatch=args.ubatch, batch=args.batch_size,
                                 type_k=args.kv_dtype or "f16", type_v=args.kv_dtype_v, kv_unified=args.kv_unified,
                                 swa_full=args.swa_full)
        if args.json:
            print_json(layout.to_dict())
            return 0
        print_table([("model", layout.model), ("n_ctx (padded)", f"{layout.n_ctx:,}"), ("n_ctx per slot", f"{layout.n_ctx_seq:,}"),
                     ("slots", layout.n_parallel), ("n_ubatch", layout.n_ubatch), ("K / V type", f"{layout.type_k} / {layout.type_v}")])
        for c in layout.caches:
            print(f"  {c.kind:<4} cache: {c.cells:,} cells x {c.layers} layers x {c.streams} streams = {fmt_bytes(c.kv_bytes)} "
                  f"(K {c.k_bytes / 2**20:.2f} MiB, V {c.v_bytes / 2**20:.2f} MiB)")
        print(f"kv_bytes  {fmt_bytes(layout.kv_bytes)}")
        return 0
    if args.seq_len is None:
        raise BadInput("--seq-len", None, "allowed: the tokens of context per sequence, e.g. --seq-len 2048")
    est = kv_cache(args.model, args.seq_len, args.batch, args.kv_dtype or "fp16", args.tp, args.block_size, args.max_len)
    if args.json:
        print_json(est.to_dict())
        return 0
    rows = [("model", f"{est.model} ({est.attention})"), ("KV dtype", est.kv_dtype),
            ("seq_len x batch", f"{est.seq_len:,} x {est.batch:,}"), ("tensor parallel", est.tp),
            ("per token per layer (1 rank)", fmt_bytes(est.kv_bytes_per_token_per_layer)),
            ("per token (all layers)", fmt_bytes(est.kv_bytes_per_token)),
            ("per sequence", fmt_bytes(est.kv_bytes_per_sequence)),
            ("per rank (whole batch)", fmt_bytes(est.kv_bytes_per_rank)), ("kv_bytes (whole batch)", fmt_bytes(est.kv_bytes))]
    if est.block_size:
        rows += [(f"paged, block {est.block_size}", fmt_bytes(est.kv_bytes_paged)), ("paged waste", fmt_bytes(est.paged_waste_bytes))]
    if est.max_len:
        rows += [(f"contiguous to {est.max_len:,}", fmt_bytes(est.kv_bytes_contiguous)),
                 ("contiguous waste", fmt_bytes(est.contiguous_waste_bytes))]
    print_table(rows)
    return 0


def cmd_capacity(args: argparse.Namespace) -> int:
    from .kv_math import plan_capacity

    plan = plan_capacity(
        args.model, args.max_model_len, kv_dtype=args.kv_dtype, block_size=args.block_size, tp=args.tp,
        available_kv_gib=args.available_kv_gib, gpu=args.gpu, gpu_memory_utilization=args.gpu_memory_utilization,
        weight_dtype=args.weight_dtype, weight_gib=args.weight_gib, overhead_gib=args.overhead_gib,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    if args.json:
        print_json(plan.to_dict())
        return 0
    rows = [("model", plan.model), ("KV dtype / block size / tp", f"{plan.kv_dtype} / {plan.block_size} / {plan.tp}")]
    if plan.gpu:
        rows += [("GPU", f"{plan.gpu}: {fmt_bytes(plan.gpu_memory_bytes)} x {plan.gpu_memory_utilization} = {fmt_bytes(plan.requested_bytes)}"),
                 ("weights per rank", f"{fmt_bytes(plan.weight_bytes_per_rank)} ({plan.weight_dtype})"),
                 ("overhead (estimate)", fmt_bytes(plan.overhead_bytes))]
    rows += [("available for KV", fmt_bytes(plan.available_kv_bytes)), ("page (block x layer)", fmt_bytes(plan.page_bytes)),
             ("num_blocks", f"{plan.num_blocks:,}"), ("kv_cache_tokens", f"{plan.kv_cache_tokens:,}"),
             (f"max_concurrency at {plan.max_model_len:,}", f"{plan.max_concurrency:.2f}x")]
    if plan.sliding_window_estimate:
        rows.append(("note", "sliding-window layers: concurrency follows vLLM's SlidingWindowSpec; its hybrid allocator may report other token counts"))
    if plan.problem:
        rows.append(("problem", plan.problem))
    print_table(rows)
    return 0


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m labs_lib", description="LLM Inference Labs command line.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("models", help="list the model catalogue")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("kv", help="exact KV-cache bytes for a model")
    p.add_argument("--model", required=True, help="catalogue id or alias, config.json, or .gguf")
    p.add_argument("--seq-len", help="tokens of context per sequence")
    p.add_argument("--batch", default=1, help="concurrent sequences (default 1)")
    p.add_argument("--kv-dtype", help="fp16 (default), bf16, fp32, fp8, int8, int4, q8_0, q4_0, …")
    p.add_argument("--tp", default=1, help="tensor-parallel ranks (default 1)")
    p.add_argument("--block-size", help="also report paged storage in blocks of this many tokens")
    p.add_argument("--max-len", help="also report contiguous preallocation to this length")
    p.add_argument("--engine", choices=["ideal", "llamacpp"], default="ideal", help="ideal math, or llama.cpp's allocation")
    p.add_argument("--ctx", help="llamacpp: total context cells (n_ctx)")
    p.add_argument("--parallel", default=1, help="llamacpp: slots (n_parallel)")
    p.add_argument("--ubatch", default=512, help="llamacpp: n_ubatch (default 512)")
    p.add_argument("--batch-size", default=2048, help="llamacpp: n_batch (default 2048)")
    p.add_argument("--kv-dtype-v", help="llamacpp: V cache type when it differs from K")
    p.add_argument("--kv-unified", action="store_true", help="llamacpp: one KV stream shared by all slots")
    p.add_argument("--swa-full", action="store_true", help="llamacpp: full-size sliding-window cache")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_kv)

    p = sub.add_parser("capacity", help="vLLM's KV blocks, tokens and maximum concurrency")
    p.add_argument("--model", required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--gpu", help="a GPU from data/gpus.json")
    where.add_argument("--available-kv-gib", help="the KV pool itself, in GiB")
    p.add_argument("--gpu-memory-utilization", default=0.9)
    p.add_argument("--max-model-len", required=True)
    p.add_argument("--kv-dtype", default="bf16")
    p.add_argument("--block-size", default=16)
    p.add_argument("--tp", default=1)
    p.add_argument("--weight-dtype", default="bf16", help="format of the weights (default bf16)")
    p.add_argument("--weight-gib", help="weights in GiB, instead of params x weight dtype")
    p.add_argument("--overhead-gib", default=2.0, help="activations + non-torch + CUDA graphs (default 2.0, an estimate)")
    p.add_argument("--max-num-batched-tokens", default=2048, help="for sliding-window layers (default 2048)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_capacity)

    from . import bench, doctor, quant_compare, runner, serve, sweep

    runner.add_parser(sub)
    serve.add_parser(sub)
    bench.add_parser(sub)
    sweep.add_parser(sub)
    quant_compare.add_parser(sub)
    doctor.add_parser(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {message}", file=file or sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _one_line_warning  # a user reads what happened, not which source line said so
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LabsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
