"""Lab 04's comparison: each weight variant (and KV cache precision) measured for memory, speed and quality."""

from __future__ import annotations

from dataclasses import dataclass, replace

import httpx
import pandas as pd

from .endpoints import endpoint_for
from .engine import EngineConfig, make_engine
from .errors import BadInput, positive_int
from .gguf_meta import read_gguf_meta
from .load import run_load, warm_up
from .prompts import PromptFactory, corpus_text, engine_tokenizer
from .quality import (
    Scores,
    agreement,
    greedy_tokens,
    identical_prefix,
    score_llamacpp,
    score_vllm,
    text_tokens,
)
from .quant import ORIGINAL, check_variant, variant_path
from .timing import RequestSpec

KV_DTYPES = ("f16", "q8_0", "q4_0")


@dataclass(frozen=True)
class QuantSettings:
    eval_tokens: int = 256  # tokens of data/texts/eval.txt scored
    greedy_tokens: int = 64  # greedy continuation compared with the reference
    speed_requests: int = 6  # requests per concurrency level
    concurrencies: tuple[int, ...] = (1, 4)
    prompt_tokens: int = 64
    max_tokens: int = 48

    @classmethod
    def quick(cls) -> QuantSettings:
        return cls(eval_tokens=48, greedy_tokens=24, speed_requests=4, concurrencies=(1, 4), prompt_tokens=32, max_tokens=24)

    def ctx(self) -> int:
        per_slot = max(self.eval_tokens + 32, self.prompt_tokens + self.max_tokens + 48, self.greedy_tokens + 48)
        return max(self.concurrencies) * per_slot


def _tokens(engine, text: str, limit: int) -> tuple[int | None, list[int]]:
    if engine.kind == "llamacpp":
        return text_tokens(engine.root_url, text, limit, endpoint_for(engine).headers())
    resp = httpx.post(f"{engine.root_url}/tokenize", json={"model": engine.model_id, "prompt": text}, timeout=60)
    resp.raise_for_status()
    ids = resp.json()["tokens"]
    return ids[0], ids[1 : limit + 1]


async def measure_config(kind: str, config: EngineConfig, label: dict, settings: QuantSettings, *, progress: bool = False
                         ) -> tuple[dict, Scores, list[int]]:
    """Start one configuration; measure load, memory, KV, speed and quality; stop. Returns (row, scores, greedy ids)."""
    text = corpus_text("eval.txt")
    with make_engine(kind, config) as engine:
        headers = endpoint_for(engine).headers()
        row = {**label, "load_s": round(engine.started_s, 2), "rss_MiB": round((engine.resident_bytes() or 0) / 2**20, 1)}
        if kind == "llamacpp":
            row["kv_MiB"] = round(engine.allocation.kv_mib, 2)
        bos, ids = _tokens(engine, text, settings.eval_tokens)
        scores = (score_llamacpp(engine.root_url, bos, ids, headers=headers) if kind == "llamacpp"
                  else score_vllm(engine.base_url, engine.model_id, bos, ids, headers=headers))
        greedy = greedy_tokens(engine.root_url, [bos, *ids[:16]], settings.greedy_tokens, headers) if kind == "llamacpp" else []
        endpoint = endpoint_for(engine)
        factory = PromptFactory(engine_tokenizer(engine.root_url, headers) if kind == "llamacpp" else None, seed=7)
        await warm_up(endpoint)
        for c in settings.concurrencies:
            specs = [RequestSpec(p, settings.max_tokens, ignore_eos=True) for p in factory.prompts(settings.speed_requests, settings.prompt_tokens)]
            s = (await run_load(endpoint, specs, concurrency=c, progress=progress, desc=f"{label} c={c}")).summary
            if c == settings.concurrencies[0]:
                row |= {"ttft_p50_ms": s["p50_ttft_ms"], "tpot_p50_ms": s["p50_tpot_ms"]}
            row[f"tok_s_c{c}"] = s["output_throughput"]
        row |= {"nll": scores.nll, "perplexity": scores.perplexity, "top1_accuracy": scores.top1_accuracy}
    return row, scores, greedy


