"""The labs' explorers, through their own callbacks: every control change recomputes with the library's
functions and redraws (the browser test, tests/test_browser.py, moves the same controls in JupyterLab).
Lab 01's over the catalogues, lab 03's over a concurrency sweep measured here on the embedded engine,
labs 04 and 05's over real results (tests/fixtures/)."""

import itertools
from pathlib import Path

import pytest

from labs_lib.kv_math import kv_cache, plan_capacity
from labs_lib.widgets import BATCHES, SEQ_LENS, KVExplorer, explorer_state

pytest.importorskip("ipywidgets")


@pytest.fixture
def explorer():
    return KVExplorer(
        ["Llama-3.1-8B", "Llama-3.1-405B", "Qwen2.5-7B", "gemma-3-270m"],
        ["RTX-4090", "L40S", "H100-SXM", "L4"],
        model="Llama-3.1-8B",
        gpu="RTX-4090",
        kv_dtype="bf16",
        gpu_memory_utilization=0.9,
        seq_len=8192,
        batch=4,
    )


def library(model, gpu, kv_dtype, util, seq_len, batch):
    plan = plan_capacity(model, seq_len, kv_dtype=kv_dtype, gpu=gpu, gpu_memory_utilization=util)
    return kv_cache(model, seq_len, batch, kv_dtype).kv_bytes, plan


CHANGES = [  # each one changes what is drawn (a 405B model leaves no pool on any of these cards)
    ("gpu", "H100-SXM"),
    ("model", "Llama-3.1-405B"),
    ("kv_dtype", "fp8"),
    ("model", "Qwen2.5-7B"),
    ("gpu_memory_utilization", 0.95),
    ("seq_len", 131072),
    ("batch", 64),
    ("gpu", "L4"),
]


def test_every_change_recomputes_with_the_library_and_redraws(explorer):
    for name, value in CHANGES:
        draws, figure_before = explorer.draws, explorer.figure.value
        explorer.controls[name].value = value
        v = explorer.values()
        kv_bytes, plan = library(v["model"], v["gpu"], v["kv_dtype"], v["gpu_memory_utilization"], v["seq_len"], v["batch"])
        s = explorer.state
        assert (s.kv_bytes, s.kv_pool_bytes, s.max_concurrency, s.kv_cache_tokens) == (
            kv_bytes,
            plan.available_kv_bytes,
            plan.max_concurrency,
            plan.kv_cache_tokens,
        ), name
        assert s.fits == (v["batch"] <= plan.max_concurrency)
        assert explorer.draws == draws + 1 and explorer.figure.value != figure_before, f"no redraw after {name}"
        assert f"{plan.kv_cache_tokens:,} tokens" in explorer.readout.value


def test_the_budget_follows_the_model_and_the_card(explorer):
    small = explorer.state
    explorer.controls["model"].value = "Llama-3.1-405B"
    assert explorer.state.kv_pool_bytes == 0 and not explorer.state.fits and explorer.state.problem
    assert "does not fit" in explorer.readout.value
    explorer.controls["model"].value = "Llama-3.1-8B"
    explorer.controls["gpu"].value = "H100-SXM"
    assert explorer.state.kv_pool_bytes > 5 * small.kv_pool_bytes


def test_sliders_step_through_the_whole_range_evenly():
    assert SEQ_LENS[0] == 256 and SEQ_LENS[-1] >= 1_000_000
    assert all(b / a == 2 for a, b in itertools.pairwise(SEQ_LENS))
    assert BATCHES[0] == 1 and BATCHES[-1] == 512 and all(b / a <= 2 for a, b in itertools.pairwise(BATCHES))


