"""Decode against the roofline, per weight variant of the embedded model: two roofs, the lower one binds.

Memory: a decode step of one sequence reads every weight once plus the sequence's KV cache so far, so
tokens/s <= read bandwidth / bytes per step. Compute: each variant's arithmetic rate on this machine is
its own prefill speed (the server's prompt timings for a long uncached prompt: the same kernels, a whole
prompt per step), an upper bound on the tokens/s its decode can compute. This script measures the
machine's read bandwidth (labs_lib.roofline.measure_bandwidth, all cores; a single-thread read is printed
for reference), the bytes per step of each variant (GGUF tensor bytes + f16 KV at the mean decode
context), its prefill speed, and the engine's tokens/s at concurrency 1 (1000 / median TPOT). Goal: the
default configuration (the shipped Q4_K_M, engine defaults) at >= 70% of the lower roof. Diagnostics for the default, in interleaved
rounds: one thread instead of all, flash attention forced off/on, batch sizes, two sequences at once.

    .venv/bin/python bench/decode_roofline.py [--variants Q4_K_M,F16,Q8_0,Q4_0-PURE] [--requests 5]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig, make_engine
from labs_lib.gguf_meta import read_gguf_meta
from labs_lib.kv_math import kv_cache
from labs_lib.load import prefill_tokens_per_s, run_blocking, run_load, warm_up
from labs_lib.prompts import PromptFactory, engine_tokenizer
from labs_lib.quant import ORIGINAL, build_variant, variant_path
from labs_lib.roofline import measure_bandwidth, roofline_row
from labs_lib.timing import RequestSpec

from _common import header, verdict

GOAL = 0.70


PREFILL_TOKENS = 512  # a prompt long enough that prefill runs the kernels at their best


def decode_speed(config: EngineConfig, requests: int, prompt_tokens: int, max_tokens: int, concurrency: int = 1) -> dict:
    """Median TPOT (ms) and aggregate output tokens/s of `requests` greedy requests run to max_tokens, and the
    prefill speed (prompt tokens/s by the server's own timings, uncached PREFILL_TOKENS prompts)."""
    with make_engine("llamacpp", config).start() as engine:
        endpoint = endpoint_for(engine)
        factory = PromptFactory(engine_tokenizer(engine.root_url), seed=11)
        run_blocking(warm_up(endpoint, 2))
        specs = [RequestSpec(p, max_tokens, ignore_eos=True) for p in factory.prompts(requests, prompt_tokens)]
        run = run_blocking(run_load(endpoint, specs, concurrency=concurrency, progress=False))
        prefill = run_blocking(prefill_tokens_per_s(endpoint, factory.prompts(2, PREFILL_TOKENS), extra=engine.uncached_body))
    ok = [r for r in run.records if r.ok and r.tpot_ms]
    if not ok:
        raise SystemExit(f"no request succeeded: {[r.error for r in run.records][:2]}")
    return {
        "tpot_ms": float(np.median([r.tpot_ms for r in ok])),
        "output_tok_s": run.summary.output_throughput,
        "prefill_tok_s": prefill,
    }


def tensor_mix(meta) -> str:
    """Where a variant's bytes are: MiB per tensor type, and the share of the token embedding (tied:
    Gemma reads it whole every step to compute the logits over its 262k-token vocabulary)."""
    by_type = Counter()
    for t in meta.tensors:
        by_type[t.type_name] += t.n_bytes
    embd = next((t for t in meta.tensors if t.name == "token_embd.weight"), None)
    mix = ", ".join(f"{name} {n / 2**20:.0f}" for name, n in by_type.most_common())
    return mix + (f" MiB; token_embd {embd.type_name} = {embd.n_bytes / meta.tensor_bytes:.0%} of the bytes" if embd else " MiB")


def diagnose(args, ctx: int) -> None:
    """The knobs that could hold the default back, each against the default in interleaved rounds
    (engine-to-engine noise on a shared 2-core machine is +-15%; one round would mislead)."""
    single = measure_bandwidth(buffer_mib=512, repeats=5, threads=1)
    print(
        f"single-thread read bandwidth {single.gb_per_s:.1f} GB/s (a bandwidth-bound decode would barely slow down on one thread)"
    )
    base = EngineConfig(
        model=str(variant_path(ORIGINAL)), served_model_name="gemma-3-270m", chat_template="gemma", ctx=ctx, parallel=1
    )
    cases = {
        "default (engine defaults)": (base, 1),
        "1 thread": (base.with_(threads=1), 1),
        "flash attention off": (base.with_(flash_attention=False), 1),
        "flash attention on": (base.with_(flash_attention=True), 1),
        "batch 512 / ubatch 512": (base.with_(batch_tokens=512, ubatch_tokens=512), 1),
        "2 sequences at once": (base.with_(parallel=2), 2),
    }
    tpot: dict[str, list[float]] = {k: [] for k in cases}
    agg: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for label, (config, concurrency) in cases.items():
            speed = decode_speed(config, args.requests * concurrency, args.prompt_tokens, args.max_tokens, concurrency)
            tpot[label].append(speed["tpot_ms"])
            agg[label].append(speed["output_tok_s"])
    reference = float(np.median(tpot["default (engine defaults)"]))
    print(f"diagnostics for the default ({ORIGINAL}), median of {args.rounds} interleaved rounds:")
    for label in cases:
        t = float(np.median(tpot[label]))
        print(f"  {label:<26} TPOT {t:6.1f} ms ({t / reference:.2f}x the default), aggregate {np.median(agg[label]):.1f} tok/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=f"{ORIGINAL},F16,Q8_0,Q4_0-PURE")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; each figure is the median")
    parser.add_argument("--no-diagnostics", action="store_true")
    args = parser.parse_args()
    header("Decode against the roofline, memory and compute (embedded engine, concurrency 1)")
    bw = measure_bandwidth(buffer_mib=512, repeats=7)
    print(
        f"read bandwidth {bw.gb_per_s:.1f} GB/s best, {bw.median_bytes_per_s / 1e9:.1f} median ({bw.threads} threads); "
        f"single-thread copy (read+write) {bw.copy_bytes_per_s / 1e9:.1f} GB/s"
    )
    kv_per_token = kv_cache("gemma-3-270m", 1, 1, "fp16").kv_bytes_per_token
    context = args.prompt_tokens + args.max_tokens // 2
    ctx = max(2 * (args.prompt_tokens + args.max_tokens + 64), PREFILL_TOKENS + 64)
    names = [name.strip() for name in args.variants.split(",")]
    paths = {name: build_variant(name, progress=False).path for name in names}
    tpots: dict[str, list[float]] = {name: [] for name in names}
    prefills: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):  # interleaved, so a slow spell of the machine hits every variant alike
        for name in names:
            config = EngineConfig(
                model=str(paths[name]), served_model_name="gemma-3-270m", chat_template="gemma", ctx=ctx, parallel=1
            )
            speed = decode_speed(config, args.requests, args.prompt_tokens, args.max_tokens)
            tpots[name].append(speed["tpot_ms"])
            if speed["prefill_tok_s"]:
                prefills[name].append(speed["prefill_tok_s"])
    rows = []
    for name in names:
        tpot_ms = float(np.median(tpots[name]))
        meta = read_gguf_meta(paths[name])
        compute = float(np.median(prefills[name])) if prefills[name] else None
        row = roofline_row(name, meta.tensor_bytes, kv_per_token, context, bw.bytes_per_s, tpot_ms, compute_tokens_per_s=compute)
        rows.append(row)
        print(
            f"  {name:<7} {row['bytes_per_step'] / 2**20:7.1f} MiB/step  memory roof {row['memory_bound_tokens_per_s']:6.1f} tok/s  "
            f"compute roof (prefill) {compute or float('nan'):7.1f} tok/s  -> {row['limited_by']}-bound; "
            f"measured {row['measured_tokens_per_s']:6.1f} tok/s (TPOT {tpot_ms:.1f} ms)  measured/lower roof {row['measured_vs_bound']:.2f}"
        )
        print(f"          {tensor_mix(meta)}")
    default = next(r for r in rows if r["what"] == ORIGINAL) if any(r["what"] == ORIGINAL for r in rows) else None
    if len(rows) > 1:
        fastest = max(rows, key=lambda r: r["measured_tokens_per_s"])
        smallest = min(rows, key=lambda r: r["bytes_per_step"])
        largest = max(rows, key=lambda r: r["bytes_per_step"])
        print(
            f"bytes per step {largest['what']}/{smallest['what']} = {largest['bytes_per_step'] / smallest['bytes_per_step']:.2f}x, "
            f"tokens/s {smallest['what']}/{largest['what']} = "
            f"{smallest['measured_tokens_per_s'] / largest['measured_tokens_per_s']:.2f}x "
            f"(a bandwidth-bound decode would speed up by the byte ratio); fastest: {fastest['what']}"
        )
    if default and not args.no_diagnostics:
        diagnose(args, ctx)
    if default is None:
        print(f"the default variant {ORIGINAL} was not measured")
        return verdict({f"{ORIGINAL} measured": False})
    return verdict(
        {
            f"default ({ORIGINAL}) at >= {GOAL:.0%} of its lower roof (measured {default['measured_vs_bound']:.0%})": default[
                "measured_vs_bound"
            ]
            >= GOAL
        }
    )


if __name__ == "__main__":
    sys.exit(main())