async def compare_variants(variants: list[str], kv_dtypes: list[str] = ("f16",), *, reference: str = "F16", kv_variant: str = ORIGINAL,
                           settings: QuantSettings | None = None, progress: bool = True) -> pd.DataFrame:
    """Every weight variant with an f16 KV cache, then kv_variant with each quantized KV cache (flash attention on).
    Agreement columns compare each row with `reference` (f16 KV), KV rows with kv_variant at f16."""
    from tqdm.auto import tqdm

    settings = settings or QuantSettings()
    variants = [check_variant(v) for v in variants]
    reference = check_variant(reference)
    kv_dtypes = [str(k).lower() for k in kv_dtypes]
    for k in kv_dtypes:
        if k not in KV_DTYPES:
            raise BadInput("kv dtype", k, "allowed: " + ", ".join(KV_DTYPES))
    runs = [(v, "f16") for v in dict.fromkeys([reference, *variants])]
    runs += [(check_variant(kv_variant), k) for k in kv_dtypes if k != "f16"]
    if (check_variant(kv_variant), "f16") not in runs and any(k != "f16" for k in kv_dtypes):
        runs.insert(1, (check_variant(kv_variant), "f16"))
    results: dict[tuple[str, str], tuple[dict, Scores, list[int]]] = {}
    for variant, kv in tqdm(runs, desc="variants", unit="config", disable=not progress):
        path = variant_path(variant)
        meta = read_gguf_meta(path)
        label = {"variant": variant, "kv_dtype": kv, "file_MiB": round(path.stat().st_size / 2**20, 1),
                 "bits_per_weight": round(8 * meta.tensor_bytes / meta.n_params, 3)}
        config = EngineConfig(model=str(path), served_model_name="gemma-3-270m", chat_template="gemma", ctx=settings.ctx(),
                              parallel=max(settings.concurrencies), kv_cache_dtype=kv, flash_attention=True if kv != "f16" else None)
        results[(variant, kv)] = await measure_config("llamacpp", config, label, settings)
    rows = []
    for (_, kv), (row, scores, greedy) in results.items():
        ref_key = (reference, "f16") if kv == "f16" else (check_variant(kv_variant), "f16")
        ref_row, ref_scores, ref_greedy = results[ref_key]
        rows.append({**row, **agreement(ref_scores, scores), "greedy_identical_prefix": identical_prefix(ref_greedy, greedy),
                     "reference": f"{ref_key[0]}/{ref_key[1]}"})
    return pd.DataFrame(rows)


async def compare_models(models: list[dict], *, settings: QuantSettings | None = None, progress: bool = True) -> pd.DataFrame:
    """The same measurements through vLLM: each entry is EngineConfig fields, e.g.
    {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq"} or {"model": …, "kv_cache_dtype": "fp8"}.
    Agreement columns compare every row with the first."""
    from tqdm.auto import tqdm

    settings = settings or QuantSettings()
    results = []
    for fields in tqdm(models, desc="models", unit="config", disable=not progress):
        config = EngineConfig(**{"max_model_len": 4096, "parallel": max(settings.concurrencies) * 4, **fields})
        label = {"model": config.model, "quantization": config.quantization or "-", "kv_dtype": config.kv_cache_dtype}
        results.append(await measure_config("vllm", config, label, settings))
    ref_scores = results[0][1]
    return pd.DataFrame([{**row, **agreement(ref_scores, scores)} for row, scores, _ in results])


def cmd_quant(args) -> int:
    from .load import run_blocking
    from .quant import variants_table

    variants = [v.strip() for v in str(args.variants).split(",") if v.strip()]
    kv = [k.strip() for k in str(args.kv_dtypes).split(",") if k.strip()]
    if not variants:
        raise BadInput("--variants", args.variants, "allowed: comma-separated names among F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q4_K_M")
    settings = QuantSettings.quick() if args.quick else QuantSettings()
    if args.eval_tokens:
        settings = replace(settings, eval_tokens=positive_int("--eval-tokens", args.eval_tokens, maximum=4096))
    for v in variants:
        check_variant(v)
    variants_table([check_variant(v) for v in dict.fromkeys(["F16", *variants])], progress=not args.json)  # build (cached)
    df = run_blocking(compare_variants(variants, kv, settings=settings, progress=not args.json))
    if args.json:
        print(df.to_json(orient="records", indent=2))
        return 0
    cols = ["variant", "kv_dtype", "file_MiB", "bits_per_weight", "kv_MiB", "rss_MiB", "load_s", "ttft_p50_ms", "tpot_p50_ms",
            *[c for c in df.columns if c.startswith("tok_s_c")], "perplexity", "delta_nll", "top1_agreement", "greedy_identical_prefix"]
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(df[cols].round(3).to_string(index=False))
    print(f"quality on {settings.eval_tokens} tokens of data/texts/eval.txt; agreement vs {df['reference'].iloc[0]} "
          "(F16 = the shipped Q4_K_M dequantized, stored at 16 bits)")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("quant", help="compare weight variants and KV cache precisions: memory, speed, quality")
    p.add_argument("--variants", default="F16,Q8_0,Q4_0", help="comma-separated: F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q4_K_M")
    p.add_argument("--kv-dtypes", default="f16", help="comma-separated KV cache types: f16, q8_0, q4_0")
    p.add_argument("--eval-tokens", help="tokens of the evaluation text to score (default 256; quick 48)")
    p.add_argument("--quick", action="store_true", help="small sizes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_quant)


def rank(df: pd.DataFrame, column: str = "perplexity") -> list[str]:
    """Variants from best to worst by a quality column (measured, not assumed)."""
    return list(df.sort_values(column)["variant"] + "/" + df.sort_values(column)["kv_dtype"])
