"""The decode roofline: bytes per step, the bound, and the machine's measured read bandwidth."""

from pathlib import Path

import numpy as np
import pytest

from labs_lib.kv_math import kv_cache, weight_bytes
from labs_lib.roofline import (
    CACHE_MULTIPLE,
    bound_tokens_per_s,
    decode_bytes_per_step,
    last_level_cache_bytes,
    measure_bandwidth,
    roofline_row,
    streamed_buffer_mib,
)


def test_llama_8b_on_an_h100_is_bounded_near_200_tokens_per_s():
    # 8.03e9 bf16 weights = 16.06 GB; H100 SXM 3.35 TB/s: the often-quoted ~200 tok/s single-stream ceiling
    step = decode_bytes_per_step(
        weight_bytes("llama-3.1-8b", "bf16"), kv_cache("llama-3.1-8b", 1, 1, "bf16").kv_bytes_per_token, 2048
    )
    assert 16.0e9 < step < 16.5e9  # + 2048 tokens x 128 KiB of KV = 0.27 GB
    assert bound_tokens_per_s(3.35e12, step) == pytest.approx(3.35e12 / step)
    assert 200 < bound_tokens_per_s(3.35e12, step) < 210


def test_batch_shares_the_weights_not_the_kv():
    one = decode_bytes_per_step(1000, 10, 100, batch=1)
    eight = decode_bytes_per_step(1000, 10, 100, batch=8)
    assert (one, eight) == (2000, 9000)
    assert bound_tokens_per_s(9000.0, eight, batch=8) == pytest.approx(8.0)


def test_roofline_row_ratio():
    row = roofline_row("x", 900, 1, 100, 1e6, tpot_ms=2.0)  # 1000 B/step at 1 MB/s: bound 1000 tok/s, measured 500
    assert row["bound_tokens_per_s"] == pytest.approx(1000) and row["measured_vs_bound"] == pytest.approx(0.5)
    assert roofline_row("x", 900, 1, 100, 1e6)["measured_vs_bound"] is None


def test_measured_bandwidth_is_a_dram_figure():
    bw = measure_bandwidth(buffer_mib=64, repeats=2, threads=1)
    # a 64 MiB stream cannot come from cache; any machine that runs the labs reads 0.5-1000 GB/s
    assert 0.5e9 < bw.bytes_per_s < 1e12 and bw.median_bytes_per_s <= bw.bytes_per_s and bw.threads == 1


def test_decode_runs_under_the_lower_roof_and_batching_lifts_only_the_memory_one():
    from labs_lib.roofline import compute_bound_tokens_per_s

    # 8.03e9 params at 989 dense bf16 TFLOP/s (H100 SXM): ~61,600 tokens/s of arithmetic, whatever the batch
    compute = compute_bound_tokens_per_s(989e12, 8.03e9)
    assert compute == pytest.approx(989e12 / 16.06e9)
    one = roofline_row("x", 1000, 10, 100, 2000.0, tpot_ms=1000.0, compute_tokens_per_s=5.0)  # memory roof 1 tok/s
    assert (one["bound_tokens_per_s"], one["limited_by"]) == (pytest.approx(1.0), "memory")
    eight = roofline_row("x", 1000, 10, 100, 2000.0, tpot_ms=1000.0, batch=8, compute_tokens_per_s=5.0)
    # 8 sequences: 1000 + 8 x 1000 bytes per step at 2000 B/s = 2/9 steps/s, x 8 = 1.78 tok/s; compute still 5
    assert eight["memory_bound_tokens_per_s"] == pytest.approx(8 * 2000 / 9000)
    assert eight["measured_tokens_per_s"] == pytest.approx(8.0) and eight["compute_bound_tokens_per_s"] == 5.0
    many = roofline_row("x", 1000, 0, 100, 2000.0, batch=64, compute_tokens_per_s=5.0)  # no KV: memory roof 128
    assert (many["bound_tokens_per_s"], many["limited_by"]) == (5.0, "compute")


