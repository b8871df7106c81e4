"""Lab 05 on vLLM: its configurations (bf16, fp8 or 4-bit weights; a 16-bit or fp8 KV cache) read as the lab reads
llama.cpp's variants: what each stores (section 2), what its KV dtype buys in the same pool (section 5 and
exercise 1), and its decode TPOT against the bytes a step reads (section 6)."""

from __future__ import annotations

import pandas as pd

from .engines import EngineConfig
from .errors import BadInput
from .kv_math import DTYPES, MIB, kv_cache
from .models import ModelSpec, load_model
from .quant_compare import config_labels, model_label
from .roofline import decode_bytes_per_step

# a pre-quantized checkpoint's method, from its name (vLLM reads it from the checkpoint's config)
_FOUR_BIT = ("-AWQ", "-GPTQ-Int4")
# tokens per block that vLLM's pool rounds to: two pools of the same bytes can differ by this much over their ratio
POOL_ROUNDING = 0.01


def _spec(model: str) -> ModelSpec | None:
    """The catalogue's entry for a served model id (a hub id, its quantized checkpoint's name), None if absent."""
    name = model.split("/")[-1]
    for suffix in _FOUR_BIT:
        name = name.removesuffix(suffix)
    for ref in (model, name):
        try:
            return load_model(ref)
        except BadInput:
            continue
    return None


def weights_format(row: pd.Series) -> str:
    """The format a configuration's linear layers are stored in: fp8 (online or from the checkpoint), int4 (AWQ,
    GPTQ-Int4), fp32 (dtype float32), else the checkpoint's bf16."""
    quantization = str(row.get("quantization", "-"))
    if quantization.startswith("fp8"):
        return "fp8"
    if quantization in ("awq", "gptq") or str(row["model"]).endswith(_FOUR_BIT):
        return "int4"
    return "fp32" if row.get("dtype") in ("float32", "fp32") else "bf16"


def _kv_format(kv_dtype: str) -> str:
    return "fp8" if str(kv_dtype).startswith("fp8") else "bf16"  # "auto"/"f16": the model's 16 bits


# AWQ and GPTQ-Int4 add an fp16 scale and a 4-bit zero to each group of 128 weights (fp8_per_tensor's one scale per
# matrix rounds to nothing)
GROUP_SCALE_BITS = {"int4": 20 / 128}


def linear_bits(fmt: str) -> float:
    """Bits per weight of a format's linear layers, their group scales included."""
    return DTYPES[fmt].bits_per_value + GROUP_SCALE_BITS.get(fmt, 0.0)


def computed_weight_bytes(spec: ModelSpec, fmt: str) -> float:
    """Bytes of a checkpoint's weights with its linear layers in `fmt`. vLLM 0.33's online fp8_per_tensor quantizes
    linear and MoE layers only (quantization/online/base.py, resolve_quant_method_cls), and AWQ and GPTQ
    checkpoints store only linear layers in 4 bits, so the token embedding (vocab x hidden) stays 16-bit; an untied
    output layer is counted with the linear layers (an underestimate of about vocab x hidden x 1.5 bytes at 4 bits)."""
    assert spec.params
    if fmt in ("fp32", "bf16"):
        return spec.params * linear_bits(fmt) / 8
    embedding = spec.vocab_size * spec.hidden_size
    return embedding * 2 + (spec.params - embedding) * linear_bits(fmt) / 8


def stored(results: pd.DataFrame) -> pd.DataFrame:
    """Section 2 on vLLM: each configuration's weights (MiB as vLLM logs loading them on a GPU, else computed from
    the model catalogue by computed_weight_bytes), bits per weight, and KV bytes per token."""
    rows = []
    for label, (_, r) in zip(config_labels(results), results.iterrows(), strict=True):
        spec, fmt, kv_fmt = _spec(str(r["model"])), weights_format(r), _kv_format(r["kv_dtype"])
        logged = r.get("weights_MiB")
        if pd.notna(logged):
            mib, source = float(logged), "logged by vLLM"
        elif spec is not None and spec.params:
            mib, source = computed_weight_bytes(spec, fmt) / MIB, "computed"
        else:
            mib, source = float("nan"), "not in the model catalogue"
        per_token = kv_cache(spec, 1, 1, kv_fmt).kv_bytes_per_token if spec else None
        rows.append(
            {
                "configuration": label,
                "weights": fmt,
                "weights MiB": mib,
                "bits per weight": mib * MIB * 8 / spec.params if spec and spec.params else float("nan"),
                "weights from": source,
                "KV dtype": kv_fmt,
                "KV bytes per token": per_token,
            }
        )
    return pd.DataFrame(rows)