def test_a_starting_value_between_steps_takes_the_nearest(explorer):
    e = KVExplorer(
        ["gemma-3-270m"],
        ["L4"],
        model="gemma-3-270m",
        gpu="L4",
        kv_dtype="fp16",
        gpu_memory_utilization=0.9,
        seq_len=3000,
        batch=5,
    )
    assert e.controls["seq_len"].value == 2048 and e.controls["batch"].value in (4, 6)
    assert e.state == explorer_state("gemma-3-270m", "L4", "fp16", 0.9, 2048, e.controls["batch"].value)


# ---- lab 04's sweep explorer, over real sweep results (tests/fixtures/sweeps/README.md)


@pytest.fixture
def measured():
    import pandas as pd

    from labs_lib import sweep_views as views
    from labs_lib.sweep import load_results

    folder = Path(__file__).parent / "fixtures" / "sweeps"
    tables = [views.load_table(load_results(p)).assign(experiment=p.stem) for p in sorted(folder.glob("*.jsonl"))]
    return pd.concat(tables, ignore_index=True)


def test_the_sweep_explorer_redraws_every_choice_over_the_measured_points(measured):
    from labs_lib.widgets import SweepExplorer

    explorer = SweepExplorer(measured, x="TTFT p99", y="tok/s", colour="experiment")
    assert explorer.points == len(measured.dropna(subset=["TTFT p99", "tok/s"])) > 0
    for name, value in (("x", "concurrency"), ("y", "TTFT p50"), ("colour", "config"), ("x", "TPOT p50")):
        before, draws = explorer.figure.value, explorer.draws
        explorer.controls[name].value = value
        v = explorer.values()
        shown = measured.dropna(subset=[v["x"], v["y"]])
        assert explorer.draws == draws + 1 and explorer.figure.value != before, name
        assert explorer.points == len(shown)
        assert f"{shown[v['colour']].nunique()} series by {v['colour']}" in explorer.readout.value


def test_the_sweep_explorer_over_only_refused_starts_says_nothing_started():
    """Every start refused (a card another process holds): the tables hold failure rows only, and the explorer
    draws an empty figure and says so, rather than failing on a metric list with nothing in it."""
    from labs_lib import sweep_views as views
    from labs_lib.sweep import load_results
    from labs_lib.widgets import SweepExplorer

    path = sorted((Path(__file__).parent / "fixtures" / "sweeps").glob("*.jsonl"))[0]
    refused = load_results(path).assign(status="failed", error="ValueError: Free memory on device")
    table = views.load_table(refused).assign(experiment=path.stem)
    assert table.empty

    explorer = SweepExplorer(table, x="TTFT p99", y="tok/s", colour="experiment")
    assert explorer.points == 0 and "no configuration started" in explorer.text()
    assert explorer.figure.value  # a figure all the same: the axes the learner asked for, empty


# ---- lab 03's latency explorer, over a concurrency sweep measured on the embedded engine


@pytest.fixture(scope="module")
def measured_runs(starts_engine):
    from labs_lib import experiments
    from labs_lib.endpoints import endpoint_for
    from labs_lib.engines import EngineConfig
    from labs_lib.engines.llamacpp import LlamaCppEngine
    from labs_lib.load import run_blocking
    from labs_lib.prompts import PromptFactory

    with LlamaCppEngine(EngineConfig(ctx=2048, parallel=2)) as engine:
        factory = PromptFactory(engine.prompt_tokenizer(), seed=0)
        table, runs, _ = run_blocking(
            experiments.concurrency_sweep(
                endpoint_for(engine),
                factory,
                [1, 2, 4],
                requests=5,
                prompt_tokens=32,
                max_tokens=8,
                engine=engine,
                progress=False,
            )
        )
    return table, runs


