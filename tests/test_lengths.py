"""Request lengths drawn from recorded traces (labs_lib/lengths.py, data/length_distributions.json): the table is
a distribution, sampling reproduces it, and bench and sweeps send what it draws (issue 25)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, run_cli

from labs_lib.errors import BadInput
from labs_lib.lengths import LengthDistribution, distribution_names, length_distribution, sampled_lengths
from labs_lib.sweep import Workload, _workload, _workload_key
from labs_lib.vllm_interop import sweep_params

TABLE = json.loads((REPO / "data" / "length_distributions.json").read_text())["distributions"]


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_trace_is_a_distribution_whose_lengths_may_be_drawn_independently(name):
    trace = length_distribution(name)
    assert trace.quantiles[0] == 0 and trace.quantiles[-1] == 1 and trace.requests > 1000
    for values in (trace.quantiles, trace.context_tokens, trace.generated_tokens):
        assert list(values) == sorted(values)
    assert abs(trace.rank_correlation) < 0.1  # what lets sample() draw context and output independently
    assert "CC-BY" in TABLE[name]["license"] and TABLE[name]["source"].startswith("https://github.com/Azure/")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_sampling_reproduces_the_recorded_quantiles(name):
    trace = length_distribution(name)
    pairs = np.array(trace.sample(40_000, seed=1))
    for column, recorded in ((0, trace.context_tokens), (1, trace.generated_tokens)):
        for q in (0.1, 0.25, 0.5, 0.75, 0.9):
            want = np.interp(q, trace.quantiles, recorded)
            assert np.quantile(pairs[:, column], q) == pytest.approx(want, rel=0.04, abs=2)
    half = np.array(trace.sample(40_000, seed=1, scale=0.5))
    assert np.median(half[:, 0]) == pytest.approx(trace.median()[0] / 2, rel=0.04, abs=2)
    assert trace.sample(5, seed=3) == trace.sample(5, seed=3) != trace.sample(5, seed=4)
    assert min(min(p) for p in trace.sample(1000, seed=2, scale=0.001)) == 1  # never a zero-token request
    capped = trace.sample(2000, seed=5, cap=300)  # an engine's context per request
    assert max(c + g for c, g in capped) <= 300 and min(min(p) for p in capped) >= 1
    assert max(c + g for c, g in trace.sample(2000, seed=5)) > 300  # the cap did the cutting


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_mean_request_is_what_sampling_draws_on_average(name):
    trace = length_distribution(name)
    drawn = np.array(trace.sample(200_000, seed=11))
    assert trace.mean_tokens() == pytest.approx(drawn.sum(axis=1).mean(), rel=0.01)
    # by hand: uniform 0-100 prompt tokens and 0-10 output tokens average 50 + 5
    flat = LengthDistribution("flat", "", "", 2, (0.0, 1.0), (0.0, 100.0), (0.0, 10.0), 0.0)
    assert flat.mean_tokens() == pytest.approx(55.0)


def test_a_bad_name_or_scale_is_one_line():
    with pytest.raises(BadInput) as bad:
        length_distribution("sharegpt")
    assert "sharegpt" in str(bad.value) and all(n in str(bad.value) for n in distribution_names())
    for bad in ({"scale": 0}, {"cap": 1}, {"cap": -5}):
        with pytest.raises(BadInput):
            sampled_lengths("azure-conv-2023", 3, **bad)


def test_sweep_workloads_take_a_trace_and_old_points_keep_their_ids():
    plain = Workload()
    assert "lengths" not in _workload_key(plain) and "length_scale" not in _workload_key(plain)
    traced = _workload({"name": "azure", "lengths": "azure-conv-2023", "length_scale": 0.1}, "workload")
    assert _workload_key(traced)["lengths"] == "azure-conv-2023"
    for clash in ({"turns": 2}, {"shared_prefix_tokens": 64}):
        with pytest.raises(BadInput) as bad:
            _workload({"lengths": "azure-conv-2023", **clash}, "workload")
        assert next(iter(clash)) in str(bad.value)
    with pytest.raises(BadInput):
        _workload({"lengths": "nope"}, "workload")


def test_vllms_sweep_export_refuses_a_trace_in_one_line():
    from labs_lib.sweep import Grid

    grid = Grid(name="traced", engine="vllm", base={}, axes={}, workloads=[Workload(lengths="azure-conv-2023")])
    with pytest.raises(BadInput) as bad:
        sweep_params(grid)
    assert "fixed lengths" in str(bad.value)


@pytest.mark.engine
def test_bench_sends_the_drawn_lengths_to_the_engine():
    requests, scale = 6, 0.05
    out = json.loads(
        run_cli(
            "bench",
            "--endpoint",
            "local",
            "--lengths",
            "azure-conv-2023",
            "--length-scale",
            str(scale),
            "--requests",
            str(requests),
            "--concurrency",
            "2",
            "--json",
        ).stdout
    )
    row = out["results"][0]
    pairs = sampled_lengths("azure-conv-2023", requests, seed=0, scale=scale)
    assert row["completed"] == requests
    assert row["total_output_tokens"] == sum(g for _, g in pairs)  # ignore_eos: every request decodes its drawn length
    assert row["total_input_tokens"] > sum(c for c, _ in pairs)  # the drawn prompts, plus the chat template
    assert out["settings"]["lengths"] == "azure-conv-2023"


@pytest.mark.engine
def test_a_sweep_sends_each_points_drawn_lengths(tmp_path):
    """cpu_trace_lengths' quick grid through `labs sweep` on llama.cpp: every request decodes the output its point's
    seed draws (ignore_eos), and no prompt outgrows the slot it is capped for."""
    from labs_lib.paths import DATA_DIR
    from labs_lib.sweep import load_grid

    grid_path = DATA_DIR / "grids" / "cpu_trace_lengths.yaml"
    out = tmp_path / "trace.jsonl"
    done = run_cli("sweep", "--grid", str(grid_path), "--quick", "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr
    rows = {r["point_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    points = load_grid(grid_path, quick=True).points()
    assert len(rows) == len(points) == 2
    for point in points:
        row, w = rows[point.point_id("llamacpp")], point.workload
        pairs = sampled_lengths(
            w.lengths, w.requests, seed=int(point.point_id("llamacpp")[:8], 16), scale=w.length_scale, cap=w.length_cap
        )
        assert row["status"] == "ok" and row["summary"]["completed"] == w.requests, row.get("error")
        assert row["summary"]["total_output_tokens"] == sum(g for _, g in pairs)
        assert max(c + g for c, g in pairs) <= w.length_cap


@pytest.mark.engine
def test_lab03s_trace_run_matches_the_fixed_runs_mean_work_and_sends_the_drawn_lengths(starts_engine):
    """experiments.trace_beside_fixed, as lab 03 runs it: the same concurrency and number of requests as a fixed run,
    lengths from the trace scaled to the fixed run's mean prompt + output tokens, capped at the slot's context."""
    from labs_lib.endpoints import endpoint_for
    from labs_lib.engines import EngineConfig
    from labs_lib.engines.llamacpp import LlamaCppEngine
    from labs_lib.experiments import concurrency_sweep, trace_beside_fixed
    from labs_lib.load import run_blocking
    from labs_lib.prompts import PromptFactory, engine_tokenizer

    with LlamaCppEngine(EngineConfig(ctx=2 * 384, parallel=2)) as engine:
        endpoint = endpoint_for(engine)
        factory = PromptFactory(engine_tokenizer(engine.root_url), seed=0)
        _, runs, _ = run_blocking(
            concurrency_sweep(endpoint, factory, [2], requests=6, prompt_tokens=48, max_tokens=16, progress=False)
        )
        table, traced = run_blocking(
            trace_beside_fixed(endpoint, factory, runs[0], "azure-conv-2023", cap_tokens=352, progress=False)
        )
    scale = (48 + 16) / length_distribution("azure-conv-2023").mean_tokens()
    assert traced.settings["length_scale"] == pytest.approx(scale, rel=1e-3) and traced.settings["concurrency"] == 2
    pairs = sampled_lengths("azure-conv-2023", 6, scale=traced.settings["length_scale"], cap=352)
    assert [r.output_tokens for r in traced.records] == [g for _, g in pairs]  # ignore_eos: each decodes its draw
    assert list(table.lengths) == ["fixed", "azure-conv-2023"] and table.failed.sum() == 0
    assert table["output max"].iloc[0] == 16 and table["output max"].iloc[1] == max(g for _, g in pairs)


def test_lab03s_trace_table_reports_failures_as_data_when_nothing_answers():
    """No server on the port: every request of both runs fails at once; the table counts them, no exception."""
    from labs_lib.endpoints import Endpoint
    from labs_lib.experiments import trace_beside_fixed
    from labs_lib.load import LoadResult, run_blocking, run_load
    from labs_lib.prompts import PromptFactory
    from labs_lib.timing import RequestSpec

    closed = Endpoint("nothing", "http://127.0.0.1:9/v1", "m", None)
    factory = PromptFactory(None, seed=0)
    specs = [RequestSpec(p, 8) for p in factory.prompts(3, 16)]
    fixed = run_blocking(run_load(closed, specs, concurrency=2, progress=False, settings={"prompt_tokens": 16, "max_tokens": 8}))
    assert isinstance(fixed, LoadResult) and fixed.summary.failed == 3
    table, traced = run_blocking(trace_beside_fixed(closed, factory, fixed, "azure-code-2023", cap_tokens=64, progress=False))
    assert table.failed.tolist() == [3, 3] and table["prompt mean"].isna().all() and table["TTFT p50"].isna().all()
    assert traced.settings["lengths"] == "azure-code-2023"