def planned(models: list[dict]) -> pd.DataFrame:
    """Section 2 on vLLM, before anything starts: what each configuration of `models` (EngineConfig fields, lab 05's
    vllm_models) will store, computed from the model catalogue."""
    return stored(pd.DataFrame([model_label(EngineConfig(**fields)) for fields in models]))


def same_weights(results: pd.DataFrame) -> pd.DataFrame:
    """The rows with the first row's weights (model, dtype, quantization): on vLLM the KV pool is what the card has
    left after the weights, so only these share one pool's bytes."""
    if results.empty:
        return results
    first = results.iloc[0]
    keep = pd.Series(True, index=results.index)
    for col in ("model", "dtype", "quantization"):
        if col in results:
            keep &= results[col] == first[col]
    return results[keep]


KV_COLUMNS = ("kv_dtype", "kv_cache_tokens", "max_concurrency", "tpot_p50_ms", "kl", "kl_ci_low", "kl_ci_high", "top1_agreement")


def kv_precision(results: pd.DataFrame) -> pd.DataFrame:
    """Section 5 on vLLM: each KV dtype with the reference's weights, the tokens vLLM's pool holds (its start-up
    line) against the 16-bit cache's, its TPOT and its quality against the reference."""
    rows = same_weights(results)
    table = rows[[c for c in KV_COLUMNS if c in rows]].copy()
    if rows.empty:  # no configuration started: their rows and reasons are in section 3
        return table.assign(**{"tokens / 16-bit": []})
    table.insert(2, "tokens / 16-bit", rows.kv_cache_tokens / rows.kv_cache_tokens.iloc[0])
    return table.reset_index(drop=True)


def twice_the_sequences(results: pd.DataFrame) -> tuple[str, str]:
    """Exercise 1 on vLLM: (the KV dtype whose pool, the same bytes as the 16-bit cache's, holds at least twice its
    tokens (vLLM's logged counts, less its block rounding) at the least measured KL, or "none"; each dtype's ratio)."""
    table = kv_precision(results)
    if table.empty:
        return "none", "no configuration started: nothing to compare"
    others = table.iloc[1:]
    fits = others[others["tokens / 16-bit"] >= 2 * (1 - POOL_ROUNDING)]
    best = "none" if fits.empty else str(fits.sort_values("kl", kind="stable").kv_dtype.iloc[0])
    return best, "tokens / 16-bit: " + ", ".join(
        f"{d} {r:.2f}" for d, r in zip(others.kv_dtype, others["tokens / 16-bit"], strict=True)
    )


def tpot_against_bytes(results: pd.DataFrame, context_tokens: int) -> pd.DataFrame:
    """Section 6 on vLLM: the bytes one decode step reads (weights once, plus one sequence's KV cache at
    `context_tokens`), and each configuration's TPOT p50 against what the reference's TPOT predicts if a step were
    all reading (its TPOT x the bytes ratio): measured / predicted above 1 means something besides reading costs."""
    if results.empty:  # no configuration started
        return pd.DataFrame(columns=["configuration", "bytes_per_step", "tpot_p50_ms", "measured / predicted"])
    parts = stored(results)
    step = [
        decode_bytes_per_step(int(w * MIB), int(kv), context_tokens) if pd.notna(w) and pd.notna(kv) else float("nan")
        for w, kv in zip(parts["weights MiB"], parts["KV bytes per token"], strict=True)
    ]
    table = parts[["configuration", "weights", "KV dtype"]].assign(
        bytes_per_step=step, tpot_p50_ms=results.tpot_p50_ms.to_numpy()
    )
    ratio = table.bytes_per_step / table.bytes_per_step.iloc[0]
    table["bytes / reference"] = ratio
    table["TPOT predicted by bytes"] = table.tpot_p50_ms.iloc[0] * ratio
    table["measured / predicted"] = table.tpot_p50_ms / table["TPOT predicted by bytes"]
    return table
