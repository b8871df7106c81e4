"""Lab 05's comparison: each weight variant (and KV cache precision) measured for memory, speed and quality."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pandas as pd

from .endpoints import endpoint_for
from .engines import EngineConfig, make_engine
from .errors import BadInput, LabsError
from .gguf_meta import read_gguf_meta
from .kv_math import MIB, llamacpp_layout
from .load import prefill_tokens_per_s, run_load, warm_up
from .prompts import PromptFactory, corpus_text
from .quality import Scorers, Scores, agreement, identical_prefix
from .quant import ORIGINAL, build_variant, check_variant
from .timing import RequestSpec

KV_DTYPES = ("f16", "q8_0", "q4_0")
# vLLM on CPU, the shipped model: weights as converted (bf16), upcast to float32, and an fp8 KV cache
VLLM_CPU_MODELS: tuple[dict[str, str], ...] = ({}, {"dtype": "float32"}, {"kv_cache_dtype": "fp8"})
# quick: one vLLM start less (about a minute on 2 cores); the weights' precision is compared on llama.cpp at quick size
VLLM_CPU_QUICK_MODELS: tuple[dict[str, str], ...] = ({}, {"kv_cache_dtype": "fp8"})
# fp8 weights quantized at load from a bf16 checkpoint: "--quantization fp8" still does it in vLLM 0.33 but is
# deprecated for online quantization there in favour of this name (model_loader/weight_utils.py, get_quant_config)
ONLINE_FP8 = "fp8_per_tensor"
# vLLM on a GPU: a family of configurations by name (lab 05's gpu_models). "shipped" needs no hub and no token;
# the 7B family is ungated and downloads the sizes below (Hugging Face's file listings, 2026-12) once.
GPU_MODEL_FAMILIES = {
    "shipped": ({}, {"quantization": ONLINE_FP8}, {"kv_cache_dtype": "fp8"}),  # bf16, vLLM's online fp8 weights, fp8 KV
    "qwen2.5-7b": (
        {"model": "Qwen/Qwen2.5-7B-Instruct"},
        {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ"},  # pre-quantized: vLLM reads the method and picks the kernel
        {"model": "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"},
        {"model": "Qwen/Qwen2.5-7B-Instruct", "quantization": ONLINE_FP8},  # online: quantized at load, so it is asked for
        {"model": "Qwen/Qwen2.5-7B-Instruct", "kv_cache_dtype": "fp8"},
    ),
}
DOWNLOAD_GB = {"Qwen/Qwen2.5-7B-Instruct": 15.2, "Qwen/Qwen2.5-7B-Instruct-AWQ": 5.6, "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4": 5.6}


def download_note(models: list[dict]) -> str:
    """One line: what the configurations download from the hub before the first starts ("" when nothing)."""
    ids = list(dict.fromkeys(m["model"] for m in models if m.get("model")))
    if not ids:
        return ""
    sizes = [DOWNLOAD_GB.get(i) for i in ids]
    total = sum(s for s in sizes if s)
    known = f"about {total:.1f} GB" + (" and more" if None in sizes else "") if total else "sizes unknown here"
    return f"downloads once from the Hugging Face hub ({known}, unless cached): " + ", ".join(ids)


@dataclass(frozen=True)
class QuantSettings:
    eval_tokens: int = 768  # tokens of data/texts/eval.txt scored (it has 1,131 on Gemma 3's tokenizer)
    greedy_tokens: int = 64  # greedy continuation compared with the reference
    speed_requests: int = 6  # requests per concurrency level
    concurrencies: tuple[int, ...] = (1, 4)
    prompt_tokens: int = 64
    max_tokens: int = 48
    prefill_tokens: int = 512  # two uncached prompts this long measure the prefill speed (the compute roof)
    scorers: Scorers = field(default_factory=Scorers)  # perplexity and KL: the library's, or lab 05's participant's once checked

    @classmethod
    def quick(cls) -> QuantSettings:
        return cls(
            eval_tokens=128,
            greedy_tokens=24,
            speed_requests=4,
            concurrencies=(1, 4),
            prompt_tokens=32,
            max_tokens=24,
            prefill_tokens=256,
        )

    def ctx(self) -> int:
        per_slot = max(
            self.eval_tokens + 32, self.prompt_tokens + self.max_tokens + 48, self.greedy_tokens + 48, self.prefill_tokens + 16
        )
        return max(self.concurrencies) * per_slot


async def measure_config(
    kind: str, config: EngineConfig, label: dict, settings: QuantSettings, *, progress: bool = False
) -> tuple[dict, Scores, list[int]]:
    """Start one configuration; measure load, memory, KV, speed and quality; stop. Returns (row, scores, greedy ids).
    Memory: the process's RSS, and what the engine logs (on a GPU, where weights and KV pool live on the card
    and RSS does not show them, vLLM's weights_MiB and kv_pool_MiB)."""
    text = corpus_text("eval.txt")
    with make_engine(kind, config) as engine:
        row = {
            **label,
            "load_s": round(engine.started_s or 0.0, 2),
            "rss_MiB": round((engine.resident_bytes() or 0) / 2**20, 1),
            **engine.allocation_summary(),
        }
        kernels = engine.kernel_lines()
        if kernels:
            row["kernels"] = "; ".join(kernels)
        bos, ids = engine.tokenize_text(text, settings.eval_tokens)
        scores = engine.score(bos, ids)
        greedy = engine.greedy(([bos] if bos is not None else []) + ids[:16], settings.greedy_tokens)
        endpoint = endpoint_for(engine)
        factory = PromptFactory(engine.prompt_tokenizer(), seed=7)
        await warm_up(endpoint)
        for c in settings.concurrencies:
            specs = [
                RequestSpec(p, settings.max_tokens, ignore_eos=True)
                for p in factory.prompts(settings.speed_requests, settings.prompt_tokens)
            ]
            s = (await run_load(endpoint, specs, concurrency=c, progress=progress, desc=f"{label} c={c}")).summary
            if c == settings.concurrencies[0]:
                row |= {"ttft_p50_ms": s.ttft_ms.p50, "tpot_p50_ms": s.tpot_ms.p50}
            row[f"tok_s_c{c}"] = s.output_throughput
        long = factory.prompts(2, settings.prefill_tokens)
        row["prefill_tok_s"] = await prefill_tokens_per_s(endpoint, long, extra=engine.uncached_body)
        ppl = settings.scorers.perplexity(scores.logprobs.tolist())
        row |= {"nll": scores.nll, "perplexity": ppl, "top1_accuracy": scores.top1_accuracy}
    return row, scores, greedy


