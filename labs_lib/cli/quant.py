"""`quant`: compare weight variants and KV cache precisions: memory, speed, quality."""

from __future__ import annotations

from dataclasses import replace


def run(args) -> int:
    import pandas as pd

    from ..errors import BadInput, positive_int
    from ..load import run_blocking
    from ..quant import VARIANTS, check_variant
    from ..quant_compare import QuantSettings, check_kv_dtypes, compare_variants

    variants = [v.strip() for v in str(args.variants).split(",") if v.strip()]
    kv = [k.strip() for k in str(args.kv_dtypes).split(",") if k.strip()]
    if not variants:
        raise BadInput("--variants", args.variants, "allowed: comma-separated names among " + ", ".join(VARIANTS))
    settings = QuantSettings.quick() if args.quick else QuantSettings()
    if args.eval_tokens:
        settings = replace(settings, eval_tokens=positive_int("--eval-tokens", args.eval_tokens, minimum=32, maximum=1024))
    for v in variants:
        check_variant(v)
    kv = check_kv_dtypes(kv)  # every value checked before the first variant is built (seconds each)
    df = run_blocking(compare_variants(variants, kv, settings=settings, progress=not args.json))
    if args.json:
        print(df.to_json(orient="records", indent=2))
        return 0
    cols = [
        "variant",
        "kv_dtype",
        "file_MiB",
        "bits_per_weight",
        "kv_MiB",
        "rss_MiB",
        "load_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
        *[c for c in df.columns if c.startswith("tok_s_c")],
        "perplexity",
        "delta_nll",
        "delta_nll_ci_low",
        "delta_nll_ci_high",
        "kl",
        "kl_ci_low",
        "kl_ci_high",
        "top1_agreement",
        "greedy_identical_prefix",
    ]
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(df[cols].round(3).to_string(index=False))
    print(
        f"quality on {settings.eval_tokens} tokens of data/texts/eval.txt; agreement vs {df['reference'].iloc[0]} "
        "(the shipped model), with 95% block-bootstrap intervals; kl is KL(reference || variant) in nats/token over "
        "the top 20 tokens (a lower bound)"
    )
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("quant", help="compare weight variants and KV cache precisions: memory, speed, quality")
    p.add_argument(
        "--variants",
        default="F16,Q8_0,Q4_0",
        help="comma-separated: Q4_K_M (the shipped reference), F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, or Q8_0-PURE … Q4_0-PURE",
    )
    p.add_argument("--kv-dtypes", default="f16", help="comma-separated KV cache types: f16, q8_0, q4_0")
    p.add_argument("--eval-tokens", help="tokens of the evaluation text to score, 32-1024 (default 768; quick 128)")
    p.add_argument("--quick", action="store_true", help="small sizes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
