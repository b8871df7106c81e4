"""Lab 01's explorer, through its own callback: every control change recomputes with the library's
functions and redraws (the browser test, tests/test_browser.py, moves the same controls in JupyterLab)."""

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


# ---- lab 03's sweep explorer, over real sweep results (tests/fixtures/sweeps/README.md)


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