def check_kv_dtypes(kv_dtypes) -> list[str]:
    """The KV cache types, lower-cased; BadInput names the first one llama.cpp cannot cache in."""
    kv_dtypes = [str(k).lower() for k in kv_dtypes]
    for k in kv_dtypes:
        if k not in KV_DTYPES:
            raise BadInput("kv dtype", k, "allowed: " + ", ".join(KV_DTYPES))
    return kv_dtypes


async def compare_variants(
    variants: list[str],
    kv_dtypes: Sequence[str] = ("f16",),
    *,
    reference: str = ORIGINAL,
    kv_variant: str = ORIGINAL,
    settings: QuantSettings | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Every weight variant with an f16 KV cache, then kv_variant with each quantized KV cache (flash attention on);
    a variant the cache lacks is built first.
    Agreement columns (quality.agreement: means and 95% intervals) compare each row with `reference` (f16 KV),
    KV rows with kv_variant at f16. The reference defaults to the shipped Q4_K_M, the only original here."""
    from .progress import bar as tqdm

    settings = settings or QuantSettings()
    variants = [check_variant(v) for v in variants]
    reference = check_variant(reference)
    kv_dtypes = check_kv_dtypes(kv_dtypes)
    runs = [(v, "f16") for v in dict.fromkeys([reference, *variants])]
    runs += [(check_variant(kv_variant), k) for k in kv_dtypes if k != "f16"]
    if (check_variant(kv_variant), "f16") not in runs and any(k != "f16" for k in kv_dtypes):
        runs.insert(1, (check_variant(kv_variant), "f16"))
    results: dict[tuple[str, str], tuple[dict, Scores, list[int]]] = {}
    for variant, kv in tqdm(runs, desc="variants", unit="config", disable=not progress):
        path = build_variant(variant, progress=progress).path  # the cached file, or built now (seconds) where missing
        meta = read_gguf_meta(path)
        label = {
            "variant": variant,
            "kv_dtype": kv,
            "file_MiB": round(path.stat().st_size / 2**20, 1),
            "bits_per_weight": round(8 * meta.tensor_bytes / meta.n_params, 3),
        }
        config = EngineConfig(
            model=str(path),
            served_model_name="gemma-3-270m",
            chat_template="gemma",
            ctx=settings.ctx(),
            parallel=max(settings.concurrencies),
            kv_cache_dtype=kv,
            flash_attention=True if kv != "f16" else None,
        )
        results[(variant, kv)] = await measure_config("llamacpp", config, label, settings)
    rows = []
    for (_, kv), (row, scores, greedy) in results.items():
        ref_key = (reference, "f16") if kv == "f16" else (check_variant(kv_variant), "f16")
        _ref_row, ref_scores, ref_greedy = results[ref_key]
        rows.append(
            {
                **row,
                **agreement(ref_scores, scores, settings.scorers.kl),
                "greedy_identical_prefix": identical_prefix(ref_greedy, greedy),
                "reference": f"{ref_key[0]}/{ref_key[1]}",
            }
        )
    return pd.DataFrame(rows)


def model_label(config: EngineConfig) -> dict[str, str]:
    """The columns that name a vLLM configuration in compare_models' rows (config_labels joins them)."""
    return {
        "model": config.model or "gemma-3-270m",
        "dtype": config.dtype or "auto",
        "quantization": config.quantization or "-",
        "kv_dtype": config.kv_cache_dtype,
    }


async def compare_models(models: list[dict], *, settings: QuantSettings | None = None, progress: bool = True) -> pd.DataFrame:
    """The same measurements through vLLM: each entry is EngineConfig fields, e.g.
    {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq"} or {"model": …, "kv_cache_dtype": "fp8"}.
    Agreement columns compare every row with the first."""
    from .progress import bar as tqdm

    settings = settings or QuantSettings()
    rows: list[dict[str, Any]] = []
    scored: list[tuple[int, Any]] = []
    for fields in tqdm(models, desc="models", unit="config", disable=not progress):
        config = EngineConfig(**{"max_model_len": 4096, "parallel": max(settings.concurrencies) * 4, **fields})
        label = model_label(config)
        try:  # a failed configuration (a download, an OOM, a kernel the card lacks) is a row, as in sweeps
            row, scores, _ = await measure_config("vllm", config, label, settings)
        except (LabsError, OSError, httpx.HTTPError) as exc:
            rows.append({**label, "status": "failed", "error": (str(exc) or type(exc).__name__).splitlines()[0]})
            continue
        rows.append({**row, "status": "ok", "error": ""})
        scored.append((len(rows) - 1, scores))
    reference = str(config_labels(pd.DataFrame([rows[scored[0][0]]])).iloc[0]) if scored else ""
    for i, scores in scored:  # agreement with the first configuration that ran
        rows[i] |= {**agreement(scored[0][1], scores, settings.scorers.kl), "reference": reference}
    return pd.DataFrame(rows)


# which way is better; kl, delta_nll and perplexity_ratio are against the reference and carry 95% intervals
QUALITY = {"perplexity": "lower", "kl": "lower", "delta_nll": "lower", "perplexity_ratio": "lower", "top1_agreement": "higher"}
AGAINST_REFERENCE = ("kl", "delta_nll", "perplexity_ratio", "top1_agreement")  # the reference scores itself perfectly


def kv_slots_within(kv_mib: float, settings: QuantSettings, kv_dtype: str, model: str = "gemma-3-270m") -> int:
    """How many slots of this lab's context per slot (settings.ctx() / the most concurrent requests) llama.cpp's
    server could hold in kv_mib MiB with a `kv_dtype` KV cache (K and V alike): the most slots whose layout
    (kv_math.llamacpp_layout, which the engine's logged KV bytes equal) fits, 0 if not even one."""
    per_slot = settings.ctx() // max(settings.concurrencies)
    slots = 0
    while slots < 256 and llamacpp_layout(model, per_slot * (slots + 1), slots + 1, type_k=kv_dtype).kv_bytes <= kv_mib * MIB:
        slots += 1
    return slots


def serving_plans(
    results: pd.DataFrame, reference: str, sequences: int, context_tokens: int, model: str = "gemma-3-270m"
) -> pd.DataFrame:
    """Every weights variant paired with every KV dtype that compare_variants measured (run together or not), for
    `sequences` slots of `context_tokens` each on llama.cpp: memory_MiB (the weights file plus the KV cache
    kv_math.llamacpp_layout gives), est_kl (the weights' KL at the f16 cache plus the KV dtype's KL on the reference
    weights: the two errors taken as adding up) and est_tpot_ms (the weights' TPOT scaled by the KV dtype's on the
    reference). The reference's own weights are not a choice: every KL is measured against them."""
    at_f16 = results[results.kv_dtype == "f16"].set_index("variant")
    on_reference = results[results.variant == reference].set_index("kv_dtype")
    together = set(zip(results.variant, results.kv_dtype, strict=True))
    rows = []
    for weights, w in at_f16.drop(index=reference, errors="ignore").iterrows():
        for kv_dtype, kv in on_reference.iterrows():
            layout = llamacpp_layout(model, sequences * context_tokens, sequences, type_k=kv_dtype)
            rows.append(
                {
                    "weights": weights,
                    "kv_dtype": kv_dtype,
                    "memory_MiB": w.file_MiB + layout.kv_bytes / MIB,
                    "est_kl": w.kl + kv.kl,
                    "est_tpot_ms": w.tpot_p50_ms * kv.tpot_p50_ms / on_reference.loc["f16", "tpot_p50_ms"],
                    "run_together": (weights, kv_dtype) in together,
                }
            )
    return pd.DataFrame(rows)


def config_memory_mib(df: pd.DataFrame) -> pd.Series:
    """Each configuration's memory, MiB: its weights file and its KV cache as llama.cpp logs it (compare_variants);
    on vLLM, the weights it logs on a GPU, else its process's RSS (its KV pool is a fixed size it is given: a smaller
    KV dtype buys tokens there, not memory)."""
    if "file_MiB" in df and "kv_MiB" in df:
        return df["file_MiB"] + df["kv_MiB"]
    return df["weights_MiB"] if "weights_MiB" in df else df["rss_MiB"]


def config_labels(df: pd.DataFrame) -> pd.Series:
    """Each row's name: "variant/kv_dtype" (compare_variants) or "model[+dtype][+quantization]/kv_dtype"
    (compare_models)."""
    if "variant" in df:
        names = df["variant"].astype(str)
    else:
        names = df["model"].astype(str)
        for col, default in (("dtype", "auto"), ("quantization", "-")):
            if col in df:
                names = names + df[col].astype(str).map(lambda v, d=default: "" if v == d else f"+{v}")
    return names + "/" + df["kv_dtype"].astype(str)


def rank(df: pd.DataFrame, column: str = "perplexity") -> list[str]:
    """Rows from best to worst by a quality column (measured, not assumed), named by config_labels. On a measure
    taken against the reference (AGAINST_REFERENCE), the reference's own row is left out: it wins by definition."""
    if column in AGAINST_REFERENCE and "reference" in df:
        df = df[(config_labels(df) != df["reference"]).to_numpy()]
    ordered = df.sort_values(column, ascending=QUALITY.get(column, "lower") == "lower", kind="stable")
    return list(config_labels(ordered))


def int8_row(held: float, file_cut: float, tpot_f16_ms: float, tpot_q8_ms: float) -> dict:
    """Seed 004's "INT8 cuts memory by about 40% and TPOT improves a little", both halves: the memory in use saved
    (a fraction) within claims.TOLERANCE of 40%, and Q8_0's TPOT below F16's."""
    from .claims import TOLERANCE, row, verdict

    memory_holds, _ = verdict(40.0, 100 * held, TOLERANCE)
    faster = bool(tpot_q8_ms < tpot_f16_ms)
    return row(
        "s004-int8-40pct",
        f"memory in use {held:.0%} less (file {file_cut:.0%}); TPOT {tpot_f16_ms:.1f} -> {tpot_q8_ms:.1f} ms",
        "engine resident memory",
        bool(memory_holds and faster),
        f"memory {'within' if memory_holds else 'outside'} {TOLERANCE:.0%} of the article's 40%, TPOT "
        f"{'lower' if faster else 'not lower'}: both must hold. The claim is about memory in use: the weights shrink as "
        "the file does (8.5 bits for 16), the engine's KV cache and compute buffers do not, so the process saves less "
        "than the file; on a GPU, vLLM's logged weight memory is the counterpart",
    )


def quant_article_checks(
    weights: pd.DataFrame, results: pd.DataFrame, *, reference: str, eval_tokens: int, weight_variants: bool
) -> pd.DataFrame:
    """Lab 05's "check the article": the quantization claims against this run's variants (weights: one row per
    weight variant at the f16 KV cache; results: every variant x KV dtype), and computed where no checkpoint can
    reach this machine (AWQ)."""
    checks: list[dict] = []
    if weight_variants:
        w = weights.set_index("variant")
        checks += _int8_rows(w, reference, eval_tokens)
        checks += _four_bit_and_kv_rows(w, results)
        checks.append(smaller_weights_decode_row(w))
        checks.append(quantized_prefill_row(w))
    checks.append(_fp8_kv_row(results))
    checks.append(_awq_half_row())
    return pd.DataFrame(checks)


def smaller_weights_decode_row(w: pd.DataFrame) -> dict:
    """Seed 004's "smaller weights ease decode's memory bottleneck and often speed it up": each quantized variant's
    TPOT p50 against F16's (one row per weight variant, f16 KV cache), with the bytes it reads per step."""
    from .claims import row

    if "F16" not in w.index or len(w) < 2:
        return row("s004-smaller-weights-faster", "not measured", "", None, "needs F16 and a quantized variant")
    smaller = w.drop(index="F16").sort_values("file_MiB")
    ratios = smaller.tpot_p50_ms / w.loc["F16", "tpot_p50_ms"]
    faster = int((ratios < 1).sum())
    return row(
        "s004-smaller-weights-faster",
        "; ".join(
            f"{v} {r:.2f}x TPOT at {b / w.loc['F16', 'file_MiB']:.0%} of the bytes"
            for v, r, b in zip(smaller.index, ratios, smaller.file_MiB, strict=True)
        ),
        f"of F16's TPOT: {faster} of {len(ratios)} faster",
        faster == len(ratios) or (None if faster else False),
        "decode reads every weight once per step, so fewer bytes mean less to read; the step also dequantizes, so "
        "TPOT falls less than the bytes do (lab 05 section 6, the decode roofline, puts them side by side)",
    )


def quantized_prefill_row(w: pd.DataFrame) -> dict:
    """Seed 003's "quantization speeds prefill up little": each quantized variant's prefill speed (prompt tokens/s of
    two uncached prompts) against F16's, beside its decode speed-up (F16's TPOT over its own)."""
    from .claims import TOLERANCE, row

    if "F16" not in w.index or len(w) < 2 or "prefill_tok_s" not in w:
        return row("s003-quant-prefill-limited", "not measured", "", None, "needs F16 and a quantized variant's prefill speed")
    others = w.drop(index="F16").sort_values("file_MiB")
    prefill = others.prefill_tok_s / w.loc["F16", "prefill_tok_s"]
    decode = w.loc["F16", "tpot_p50_ms"] / others.tpot_p50_ms
    return row(
        "s003-quant-prefill-limited",
        "; ".join(f"{v} prefill {p:.2f}x, decode {d:.2f}x" for v, p, d in zip(others.index, prefill, decode, strict=True)),
        "of F16's speed",
        bool(prefill.max() <= 1 + TOLERANCE),
        f"'limited' taken as within {TOLERANCE:.0%} of F16's prefill speed. Prefill is arithmetic on every prompt token "
        "at once, so the bytes read are not what limits it; on this CPU llama.cpp's quantized kernels also do the "
        "arithmetic in 8-bit integers, which is faster. On a GPU, weight-only formats (AWQ, GPTQ) dequantize to 16 bits "
        "for the arithmetic, and a long prompt gains little (their kernels' speed-up shrinks as the batch of tokens "
        "grows)",
    )


def _int8_rows(w: pd.DataFrame, reference: str, eval_tokens: int) -> list[dict]:
    """Seed 004's INT8 claims: memory in use (file beside it) and quality, with intervals."""
    from .claims import row
    from .quant import change_from_reference

    checks = []
    if {"F16", "Q8_0"} <= set(w.index):
        cut = 1 - w.loc["Q8_0", "file_MiB"] / w.loc["F16", "file_MiB"]
        held = 1 - w.loc["Q8_0", "rss_MiB"] / w.loc["F16", "rss_MiB"]  # the engine's memory in use: the claim's 显存
        checks.append(int8_row(held, cut, w.loc["F16", "tpot_p50_ms"], w.loc["Q8_0", "tpot_p50_ms"]))
    if "Q8_0" in w.index:
        q8 = w.loc["Q8_0"]
        floor = f" (F16, no weight changed: KL {w.loc['F16', 'kl']:.4f})" if "F16" in w.index else ""
        changed = change_from_reference("Q8_0")["weights_changed"]
        low, high = q8.perplexity_ratio_ci_low, q8.perplexity_ratio_ci_high
        checks.append(
            row(
                "s004-int8-lossless",
                f"KL {q8.kl:.4f} nats/token [{q8.kl_ci_low:.4f}, {q8.kl_ci_high:.4f}]{floor}, perplexity x{q8.perplexity_ratio:.3f} "
                f"[{low:.3f}, {high:.3f}], top-1 agreement {q8.top1_agreement:.1%}",
                f"against {reference}, 95% intervals",
                None if low <= 1.0 <= high and high >= 1.02 else bool(low <= 1.0 <= high),
                f"lossless if the perplexity interval holds 1.0 and stays within +2% (else {eval_tokens} tokens cannot "
                f"tell); but Q8_0 moved only {changed:.0%} of the reference's weights (the tied embedding is Q8_0 already), so "
                "this is a lower bound of its loss from bf16 weights, which cannot reach this machine",
            )
        )
    return checks


def _four_bit_and_kv_rows(w: pd.DataFrame, results: pd.DataFrame) -> list[dict]:
    """4-bit AWQ's size (computed) beside this CPU's 4-bit formats, and the 8-bit KV cache's bytes."""
    from .claims import TOLERANCE, awq_memory, claim, row

    checks = []
    ppl_up = {v: (w.loc[v, "perplexity_ratio"], w.loc[v, "bits_per_weight"]) for v in ("Q4_0", "Q4_0-PURE") if v in w.index}
    awq4 = awq_memory()
    share = awq4["awq_weight_bytes"] / awq4["fp16_weight_bytes"]
    quarter = abs(100 * share / claim("s003-awq-quarter")["value"][0] - 1) <= TOLERANCE
    checks.append(
        row(
            "s003-awq-quarter",
            f"weights {awq4['awq_weight_bytes'] / awq4['fp16_weight_bytes']:.0%} of fp16 ({awq4['bits_per_weight']:.2f} bits "
            f"per quantized weight, {awq4['model']}); quality: not testable here",
            "size (computed) / quality",
            None if quarter else False,
            f"size: {awq4['bits_per_weight'] / 16:.0%} for the quantized layers (4 bits + group scales and zeros), "
            f"{share:.0%} for the model, whose embedding and LM head stay 16-bit: "
            f"{'about' if quarter else 'more than'} a quarter (read as 25% within 10%); quality: not testable here, because no AWQ checkpoint reaches these machines "
            "(they reach PyPI only; vLLM's x86 CPU backend would run one) and a 0.5-1% accuracy loss is a task score, not a "
            "perplexity. The nearest 4-bit formats on this CPU, against Q4_K_M: "
            + ", ".join(f"{v} ({b:.1f} bits/weight) perplexity x{r:.3f}" for v, (r, b) in ppl_up.items())
            + " (round-to-nearest 4-bit: scale-aware methods such as AWQ exist to do better)",
        )
    )
    return checks


def _fp8_kv_row(results: pd.DataFrame) -> dict:
    """Seed 001's "an fp8 KV cache halves the KV memory": measured where vLLM served an fp8 cache in this run (the
    tokens its pool holds, logged at start-up, against the 16-bit cache's in the same memory), else computed with
    vLLM's per-token bytes (2 x layers x KV heads x head size x the dtype's bytes) for a 7B model."""
    from .claims import TOLERANCE, row
    from .kv_math import kv_cache

    have = results if "kv_cache_tokens" in results else pd.DataFrame(columns=["kv_dtype", "kv_cache_tokens"])
    fp8 = have[(have.kv_dtype == "fp8") & have.kv_cache_tokens.notna()]
    full = have[have.kv_dtype.isin(["f16", "bf16", "auto"]) & have.kv_cache_tokens.notna()]
    if len(fp8) and len(full):
        share = float(full.kv_cache_tokens.iloc[0]) / float(fp8.kv_cache_tokens.iloc[0])
        computed = f"{share:.1%} of the 16-bit cache's bytes per token (vLLM's pool: {int(fp8.kv_cache_tokens.iloc[0]):,} tokens against {int(full.kv_cache_tokens.iloc[0]):,} in a pool of the same size)"
        how = "measured on vLLM in this run"
    else:
        sizes = {d: kv_cache("qwen2.5-7b", 1, 1, d).kv_bytes_per_token for d in ("bf16", "fp8")}
        share = sizes["fp8"] / sizes["bf16"]
        computed = f"{share:.1%} of bf16's bytes per token (Qwen2.5-7B: {sizes['fp8']:,} against {sizes['bf16']:,} bytes)"
        how = (
            "computed with vLLM's layout (this run served no fp8 cache: llama.cpp has none; its q8_0 keeps a scale per 32 values)"
        )
    return row(
        "s001-fp8-kv-half",
        computed,
        "KV bytes",
        abs(share - 0.5) <= TOLERANCE * 0.5,
        f"{how}: one byte per value instead of two; vLLM keeps one k_scale and one v_scale per layer outside the cache",
    )


def _awq_half_row() -> dict:
    """Seed 001's "AWQ/GPTQ saves more than half": the weights do, vLLM's reserved memory does not (computed)."""
    from .claims import awq_memory, by_model, claim, row
    from .kv_math import GIB

    awq = awq_memory()  # computed, not measured: no AWQ checkpoint can be downloaded here
    return row(
        "s001-awq-half",
        f"weights -{awq['weight_saving']:.0%} ({awq['fp16_weight_bytes'] / GIB:.1f} -> {awq['awq_weight_bytes'] / GIB:.1f} GiB, "
        f"{awq['bits_per_weight']:.2f} bits/weight); vLLM still takes {awq['vllm_reserved_bytes'] / GIB:.1f} GiB",
        f"{awq['model']} on {awq['gpu']}",
        by_model(
            (100 * awq["weight_saving"] > claim("s001-awq-half")["value"])
            + (awq["awq_reserved_bytes"] < awq["vllm_reserved_bytes"] / 2),
            2,
        ),
        f"the weights shrink by more than half, the GPU memory vLLM uses does not: it reserves total x utilization either way "
        f"and the saving becomes KV pool ({awq['kv_pool_bytes_fp16'] / GIB:.1f} -> {awq['kv_pool_bytes_awq'] / GIB:.1f} GiB: "
        f"{awq['max_concurrency_fp16']:.1f} -> {awq['max_concurrency_awq']:.1f} sequences of 4,096 tokens)",
    )
