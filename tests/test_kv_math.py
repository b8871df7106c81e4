"""KV-cache math against hand-computed values, published configs and real vLLM logs."""

import json
import math

import pytest
from conftest import REPO

from labs_lib import kv_math
from labs_lib.errors import BadInput
from labs_lib.kv_math import GIB, in_flight_batches, kv_cache, llamacpp_layout, plan_capacity, vllm_batch_defaults, weight_bytes
from labs_lib.models import ModelSpec, catalogue, load_model


def test_llama2_7b_fp16_2048_is_exactly_one_gib():
    est = kv_cache("llama-2-7b", 2048, 1, "fp16")
    assert est.kv_bytes == 2 * 32 * 32 * 128 * 2 * 2048 == 1_073_741_824


def test_deepseek_v3_mla_bytes_per_token():
    est = kv_cache("deepseek-v3", 1, 1, "bf16")
    assert est.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert est.attention == "MLA"


@pytest.mark.parametrize("hf_id", list(catalogue()))
def test_every_catalogue_model_matches_the_reference_bytes_per_token(hf_id):
    entry = catalogue()[hf_id]
    assert kv_cache(hf_id, 1, 1, "bf16").kv_bytes_per_token == entry["reference_kv_bytes_per_token_bf16"]


def test_reference_file_and_catalogue_agree():
    ref = (
        json.loads((REPO.parent / "shared" / "reference" / "model-configs.json").read_text())
        if (REPO.parent / "shared").exists()
        else None
    )
    if ref is None:
        pytest.skip("../shared is not beside this checkout")
    by_id = {m["hf_id"]: m for m in ref}
    for hf_id, entry in catalogue().items():
        assert entry["num_layers"] == by_id[hf_id]["num_hidden_layers"]
        assert entry["num_kv_heads"] == by_id[hf_id]["num_key_value_heads"]


def test_attention_kinds():
    assert load_model("llama-2-7b").attention == "MHA"
    assert load_model("llama-3.1-8b").attention == "GQA"
    assert load_model("gemma-3-270m").attention == "MQA"
    assert load_model("deepseek-v3").attention == "MLA"


def test_gqa_is_kv_heads_over_q_heads_of_mha():
    mha = ModelSpec("m", 80, 64, 64, 128, 8192, 32000)
    gqa = ModelSpec("g", 80, 64, 8, 128, 8192, 32000)
    mqa = ModelSpec("q", 80, 64, 1, 128, 8192, 32000)
    b = [kv_cache(m, 4096, 1, "fp16").kv_bytes for m in (mha, gqa, mqa)]
    assert b[0] == 10 * GIB and b[1] * 8 == b[0] and b[2] * 64 == b[0]


def test_sliding_window_layers_stop_growing_past_the_window():
    gemma = load_model("gemma-3-270m")  # 15 sliding layers (W=512), 3 full
    per_layer = 2 * 1 * 256 * 2
    assert kv_cache(gemma, 512, 1, "fp16").kv_bytes == 18 * 512 * per_layer
    assert kv_cache(gemma, 4096, 1, "fp16").kv_bytes == (3 * 4096 + 15 * 512) * per_layer
    mistral = load_model("mistral-7b")  # every layer slides, W=4096
    assert kv_cache(mistral, 8192, 1, "bf16").kv_bytes == kv_cache(mistral, 4096, 1, "bf16").kv_bytes


@pytest.mark.parametrize(
    "name,bits",
    [("fp32", 32), ("fp16", 16), ("bf16", 16), ("fp8", 8), ("int8", 8), ("int4", 4), ("q8_0", 8.5), ("q4_0", 4.5), ("q5_1", 6)],
)
def test_dtype_bits_include_block_scales(name, bits):
    assert kv_math.dtype(name).bits_per_value == bits


def test_block_quantized_kv_bytes_count_scales():
    # Llama-2-7B: 4096 values per K row per layer = 128 blocks of 32 -> 128 x 34 bytes in q8_0
    est = kv_cache("llama-2-7b", 1, 1, "q8_0")
    assert est.kv_bytes_per_token_per_layer == 2 * 128 * 34
    assert kv_cache("llama-2-7b", 1, 1, "q4_0").kv_bytes_per_token_per_layer == 2 * 128 * 18


def test_dtype_aliases():
    assert kv_math.dtype("f16") is kv_math.dtype("float16") is kv_math.dtype("fp16")
    assert kv_math.dtype("fp8_e4m3").name == "fp8"


