"""The vLLM adapter against real vLLM output (fixtures with provenance in tests/fixtures/vllm/)."""

import itertools
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import FIXTURES, assert_one_line_error, fake_key, run_cli

from labs_lib.engines import EngineConfig
from labs_lib.engines.metrics import delta, parse_metrics, token_counts
from labs_lib.engines.vllm import (
    VLLMEngine,
    command_line,
    known_flags,
    parse_help_flags,
    parse_startup_log,
    sentencepiece_text,
    serve_args,
    unknown_flags,
)
from labs_lib.errors import BadInput
from labs_lib.kv_math import plan_capacity
from labs_lib.models import ModelSpec
from labs_lib.paths import DATA_DIR

VLLM = FIXTURES / "vllm"
HELP = (VLLM / "serve_help_all_0.33.0.txt").read_text()


def test_flags_come_from_the_real_help():
    flags = parse_help_flags(HELP)
    for flag in (
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enable-prefix-caching",
        "--disable-prefix-caching",
        "--enable-chunked-prefill",
        "--disable-chunked-prefill",
        "--kv-cache-dtype",
        "--attention-backend",
        "--quantization",
        "--block-size",
        "--tensor-parallel-size",
        "--served-model-name",
        "--api-key",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
    ):
        assert flag in flags, flag
    assert "--swap-space" not in flags
    # accepted by vLLM's boolean options though --help lists only --enable/--disable (issue 12: it was refused)
    assert "--no-enable-prefix-caching" in flags and "--no-enable-chunked-prefill" in flags
    version, shipped = known_flags()
    assert shipped == frozenset(flags) or version != "0.33.0"


def test_every_flag_the_adapter_emits_exists_in_vllm_0_33():
    from labs_lib.engines.vllm import EVERY_FIELD

    config = EVERY_FIELD.with_(
        model="Qwen/Qwen2.5-7B-Instruct", parallel=64, chunked_prefill=True, attention_backend="FLASHINFER"
    )
    args = serve_args(config, 8123)
    assert unknown_flags(args, parse_help_flags(HELP)) == []
    assert args[:2] == ["serve", "Qwen/Qwen2.5-7B-Instruct"]
    pairs = dict(itertools.pairwise(args))
    assert pairs["--port"] == "8123" and pairs["--max-num-seqs"] == "64" and pairs["--kv-cache-dtype"] == "fp8"
    assert "--no-enable-prefix-caching" in args and "--enable-chunked-prefill" in args and "--enforce-eager" in args


def test_every_flag_the_labs_emit_exists_in_vllm_0_33():
    """Every grid's configurations and every EngineConfig field (what bench/gpu_install_check.sh checks against
    the GPU set's own vLLM), against vLLM 0.33.0's recorded help."""
    from labs_lib.engines.vllm import emitted_flags
    from labs_lib.sweep import grid_configs

    flags = emitted_flags(grid_configs("vllm"))
    assert {"--kv-cache-dtype", "--quantization", "--attention-backend", "--no-enable-prefix-caching"} <= set(flags)
    assert unknown_flags(list(flags), parse_help_flags(HELP)) == []


def test_parallel_one_is_max_num_seqs_one_and_none_is_vllms_default():
    assert (
        serve_args(EngineConfig(model="m", parallel=1))[
            serve_args(EngineConfig(model="m", parallel=1)).index("--max-num-seqs") + 1
        ]
        == "1"
    )
    assert "--max-num-seqs" not in serve_args(EngineConfig(model="m"))


def test_the_key_never_goes_on_the_command_line(monkeypatch):
    monkeypatch.setenv("MY_VLLM_KEY", fake_key("vllm-canary-"))
    line = command_line(EngineConfig(model="m", api_key_env="MY_VLLM_KEY"))
    assert "canary" not in line and line.startswith("VLLM_API_KEY=$MY_VLLM_KEY vllm serve m")


def test_removed_flag_is_reported_before_launch():
    with pytest.raises(BadInput, match="--swap-space"):
        VLLMEngine(EngineConfig(model="m", extra_args=["--swap-space", "8"]))
    assert "--swap-space 8" in (VLLM / "swap_space_error_0.33.0.txt").read_text()  # what vLLM itself says