def test_decode_step_flops_follow_the_published_count_and_the_window():
    from labs_lib.models import load_model
    from labs_lib.roofline import decode_step_flops

    llama = load_model("llama-3.1-8b")
    # Hoffmann et al. 2022 (Chinchilla), appendix F: 2 x params, plus logits and reduce, 2 x 2 x context x key size x heads
    t = 4096
    assert decode_step_flops(llama, t) == 2 * llama.params + 4 * 32 * 32 * 128 * t
    # without the cache the whole pass reruns over every token: the sum of the cached steps 1..t
    steps = np.arange(1, 301)
    assert decode_step_flops(llama, 300, cached=False) == pytest.approx(decode_step_flops(llama, steps).sum(), rel=1e-12)
    gemma = load_model("gemma-3-270m")  # 15 of 18 layers attend to a 512-token window
    beyond = decode_step_flops(gemma, 8192) - decode_step_flops(gemma, 4096)
    assert beyond == 4 * gemma.num_q_heads * 256 * 3 * 4096  # only the 3 global layers grow past the window
    many = np.arange(1, 2001)
    assert decode_step_flops(gemma, 2000, cached=False) == pytest.approx(decode_step_flops(gemma, many).sum(), rel=1e-12)
    deepseek = load_model("deepseek-ai/DeepSeek-V3")  # MLA: absorbed attention over the latent and rope key
    assert decode_step_flops(deepseek, 1) == 2 * deepseek.params + 4 * deepseek.num_q_heads * (512 + 64) * 61


def test_decode_reads_the_cards_bandwidth_on_a_gpu_and_this_machines_on_the_cpu(monkeypatch):
    """Lab 03's roofline on a GPU instance divided by the host's DRAM bandwidth. A fake NVML reading stands
    for the card (no GPU here); an engine on the CPU, or a card the catalogue lacks, gets the measured DRAM."""
    from labs_lib import roofline
    from labs_lib.gpu import GPUReading

    h200 = GPUReading(0, "NVIDIA H200", 150_754_820_096, 0, 150_754_820_096, 0.0)
    monkeypatch.setattr("labs_lib.gpu.read_gpus", lambda: ([h200], None))
    bytes_per_s, source = roofline.decode_bandwidth("cuda")
    assert bytes_per_s == 4800e9 and "H200" in source and "catalogue" in source
    on_cpu, source = roofline.decode_bandwidth("cpu", buffer_mib=16)
    assert 1e8 < on_cpu < 1e12 and "measured" in source  # the engine is on the CPU: the card is not what it reads
    unknown = GPUReading(0, "NVIDIA Quadro Unlisted 9000", 1 << 34, 0, 1 << 34, 0.0)
    monkeypatch.setattr("labs_lib.gpu.read_gpus", lambda: ([unknown], None))
    assert "measured" in roofline.decode_bandwidth("cuda", buffer_mib=16)[1]


def test_catalogue_rows_put_llama_8b_on_an_h200_near_300_tokens_per_s_at_batch_1():
    """H200: 4.8 TB/s and 989 dense bf16 TFLOP/s (NVIDIA's sheet); Llama-3.1-8B's 16 GB of bf16 weights read per step."""
    from labs_lib.roofline import catalogue_rows

    rows = catalogue_rows("llama-3.1-8b", ("L4", "H200"), batches=(1, 64), context_tokens=2048)
    assert [(r["what"], r["batch"]) for r in rows] == [
        ("L4, Llama-3.1-8B bf16", 1),
        ("L4, Llama-3.1-8B bf16", 64),
        ("H200, Llama-3.1-8B bf16", 1),
        ("H200, Llama-3.1-8B bf16", 64),
    ]
    h200 = rows[2]
    assert 280 < h200["memory_bound_tokens_per_s"] < 300 and h200["limited_by"] == "memory"
    assert rows[3]["bound_tokens_per_s"] > 20 * h200["bound_tokens_per_s"]  # the batch shares the weights read
    assert all(r["measured_tokens_per_s"] is None for r in rows)  # a catalogue row measures nothing


