"""Lab 05 on vLLM: sections 2, 5 and 6 and exercise 1 read vLLM's configurations (quant_views), here on the
configurations a GPU instance and this CPU run, and on rows shaped as compare_models writes them."""

from pathlib import Path

import pandas as pd
import pytest

from labs_lib import quant_views
from labs_lib.gguf_meta import read_gguf_meta
from labs_lib.kv_math import MIB
from labs_lib.quant import ORIGINAL, variant_path
from labs_lib.quant_compare import GPU_MODEL_FAMILIES, VLLM_CPU_MODELS
from labs_lib.roofline import decode_bytes_per_step


def rows(*configs: dict) -> pd.DataFrame:
    """compare_models' columns for a few configurations (model, dtype, quantization, kv_dtype and the measurements)."""
    base = {"model": "gemma-3-270m", "dtype": "auto", "quantization": "-", "kv_dtype": "f16", "kl": 0.0}
    return pd.DataFrame([{**base, **c} for c in configs])


def test_vllms_fp8_weights_spare_the_embedding_as_the_shipped_file_counts_it():
    """The shipped GGUF's own tensor table: the tied embedding's elements stay 16-bit under fp8_per_tensor (a linear-
    layer method), so the 270M model's fp8 weights are 13 bits per weight, not 8; bf16 and float32 are every weight."""
    meta = read_gguf_meta(variant_path(ORIGINAL))
    embedding = next(t.n_elements for t in meta.tensors if t.name == "token_embd.weight")
    table = quant_views.planned([dict(m) for m in GPU_MODEL_FAMILIES["shipped"]]).set_index("configuration")
    fp8 = table.loc["gemma-3-270m+fp8_per_tensor/f16"]
    assert fp8["weights MiB"] * MIB == pytest.approx(embedding * 2 + (meta.n_params - embedding) * 1)
    assert 8 < fp8["bits per weight"] < 16 and fp8["weights"] == "fp8"
    on_cpu = quant_views.planned([dict(m) for m in VLLM_CPU_MODELS]).set_index("configuration")
    assert on_cpu.loc["gemma-3-270m/f16", "weights MiB"] * MIB == meta.n_params * 2
    assert on_cpu.loc["gemma-3-270m+float32/f16", "weights MiB"] * MIB == meta.n_params * 4
    assert on_cpu.loc["gemma-3-270m/fp8", "KV bytes per token"] * 2 == on_cpu.loc["gemma-3-270m/f16", "KV bytes per token"]


def test_every_gpu_configuration_is_read_with_its_format():
    """The 7B family's hub ids resolve in the catalogue (its quantized checkpoints by their base model), AWQ and
    GPTQ-Int4 as 4-bit with their group scales, and a weight size vLLM logged on a card replaces the computed one."""
    table = quant_views.planned([dict(m) for m in GPU_MODEL_FAMILIES["qwen2.5-7b"]])
    assert table["weights MiB"].notna().all() and (table["weights from"] == "computed").all()
    assert list(table.weights) == ["bf16", "int4", "int4", "fp8", "bf16"]
    assert 4 < table["bits per weight"].iloc[1] < 8
    logged = quant_views.stored(rows({"weights_MiB": 300.0}, {"weights_MiB": None}))
    assert list(logged["weights from"]) == ["logged by vLLM", "computed"] and logged["weights MiB"].iloc[0] == 300.0


def test_twice_the_sequences_is_graded_by_the_pool_vllm_logged_and_the_kl():
    """Exercise 1 on vLLM: only rows with the reference's weights share its pool; a KV dtype qualifies at twice its
    tokens (less vLLM's block rounding), the least KL wins, and none qualifying is "none"."""
    fp8_kv = {"kv_dtype": "fp8", "kv_cache_tokens": 163_271, "kl": 0.005}
    fp8_weights = {"quantization": "fp8_per_tensor", "kv_cache_tokens": 400_000, "kl": 0.001}  # a bigger pool: not KV
    results = rows({"kv_cache_tokens": 81_621}, fp8_weights, fp8_kv)
    table = quant_views.kv_precision(results)
    assert list(table.kv_dtype) == ["f16", "fp8"] and table["tokens / 16-bit"].iloc[1] == 163_271 / 81_621
    assert quant_views.twice_the_sequences(results) == ("fp8", f"tokens / 16-bit: fp8 {163_271 / 81_621:.2f}")
    short = rows({"kv_cache_tokens": 81_621}, {**fp8_kv, "kv_cache_tokens": 150_000})
    assert quant_views.twice_the_sequences(short)[0] == "none"
    both = rows(
        {"kv_cache_tokens": 1000},
        {**fp8_kv, "kv_cache_tokens": 2000, "kl": 0.02},
        {"kv_dtype": "fp8_e5m2", "kv_cache_tokens": 2000, "kl": 0.01},
    )
    assert quant_views.twice_the_sequences(both)[0] == "fp8_e5m2"


def test_tpot_against_bytes_scales_the_references_tpot_by_the_bytes_a_step_reads():
    results = rows(
        {"tpot_p50_ms": 20.0}, {"quantization": "fp8_per_tensor", "tpot_p50_ms": 18.0}, {"kv_dtype": "fp8", "tpot_p50_ms": 21.0}
    )
    table = quant_views.tpot_against_bytes(results, context_tokens=160)
    parts = quant_views.stored(results)
    expected = [
        decode_bytes_per_step(int(w * MIB), int(kv), 160)
        for w, kv in zip(parts["weights MiB"], parts["KV bytes per token"], strict=True)
    ]
    assert list(table.bytes_per_step) == expected
    assert table["TPOT predicted by bytes"].iloc[1] == pytest.approx(20.0 * expected[1] / expected[0])
    assert table["measured / predicted"].iloc[0] == 1.0 and table["measured / predicted"].iloc[1] == pytest.approx(
        18.0 / (20.0 * expected[1] / expected[0])
    )


def test_the_workshop_model_a_gpu_serves_is_read_from_its_own_config(tmp_path):
    """On a GPU lab 05's default family runs on the workshop model's folder: its config.json sizes every row."""
    import json
    import shutil

    from labs_lib.models import estimate_params

    folder = tmp_path / "Qwen2.5-32B-Instruct"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "fixtures" / "hf_configs" / "qwen2.5-32b.json", folder / "config.json")
    params = estimate_params(json.loads((folder / "config.json").read_text()))
    table = quant_views.planned([{"model": str(folder)}, {"model": str(folder), "kv_cache_dtype": "fp8"}])
    assert list(table["weights MiB"] * MIB) == [params * 2, params * 2]
    assert table["KV bytes per token"].iloc[0] == 2 * table["KV bytes per token"].iloc[1] > 0


def test_no_configuration_started_leaves_empty_tables_and_no_answer():
    """Every vLLM start refused (a card another engine holds: tests/test_refused_starts.py runs the lab so): the
    failed rows are left out before these sections, which then show empty tables, and exercise 1 says why."""
    failed = rows({"status": "failed"}).iloc[0:0]
    assert quant_views.kv_precision(failed).empty and quant_views.tpot_against_bytes(failed, 160).empty
    assert quant_views.twice_the_sequences(failed) == ("none", "no configuration started: nothing to compare")
