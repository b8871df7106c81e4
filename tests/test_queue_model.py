"""Queues and the sweep views lab 04's exercise and design task read: the mean TTFT when closed-loop users
outnumber an engine's one slot, as a first-come, first-served queue predicts it (load.one_at_a_time_mean_ttft_ms),
worked by hand and measured on the real embedded engine, with Little's law on the same run (lab 03's exercise);
the prefix cache's TTFT were it only the tokens computed (sweep_views.cache_ttft_means); the design task's KV per
point (sweep_views.kv_needed_table)."""

from __future__ import annotations

import pandas as pd
import pytest

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.errors import BadInput
from labs_lib.kv_math import MIB, kv_cache
from labs_lib.load import in_flight_means, one_at_a_time_mean_ttft_ms, run_blocking, run_load
from labs_lib.prompts import PromptFactory, engine_tokenizer
from labs_lib.sweep_views import cache_ttft_means, kv_needed_table
from labs_lib.timing import RequestRecord, RequestSpec


def test_the_queue_by_hand():
    assert one_at_a_time_mean_ttft_ms(100.0, 1000.0, 1, 8) == 100.0  # one user never waits
    # 4 users, 8 requests: the first four wait 0, 1, 2, 3 services, the next four 3 each: 18 / 8 = 2.25
    assert one_at_a_time_mean_ttft_ms(100.0, 1000.0, 4, 8) == pytest.approx(100.0 + 2250.0)
    # as many users as requests: everything sent at once, waits 0 .. N-1
    assert one_at_a_time_mean_ttft_ms(0.0, 10.0, 8, 8) == pytest.approx(35.0)
    assert one_at_a_time_mean_ttft_ms(0.0, 10.0, 50, 8) == pytest.approx(35.0)  # users beyond the requests send nothing
    with pytest.raises(BadInput, match="concurrency"):
        one_at_a_time_mean_ttft_ms(0.0, 10.0, 0, 8)


def _row(parallel: int, concurrency: int, mean_ttft: float, mean_e2e: float, goodput: float, p99: float) -> dict:
    return {
        "status": "ok",
        "config.parallel": parallel,
        "level.concurrency": concurrency,
        "workload.prompt_tokens": 64,
        "workload.max_tokens": 32,
        "workload.shared_prefix_tokens": 0,
        "summary.requests": 8,
        "summary.mean_ttft_ms": mean_ttft,
        "summary.mean_e2e_ms": mean_e2e,
        "summary.p50_ttft_ms": mean_ttft,
        "summary.p99_ttft_ms": p99,
        "summary.goodput": goodput,
        "summary.output_throughput": 30.0,
    }


def test_the_design_tasks_view_holds_the_kv_each_point_needs():
    rows = [
        (1, 1, 170, 1030, 0.97, 174),
        (1, 4, 2490, 3340, 0.24, 3337),
        (4, 1, 177, 1000, 1.0, 190),
        (4, 4, 618, 1500, 2.09, 677),
    ]
    df = pd.DataFrame([_row(*r) for r in rows])
    table, why = kv_needed_table(df, "gemma-3-270m")
    assert why is None and list(table["sequences at once"]) == [1, 1, 1, 4]
    one_sequence = kv_cache("gemma-3-270m", 96, 1, "fp16").kv_bytes / MIB  # 64 prompt + 32 output tokens
    assert table["KV MiB needed"].tolist() == pytest.approx([one_sequence] * 3 + [4 * one_sequence])
    assert table["goodput per KV MiB"].iloc[3] == pytest.approx(2.09 / (4 * one_sequence))
    assert kv_needed_table(df, "no-such-model")[0] is None and "no-such-model" in kv_needed_table(df, "no-such-model")[1]


