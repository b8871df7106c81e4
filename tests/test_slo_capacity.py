"""The SLO capacity search: its bracketing, its verdicts (coordinated omission included), and runs on the real
embedded engine at SLOs whose answer does not depend on how busy this machine is."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_one_line_error, run_cli

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig
from labs_lib.engines.llamacpp import LlamaCppEngine
from labs_lib.errors import BadInput
from labs_lib.load import SLO, LoadResult, from_schedule_ms, latency_values_ms, run_blocking, run_load
from labs_lib.prompts import PromptFactory, engine_tokenizer
from labs_lib.slo_capacity import bracket, judge, slo_capacity, slo_from_closed_loop
from labs_lib.timing import RequestRecord, RequestSpec


def _search(capacity_rps: float, **kw) -> tuple[tuple[float | None, float | None], list[float]]:
    """bracket() against a rule (meets below capacity_rps): the search alone, on the rates it chooses."""
    tried: list[float] = []

    async def meets(rate: float) -> bool:
        tried.append(rate)
        return rate <= capacity_rps

    args = {"start": 0.5, "ceiling": 64.0, "max_points": 8, "resolution": 0.25, **kw}
    return run_blocking(bracket(meets, args["start"], args["ceiling"], args["max_points"], args["resolution"])), tried


def test_the_search_doubles_then_bisects_within_its_budget():
    (good, bad), tried = _search(5.0)
    assert tried[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]  # doubling until the first miss
    assert good is not None and bad is not None and good <= 5.0 < bad and len(tried) <= 8
    assert bad - good <= 0.25 * good or len(tried) == 8  # bracketed to the resolution, or out of runs


def test_the_search_says_which_side_it_could_not_find():
    assert _search(0.1)[0] == (None, 0.5)  # the lowest rate already misses
    (good, bad), tried = _search(1000.0, ceiling=4.0)
    assert (good, bad) == (4.0, None) and tried == [0.5, 1.0, 2.0, 4.0]  # met up to the ceiling


def _record(i: int, scheduled: float, sent: float, ttft: float, e2e: float) -> RequestRecord:
    return RequestRecord(request_id=i, sent_s=sent, scheduled_s=scheduled, ttft_ms=ttft, tpot_ms=5.0, e2e_ms=e2e, output_tokens=8)


# Lab 03 at its quick sizes on this project's 2-vCPU Intel host, 2026-12-07, Gemma 3 270M with 4 slots: section 1's
# closed-loop medians (levels 1, 4, 8) and section 7's first open-loop rate, half the capacity at c=4, 10 requests
# (its p90s, from the schedule). Both searches ended "no rate tried meets" under the SLO the lab had then (TTFT
# within 5x the c=1 median, TPOT within 1.25x the c=4 one): llama.cpp on TPOT (59.7 > 59.2), vLLM on TTFT (861 > 777).
RECORDED_LAB03 = {
    "llamacpp": {"ttft": (206.3, 730.5, 1725.5), "tpot": (18.6, 47.3, 46.3), "half_capacity_p90": (740.3, 59.67)},
    "vllm": {"ttft": (155.4, 540.0, 1390.9), "tpot": (55.9, 55.8, 58.3), "half_capacity_p90": (861.4, 66.6)},
}


@pytest.mark.parametrize("engine", sorted(RECORDED_LAB03))
def test_the_labs_slo_is_met_at_half_the_closed_loops_capacity(engine):
    """Lab 03's SLO leaves room for random arrivals: the recorded first rate of each engine's search meets it, so the
    search has a rate that met to bracket from. It takes the slowest median within the slots (vLLM's c=1 TPOT, not
    c=4's) and ignores the levels past them, where requests queue."""
    run = RECORDED_LAB03[engine]
    slo = slo_from_closed_loop((1, 4, 8), run["ttft"], run["tpot"], slots=4)
    assert slo.ttft_ms == round(2.0 * max(run["ttft"][:2]), 1) and slo.tpot_ms == round(1.5 * max(run["tpot"][:2]), 1)
    ttft_p90, tpot_p90 = run["half_capacity_p90"]
    assert ttft_p90 <= slo.ttft_ms and tpot_p90 <= slo.tpot_ms
    # and it still binds: at twice the slots, the closed loop's queue alone puts the TTFT median past it
    assert run["ttft"][2] > slo.ttft_ms
    # no level within the slots (a remote endpoint's levels all past them): the lightest level measured sets it
    assert slo_from_closed_loop((8,), run["ttft"][2:], run["tpot"][2:], slots=4).ttft_ms == round(2.0 * run["ttft"][2], 1)
    past = slo_from_closed_loop((16, 8), (9999.0, run["ttft"][2]), (99.0, run["tpot"][2]), slots=4)  # levels in any order
    assert past.ttft_ms == round(2.0 * run["ttft"][2], 1) and past.tpot_ms == round(1.5 * run["tpot"][2], 1)


def test_latency_counts_from_the_schedule_where_the_client_fell_behind():
    # the client sent the second request 400 ms after its schedule: from the send its TTFT looks like 50 ms
    records = [_record(0, 0.0, 0.0, 50.0, 100.0), _record(1, 0.5, 0.9, 50.0, 100.0)]
    assert from_schedule_ms(records, "ttft") == [50.0, 450.0]
    point = judge(LoadResult(records, 1.0), 2.0, SLO(ttft_ms=200), 50)
    assert point.ttft_from_send_ms == 50.0 and point.ttft_ms == 250.0  # p50 of 50 and 450


def test_a_run_whose_requests_queue_is_saturated():
    # arrivals every 0.1 s, each TTFT 300 ms longer than the one before: a queue, and completions fall behind
    records = [_record(i, 0.1 * i, 0.1 * i, 50.0 + 300 * i, 100.0 + 300 * i) for i in range(9)]
    point = judge(LoadResult(records, 4.0), 10.0, SLO(ttft_ms=1e9), 50)
    assert point.saturated and not point.meets and "saturated" in point.why
    steady = [_record(i, 0.1 * i, 0.1 * i, 50.0, 100.0) for i in range(9)]
    assert judge(LoadResult(steady, 1.0), 10.0, SLO(ttft_ms=1e9), 50).meets


def test_a_burst_late_in_the_run_is_not_a_queue():
    # nine requests 0.5 s apart, served in 100 ms; two of the last three arrive together (a random burst, or the host
    # stalled) and wait 600 ms, the last is served at once: a queue would have delayed every late request
    records = [_record(i, 0.5 * i, 0.5 * i, 50.0, 100.0) for i in range(9)]
    records[6] = _record(6, 3.0, 3.0, 650.0, 700.0)
    records[7] = _record(7, 3.01, 3.01, 650.0, 700.0)
    point = judge(LoadResult(records, 4.2), 2.0, SLO(ttft_ms=1e9), 50)
    assert point.meets and not point.saturated and point.queue_growth == 1.0, point.why
    records[8] = _record(8, 4.0, 4.0, 650.0, 700.0)  # the last one waits too: every late request did
    assert judge(LoadResult(records, 4.7), 2.0, SLO(ttft_ms=1e9), 50).saturated


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"slo": SLO()}, "slo"),
        ({"percentile": 97}, "percentile"),
        ({"percentile": 99, "requests": 20}, "at least 100 requests"),
        ({"max_rps": 0.25}, "max_rps"),
    ],
)
def test_bad_search_settings_are_one_line(kw, needle):
    settings = {"slo": SLO(ttft_ms=100), "percentile": 90, "requests": 20, "max_rps": 8.0, **kw}
    slo = settings.pop("slo")
    with pytest.raises(BadInput, match=needle):
        run_blocking(slo_capacity(None, lambda n: [], slo, **settings))  # refused before any request


