"""`bench --repeats`: one level run several times, each metric over all runs with an interval from resampling
whole runs (bench.repeat_intervals), on constructed runs whose answers are known."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from labs_lib.bench import INTERVAL_METRICS, repeat_intervals
from labs_lib.load import LoadResult
from labs_lib.timing import RequestRecord


def run(ttft_ms: float, duration_s: float = 2.0, n: int = 4) -> LoadResult:
    """n requests of 9 tokens each, TTFT ttft_ms and 10 ms per later token."""
    records = [RequestRecord(i, ttft_ms=ttft_ms, tpot_ms=10.0, e2e_ms=ttft_ms + 80, output_tokens=9, chunks=9) for i in range(n)]
    return LoadResult(records, duration_s)


def test_one_run_has_no_interval():
    point, low, high = repeat_intervals([run(100.0)])["p50_ttft_ms"]
    assert point == pytest.approx(100.0) and low is None and high is None


def test_identical_runs_give_an_interval_of_zero_width():
    intervals = repeat_intervals([run(100.0), run(100.0), run(100.0)])
    assert set(intervals) == set(INTERVAL_METRICS)
    point, low, high = intervals["output_throughput"]
    assert point == low == high == pytest.approx(3 * 4 * 9 / 6.0)


def test_a_slow_run_widens_the_interval_and_weighs_by_its_requests():
    # one run of three was cold: its TTFTs are 10x; the pooled median stays with the two warm runs, the interval
    # reaches the cold one (a resample can draw it two or three times), and throughput is tokens over summed time
    intervals = repeat_intervals([run(1000.0, duration_s=6.0), run(100.0), run(100.0)], seed=1)
    point, low, high = intervals["p50_ttft_ms"]
    assert point == pytest.approx(100.0) and low == pytest.approx(100.0) and high == pytest.approx(1000.0)
    point, low, high = intervals["output_throughput"]
    assert point == pytest.approx(3 * 36 / 10.0) and low < point < high


def test_ttft_parts_read_vllms_histograms_as_means_over_the_run():
    """vLLM's names as its /metrics writes them (tests/fixtures/vllm/metrics_0.33.0.txt); the delta of a run of 4
    requests that queued 0.8 s and prefilled 0.2 s in all: 200 ms and 50 ms each, the rest of a 400 ms TTFT 150."""
    from labs_lib.engines.metrics import parse_metrics
    from labs_lib.load import ttft_parts

    names = parse_metrics((FIXTURES / "vllm" / "metrics_0.33.0.txt").read_text())
    assert {"vllm:request_queue_time_seconds_sum", "vllm:request_prefill_time_seconds_count"} <= set(names)
    run = LoadResult([RequestRecord(i, ttft_ms=400.0, e2e_ms=500.0, output_tokens=4, chunks=4) for i in range(4)], 1.0)
    run.engine_delta = {
        "vllm:request_queue_time_seconds_sum": 0.8,
        "vllm:request_queue_time_seconds_count": 4,
        "vllm:request_prefill_time_seconds_sum": 0.2,
        "vllm:request_prefill_time_seconds_count": 4,
    }
    assert ttft_parts(run) == {"requests": 4, "ttft_ms": 400.0, "queue_ms": 200.0, "prefill_ms": 50.0, "rest_ms": 150.0}
    run.engine_delta = None  # nothing scraped and no server timings: only the client's TTFT is known
    assert ttft_parts(run) == {"requests": 4, "ttft_ms": 400.0, "queue_ms": None, "prefill_ms": None, "rest_ms": None}


def test_a_conversation_sends_its_earlier_turns_before_the_new_question():
    """Multi-turn (load.run_conversations): turn k carries the k earlier questions and the answers the server gave,
    in order, then its own question."""
    from labs_lib.prompts import PromptFactory
    from labs_lib.timing import RequestSpec

    talks = PromptFactory(None, seed=0).conversations(2, 3, 12)
    assert [len(c) for c in talks] == [3, 3] and len({q for c in talks for q in c}) == 6  # distinct
    spec = RequestSpec("third?", 8, system="be brief", history=(("first?", "one"), ("second?", "two")))
    roles = [(m["role"], m["content"]) for m in spec.body("m")["messages"]]
    assert roles == [
        ("system", "be brief"),
        ("user", "first?"),
        ("assistant", "one"),
        ("user", "second?"),
        ("assistant", "two"),
        ("user", "third?"),
    ]


def test_a_one_token_reply_meets_a_tpot_limit_as_vllm_bench_serve_counts_it():
    """vLLM's benchmark (vllm/benchmarks/serve.py, calculate_metrics, 0.32 and 0.33): "if output_len <= 1, we regard
    tpot as 0 for goodput". The labs' goodput (SLO.met) and the goodput build-it's reference count it the same way;
    a failed request still never counts, and a reply whose TPOT is missing for another reason does not meet a limit."""
    from labs_lib.cores.lab04 import goodput
    from labs_lib.load import SLO, summarize
    from labs_lib.timing import RequestRecord

    slo = SLO(ttft_ms=200, tpot_ms=25)
    one = RequestRecord(ttft_ms=100, tpot_ms=None, e2e_ms=100, output_tokens=1)
    assert slo.met(one) and summarize([one], 1.0, slo).goodput == 1.0 == goodput([one], slo, 1.0)
    assert not slo.met(RequestRecord(ttft_ms=100, tpot_ms=None, e2e_ms=100, output_tokens=1, error="HTTP 500"))
    assert not slo.met(RequestRecord(ttft_ms=100, tpot_ms=None, e2e_ms=300, output_tokens=None))  # no usage, no TPOT