def test_kv_dtype_vocabulary():
    with pytest.raises(BadInput, match="q8_0"):
        serve_args(EngineConfig(model="m", kv_cache_dtype="q8_0"))
    assert "--kv-cache-dtype" not in serve_args(EngineConfig(model="m"))  # the default f16 = the model's dtype (auto)


def test_starting_without_vllm_is_one_clear_error(tmp_path):
    # LABS_VLLM_PYTHON names the one vLLM to use: here one that does not exist, as on a machine without vLLM
    code = (
        "from labs_lib.engines import EngineConfig, make_engine\n"
        "make_engine('vllm', EngineConfig(model='Qwen/Qwen2.5-7B-Instruct')).start()\n"
    )
    env = {**os.environ, "LABS_VLLM_PYTHON": str(tmp_path / "no-python")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0 and "vLLM is not installed: run `make setup-vllm`" in proc.stderr


@pytest.mark.parametrize(
    "name,expected",
    [
        (
            "startup_v0_issue10517.log",
            {
                "available_kv_gib": 3.81,
                "num_gpu_blocks": 1952,
                "max_model_len": 20000,
                "max_concurrency": 1.56,
                "weights_gib": 14.9888,
                "gpu_memory_utilization": 0.90,
            },
        ),
        (
            "startup_v1_pr12569.log",
            {"num_gpu_blocks": 1381, "max_model_len": 2048, "max_concurrency": 10.79, "weights_gib": 67.7229},
        ),
        (
            "startup_v1_twoline_lmcache1739.log",
            {
                "available_kv_gib": 6.51,
                "kv_cache_tokens": 42656,
                "max_model_len": 32768,
                "max_concurrency": 1.30,
                "kv_device": "GPU",
            },
        ),
        (
            "startup_v1_twoline_club3090_612.log",
            {"available_kv_gib": 5.98, "kv_cache_tokens": 567978, "max_model_len": 131072, "max_concurrency": 4.33},
        ),
        ("startup_oneline_cpu_backend.log", {"kv_cache_tokens": 23296, "max_model_len": 4096, "max_concurrency": 5.69}),
    ],
)
def test_startup_log_parser_on_real_logs(name, expected):
    alloc = parse_startup_log((VLLM / name).read_text())
    for key, value in expected.items():
        assert getattr(alloc, key) == pytest.approx(value), key
    assert alloc.error is None


def test_startup_log_parser_sees_a_refused_start():
    alloc = parse_startup_log((VLLM / "startup_v0_issue10517_too_long.log").read_text())
    assert alloc.max_concurrency == 0.82 and "larger than the maximum number of tokens" in alloc.error


def test_planner_reproduces_a_logged_pool():
    # LMCache#1739: Qwen3-14B (40 layers, 40 heads, 8 KV heads of 128), 6.51 GiB available -> 42,656 tokens, 1.30x at 32,768
    qwen3_14b = ModelSpec("Qwen3-14B", 40, 40, 8, 128, 5120, 151936)
    logged = parse_startup_log((VLLM / "startup_v1_twoline_lmcache1739.log").read_text())
    plan = plan_capacity(qwen3_14b, logged.max_model_len, kv_dtype="bf16", available_kv_gib=logged.available_kv_gib)
    assert plan.kv_cache_tokens == logged.kv_cache_tokens
    assert round(plan.max_concurrency, 2) == logged.max_concurrency


def test_metrics_page_of_vllm_0_33():
    m = parse_metrics((VLLM / "metrics_0.33.0.txt").read_text())
    assert m["vllm:num_requests_running"] == 3 and m["vllm:num_requests_waiting"] == 2
    assert m["vllm:kv_cache_usage_perc"] == pytest.approx(0.42)
    assert m["vllm:prefix_cache_queries_total"] == 4096 and m["vllm:prefix_cache_hits_total"] == 2048
    assert m["vllm:num_preemptions_total"] == 1 and m["vllm:time_to_first_token_seconds_count"] == 3
    counts = token_counts(delta({}, m), "vllm")
    assert counts == {"prompt_tokens": 4096, "output_tokens": 96, "prompt_tokens_cached": 2048}
    assert "vllm:gpu_cache_usage_perc" not in m  # the old name is gone


def test_metrics_page_of_vllm_0_10_partial():
    m = parse_metrics((VLLM / "metrics_0.10.0_partial.txt").read_text())
    assert m["vllm:prefix_cache_queries_total"] == 32 and m["vllm:kv_cache_usage_perc"] < 1e-4


def test_error_bodies_are_diagnosed():
    from labs_lib.doctor import diagnose

    bodies = json.loads((DATA_DIR / "vllm_errors_0.33.0.json").read_text())
    assert diagnose(bodies["unauthorized_401"]).code == "auth"
    assert diagnose(bodies["model_not_found_404"]).code == "model_not_found"
    assert diagnose(bodies["context_exceeded_400"]).code == "context_exceeded"


def test_sweep_dry_run_prints_vllm_commands_for_the_gpu_grid():
    proc = run_cli("sweep", "--engine", "vllm", "--grid", "data/grids/gpu_tuning.yaml", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    # the shipped model by default on a GPU too (no hub, no token): its converted folder, under its own id
    assert len(lines) == 5 and all(
        ln.startswith("vllm serve ") and "gemma-3-270m-hf " in ln and "--served-model-name gemma-3-270m " in ln for ln in lines
    ), lines
    assert "--gpu-memory-utilization 0.5 --no-enable-prefix-caching" in lines[0]
    assert "--kv-cache-dtype fp8 --attention-backend FLASH_ATTN" in lines[-1]
    flags = parse_help_flags(HELP)
    for line in lines:
        assert unknown_flags(line.split("#")[0].split(), flags) == []
    article = run_cli("sweep", "--grid", "data/grids/article_seed002.yaml", "--dry-run")
    assert re.search(r"WARNING: vLLM [\d.]+ does not know --swap-space", article.stdout), article.stdout


def test_sweep_dry_run_for_a_card_from_any_machine():
    """`--device gpu` prints what a card runs (vLLM's own pool and CUDA graphs) wherever the dry run is made; a
    device it does not know is one line and exit 2."""
    proc = run_cli("sweep", "--grid", "data/grids/gpu_quantization.yaml", "--dry-run", "--device", "gpu")
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and len(lines) == 5, (proc.stdout, proc.stderr)
    assert not any("--enforce-eager" in line or "--kv-cache-memory-bytes" in line for line in lines), lines
    assert_one_line_error(run_cli("sweep", "--grid", "data/grids/gpu_quantization.yaml", "--dry-run", "--device", "cuda"), "cuda")


def test_sweep_dry_run_with_a_model_override():
    proc = run_cli("sweep", "--grid", "data/grids/gpu_kv_pool.yaml", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--dry-run")
    assert proc.stdout.count("vllm serve meta-llama/Llama-3.1-8B-Instruct") == 4


def test_sweep_bad_grid_is_one_line(tmp_path):
    assert_one_line_error(run_cli("sweep", "--grid", str(tmp_path / "none.yaml")), "none.yaml")


def test_a_refused_cpu_start_is_reported_by_its_root_cause():
    """vLLM on CPU reserves gpu_memory_utilization x RAM and refuses to start when other processes hold more
    than the rest; the API server's wrapper error must not hide the worker's reason."""
    from labs_lib.doctor import diagnose
    from labs_lib.engines.vllm import first_error

    reason = first_error((VLLM / "startup_cpu_memory_utilization_0.32.0.log").read_text())
    assert reason.startswith("ValueError: Available memory on node 0") and "--gpu-memory-utilization" in reason
    assert diagnose(reason).code == "engine_memory"


def test_a_refusal_keeps_vllms_fix_as_far_as_the_user_sees_it():
    """vLLM's refusal of a max_model_len its pool cannot hold ends with its fix, about 560 characters in: the
    engine's reason keeps it, and so does what lab 06 shows of the failed start (its log's path after it). A longer
    failure is cut at a word, and says so."""
    from labs_lib.doctor.troubleshoot import ERROR_CHARS, attempt
    from labs_lib.engines.vllm import first_error

    reason = first_error((VLLM / "startup_refused_max_model_len_0.32.0.log").read_text())
    assert reason.startswith("ValueError: To serve at least one request") and reason.endswith("for more details."), reason

    def refused():
        raise RuntimeError(f"vllm failed to start: {reason} (log: /root/.cache/llm-inference-labs/logs/vllm-1.log)")

    seen = attempt("max_model_len 32768 in 0.02 GiB", refused).error
    assert "or decreasing `max_model_len` when initializing the engine" in seen and seen.endswith("vllm-1.log)"), seen

    def long_failure():
        raise RuntimeError("word " * 400)

    cut = attempt("a long failure", long_failure).error
    assert len(cut) <= ERROR_CHARS and cut.endswith("word …"), cut[-20:]


def test_cpu_kv_pool_is_its_own_flag():
    args = serve_args(EngineConfig(kv_cache_gib=0.5))
    assert dict(itertools.pairwise(args))["--kv-cache-memory-bytes"] == str(2**29)
    assert unknown_flags(args, parse_help_flags(HELP)) == []


def test_a_vllm_api_key_in_the_environment_does_not_lock_an_engine_configured_without_one(monkeypatch, vllm_installed):
    """vLLM reads VLLM_API_KEY itself: a key exported for another server must not reach an engine whose
    configuration names none (found by lab 02's canary run: every request got 401)."""
    monkeypatch.setenv("VLLM_API_KEY", fake_key("canary-"))
    _, env, _ = VLLMEngine(EngineConfig(model="Qwen/Qwen2.5-7B-Instruct"))._command()
    assert "VLLM_API_KEY" in env and env["VLLM_API_KEY"] is None  # removed from the child's environment
    monkeypatch.setenv("MY_VLLM_KEY", "k-" + "x" * 20)
    _, env, _ = VLLMEngine(EngineConfig(model="Qwen/Qwen2.5-7B-Instruct", api_key_env="MY_VLLM_KEY"))._command()
    assert env["VLLM_API_KEY"] == "k-" + "x" * 20


def test_sentencepiece_names_become_text_one_piece_per_token():
    """Gemma's /tokenize names (vLLM, return_token_strs): "▁" a space; byte tokens for what the vocabulary lacks
    (here é = C3 A9 as two byte tokens), decoded together and held by the first."""
    names = ["The", "\u2581caf", "<0xC3>", "<0xA9>", "\u2581is", "\u2581open"]
    pieces = sentencepiece_text(names)
    assert len(pieces) == len(names)
    assert "".join(pieces) == "The café is open"
    assert pieces[2:4] == ["é", ""]


def test_scoring_without_a_bos_leaves_out_the_token_that_has_no_context():
    """vLLM's prompt_logprobs as /v1/completions returns them for a prompt without BOS (Qwen's tokenizer adds
    none): the first entry is null. Scoring used to index into it (TypeError); the live case is in
    test_vllm_live.py."""
    from labs_lib.engines.vllm import scores_from_prompt_logprobs

    prompt_logprobs = [
        None,
        {"791": {"logprob": -2.5, "rank": 3, "decoded_token": " the"}, "13": {"logprob": -0.4, "rank": 1, "decoded_token": "."}},
        {"6": {"logprob": -0.1, "rank": 1, "decoded_token": "a"}},
    ]
    scores = scores_from_prompt_logprobs(prompt_logprobs, [40, 791, 6])
    assert scores.token_ids == [791, 6] and list(scores.logprobs) == [-2.5, -0.1]
    assert scores.top1_ids == [13, 6] and scores.top_logprobs[0] == {13: -0.4, 791: -2.5}
    with_bos = scores_from_prompt_logprobs(prompt_logprobs, [791, 6])  # the null was the BOS's: every token scored
    assert with_bos.token_ids == [791, 6]


def test_a_configuration_that_cannot_run_is_a_row_with_its_reason():
    """Lab 05 on vLLM: one configuration that cannot start (here a KV type vLLM does not have; on a GPU a
    download, an OOM, a kernel the card lacks) is a row with its one-line reason, and the comparison goes on.
    It used to end the whole comparison."""
    from labs_lib.load import run_blocking
    from labs_lib.quant_compare import QuantSettings, compare_models

    df = run_blocking(compare_models([{"kv_cache_dtype": "q4_0"}], settings=QuantSettings.quick(), progress=False))
    assert list(df.status) == ["failed"], df
    assert "q4_0" in df.error[0] and "\n" not in df.error[0] and df.kv_dtype[0] == "q4_0"


def test_lab04_gpu_models_take_a_family_or_a_list():
    from labs_lib.errors import BadInput
    from labs_lib.params import lab05
    from labs_lib.quant_compare import GPU_MODEL_FAMILIES, download_note

    common = {
        "engine": "llamacpp",
        "variants": ["Q4_K_M"],
        "kv_dtypes": ["f16"],
        "eval_tokens": 64,
        "quick": True,
        "interactive": False,
    }
    assert lab05(gpu_models="shipped", **common).gpu_models == [dict(m) for m in GPU_MODEL_FAMILIES["shipped"]]
    assert download_note(lab05(gpu_models="shipped", **common).gpu_models) == ""  # the shipped model: no hub
    note = download_note(lab05(gpu_models="qwen2.5-7b", **common).gpu_models)
    assert "about 26.4 GB" in note and "Qwen/Qwen2.5-7B-Instruct-AWQ" in note
    with pytest.raises(BadInput, match=r"allowed: shipped, qwen2\.5-7b"):
        lab05(gpu_models="llama-70b", **common)
    # the lab's first line names what it compares on its engine: llama.cpp's files, or vLLM's configurations
    assert lab05(gpu_models="shipped", **common).compared == "weights Q4_K_M; KV f16"
    on_vllm = lab05(gpu_models="shipped", **{**common, "engine": "vllm", "variants": ["Q4_K_M", "Q4_0"]}).compared
    assert on_vllm.startswith("configurations: as served; ") and on_vllm.endswith("; kv_cache_dtype=fp8"), on_vllm
    assert "Q4_0" not in on_vllm and "Q4_K_M" not in on_vllm, on_vllm


def test_labs_share_one_gpu_and_a_full_card_says_who_holds_it():
    """On a GPU each lab's engine reserved vLLM's default 0.92 of the card, so the next lab's could not start
    ("Free memory on device …"). The shipped model now takes a few GiB; a start that vLLM's own check would
    refuse is refused first, in one line naming the process that holds the card. Fake NVML readings (no GPU here)."""
    from labs_lib.engines.vllm import SHIPPED_GPU_BUDGET_GIB, gpu_shortfall, shared_gpu_utilization
    from labs_lib.gpu import GPUProcess, GPUReading

    gib = 2**30
    h100 = int(79.65 * gib)
    util = shared_gpu_utilization(h100)
    assert util * h100 == pytest.approx(SHIPPED_GPU_BUDGET_GIB * gib, rel=0.01) and util < 0.15
    assert shared_gpu_utilization(4 * gib) == 0.92  # a small card: vLLM's own default, never more
    first_lab = GPUProcess(4242, "python -m vllm.entrypoints.openai.api_server --model …", int(70 * gib))
    busy = GPUReading(0, "NVIDIA H100 80GB HBM3", h100, int(70 * gib), h100 - int(70 * gib), 0.0)
    assert gpu_shortfall(util, busy, [first_lab]) is None  # lab 02's engine holds 70 GiB; lab 04's still fits
    line = gpu_shortfall(0.92, busy, [first_lab])
    assert line and "\n" not in line and "PID 4242" in line and "73.3 GiB" in line and "Shut Down" in line, line


@pytest.mark.parametrize(
    "log,weights_mib,kv_mib",
    [("startup_v1_pr12569.log", 69348.2, None), ("startup_v1_twoline_lmcache1739.log", None, 6666.2)],
)
def test_on_a_gpu_lab04_memory_is_what_vllm_logs(log, weights_mib, kv_mib):
    """On a GPU the weights and the KV pool live on the card, so lab 05 measured the host RSS of the vLLM
    process (or NVML's whole-card figure, other processes included). It now takes what vLLM logs; recorded real
    GPU start-up logs (tests/fixtures/vllm/README.md gives each one's source) stand in for a GPU here."""
    from labs_lib.engines.vllm import VLLMEngine, parse_startup_log

    engine = VLLMEngine(EngineConfig(model="org/model"), check_flags=False)
    engine.allocation = parse_startup_log((FIXTURES / "vllm" / log).read_text())
    summary = engine.allocation_summary()
    assert summary.get("weights_MiB") == weights_mib and summary.get("kv_pool_MiB") == kv_mib, summary


def test_a_backend_and_kv_dtype_the_card_cannot_run_is_refused_with_the_reason():
    """gpu_tuning.yaml's last step (FLASH_ATTN with an fp8 KV cache) cannot start on an L4 or an A100 (vLLM 0.33
    runs fp8 KV in FlashAttention only on Hopper and Blackwell): the reason, before a minute is spent starting."""
    from labs_lib.engines.vllm import unsupported_on_card
    from labs_lib.sweep import load_grid

    last = EngineConfig(**load_grid("data/grids/gpu_tuning.yaml").configs()[-1])
    assert last.attention_backend == "FLASH_ATTN" and last.kv_cache_dtype == "fp8"
    why = unsupported_on_card(last, (8, 9))  # L4, RTX 4090
    assert why and "Hopper" in why and "8.9" in why and "FLASHINFER" in why
    assert unsupported_on_card(last, (8, 0))  # A100
    assert unsupported_on_card(last, (9, 0)) is None and unsupported_on_card(last, (10, 0)) is None  # H100/H200, B200
    assert unsupported_on_card(last.with_(attention_backend="FLASHINFER"), (8, 9)) is None
    assert unsupported_on_card(last.with_(kv_cache_dtype="auto"), (8, 9)) is None
    assert "8.0 or newer" in unsupported_on_card(last.with_(kv_cache_dtype="auto"), (7, 5))  # T4
    assert unsupported_on_card(last, None) is None  # no NVML reading: vLLM's own check speaks


def test_planner_reproduces_gpu_logs_of_three_versions_and_cards():
    """Real GPU start-ups (tests/fixtures/vllm/README.md gives each source) through the parser and the planner,
    beside test_planner_reproduces_a_logged_pool (V1, Qwen3-14B): V0 on a 24 GB card (Llama-3.1-8B; the logged
    pool is rounded to 0.01 GiB, so the planner's blocks at its two ends must bracket vLLM's), and vLLM 0.29 on two
    GB10s at TP 2 (MiniMax-M2: 62 layers, 8 KV heads of 128, 4 per rank), whose refusal states the KV bytes one
    request at the model's length needs, which the planner must equal to the logged 0.01 GiB."""
    v0 = parse_startup_log((VLLM / "startup_v0_issue10517.log").read_text())
    low, high = (
        plan_capacity("llama-3.1-8b", v0.max_model_len, kv_dtype="fp16", available_kv_gib=v0.available_kv_gib + d)
        for d in (-0.005, 0.005)
    )
    assert low.num_blocks <= v0.num_gpu_blocks <= high.num_blocks and high.num_blocks - low.num_blocks <= 6
    assert round(v0.num_gpu_blocks / low.blocks_per_request, 2) == v0.max_concurrency  # 1,952 blocks / 1,250 per request

    text = (VLLM / "startup_v1_refused_spark396.txt").read_text()
    max_len, needed_gib = re.search(r"max seq len \((\d+)\), ([\d.]+) GiB KV cache is needed", text).groups()
    minimax_m2 = ModelSpec("MiniMax-M2", 62, 48, 8, 128, 3072, 200064)
    plan = plan_capacity(minimax_m2, int(max_len), kv_dtype="bf16", tp=2, available_kv_gib=22.5)
    one_request = plan.blocks_per_request * plan.page_bytes * minimax_m2.num_layers
    assert round(one_request / 2**30, 2) == float(needed_gib) and not plan.fits_one_request


def test_the_recorded_defaults_are_what_the_installed_vllm_declares(vllm_installed):
    """Lab 04's defaults table: every fixed default the labs recorded from vLLM's source (VLLMEngine.DEFAULTS) is what
    the installed vLLM's config classes declare now, read at run time; the card-dependent ones stay as recorded."""
    from labs_lib.sweep_views import defaults_table

    table = defaults_table("vllm").set_index("knob")
    installed = next(c for c in table.columns if c.startswith("installed ("))
    assert "vllm" in installed and "not readable" not in installed, installed
    fixed = table[table.recorded != "by card"]
    assert list(fixed.index) == ["prompt_cache", "chunked_prefill", "gpu_memory_utilization", "kv_cache_dtype"]
    assert fixed.agrees.all(), fixed[[installed, "recorded"]]
    assert (table.loc[table.recorded == "by card", installed] == "-").all()


def test_without_vllm_the_defaults_table_says_so_and_keeps_the_recorded_values():
    # a process that finds no vLLM (LABS_VLLM_PYTHON names nothing), as on a laptop without make setup-vllm
    code = "from labs_lib.sweep_views import defaults_table; print(defaults_table('vllm').to_json(orient='split'))"
    env = {**os.environ, "LABS_VLLM_PYTHON": "/nonexistent/python"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    table = json.loads(proc.stdout)
    assert "installed (not readable here)" in table["columns"], proc.stderr
    rows = [dict(zip(table["columns"], r, strict=True)) for r in table["data"]]
    assert all(r["agrees"] is None for r in rows)
    assert {r["knob"]: r["recorded"] for r in rows} == {k: v for k, (v, _) in VLLMEngine.DEFAULTS.items()}


def test_lab04_auto_takes_vllm_wherever_it_is_installed_and_the_endpoint_labs_only_with_a_gpu(monkeypatch):
    """Lab 04 teaches vLLM's knobs: "auto" is vLLM on this CPU too once make setup-vllm ran; labs 02, 03 and 05 keep
    the embedded engine on a CPU. Without vLLM, lab 04's llama.cpp grids stand in."""
    from labs_lib import params
    from labs_lib.engines import resolve_kind
    from labs_lib.engines.vllm import VLLM_VENV, find_vllm
    from labs_lib.gpu import read_gpus

    lab04 = dict(model=None, slo_ttft_ms=1, slo_tpot_ms=1, resume=False, quick=True, interactive=False)
    monkeypatch.setenv("LABS_VLLM_PYTHON", "absent")
    assert (params.lab04(engine="auto", **lab04).engine, params.lab04(engine="auto", **lab04).grid_prefix) == ("llamacpp", "cpu")
    installed = VLLM_VENV / "bin" / "python"
    monkeypatch.setenv("LABS_VLLM_PYTHON", str(installed))
    if installed.exists() and find_vllm() and not read_gpus()[0]:
        chosen = params.lab04(engine="auto", **lab04)
        assert (chosen.engine, chosen.grid_prefix) == ("vllm", "vllm_cpu")
        assert resolve_kind("auto") == "llamacpp"  # labs 02, 03 and 05: vLLM by default only where a GPU answers
    # and each lab says so where its parameters are introduced (labs 02 and 03 had said "vLLM where installed")
    from labs_lib import runner

    said = {lab: json.loads(runner.discover(lab)[0].read_text())["cells"][:4] for lab in ("02", "03", "04", "05")}
    said = {lab: "".join("".join(c["source"]) for c in cells) for lab, cells in said.items()}
    assert all("vLLM if installed on a GPU, else llama.cpp" in said[lab] for lab in ("02", "03"))
    assert "picks vLLM wherever it is installed" in said["04"] and "auto: vLLM on a GPU instance" in said["05"]