def test_tensor_parallel_splits_then_replicates_heads():
    full = kv_cache("llama-3.1-70b", 8192, 1, "bf16", tp=1)
    for tp in (2, 4, 8):
        est = kv_cache("llama-3.1-70b", 8192, 1, "bf16", tp=tp)
        assert est.kv_bytes_per_rank * tp == full.kv_bytes == est.kv_bytes
    tp16 = kv_cache("llama-3.1-70b", 8192, 1, "bf16", tp=16)
    assert tp16.kv_bytes_per_rank == kv_cache("llama-3.1-70b", 8192, 1, "bf16", tp=8).kv_bytes_per_rank
    assert tp16.kv_bytes == 2 * full.kv_bytes


def test_mla_latent_is_held_whole_by_every_rank():
    one = kv_cache("deepseek-v3", 4096, 1, "bf16", tp=1)
    eight = kv_cache("deepseek-v3", 4096, 1, "bf16", tp=8)
    assert eight.kv_bytes_per_rank == one.kv_bytes_per_rank and eight.kv_bytes == 8 * one.kv_bytes


@pytest.mark.parametrize("model,tp", [("llama-2-7b", 3), ("llama-3.1-8b", 5), ("llama-2-7b", 0), ("qwen2.5-7b", 8)])
def test_tp_that_does_not_split_heads_is_refused(model, tp):
    with pytest.raises(BadInput, match="tp"):
        kv_cache(model, 1024, 1, "fp16", tp=tp)


def test_paged_and_contiguous_waste():
    est = kv_cache("llama-2-7b", 1000, 2, "fp16", block_size=16, max_len=4096)
    per_token = 2 * 32 * 32 * 128 * 2
    assert est.kv_bytes_paged == 2 * 1008 * per_token  # 63 blocks of 16
    assert est.paged_waste_bytes == 2 * 8 * per_token
    assert est.kv_bytes_contiguous == 2 * 4096 * per_token
    assert est.contiguous_waste_bytes == 2 * 3096 * per_token


def test_allocation_utilization():
    util = kv_math.allocation_utilization([10, 20, 30], max_len=100, block_size=16)
    assert util["contiguous"] == pytest.approx(60 / 300)
    assert util["paged"] == pytest.approx(60 / (16 + 32 + 32))


