"""The claims judged by running the labs' own mechanisms, reading vLLM's source and running the installed SDK: each
verdict follows its input, so changing the input (a what-if) changes the verdict."""

import os

import pytest
from test_claims import _judged

from labs_lib import package_claims, tiny_decoder
from labs_lib.mechanism_claims import mechanism_claims_table
from labs_lib.package_claims import package_claims_table
from labs_lib.roofline import article_claims_table
from labs_lib.vllm_source import source_claims_table

BIG_POOL = 200 * 4096  # room for every request reserved at 4,096 tokens: contiguous allocation costs nothing


def test_contiguous_reservation_wastes_what_paging_keeps(monkeypatch):
    row = _judged(mechanism_claims_table, "s003-contiguous-waste")
    assert row["verdict"] == "holds" and int(row["computed"].rstrip("%")) > 50
    assert _judged(mechanism_claims_table, "s003-contiguous-waste", monkeypatch, wasted_over=0.95)["verdict"] == "does not hold"


@pytest.mark.parametrize("cid", ["s003-fragmentation-waits", "s000-paged-more-concurrent", "s003-continuous-needs-paging"])
def test_paging_claims_follow_the_pool(monkeypatch, cid):
    """In a pool too small to reserve 4,096 tokens for everyone, paging runs more at once and finishes sooner; in a
    pool large enough for every reservation the two are the same, and none of the claims holds."""
    assert _judged(mechanism_claims_table, cid)["verdict"] == "holds"
    assert _judged(mechanism_claims_table, cid, monkeypatch, pool_tokens=BIG_POOL)["verdict"] == "does not hold"


def test_block_tables_scatter_once_requests_leave(monkeypatch):
    row = _judged(mechanism_claims_table, "s003-block-table")
    scattered, of = (int(n) for n in row["computed"].split(" of "))
    assert row["verdict"] == "holds" and 0 < scattered <= of
    # prompts of one block each: no table has two blocks to be apart
    assert _judged(mechanism_claims_table, "s003-block-table", monkeypatch, prompt_share=0.005)["verdict"] == "does not hold"


@pytest.mark.parametrize(
    "cid", ["s002-static-padding", "s003-static-tail", "s003-continuous-refill", "s000-continuous-utilization"]
)
def test_static_batching_claims_need_more_than_one_slot(monkeypatch, cid):
    """On one slot static and continuous batching are the same schedule: nothing is padded, nothing waits."""
    assert _judged(mechanism_claims_table, cid)["verdict"] == "holds"
    assert _judged(mechanism_claims_table, cid, monkeypatch, slots=1)["verdict"] == "does not hold"


def test_a_cache_that_forgets_fails_the_cached_step_claim(monkeypatch):
    assert _judged(mechanism_claims_table, "s003-decode-q-only")["verdict"] == "holds"

    def newest_only(x_t, cache, wq, wk, wv):  # keeps no history: attends the new token to itself
        cache["length"] += 1
        return x_t @ wv

    monkeypatch.setattr(tiny_decoder, "decode_step", newest_only)
    assert _judged(mechanism_claims_table, "s003-decode-q-only")["verdict"] == "does not hold"


def test_every_earlier_key_matters_above_the_tolerance(monkeypatch):
    row = _judged(mechanism_claims_table, "s002-attends-all")
    assert row["verdict"] == "holds" and float(row["computed"]) > 1e-3
    assert _judged(mechanism_claims_table, "s002-attends-all", monkeypatch, tolerance=1e3)["verdict"] == "does not hold"


def test_attention_is_order_blind_only_without_the_mask(monkeypatch):
    assert _judged(mechanism_claims_table, "s004-order-blind")["verdict"] == "depends"
    # a tolerance larger than the causal mask's effect calls both blind
    assert _judged(mechanism_claims_table, "s004-order-blind", monkeypatch, tolerance=1e3)["verdict"] == "holds"


def test_model_shapes_are_read_from_the_configurations(monkeypatch):
    assert _judged(mechanism_claims_table, "s004-embedding-4096")["verdict"] == "holds"
    assert _judged(mechanism_claims_table, "s004-embedding-4096", monkeypatch, value=5120)["verdict"] == "does not hold"
    row = _judged(mechanism_claims_table, "s000-gqa-families")
    assert row["verdict"] == "does not hold" and "Llama-2-7b-hf" in row["computed"] and "70b" not in row["computed"]
    only_gqa = _judged(mechanism_claims_table, "s000-gqa-families", monkeypatch, families=["Llama-3", "Mistral"])
    assert only_gqa["verdict"] == "holds"


def test_the_24gb_card_anecdote_against_the_planner(monkeypatch):
    crash = _judged(mechanism_claims_table, "s004-crash-at-200")
    assert crash["verdict"] == "does not hold" and int(crash["computed"].replace(",", "")) > 200
    # a crash past the pool's size would be the cache running out
    assert _judged(mechanism_claims_table, "s004-crash-at-200", monkeypatch, value=10**6)["verdict"] == "holds"
    assert _judged(mechanism_claims_table, "s004-4k-steady")["verdict"] == "holds"
    assert _judged(mechanism_claims_table, "s004-4k-steady", monkeypatch, gpu="T4")["verdict"] == "does not hold"


