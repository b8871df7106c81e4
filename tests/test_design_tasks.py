"""The design tasks judge a participant's proposal with the lab's own numbers: the planner (lab 01), measured
sweep rows (labs 04-05; here lab 04's real sweep, tests/fixtures/sweeps/README.md), a run of the participant's own setting
(lab 03)."""

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO

from labs_lib import sweep_views as views
from labs_lib.design_tasks import (
    best_capacity_design,
    capacity_designs,
    check_capacity_design,
    check_choice,
    kv_dtype_costs,
)
from labs_lib.kv_math import plan_capacity
from labs_lib.sweep import load_results


def test_capacity_design_is_judged_by_the_planner_and_a_quality_budget(capsys):
    """Lab 01's task: Qwen2.5-7B for 50 users at 8k on the least card memory, its KV cache within a KL budget."""
    assert check_capacity_design(None) is None and "Hint" in capsys.readouterr().out
    fp8 = kv_dtype_costs().loc[("vllm", "fp8")]
    # the trade-off the task teaches holds for the measured cost: fp8 is inside the lab's budget, outside the strict one
    assert fp8.kl_ci_low >= 0.002 and fp8.kl_ci_high < 0.01, fp8
    # the planner's facts behind it: at max_num_seqs 50 an A100-40GB holds 50 only with fp8, an L40S with bf16 too
    at = {"kv_dtype": "bf16", "gpu_memory_utilization": 0.9, "max_num_seqs": 50}
    on = {gpu: plan_capacity("qwen2.5-7b", 8192, gpu=gpu, **at) for gpu in ("A100-40GB", "L40S")}
    assert on["A100-40GB"].max_concurrency_low < 50 <= on["L40S"].max_concurrency_low
    design = {"gpu": "A100-40GB", "kv_dtype": "fp8", "max_num_seqs": 64}
    assert check_capacity_design(design) is True and "correct: the least card memory (40 GiB)" in capsys.readouterr().out
    assert check_capacity_design({**design, "kv_dtype": "bf16"}) is False
    short = plan_capacity("qwen2.5-7b", 8192, gpu="A100-40GB", **{**at, "max_num_seqs": 64})
    assert f"{short.max_concurrency_low:,.1f} at its high end" in capsys.readouterr().out
    assert check_capacity_design({**design, "gpu": "L40S"}) is False  # enough, not least
    assert "a card with less memory does it too" in capsys.readouterr().out
    assert check_capacity_design({**design, "max_num_seqs": 32}) is False and "admits fewer than 50" in capsys.readouterr().out
    # the strict budget rules fp8 out, and its answer costs a bigger card: the L40S with the 16-bit cache
    assert check_capacity_design(design, kl_budget=0.002) is False and "over the budget" in capsys.readouterr().out
    assert check_capacity_design({**design, "gpu": "L40S", "kv_dtype": "bf16"}, kl_budget=0.002) is True
    check_capacity_design("show", kl_budget=0.002)
    assert "L40S with a bf16 KV cache" in capsys.readouterr().out
    for bad in ({**design, "gpu": "L41S"}, {**design, "kv_dtype": "q4_0"}, {**design, "max_num_seqs": "x"}, {"gpu": "L4"}):
        assert check_capacity_design(bad) is False
        out = capsys.readouterr().out
        assert len(out.strip().splitlines()) == 1 and "not allowed" in out, out  # one line, no traceback
    table = capacity_designs("qwen2.5-7b", users=50, seq_len=8192, gpu_memory_utilization=0.9)
    assert best_capacity_design(table, 0.01).gpu == "A100-40GB" and best_capacity_design(table, 1e-9) is not None


@pytest.fixture
def batching():
    return views.load_table(load_results(Path(__file__).parent / "fixtures" / "sweeps" / "batching-llamacpp-quick.jsonl"))


