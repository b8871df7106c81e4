"""`bench --repeats`: one level run several times, each metric over all runs with an interval from resampling
whole runs (bench.repeat_intervals), on constructed runs whose answers are known."""

from __future__ import annotations

import pytest

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