def test_littles_law_by_hand():
    def record(ttft_ms: float, e2e_ms: float, ok: bool = True) -> RequestRecord:
        return RequestRecord(ttft_ms=ttft_ms, e2e_ms=e2e_ms, error=None if ok else "timeout")

    # 2 s of run: 1 s + 3 s waiting for first tokens, 1 s + 1 s decoding; a failed request counts for nothing
    means = in_flight_means([record(1000, 2000), record(3000, 4000), record(5000, 9000, ok=False)], 2.0)
    assert means == {"waiting": 2.0, "decoding": 1.0, "in_flight": 3.0}
    with pytest.raises(BadInput, match="duration_s"):
        in_flight_means([], 0)


def test_the_cache_counterfactual_scales_caching_off_by_the_hit_rate_of_the_same_workload_and_load():
    def row(cache: bool, workload: str, concurrency: int, prompt: float, cached: float, mean_ttft: float) -> dict:
        return {
            "status": "ok",
            "config.prompt_cache": cache,
            "workload.name": workload,
            "level.concurrency": concurrency,
            "metrics.vllm:prompt_tokens_total": prompt,  # vLLM counts cache hits among the prompt tokens
            "metrics.vllm:prompt_tokens_cached_total": cached,
            "summary.p50_ttft_ms": mean_ttft,
            "summary.mean_ttft_ms": mean_ttft,
        }

    df = pd.DataFrame(
        [
            row(False, "one", 1, 2000, 0, 800.0),
            row(True, "one", 1, 2000, 1500, 300.0),  # hit rate 0.75
            row(True, "three", 1, 3000, 1500, 500.0),  # another workload: not compared
            row(True, "one", 4, 2000, 1900, 100.0),  # another load: not compared
        ]
    )
    cache = cache_ttft_means(df, "vllm")
    assert (cache["off"], cache["on"], cache["hit_rate"]) == ("prompt_cache=False", "prompt_cache=True", 0.75)
    assert cache["computed_only_ms"] == pytest.approx(200.0) and cache["on_mean_ttft_ms"] == 300.0
    assert cache_ttft_means(df.iloc[:1], "vllm") is None


@pytest.fixture(scope="module")
def one_slot(starts_engine):
    with LlamaCppEngine(EngineConfig(ctx=1024, parallel=1)) as e:
        yield e


@pytest.mark.engine
def test_on_the_engine_users_beyond_one_slot_wait_as_the_queue_predicts(one_slot):
    endpoint = endpoint_for(one_slot)
    factory = PromptFactory(engine_tokenizer(one_slot.root_url), seed=3)

    def run(concurrency: int, n: int):
        specs = [RequestSpec(p, 8, ignore_eos=True) for p in factory.prompts(n, 32)]
        result = run_blocking(run_load(endpoint, specs, concurrency=concurrency, progress=False))
        assert result.summary.completed == n
        return result

    run_blocking(run_load(endpoint, [RequestSpec("warm up", 2)], concurrency=1, progress=False))
    alone, busy_run = run(1, 4).summary, run(4, 8)
    busy = busy_run.summary
    # one slot never idles while users queue: the run's duration / N is its mean service time, measured under the
    # same load as its waits (on a busy machine the run alone may have seen other neighbours; on a quiet one the
    # two agree)
    service_ms = 1000 * busy.duration_s / 8
    predicted = one_at_a_time_mean_ttft_ms(alone.ttft_ms.mean, service_ms, 4, 8)
    # a steady-state guess (every request behind C - 1) would be (3 - 2.25) / 2.25 = 33% over; no queue at all, 90% under
    assert busy.ttft_ms.mean == pytest.approx(predicted, rel=0.2), (alone.ttft_ms.mean, service_ms, busy.ttft_ms.mean)

    # Little's law on the same run: one slot decodes at most one request at a time, and the closed loop keeps 4 in
    # flight until the last sends, then drains: 4 for 5 of the 8 services, then 3, 2, 1 -> 26 / 8 on average
    means = in_flight_means(busy_run.records, busy_run.duration_s)
    assert 0.3 < means["decoding"] <= 1.05, means
    assert means["in_flight"] == pytest.approx(26 / 8, rel=0.15), means