def test_a_choice_is_judged_against_the_measured_rows(batching, capsys):
    limit = 1000.0
    allowed = batching[batching["TTFT p99"] < limit]
    best = allowed.loc[allowed["goodput req/s"].idxmax()]
    over = batching[batching["TTFT p99"] >= limit].iloc[0]
    other = allowed[allowed.index != best.name].iloc[0]
    kw = {"keys": ("config", "concurrency"), "limit_column": "TTFT p99", "limit": limit, "objective": "goodput req/s"}
    pick = lambda row: {"config": row["config"], "concurrency": int(row["concurrency"])}  # noqa: E731
    assert check_choice("", None, batching, **kw) is None
    assert check_choice("", pick(best), batching, **kw) is True
    assert check_choice("", pick(over), batching, **kw) is False and "over the limit" in capsys.readouterr().out
    assert check_choice("", pick(other), batching, **kw) is False
    out = capsys.readouterr().out
    assert "meets the limit" in out and best["config"] not in out.split("meets the limit")[1]  # no answer yet
    assert check_choice("", "show", batching, **kw) is False
    assert f"config={best['config']}" in capsys.readouterr().out
    assert check_choice("", {"config": "parallel=99", "concurrency": 1}, batching, **kw) is False
    assert check_choice("", {"config": "x"}, batching, **kw) is False and "not allowed" in capsys.readouterr().out


def test_an_interval_accepts_the_best_row_that_surely_or_possibly_meets_the_limit(capsys):
    import pandas as pd

    # lab 05's shape: perplexity ratio to the reference with its 95% interval; the limit is 1.05
    table = pd.DataFrame(
        {
            "configuration": ["Q8_0/f16", "Q5_0/f16", "Q4_0/f16", "Q4_0-PURE/f16"],
            "file_MiB": [278.0, 242.2, 230.2, 150.2],
            "perplexity_ratio": [1.001, 1.02, 1.06, 1.31],
            "perplexity_ratio_ci_low": [0.999, 1.01, 1.03, 1.22],
        }
    )
    kw = {
        "keys": ("configuration",),
        "limit_column": "perplexity_ratio",
        "limit": 1.05,
        "objective": "file_MiB",
        "higher_is_better": False,
    }
    # without the interval only Q5_0 is right; with it Q4_0 (1.06, interval down to 1.03) may meet 1.05 too
    assert check_choice("", {"configuration": "Q4_0/f16"}, table, **kw) is False and "over the limit" in capsys.readouterr().out
    assert check_choice("", {"configuration": "Q5_0/f16"}, table, **kw) is True
    lenient = {**kw, "limit_column_low": "perplexity_ratio_ci_low"}
    assert check_choice("", {"configuration": "Q4_0/f16"}, table, **lenient) is True
    assert "as far as this measurement can tell" in capsys.readouterr().out
    assert check_choice("", {"configuration": "Q5_0/f16"}, table, **lenient) is True
    assert "correct: " in capsys.readouterr().out
    assert check_choice("", {"configuration": "Q8_0/f16"}, table, **lenient) is False
    assert check_choice("", {"configuration": "Q4_0-PURE/f16"}, table, **lenient) is False
    capsys.readouterr()
    assert check_choice("", "show", table, **lenient) is False
    assert "configuration=Q5_0/f16 or configuration=Q4_0/f16" in capsys.readouterr().out


def test_lab04s_task_weighs_a_kl_budget_against_a_tpot_slo_on_a_real_run(capsys):
    """Lab 05's design task on vLLM, here on its measured quick run (tests/fixtures/quant/README.md): KL under 0.01 and TPOT p50
    within 10% of the reference's, least weights + KV memory. F16 is closest in KL but over the SLO; Q8_0 meets
    both with more memory than the reference's weights with a q8_0 KV cache."""
    import pandas as pd

    from labs_lib.quant_compare import config_labels, config_memory_mib

    results = pd.read_csv(Path(__file__).parent / "fixtures" / "quant" / "configurations-llamacpp-quick.csv")
    slo = 1.10 * results.iloc[0]["tpot_p50_ms"]
    choices = results.assign(configuration=list(config_labels(results)), memory_MiB=config_memory_mib(results)).iloc[1:]
    kw = {
        "keys": ("configuration",),
        "limit_column": "kl",
        "limit_column_low": "kl_ci_low",
        "limit": 0.01,
        "also": {"tpot_p50_ms": slo},
        "objective": "memory_MiB",
        "higher_is_better": False,
    }
    f16 = choices[choices.configuration == "F16/f16"].iloc[0]
    assert f16.kl < 0.01 and f16.tpot_p50_ms > slo  # the best quality, too slow
    assert check_choice("", {"configuration": "F16/f16"}, choices, **kw) is False
    assert "tpot_p50_ms" in capsys.readouterr().out
    assert check_choice("", {"configuration": "Q8_0/f16"}, choices, **kw) is False  # within both, not the least memory
    assert check_choice("", {"configuration": "Q4_K_M/q4_0"}, choices, **kw) is False  # small, over the KL budget
    capsys.readouterr()
    assert check_choice("", {"configuration": "Q4_K_M/q8_0"}, choices, **kw) is True
    assert "correct: " in capsys.readouterr().out
    assert check_choice("", {"configuration": "Q4_K_M/q8_0"}, choices, **{**kw, "also": {"tpot_p50_ms": 11.0}}) is False