def test_weight_bytes():
    assert weight_bytes("llama-2-7b", "fp16") == 6_738_415_616 * 2
    assert weight_bytes("llama-2-7b", "int4") == 6_738_415_616 // 2
    assert weight_bytes("llama-2-7b", "q8_0") == -(-6_738_415_616 // 32) * 34


@pytest.mark.parametrize(
    "bad",
    [
        dict(seq_len=0),
        dict(seq_len=-5),
        dict(seq_len="abc"),
        dict(batch=0),
        dict(kv_dtype="fp7"),
        dict(block_size=0),
        dict(seq_len=100, max_len=10),
    ],
)
def test_bad_input_names_the_value(bad):
    args = {"model": "llama-2-7b", "seq_len": 1024, **bad}
    with pytest.raises(BadInput) as info:
        kv_cache(**args)
    assert "allowed" in str(info.value) and len(str(info.value).splitlines()) == 1


# ---- capacity planner against published vLLM logs


@pytest.mark.parametrize(
    "available_gib,max_len,logged_blocks,logged_concurrency",
    [
        (3.81, 20000, 1952, 1.56),  # vllm#10517: Llama-3.1-8B on an RTX 3090, gpu_memory_utilization 0.9
        (2.89, 29000, 1478, 0.82),  # same issue, max_model_len 29000 (refuses to start: below 1x)
    ],
)
def test_capacity_reproduces_vllm_logs(available_gib, max_len, logged_blocks, logged_concurrency):
    plan = plan_capacity("llama-3.1-8b", max_len, kv_dtype="bf16", available_kv_gib=available_gib)
    page_all_layers = 16 * 131072
    hidden_by_rounding = 0.005 * GIB / page_all_layers  # the log prints GiB to 2 decimals
    assert abs(plan.num_blocks - logged_blocks) <= hidden_by_rounding
    exact = plan_capacity("llama-3.1-8b", max_len, kv_dtype="bf16", available_kv_gib=logged_blocks * page_all_layers / GIB)
    assert exact.num_blocks == logged_blocks
    assert round(exact.max_concurrency, 2) == logged_concurrency
    assert exact.fits_one_request == (logged_concurrency >= 1)


def test_vllm_pr13596_token_count_and_concurrency():
    # vllm PR #13596's example: "# GPU blocks: 127626" -> "GPU KV cache size: 2,042,016 tokens", 997.08x at 2,048
    plan = plan_capacity("llama-3.1-8b", 2048, available_kv_gib=127626 * 16 * 131072 / GIB)
    assert plan.num_blocks == 127626 and plan.kv_cache_tokens == 2_042_016
    assert round(plan.max_concurrency, 2) == 997.08


def test_capacity_from_gpu_subtracts_weights_and_overhead():
    plan = plan_capacity(
        "llama-2-7b", 2048, kv_dtype="fp16", gpu_memory_gib=24, weight_gib=14, overhead_gib=2, gpu_memory_utilization=0.9
    )
    assert plan.available_kv_bytes == math.ceil(24 * GIB * 0.9) - 14 * GIB - 2 * GIB
    assert plan.num_blocks == plan.available_kv_bytes // (16 * 524288)
    assert plan.kv_cache_tokens == plan.num_blocks * 16


def test_capacity_reports_weights_that_do_not_fit():
    plan = plan_capacity("llama-3.1-70b", 4096, gpu="L4")
    assert plan.num_blocks == 0 and not plan.fits_one_request and "exceed" in plan.problem


def test_capacity_tp_splits_weights_and_heads():
    one = plan_capacity("llama-3.1-70b", 4096, gpu="H100-SXM", tp=4)
    assert one.weight_bytes_per_rank == weight_bytes("llama-3.1-70b", "bf16") // 4
    assert one.page_bytes == 16 * 2 * 2 * 128 * 2  # 2 KV heads per rank


# ---- llama.cpp engine layout (the logged sizes are checked against the real engine in test_engine.py)


def test_llamacpp_layout_matches_a_logged_start_up():
    # logged by xllamacpp 2026.10 for Gemma 3 270M, n_ctx 4096, n_parallel 2:
    #   llama_kv_cache: size = 12.00 MiB (2048 cells, 3 layers, 2/2 seqs), K (f16): 6.00 MiB, V (f16): 6.00 MiB
    #   llama_kv_cache: size = 30.00 MiB (1024 cells, 15 layers, 2/2 seqs), K (f16): 15.00 MiB, V (f16): 15.00 MiB
    layout = llamacpp_layout("gemma-3-270m", 4096, 2)
    full, swa = layout.caches
    assert (full.cells, full.layers, full.streams, full.kv_bytes) == (2048, 3, 2, 12 * 2**20)
    assert (swa.cells, swa.layers, swa.streams, swa.kv_bytes) == (1024, 15, 2, 30 * 2**20)


def test_llamacpp_layout_padding_and_swa_full():
    layout = llamacpp_layout("gemma-3-270m", 1000, 3)  # 1000 -> 1024 -> 341 per slot -> 512
    assert layout.n_ctx_seq == 512 and layout.n_ctx == 1536
    full_swa = llamacpp_layout("gemma-3-270m", 8192, 1, swa_full=True)
    assert full_swa.caches[1].cells == 8192
    small_ubatch = llamacpp_layout("gemma-3-270m", 8192, 1, ubatch=128)
    assert small_ubatch.caches[1].cells == 768  # 512 + 128 padded to 256


def test_the_planner_takes_vllms_step_budget_for_the_card():
    """vLLM 0.33's API server defaults max_num_batched_tokens by card (EngineArgs.get_batch_defaults): 8,192 on
    H100/H200, 16,384 from 160 GiB, 2,048 on an A100 or a smaller card. The planner assumed 2,048 everywhere,
    which on a sliding-window model under-counts the window's blocks and over-counts concurrency on an H100."""
    from labs_lib.kv_math import vllm_batch_defaults

    gib = 2**30
    assert vllm_batch_defaults(int(79.65 * gib), "NVIDIA H100 80GB HBM3")["max_num_batched_tokens"] == 8192
    assert vllm_batch_defaults(int(140.4 * gib), "H200") == {**vllm_batch_defaults(int(80 * gib), "H100-SXM")}
    assert vllm_batch_defaults(int(80 * gib), "A100-80GB")["max_num_batched_tokens"] == 2048  # vLLM PR #17885
    assert vllm_batch_defaults(180 * gib, "NVIDIA B200")["max_num_seqs"] == 1024
    assert vllm_batch_defaults(180 * gib, "NVIDIA B200")["max_num_batched_tokens"] == 16384
    assert vllm_batch_defaults(22 * gib, "L4")["max_num_seqs"] == 256
    assert vllm_batch_defaults(0, on_cpu=True, world_size=2)["max_num_batched_tokens"] == 4096

    h100 = plan_capacity("gemma-3-27b", 32768, gpu="H100-SXM")
    as_before = plan_capacity("gemma-3-27b", 32768, gpu="H100-SXM", max_num_batched_tokens=2048)
    assert h100.max_num_batched_tokens == 8192 and as_before.max_num_batched_tokens == 2048
    assert h100.blocks_per_request > as_before.blocks_per_request and h100.max_concurrency < as_before.max_concurrency
    assert plan_capacity("gemma-3-27b", 32768, gpu="A100-80GB").max_num_batched_tokens == 2048
    assert plan_capacity("llama-3.1-8b", 8192, available_kv_gib=4).max_num_batched_tokens == 2048  # no card: vLLM's small default


def test_the_sliding_window_figure_shows_windowed_caches_growing_slower():
    import matplotlib

    matplotlib.use("Agg")
    from labs_lib.plots import sliding_window_figure

    lengths = [1024, 131072]
    fig = sliding_window_figure(["llama-3.1-8b", "gemma-3-27b"], lengths)
    llama, gemma = ([float(y) for y in line.get_ydata()] for line in fig.axes[0].get_lines())
    assert llama[1] / llama[0] == pytest.approx(128)  # every layer keeps every token
    assert gemma[1] / gemma[0] < 30  # 5 of 6 layers keep a 1,024-token window
    assert "52/62 layers slide (W=1024)" in fig.axes[0].get_legend().get_texts()[1].get_text()


# vLLM 0.33.0 on CUDA, read in its wheel: VllmConfig.max_concurrent_batches (vllm/config/vllm.py) is 2 under async
# scheduling, which VllmConfig.__post_init__ turns on by default on one CUDA GPU; platforms/cpu.py turns it off;
# max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens. The CPU build installed here shares
# SlidingWindowSpec.max_admission_blocks_per_request (v1/kv_cache_interface.py), which the test asks directly.
_VLLM_SWA_BLOCKS = """
import json, sys, torch
from vllm.v1.kv_cache_interface import SlidingWindowSpec
spec = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=256, dtype=torch.bfloat16, sliding_window=512)
print(json.dumps([spec.max_admission_blocks_per_request(max_in_flight_tokens=t, max_model_len=m) for t, m in json.loads(sys.argv[1])]))
"""


@pytest.mark.parametrize("card", ["H100-SXM", "L4"])
def test_the_planner_reserves_what_vllm_033_reserves_for_sliding_window_layers_on_cuda_and_on_cpu(card, vllm_installed):
    """Gemma 3 (15 sliding-window layers of 512, 3 full; vLLM groups them 3 by 3) at 8,192 tokens: a sliding group
    reserves window - 1 + in-flight tokens per request, in flight being twice the card's step budget on a GPU
    (async scheduling) and once on CPU. The expected blocks come from vLLM's own function."""
    import json
    import subprocess

    from labs_lib.engines.vllm import find_vllm

    gpu = plan_capacity("gemma-3-270m", 2048, gpu=card)
    budget = vllm_batch_defaults(gpu.gpu_memory_bytes, gpu.gpu)["max_num_batched_tokens"]
    assert gpu.max_in_flight_tokens == 2 * budget  # async scheduling's two batches
    on_cpu = plan_capacity("gemma-3-270m", 2048, available_kv_gib=1, block_size=16, on_cpu=True)
    assert on_cpu.max_in_flight_tokens == 2048
    asked = [[2 * budget, 2048], [2048, 2048], [2 * budget, 8192]]
    done = subprocess.run(
        [find_vllm().python, "-c", _VLLM_SWA_BLOCKS, json.dumps(asked)], capture_output=True, text=True, check=True, timeout=300
    )
    swa_gpu, swa_cpu, swa_gpu_long = json.loads(done.stdout.strip().splitlines()[-1])
    full_blocks = 2048 // 16
    assert gpu.blocks_per_request == full_blocks + 5 * swa_gpu  # 1 full group, 5 sliding groups of 3 layers
    assert on_cpu.blocks_per_request == full_blocks + 5 * swa_cpu
    # lab 04's table plans each pool with the card's budget: the same pool holds fewer requests than with 2,048 assumed
    long = plan_capacity("gemma-3-270m", 8192, available_kv_gib=4, gpu=card)
    assert long.blocks_per_request == 8192 // 16 + 5 * swa_gpu_long
    assumed = plan_capacity("gemma-3-270m", 8192, available_kv_gib=4, async_scheduling=False)  # what lab 04 planned
    assert assumed.max_concurrency / long.max_concurrency == pytest.approx({"H100-SXM": 2.34, "L4": 1.49}[card], abs=0.01)


def test_async_scheduling_is_off_on_cpu_and_with_pipeline_parallelism():
    assert in_flight_batches() == 2 and in_flight_batches(on_cpu=True) == 1
    assert in_flight_batches(pipeline_parallel=2) == 2 and in_flight_batches(pipeline_parallel=4) == 4
    assert in_flight_batches(async_scheduling=False) == 1