def test_the_cli_refuses_a_percentile_its_sample_cannot_support():
    proc = run_cli(
        "bench", "--endpoint", "local", "--slo-capacity", "--slo-ttft-ms", "500", "--percentile", "99", "--requests", "16"
    )
    assert_one_line_error(proc, "at least 100 requests")


@pytest.fixture(scope="module")
def engine(starts_engine):
    with LlamaCppEngine(EngineConfig(ctx=4096, parallel=4)) as e:
        yield e


def _specs(engine):
    factory = PromptFactory(engine_tokenizer(engine.root_url), seed=5)
    return lambda n: [RequestSpec(p, 4, ignore_eos=True) for p in factory.prompts(n, 16)]


@pytest.mark.engine
def test_on_the_engine_an_slo_no_server_meets_stops_at_the_first_rate(engine):
    found = run_blocking(
        slo_capacity(endpoint_for(engine), _specs(engine), SLO(ttft_ms=0.001), requests=10, start_rps=4.0, progress=False)
    )
    assert found.max_rps is None and found.first_miss_rps == 4.0 and len(found.points) == 1
    assert found.points[0].completed == 10 and "TTFT p90" in found.points[0].why
    assert "already misses" in found.describe()


@pytest.mark.engine
def test_on_the_engine_light_load_meets_a_loose_slo_up_to_the_ceiling(engine):
    # 16-token prompts, 4 tokens out. Light load is measured, not assumed: one request at a time, this host serves
    # 1 / E2E requests per second (more with its 4 slots); the search runs at an eighth and a quarter of that, so a
    # slow or busy host (a fixed 2 req/s was saturation with every core taken) gets a lighter load, not a miss. The
    # arrivals offer exactly the rate asked (vLLM's scaled draw); at a sixth and a third, beside two busy cores, a
    # burst of three made the last third's TTFT look like a queue in 2 of 4 runs
    specs = _specs(engine)
    alone = run_blocking(run_load(endpoint_for(engine), specs(3), concurrency=1, progress=False))
    one_at_a_time_rps = 1000 / float(np.median(latency_values_ms(alone.records, "e2e")))
    start = round(one_at_a_time_rps / 8, 3)
    found = run_blocking(
        slo_capacity(
            endpoint_for(engine),
            specs,
            SLO(ttft_ms=60_000, tpot_ms=60_000),
            requests=10,
            start_rps=start,
            max_rps=2 * start,
            progress=False,
        )
    )
    why = [(p.rate_rps, p.achieved_rps, p.queue_growth, p.why) for p in found.points]
    assert [p.rate_rps for p in found.points] == [start, 2 * start], why
    assert found.max_rps == 2 * start and found.first_miss_rps is None and all(p.meets for p in found.points), why
    assert all(p.ttft_ms >= p.ttft_from_send_ms for p in found.points)  # the schedule never comes after the send
    assert f"capacity is above {2 * start:g} req/s" in found.describe()


@pytest.mark.engine
def test_the_cli_searches_on_the_embedded_engine():
    proc = run_cli(
        "bench", "--endpoint", "local", "--slo-capacity", "--slo-ttft-ms", "0.001", "--requests", "10", "--max-tokens", "4",
        "--prompt-tokens", "16", "--start-rate", "4", "--json",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # no rate meets an impossible SLO: the command says so
    out = json.loads(proc.stdout)
    assert out["max_rps"] is None and len(out["points"]) == 1 and "already misses" in out["verdict"]