def test_lab05s_serving_plan_is_a_pair_no_run_combined(capsys):
    """Lab 05's design task on llama.cpp, on its measured quick run: 16 x 4,096 tokens in what the F16 weights file
    takes. The least estimated KL that fits is Q8_0 weights with a q8_0 cache, a pair the lab never ran."""
    import pandas as pd

    from labs_lib.quant_compare import serving_plans

    results = pd.read_csv(Path(__file__).parent / "fixtures" / "quant" / "configurations-llamacpp-quick.csv")
    plans = serving_plans(results, "Q4_K_M", 16, 4096)
    assert len(plans) == 4 * 3 and "Q4_K_M" not in set(plans.weights)  # every variant x every KV dtype, not the reference
    budget = float(results[results.variant == "F16"].file_MiB.iloc[0])
    kw = {
        "keys": ("weights", "kv_dtype"),
        "limit_column": "memory_MiB",
        "limit": budget,
        "also": {"est_tpot_ms": 1.10 * results.iloc[0]["tpot_p50_ms"]},
        "objective": "est_kl",
        "higher_is_better": False,
        "rows_are": "planned",
    }
    best = plans[(plans.weights == "Q8_0") & (plans.kv_dtype == "q8_0")].iloc[0]
    assert not best.run_together and best.memory_MiB < budget  # 278.0 MiB of weights + 229.5 of q8_0 cache
    assert check_choice("", {"weights": "Q8_0", "kv_dtype": "q8_0"}, plans, **kw) is True
    assert check_choice("", {"weights": "F16", "kv_dtype": "q4_0"}, plans, **kw) is False  # 639 MiB: over the budget
    assert check_choice("", {"weights": "Q8_0", "kv_dtype": "q4_0"}, plans, **kw) is False  # fits, more KL
    capsys.readouterr()
    assert check_choice("", {"weights": "Q4_K_M", "kv_dtype": "q8_0"}, plans, **kw) is False
    assert "no planned row" in capsys.readouterr().out
    assert check_choice("", {"weights": "Q8_0", "kv_dtype": "q8_0"}, plans, **{**kw, "also": {"est_tpot_ms": 11.9}}) is False
    assert check_choice("", "show", plans, **kw) is False and "weights=Q8_0, kv_dtype=q8_0" in capsys.readouterr().out