@pytest.mark.engine
def test_the_latency_explorer_reads_the_measured_records(measured_runs):
    import numpy as np

    from labs_lib.widgets import LatencyExplorer

    table, runs = measured_runs
    explorer = LatencyExplorer(runs, slots=2, metric="ttft", percentile=99)
    s = explorer.state  # the last level, TTFT p50/p99: the sweep's own table (Summary) says the same
    last = table[table.concurrency == 4].iloc[0]
    assert s.concurrency == 4 and s.completed == 5 == s.values
    assert (s.p50_ms, s.percentile_ms) == pytest.approx((last.p50_ttft_ms, last.p99_ttft_ms))
    assert "set by the two slowest" in explorer.readout.value  # 5 values: p99 lies between the two largest
    by_level = {run.settings["concurrency"]: run for run in runs}
    changes = [("metric", "tpot"), ("percentile", 90), ("concurrency", 1), ("metric", "itl"), ("percentile", 50)]
    changes += [("metric", "e2e"), ("concurrency", 2), ("percentile", 99.9)]
    for name, value in changes:
        before, draws = explorer.figure.value, explorer.draws
        explorer.controls[name].value = value
        v, s = explorer.values(), explorer.state
        ok = [r for r in by_level[v["concurrency"]].records if r.ok]
        values = [g for r in ok for g in r.itl_ms] if v["metric"] == "itl" else [getattr(r, f"{v['metric']}_ms") for r in ok]
        # the definition, straight from the records: numpy's percentile, as vLLM's benchmark takes it
        assert s.values == len(values) and s.max_ms == max(values), name
        assert s.percentile_ms == pytest.approx(np.percentile(values, v["percentile"])), name
        assert s.p50_ms == pytest.approx(np.median(values)), name
        if v["percentile"] in (50, 90, 99):  # and the run's Summary, where it has that percentile
            stats = getattr(by_level[v["concurrency"]].summary, f"{v['metric']}_ms")
            assert s.percentile_ms == pytest.approx(getattr(stats, f"p{v['percentile']}")), name
        assert f"p{v['percentile']:g} <b>{s.percentile_ms:,.1f} ms</b>" in explorer.readout.value, name
        assert explorer.readout.value.count("p50 ") == 1, name  # p50 chosen: shown once, not twice
        tail = v["percentile"] > 100 - 100 / (len(values) - 1)
        assert ("set by the two slowest" in explorer.readout.value) == tail, (name, len(values))
        assert explorer.draws == draws + 1 and explorer.figure.value != before, f"no redraw after {name}"


def test_latency_metrics_and_percentiles_are_checked():
    from labs_lib.errors import BadInput
    from labs_lib.load import latency_values_ms, percentile_ms

    with pytest.raises(BadInput, match="metric: 'ttlt' is not allowed; allowed: ttft, tpot, itl, e2e"):
        latency_values_ms([], "ttlt")
    for bad in (101, -1, "99", True):
        with pytest.raises(BadInput, match="percentile"):
            percentile_ms([1.0], bad)
    assert percentile_ms([], 50) is None and percentile_ms([3.0, 1.0, 2.0], 50) == 2.0


# ---- lab 05's configuration explorer, over a real comparison (tests/fixtures/quant/README.md)


@pytest.fixture
def compared():
    import pandas as pd

    return pd.read_csv(Path(__file__).parent / "fixtures" / "quant" / "configurations-llamacpp-quick.csv")


