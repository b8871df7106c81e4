"""vLLM's start-up overhead, estimated part by part (labs_lib/vllm_memory.py), against the profiles vLLM's own
issues and pull requests publish, and the capacity planner's range built from it (issue 23)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO, run_cli

from labs_lib.kv_math import GIB, plan_capacity
from labs_lib.models import estimate_params, load_model
from labs_lib.vllm_memory import CUDAGRAPH_GIB, TP_COMM_GIB, against_published, ffn_width, startup_overhead

PROFILES = json.loads((REPO / "data" / "vllm_startup_profiles.json").read_text())["profiles"]


def test_every_published_profile_lies_inside_the_estimates_range():
    rows = against_published()
    assert len(rows) == len(PROFILES) >= 3
    outside = [r for r in rows if not (r["activation inside"] and r["non-torch inside"])]
    assert not outside, f"published profiles outside the estimate: {outside}"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: f"{p['source'].rsplit('/', 1)[1]}-tp{p['tp']}")
def test_the_profiles_figures_are_the_quoted_logs(profile):
    quoted = [float(x) for x in re.findall(r"(\d+\.\d+)GiB", profile["quote"])]
    assert profile["non_torch_gib"] in quoted
    if "peak_torch_memory" in profile["quote"]:  # V0's first form: the peak includes the weights
        peak = float(re.search(r"peak_torch_memory=(\d+\.\d+)GiB", profile["quote"])[1])
        assert profile["activation_gib"] == pytest.approx(peak - profile["weights_gib"], abs=0.005)
    else:
        assert profile["activation_gib"] in quoted and profile["weights_gib"] in quoted


@pytest.mark.parametrize(
    "name, config_width",
    [("llama-3.1-8b", 14336), ("qwen2.5-7b", 18944), ("qwen2.5-0.5b", 4864), ("gemma-3-270m", 2048)],
)
def test_the_mlp_width_derived_from_the_parameter_count_gives_that_count_back(name, config_width):
    spec = load_model(name)
    width = ffn_width(spec)
    assert width == config_width
    # the other way round: a config with that width has the catalogue's parameter count (to norms and biases)
    cfg = {
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_q_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "intermediate_size": width,
        "tie_word_embeddings": name.startswith(("gemma", "qwen2.5-0.5b")),
    }
    assert estimate_params(cfg) == pytest.approx(spec.params, rel=2e-4)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "gemma-3-27b"])
def test_no_width_is_made_up_for_experts_mla_or_a_rounded_count(name):
    spec = load_model(name)
    assert ffn_width(spec) is None
    if not spec.is_mla:
        est = startup_overhead(spec, tp=1, max_num_batched_tokens=2048, max_num_seqs=256)
        assert "not derivable" in est.note and est.ffn_width is None


def test_the_planners_range_brackets_its_central_value_and_collapses_when_the_overhead_is_given():
    plan = plan_capacity("qwen2.5-7b", 8192, gpu="L4", gpu_memory_utilization=0.9)
    assert plan.overhead_low_bytes < plan.overhead_bytes < plan.overhead_high_bytes
    assert plan.max_concurrency_low < plan.max_concurrency < plan.max_concurrency_high
    parts = plan.overhead_parts
    assert parts["forward_peak_bytes"] == 2048 * (2 * 3584 + 3 * 18944) * 2  # L4: vLLM's 2,048-token step budget
    given = plan_capacity("qwen2.5-7b", 8192, gpu="L4", gpu_memory_utilization=0.9, overhead_gib=2)
    assert given.overhead_bytes == given.overhead_low_bytes == given.overhead_high_bytes == 2 * GIB
    assert given.max_concurrency_low == given.max_concurrency == given.max_concurrency_high
    assert given.overhead_parts is None


def test_eager_mode_and_tensor_parallel_move_the_estimate_by_their_parts():
    graphs = plan_capacity("llama-3.1-70b", 8192, gpu="H100-SXM", tp=4)
    eager = plan_capacity("llama-3.1-70b", 8192, gpu="H100-SXM", tp=4, cuda_graphs=False)
    assert graphs.overhead_bytes - eager.overhead_bytes == pytest.approx(CUDAGRAPH_GIB[1] * GIB, abs=2)
    assert eager.max_concurrency > graphs.max_concurrency
    one = startup_overhead(load_model("llama-3.1-8b"), tp=1, max_num_batched_tokens=8192, max_num_seqs=1024)
    two = startup_overhead(load_model("llama-3.1-8b"), tp=2, max_num_batched_tokens=8192, max_num_seqs=1024)
    assert two.non_torch_bytes - one.non_torch_bytes == pytest.approx(TP_COMM_GIB * GIB, abs=2)
    assert two.forward_peak_bytes < one.forward_peak_bytes  # the MLP is split across ranks; the logits are not
    assert two.sampler_peak_bytes == one.sampler_peak_bytes


def test_the_cards_defaults_size_the_profile_run():
    # H100: vLLM's 1,024 sequences make the sampler's logits the larger part; an L4's 256 do not
    h100 = plan_capacity("llama-3.1-8b", 8192, gpu="H100-SXM").overhead_parts
    l4 = plan_capacity("llama-3.1-8b", 8192, gpu="L4").overhead_parts
    assert h100["sampler_peak_bytes"] == 4 * l4["sampler_peak_bytes"]
    assert h100["forward_peak_bytes"] == 4 * l4["forward_peak_bytes"]  # 8,192 against 2,048 tokens
    fewer = plan_capacity("llama-3.1-8b", 8192, gpu="H100-SXM", max_num_seqs=256).overhead_parts
    assert fewer["sampler_peak_bytes"] == l4["sampler_peak_bytes"]


def test_capacity_cli_shows_the_estimate_its_range_and_parts():
    out = run_cli("capacity", "--model", "qwen2.5-7b", "--gpu", "L4", "--max-model-len", "8192").stdout
    assert "estimated" in out and "non-torch" in out and "sampler up to" in out and "over the overhead's range" in out
    given = run_cli("capacity", "--model", "qwen2.5-7b", "--gpu", "L4", "--max-model-len", "8192", "--overhead-gib", "2").stdout
    assert "(given)" in given and "over the overhead's range" not in given
    eager = run_cli("capacity", "--model", "qwen2.5-7b", "--gpu", "L4", "--max-model-len", "8192", "--enforce-eager", "--json")
    assert json.loads(eager.stdout)["overhead_parts"]["cudagraph_bytes"] == 0