def test_the_kv_quality_data_is_what_lab04_measured():
    """data/kv_quality.json's rows are tools/kv_quality.py's reading of lab 05's saved tables (tests/fixtures/quant):
    the same KL figures, nothing typed in by hand."""
    spec = importlib.util.spec_from_file_location("kv_quality", REPO / "tools" / "kv_quality.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    references, rows = [], []
    for engine in ("llamacpp", "vllm"):
        _, ref, found = tool.kv_rows(FIXTURES / "quant" / f"configurations-{engine}-quick.csv")
        references.append(ref)
        rows += found
    data = json.loads((REPO / "data" / "kv_quality.json").read_text())
    assert (data["references"], data["rows"]) == (references, rows)
    assert {r["kv_dtype"] for r in rows} == {"q8_0", "q4_0", "fp8"}


def test_a_design_that_is_run_is_judged_by_its_own_run(capsys):
    """Lab 03's design task: the participant's cap is run, not looked up; the run must meet the objective and come
    within 15% of the best throughput measured within it (a cap between the measured levels may do better)."""
    import pandas as pd

    from labs_lib.design_tasks import check_measured_design

    table = pd.DataFrame(
        {"concurrency": [1, 4, 8], "p90_ttft_ms": [200.0, 380.0, 2800.0], "output_throughput": [46.0, 60.0, 61.0]}
    )
    limits = dict(key="concurrency", limit_column="p90_ttft_ms", limit=400.0, objective="output_throughput")

    def run(p90: float, tput: float) -> pd.DataFrame:
        return pd.DataFrame({"concurrency": [3], "p90_ttft_ms": [p90], "output_throughput": [tput]})

    assert check_measured_design(None, None, table, **limits) is None
    assert check_measured_design("show", None, table, **limits) is False
    assert "concurrency=4 (60.00 output_throughput)" in capsys.readouterr().out
    assert check_measured_design({"users": 3}, None, table, **limits) is False
    assert check_measured_design({"concurrency": 3}, None, table, **limits) is False
    assert "was not run" in capsys.readouterr().out
    assert check_measured_design({"concurrency": 3}, run(350.0, 58.0), table, **limits) is True  # within 15% of 60
    assert check_measured_design({"concurrency": 3}, run(500.0, 70.0), table, **limits) is False
    assert "over the limit 400" in capsys.readouterr().out
    assert check_measured_design({"concurrency": 3}, run(300.0, 40.0), table, **limits) is False
    assert "more than 15% below" in capsys.readouterr().out
    nothing_meets = table.assign(p90_ttft_ms=[900.0, 900.0, 900.0])
    assert check_measured_design({"concurrency": 1}, run(350.0, 10.0), nothing_meets, **limits) is True  # the run alone


@pytest.mark.engine
def test_lab03s_design_runs_the_participants_cap_on_the_engine(starts_engine, capsys):
    """The path a participant's answer takes in lab 03's design cell: the measured levels, then their own cap (one
    not measured) run as one more closed-loop level on the same engine and judged by that run."""
    from labs_lib.design_tasks import check_measured_design
    from labs_lib.endpoints import endpoint_for
    from labs_lib.engines import EngineConfig
    from labs_lib.engines.llamacpp import LlamaCppEngine
    from labs_lib.experiments import concurrency_sweep
    from labs_lib.load import run_blocking
    from labs_lib.prompts import PromptFactory, engine_tokenizer

    sizes = dict(requests=4, prompt_tokens=32, max_tokens=8, progress=False)
    with LlamaCppEngine(EngineConfig(ctx=4 * 96, parallel=4)) as engine:
        endpoint = endpoint_for(engine)
        factory = PromptFactory(engine_tokenizer(engine.root_url), seed=0)
        table, _, _ = run_blocking(concurrency_sweep(endpoint, factory, [1, 4], **sizes))
        tried, _, _ = run_blocking(concurrency_sweep(endpoint, factory, [3], **sizes))
    assert list(tried.concurrency) == [3] and int(tried.completed.iloc[0]) == 4
    limit = 2 * float(table.p90_ttft_ms.iloc[0])
    verdict = check_measured_design(
        {"concurrency": 3},
        tried,
        table,
        key="concurrency",
        limit_column="p90_ttft_ms",
        limit=limit,
        objective="output_throughput",
    )
    out = capsys.readouterr().out
    assert verdict in (True, False) and out.startswith("Design: ") and "{'concurrency': 3}" in out
    assert ("correct" in out) == verdict


def test_lab05s_design_cell_takes_the_plan_on_llamacpp_and_the_measured_rows_on_vllm(capsys):
    """quantization_design, as lab 05 calls it: the serving plan where weight variants ran, the least-memory choice
    among measured configurations otherwise (vLLM), both judged on the same real run."""
    import pandas as pd

    from labs_lib.design_tasks import quantization_design

    results = pd.read_csv(Path(__file__).parent / "fixtures" / "quant" / "configurations-llamacpp-quick.csv")
    assert quantization_design({"weights": "Q8_0", "kv_dtype": "q8_0"}, results, "Q4_K_M", True) is True
    assert "16 x 4,096 tokens in 517.7 MiB" in capsys.readouterr().out
    assert quantization_design("show", results, "Q4_K_M", False) is False
    assert "configuration=Q4_K_M/q8_0" in capsys.readouterr().out
    assert quantization_design(None, results.iloc[:1], "Q4_K_M", False) is None
    assert quantization_design("show", results.iloc[:0], "Q4_K_M", True) is None  # every configuration refused