def test_the_quant_explorer_compares_the_chosen_configurations(compared):
    from labs_lib.quant_compare import QUALITY, config_labels, rank
    from labs_lib.widgets import QuantExplorer

    explorer = QuantExplorer(compared, quality="perplexity")
    labels = list(config_labels(compared))
    weights = [label for label, kv in zip(labels, compared.kv_dtype, strict=True) if kv == "f16"]
    assert list(explorer.values()["chosen"]) == weights and len(weights) < len(labels)  # KV variants there, not chosen
    assert explorer.best == rank(compared[compared.kv_dtype == "f16"])[0]
    changes = [
        ("chosen", labels[-2:]),
        ("quality", "top1_agreement"),
        ("chosen", labels[1:4]),
        ("quality", "delta_nll"),
        ("quality", "kl"),
        ("chosen", labels[:3]),  # the reference among them: on KL it is not the best, it is what KL is measured against
    ]
    for name, value in changes:
        before, draws = explorer.figure.value, explorer.draws
        explorer.controls[name].value = value
        v = explorer.values()
        rows = compared.set_index(config_labels(compared)).loc[list(v["chosen"])]
        against = rows[rows.index != rows.reference] if v["quality"] != "perplexity" else rows  # only perplexity is not
        best = against[v["quality"]].idxmin() if QUALITY[v["quality"]] == "lower" else against[v["quality"]].idxmax()
        assert explorer.best == best and f"<b>{best}</b>" in explorer.readout.value, name
        assert f"{len(rows)} configurations" in explorer.readout.value
        assert (f"{compared.reference[0]}: the reference" in explorer.readout.value) == (len(against) < len(rows)), name
        assert explorer.draws == draws + 1 and explorer.figure.value != before, f"no redraw after {name}"
    assert "kl_ci_low" in explorer.readout.value and "kl_ci_high" in explorer.readout.value  # the interval is shown
    explorer.controls["chosen"].value = []
    assert explorer.best is None and "0 configurations" in explorer.readout.value


@pytest.mark.engine
def test_ttft_parts_put_llama_cpps_slot_wait_in_the_rest(measured_runs):
    """llama.cpp times each request's prompt (timings.prompt_ms) but not its wait for a slot: at 4 in flight on 2
    slots that wait is in the rest, which grows; the prompt's own time does not."""
    from labs_lib.load import ttft_parts

    _, runs = measured_runs
    one, four = (ttft_parts(run) for run in (runs[0], runs[-1]))
    for parts in (one, four):
        assert parts["requests"] == 5 and parts["queue_ms"] is None  # llama.cpp reports no queue time
        assert 0 < parts["prefill_ms"] < parts["ttft_ms"]
        assert parts["rest_ms"] == pytest.approx(parts["ttft_ms"] - parts["prefill_ms"])
    assert four["rest_ms"] > one["rest_ms"] + four["prefill_ms"]  # a wait of a whole request, not a prefill


def test_without_widgets_the_explorer_walks_its_tour_through_its_controls(explorer, capsys, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    draws = explorer.draws
    explorer.show(False)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "on RTX-4090" in lines[0] and "<" not in lines[0]
    assert "on L40S" in lines[1] and explorer.controls["kv_dtype"].value == "fp8"
    assert explorer.draws == draws + 2  # the kv_dtype and gpu changes, each redrawn by the explorer's own callback
    assert [type(o).__name__ for o in shown] == ["Image"] and shown[0].data == explorer.figure.value
    explorer.show(True)
    assert shown[-1] is explorer.box


def test_the_quant_explorer_on_vllms_comparison_starts_with_both_rows(capsys, monkeypatch):
    """vLLM on CPU at quick size compares one weights configuration (the reference) with an fp8 KV cache: the
    explorer starts with both rows chosen, not the reference alone, its tour chooses no row twice, and printed
    without widgets it shows no readout twice (its second step chose the two rows again)."""
    import pandas as pd

    from labs_lib.quant_compare import config_labels
    from labs_lib.widgets import QuantExplorer

    compared = pd.read_csv(Path(__file__).parent / "fixtures" / "quant" / "configurations-vllm-quick.csv")
    explorer = QuantExplorer(compared, quality="kl")
    assert list(explorer.values()["chosen"]) == list(config_labels(compared)) and len(compared) == 2
    assert "2 configurations;" in explorer.readout.value
    for step in explorer.tour():
        chosen = step.get("chosen", [])
        assert len(chosen) == len(set(chosen)), step
    monkeypatch.setattr("IPython.display.display", lambda obj: None)
    explorer.show(False)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(set(lines)) == 2 and "by kl" in lines[0] and "by top1_agreement" in lines[1], lines
    explorer.controls["chosen"].value = list(config_labels(compared))[:1]
    assert "1 configuration;" in explorer.readout.value