def test_start_up_memory_follows_the_parallel_size_and_the_card(monkeypatch):
    assert _judged(mechanism_claims_table, "s003-oom-check-tp")["verdict"] == "holds"
    # a model that fits one card at any parallel size: the parallel size is not the cause
    assert _judged(mechanism_claims_table, "s003-oom-check-tp", monkeypatch, model="llama-3.1-8b")["verdict"] == "does not hold"
    band = _judged(mechanism_claims_table, "s003-util-band")
    assert band["verdict"] == "depends" and band["computed"].startswith("L4 -")  # the small card loses most
    assert _judged(mechanism_claims_table, "s003-util-band", monkeypatch, marked_over=0.01)["verdict"] == "holds"
    assert _judged(mechanism_claims_table, "s003-util-band", monkeypatch, marked_over=0.9)["verdict"] == "does not hold"


def test_awq_gives_its_bytes_to_the_pool():
    from labs_lib.claims import awq_memory

    row = _judged(mechanism_claims_table, "s001-awq-more-blocks")
    m = awq_memory("llama-2-7b", "RTX-4090")
    assert row["computed"] == f"{m['kv_pool_bytes_awq'] / m['kv_pool_bytes_fp16']:.2f}x" and row["verdict"] == "holds"


def test_batch_meets_memory_before_compute_at_long_contexts(monkeypatch):
    assert _judged(article_claims_table, "s003-batch-oom")["verdict"] == "holds"
    short = _judged(article_claims_table, "s003-batch-oom", monkeypatch, context_tokens=128)
    assert short["verdict"] != "holds" and "compute-bound from" in short["computed"]


def test_recomputing_costs_nothing_for_the_first_token(monkeypatch):
    assert _judged(article_claims_table, "s001-recompute-multiplies")["verdict"] in ("holds", "depends")
    first = _judged(article_claims_table, "s001-recompute-multiplies", monkeypatch, prompt_tokens=0, output_tokens=1)
    assert first["verdict"] == "does not hold"


def test_vllm_advice_read_from_its_source(monkeypatch):
    assert _judged(source_claims_table, "s003-lower-max-model-len")["verdict"] == "holds"
    assert _judged(source_claims_table, "s003-lower-max-model-len", monkeypatch, value="block_size")["verdict"] == "does not hold"
    assert _judged(source_claims_table, "s002-block-size-models")["verdict"] == "holds"
    assert _judged(source_claims_table, "s002-block-size-models", monkeypatch, value=64)["verdict"] == "does not hold"
    assert _judged(source_claims_table, "s001-hit-rate-zero")["verdict"] == "depends"
    longer = _judged(source_claims_table, "s001-hit-rate-zero", monkeypatch, shared_prefix_tokens=[40, 64])
    assert longer["verdict"] == "holds"


def test_the_sdk_is_run_with_placeholder_keys_and_the_environment_kept(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-kept-as-it-was")
    before = dict(os.environ)
    found = package_claims.sdk_key_variable()
    assert found == {"TAOTOKEN_API_KEY": False, "OPENAI_API_KEY": True}
    assert dict(os.environ) == before
    table = package_claims_table().set_index("id")
    assert "sk-" not in " ".join(table["computed"].astype(str))
    assert table.loc["s000-sdk-env-name", "verdict"] == "holds"
    monkeypatch.setattr(package_claims, "sdk_key_variable", lambda: {"TAOTOKEN_API_KEY": True, "OPENAI_API_KEY": True})
    assert package_claims_table().set_index("id").loc["s000-sdk-env-name", "verdict"] == "does not hold"


def test_sdk_types_and_the_wheel_decide_their_claims(monkeypatch):
    table = package_claims_table().set_index("id")
    assert table.loc["s000-content-filter", "verdict"] == "holds"
    assert table.loc["s000-usage-fields", "verdict"] == "holds"
    assert table.loc["s001-pip-cuda", "verdict"] == "does not hold" and table.loc["s001-pip-cuda", "computed"] == "CUDA 13"
    asked = _judged(package_claims_table, "s000-usage-fields", monkeypatch, value=["prompt_tokens", "cached_tokens"])
    assert asked["verdict"] == "does not hold"
    client = table.loc["s002-client-json"]
    assert client["verdict"] == "does not hold" and "model_id" in client["computed"] and "extra_headers" in client["computed"]
    monkeypatch.setattr(
        package_claims,
        "sdk_client_arguments",
        lambda: {"base_url", "api_key", "model_id", "timeout", "max_retries", "extra_headers"},
    )
    monkeypatch.setattr(package_claims, "sdk_finish_reasons", lambda: ("stop", "length"))
    monkeypatch.setattr(package_claims, "wheel_cuda_majors", lambda: {12, 13})
    table = package_claims_table().set_index("id")
    assert table.loc["s000-content-filter", "verdict"] == "does not hold"
    assert table.loc["s001-pip-cuda", "verdict"] == "holds"
    assert table.loc["s002-client-json", "verdict"] == "holds"


def test_chunking_shortens_the_wait_only_when_the_budget_is_below_the_prompt(monkeypatch):
    row = _judged(mechanism_claims_table, "s002-chunked-prefill")
    assert row["verdict"] == "holds"
    # a budget as large as the prompt runs it in one step: nothing is chunked
    assert _judged(mechanism_claims_table, "s002-chunked-prefill", monkeypatch, token_budget=8192)["verdict"] == "does not hold"


def test_seed_003s_configurations_are_judged_by_the_doctors_check(monkeypatch):
    from labs_lib.doctor import gateway_checks

    row = gateway_checks.seed003_configs_row()
    assert row["verdict"] == "does not hold" and "vscode_settings.json: format" in row["computed"]
    monkeypatch.setattr(gateway_checks, "SEED003_CONFIGS", ("documented_openai_client.json",))
    assert gateway_checks.seed003_configs_row()["verdict"] == "holds"  # its key aside, the documented form passes