def test_fp8_weights_buy_less_at_batch_64_where_the_kv_cache_is_most_of_the_bytes():
    """Lab 05 section 8: Llama-3.1-8B (8.03 B parameters; 32 layers x 8 KV heads x 128 x K and V = 131,072 bytes of
    bf16 KV per token) on an H100, 64 sequences of 4,096 tokens. The bytes a step reads, by hand."""
    from labs_lib.roofline import catalogue_rows

    bf16, fp8, fp8_kv = (
        catalogue_rows("llama-3.1-8b", ("H100-SXM",), (1, 64), 4096, weight_dtype=w, kv_dtype=kv)
        for w, kv in (("bf16", "bf16"), ("fp8", "bf16"), ("fp8", "fp8"))
    )
    kv_bf16 = 64 * 4096 * 131_072
    assert bf16[1]["bytes_per_step"] == 2 * 8_030_261_248 + kv_bf16 and fp8[1]["bytes_per_step"] == 8_030_261_248 + kv_bf16
    assert fp8_kv[1]["bytes_per_step"] == 8_030_261_248 + kv_bf16 // 2
    assert fp8[1]["what"] == "H100-SXM, Llama-3.1-8B fp8 weights, bf16 KV" and fp8_kv[1]["what"].endswith("8B fp8")
    lift = [f[i]["bound_tokens_per_s"] / bf16[i]["bound_tokens_per_s"] for f in (fp8, fp8_kv) for i in (0, 1)]
    assert 1.9 < lift[0] < 2.0 and 1.15 < lift[1] < 1.25  # batch 1: the weights are the bytes; batch 64: the KV is
    assert lift[2] == pytest.approx(2.0) and lift[3] == pytest.approx(2.0)  # both in 8 bits: every byte halved
    assert all(r["limited_by"] == "memory" for r in bf16 + fp8 + fp8_kv)


def test_measured_rows_are_one_per_batch_with_the_batch_throughput():
    from labs_lib.roofline import measured_rows

    rows = measured_rows("here", 500_000_000, 18_432, 600, 20e9, {1: 40.0, 4: 50.0}, compute_tokens_per_s=None)
    assert [r["batch"] for r in rows] == [1, 4]
    assert rows[0]["measured_tokens_per_s"] == 25.0 and rows[1]["measured_tokens_per_s"] == 80.0  # batch x 1000 / TPOT


def test_decode_cost_figure_shows_quadratic_work_without_the_cache_and_a_rising_floor_with_it():
    import matplotlib

    matplotlib.use("Agg")
    from labs_lib.models import load_model
    from labs_lib.plots import decode_cost_figure

    spec = load_model("llama-2-7b")
    fig, work_ratio, (contexts, floor_ms) = decode_cost_figure(spec, "H100-SXM", "fp16", points=12, steps=4096)
    # without the cache step t repeats t tokens' work: about 4096/2 times the cached total (a cached step's attention
    # over the prefix grows too, so a little less)
    assert 1500 < work_ratio < 2048, work_ratio
    assert np.all(np.diff(floor_ms) >= 0) and floor_ms[-1] > floor_ms[0]  # each token's KV is one more read
    weights_ms = weight_bytes(spec, "bf16") / 3.35e12 * 1000  # H100 SXM: 3.35 TB/s
    assert floor_ms[0] == pytest.approx(weights_ms, rel=0.01) and contexts[-1] == spec.max_position_embeddings
    assert len(fig.axes) == 2


def test_the_bandwidth_buffer_outgrows_the_last_level_cache():
    """A buffer that fits in the CPU's cache measures the cache: server CPUs report hundreds of MiB of L3 (480 MiB on
    this project's Intel machines), so however small a buffer is asked for, at least 3x the largest cache is read."""
    llc = last_level_cache_bytes()
    assert llc >= 2**20 or not Path("/sys/devices/system/cpu/cpu0/cache").exists()  # Linux reports at least an L2
    assert streamed_buffer_mib(1) * 2**20 >= CACHE_MULTIPLE * llc and streamed_buffer_mib(4096) == 4096
