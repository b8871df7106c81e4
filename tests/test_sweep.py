"""The sweep runner: grids, resume, failures as rows, crash safety — with the real engine."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings

import pytest
import yaml
from conftest import REPO, assert_one_line_error, launchers, run_cli, wait_until_gone

from labs_lib.errors import BadInput
from labs_lib.load import SLO, run_blocking
from labs_lib.paths import DATA_DIR
from labs_lib.sweep import SCHEMA, load_grid, read_rows, run_sweep
from labs_lib.sweep_views import with_goodput

TINY = {
    "name": "tiny",
    "engine": "llamacpp",
    "base": {"ctx": 1024},
    "axes": {"parallel": [1]},
    "workloads": [{"name": "w", "concurrency": [1, 2], "requests": 2, "prompt_tokens": 16, "max_tokens": 4}],
}


# ---- grids (no engine)


def test_grid_points_axes_variants_and_quick():
    grid = load_grid(
        {
            **TINY,
            "axes": {"parallel": [1, 2]},
            "variants": [{"prompt_cache": True}, {"prompt_cache": False}],
            "quick": {"axes": {"parallel": [1]}},
        }
    )
    assert len(grid.configs()) == 4 and len(grid.points()) == 8
    quick = load_grid({**TINY, "axes": {"parallel": [1, 2]}, "quick": {"axes": {"parallel": [1]}}}, quick=True)
    assert [c["parallel"] for c in quick.configs()] == [1]
    ids = [p.point_id("llamacpp") for p in grid.points()]
    same = load_grid({**TINY, "axes": {"parallel": [1, 2]}, "variants": [{"prompt_cache": True}, {"prompt_cache": False}]})
    assert len(set(ids)) == len(ids) and ids == [p.point_id("llamacpp") for p in same.points()]


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda g: g.update(axes={"slots": [1]}), "slots"),
        (lambda g: g.update(axes={"parallel": 4}), "axes.parallel"),
        (lambda g: g.update(axes={"parallel": [0]}), "parallel"),
        (lambda g: g.update(engine="tgi"), "tgi"),
        (lambda g: g.update(colour="blue"), "colour"),
        (lambda g: g["workloads"][0].update(concurrency=[-1]), "concurrency"),
        (lambda g: g["workloads"][0].update(turbo=True), "turbo"),
        (lambda g: g["workloads"][0].update(requests="lots"), "lots"),
    ],
)
def test_bad_grids_name_the_value(mutate, needle):
    grid = json.loads(json.dumps(TINY))
    mutate(grid)
    with pytest.raises(BadInput, match=needle):
        load_grid(grid)


def test_bad_grid_files(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("axes: [unclosed")
    with pytest.raises(BadInput, match="YAML"):
        load_grid(broken)
    assert_one_line_error(run_cli("sweep", "--grid", str(broken)), "broken.yaml")


def test_every_shipped_grid_loads():
    for path in (REPO / "data" / "grids").glob("*.yaml"):
        assert load_grid(path).points(), path
        assert load_grid(path, quick=True).points(), path


def test_results_file_of_another_schema_is_refused(tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text('{"schema": "something-else/2", "x": 1}\n')
    with pytest.raises(BadInput, match="something-else"):
        read_rows(other)
    notjson = tmp_path / "notes.jsonl"
    notjson.write_text("hello\nworld\n")
    with pytest.raises(BadInput, match="line 1"):
        read_rows(notjson)


def test_torn_last_line_is_dropped_with_a_warning_and_repaired(tmp_path):
    path = tmp_path / "r.jsonl"
    good = [{"schema": SCHEMA, "point_id": str(i)} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in good) + '{"schema": "labs-sw')
    with pytest.warns(UserWarning, match="torn"):
        assert [r["point_id"] for r in read_rows(path)] == ["0", "1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read_rows(path, repair=True)
    assert path.read_text().endswith("}\n") and len(read_rows(path)) == 2


# ---- running (real engine)


@pytest.mark.engine
def test_sweep_runs_writes_rows_and_resumes(tmp_path):
    out = tmp_path / "s.jsonl"
    df = run_blocking(run_sweep(load_grid(TINY), out, progress=False))
    assert len(df) == 2 and (df["status"] == "ok").all()
    assert list(df["level.concurrency"]) == [1, 2] and (df["summary.completed"] == 2).all()
    assert (df["allocation.n_ctx"] == 1024).all() and (df["metrics.llamacpp:tokens_predicted_total"] >= 8).all()
    # each request's outcome kept, so goodput can be computed again (lab 04, with the participant's function)
    assert [len(r) for r in df["requests"]] == [2, 2] and all(q["error"] is None and q["ttft_ms"] > 0 for q in df["requests"][0])
    from labs_lib.cores.lab04 import goodput

    assert (with_goodput(df, goodput, SLO())["summary.goodput"] == df["summary.request_throughput"]).all()  # no limits
    first = read_rows(out)
    again = run_blocking(run_sweep(load_grid(TINY), out, progress=False))
    assert len(again) == 2 and read_rows(out) == first  # nothing re-run
    bigger = {**TINY, "axes": {"parallel": [1, 2]}}
    df3 = run_blocking(run_sweep(load_grid(bigger), out, progress=False))
    assert len(df3) == 4 and read_rows(out)[:2] == first  # only the new points ran


@pytest.mark.engine
def test_a_kept_engine_serves_the_next_grid_of_its_configuration_and_stops_at_close(tmp_path, own_tag):
    """Lab 04's saving: the first grid's last engine serves the second grid's points of the same configuration
    (that configuration first), a different configuration stops it, and close() stops the last one."""
    from labs_lib.sweep import KeptEngine

    first = load_grid({**TINY, "name": "first", "axes": {"parallel": [1, 2]}})
    second = load_grid({**TINY, "name": "second", "axes": {"parallel": [1, 2]}})  # parallel 2 first: it is kept
    with KeptEngine() as kept:
        a = run_blocking(run_sweep(first, tmp_path / "a.jsonl", progress=False, keep=kept))
        assert len(launchers(own_tag)) == 1, "the last engine of the first grid keeps running"
        b = run_blocking(run_sweep(second, tmp_path / "b.jsonl", progress=False, keep=kept))
        assert (a["status"] == "ok").all() and (b["status"] == "ok").all()
        assert not a["engine_reused"].any()
        assert list(b["config.parallel"]) == [2, 2, 1, 1], "the kept configuration runs first"
        assert list(b["engine_reused"]) == [True, True, False, False]
        assert (b["summary.completed"] == 2).all()
        assert len(launchers(own_tag)) == 1, "the parallel-1 engine is kept now, the parallel-2 one stopped"
    # stop() waits for the group; /proc may lag
    assert not wait_until_gone(own_tag, 60, alive=launchers), "close() leaves no engine running"


@pytest.mark.engine
def test_a_configuration_that_cannot_start_becomes_rows_and_the_sweep_goes_on(tmp_path):
    grid = load_grid({**TINY, "axes": {}, "variants": [{"kv_cache_dtype": "q8_0", "flash_attention": False}, {"parallel": 1}]})
    df = run_blocking(run_sweep(grid, tmp_path / "f.jsonl", progress=False))
    failed, ok = df[df.status == "failed"], df[df.status == "ok"]
    assert len(failed) == 2 and len(ok) == 2
    assert failed["error"].str.contains("quantized V cache requires flash_attn").all()
    assert failed["log_tail"].str.contains("flash_attn").all()


@pytest.mark.engine
def test_a_participants_loop_runs_the_sweep_and_what_it_forgets_to_stop_is_stopped(tmp_path):
    """Lab 04 hands its participant's sweep_loop to run_sweep: a loop that forgets stop() still runs every point,
    and run_sweep stops the engines it left running before it returns."""
    seen = []

    async def forgets_to_stop(configs, start, measure, stop):
        for config in configs:
            engine = start(config)
            seen.append(engine)
            await measure(config, engine, None)

    grid = load_grid({**TINY, "axes": {"parallel": [1, 2]}})
    df = run_blocking(run_sweep(grid, tmp_path / "loop.jsonl", progress=False, loop=forgets_to_stop))
    assert (df["status"] == "ok").all() and len(df) == 4 and len(seen) == 2
    assert not any(engine.is_running() for engine in seen), "run_sweep stops what the loop left running"


@pytest.mark.engine
def test_a_point_that_times_out_is_a_row(tmp_path):
    grid = load_grid(
        {**TINY, "workloads": [{"name": "long", "concurrency": [1], "requests": 1, "prompt_tokens": 16, "max_tokens": 400}]}
    )
    df = run_blocking(run_sweep(grid, tmp_path / "t.jsonl", point_timeout_s=1.0, progress=False))
    assert df["status"].tolist() == ["failed"] and "timed out" in df["error"].iloc[0]


@pytest.mark.engine
def test_killed_sweep_resumes_and_keeps_finished_points(tmp_path, own_tag):
    grid_file = tmp_path / "g.yaml"
    grid_file.write_text(
        yaml.safe_dump(
            {
                **TINY,
                "axes": {"parallel": [1, 2]},
                "workloads": [{"name": "w", "concurrency": [1], "requests": 2, "prompt_tokens": 16, "max_tokens": 24}],
            }
        )
    )
    out = tmp_path / "k.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labs_lib", "sweep", "--grid", str(grid_file), "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    kept = read_rows(out, repair=True)
    assert 1 <= len(kept) < 2
    assert not wait_until_gone(own_tag, 10, alive=launchers), "the sweep's engine outlived the SIGKILLed sweep"
    assert run_cli("sweep", "--grid", str(grid_file), "--out", str(out)).returncode == 0
    rows = read_rows(out)
    assert len(rows) == 2 and rows[0] == kept[0] and all(r["status"] == "ok" for r in rows)


@pytest.mark.engine
def test_child_guard_stops_the_server_when_its_parent_is_killed(tmp_path, own_tag):
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'labs_lib.engines.guard', '--', sys.executable, '-m', 'labs_lib', 'serve'],"
        " start_new_session=True, stdout=subprocess.PIPE, text=True)\n"
        "for line in p.stdout:\n"
        "    if 'Ctrl-C' in line: print('ready', flush=True); break\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        assert launchers(own_tag)
        parent.kill()
        parent.wait(5)
        assert not wait_until_gone(own_tag, 10, alive=launchers)
    finally:
        parent.kill()


def test_every_lab03_experiment_has_a_grid_for_each_engine():
    """Lab 04 loads data/grids/{cpu,gpu}_<name>.yaml for each experiment (issue 12: gpu_flash_attention was missing)."""
    import json
    import re

    from conftest import REPO

    cells = json.loads((REPO / "notebooks" / "04_vllm_tuning_sweeps.ipynb").read_text())["cells"]
    names = set(re.findall(r'experiment\("(\w+)"\)', "".join("".join(c["source"]) for c in cells)))
    assert len(names) >= 5
    for name in sorted(names):
        for prefix in ("cpu", "gpu"):
            load_grid(REPO / "data" / "grids" / f"{prefix}_{name}.yaml", quick=True)


def test_cache_hit_table_keeps_the_load_level_so_off_and_on_compare_at_the_same_concurrency():
    """gpu_prefix_cache.yaml runs both configurations at concurrency 1 and 8; lab 04 compared "off at 1"
    with "on at 8" (issue 12). The table now carries the concurrency to pair rows by."""
    import pandas as pd

    from labs_lib.sweep_views import cache_hit_table, caching_ttft_cut

    rows = pd.DataFrame(
        {
            "status": ["ok"] * 4,
            "config.prompt_cache": [False, False, True, True],
            "level.concurrency": [1, 8, 1, 8],
            "metrics.vllm:prompt_tokens_total": [4000.0, 4000.0, 4000.0, 4000.0],
            "metrics.vllm:prompt_tokens_cached_total": [0.0, 0.0, 3000.0, 3000.0],
            "summary.p50_ttft_ms": [100.0, 400.0, 40.0, 150.0],
        }
    )
    table = cache_hit_table(rows, "vllm")
    assert list(table["concurrency"]) == [1, 8, 1, 8]
    assert list(table["hit rate"]) == [0.0, 0.0, 0.75, 0.75]  # vLLM's prompt counter includes the hits
    shared, cut, said = caching_ttft_cut(table)  # lab 04 section 3: off against on at the lightest load only
    assert (
        len(shared) == 4
        and cut == pytest.approx(0.6)
        and said.endswith("100 ms (prompt_cache=False) -> 40 ms (prompt_cache=True): 60% lower")
    )
    assert caching_ttft_cut(table.iloc[:1])[1] != caching_ttft_cut(table.iloc[:1])[1]  # NaN: nothing to compare


def test_a_quick_grid_may_leave_its_knob_to_the_full_run():
    """A grid's quick section can say why a quick run turns nothing (lab 04 prints it); the full run and the
    CLI's explicit --quick keep every configuration."""
    path = DATA_DIR / "grids" / "vllm_cpu_kv_dtype.yaml"
    quick, full = load_grid(path, quick=True), load_grid(path)
    assert "quick=False turns it here too" in quick.skipped and full.skipped == ""
    assert len(quick.configs()) == len(full.configs()) == 2  # what is skipped is still a valid grid
    assert load_grid(DATA_DIR / "grids" / "vllm_cpu_kv_pool.yaml", quick=True).skipped == ""


def test_every_vllm_grid_sends_load_so_its_preemptions_are_measured():
    """vLLM's pool rows report vllm:num_preemptions (engines.vllm.kv_pool_row); the GPU pool grid sent no load,
    and lab 04 printed "preempted 0 times" for a counter never read. Quick and full, CPU and GPU."""
    from labs_lib.sweep import grid_configs

    grids = {name for name, _ in grid_configs("vllm")}
    assert "gpu_kv_pool.yaml" in grids and "vllm_cpu_kv_pool.yaml" in grids
    for name in grids:
        for quick in (False, True):
            assert load_grid(DATA_DIR / "grids" / name, quick=quick).workloads, (name, quick)


def test_a_grid_says_where_it_leaves_vllms_defaults():
    """Lab 04's GPU grids switched prefix caching and chunked prefill off without saying that vLLM runs them on by
    default: each vLLM grid's note names the default beside what the grid sets, and flags a baseline that is not it."""
    from labs_lib.sweep import defaults_note

    note = defaults_note(load_grid("data/grids/gpu_prefix_cache.yaml"))
    assert "prompt_cache turns False, True; vllm's default True" in note and "(the baseline is not the default)" in note
    assert "gpu_memory_utilization" not in note  # each engine takes its share of the card from what is free
    assert "max_num_seqs" in defaults_note(load_grid("data/grids/vllm_cpu_batching.yaml"))
    assert defaults_note(load_grid("data/grids/cpu_batching.yaml")) == ""  # llama.cpp states no defaults here


def test_the_pareto_front_keeps_the_points_nothing_beats_on_both_axes():
    import pandas as pd

    from labs_lib.sweep_views import pareto_table

    # (TPOT p50 ms, tok/s): A 10 tok/s per user at 100, B 20 at 50, C 5 at 80 (A beats it), D 20 at 40 (B beats it)
    table = pd.DataFrame({"config": list("ABCD"), "TPOT p50": [100.0, 50.0, 200.0, 50.0], "tok/s": [100.0, 50.0, 80.0, 40.0]})
    points = pareto_table(table).set_index("config")
    assert points["on_front"].to_dict() == {"A": True, "B": True, "C": False, "D": False}
    assert points.loc["B", "tok/s per user"] == 20.0 and points.loc["A", "tok/s per device"] == 100.0


def test_a_token_costs_the_devices_hour_over_the_tokens_of_that_hour():
    import pandas as pd

    from labs_lib.catalogs import gpu_price
    from labs_lib.gpu import read_gpus
    from labs_lib.sweep_views import cheapest_token_line, device_hour_price, pareto_table, usd_per_million_tokens

    # 3.60 USD an hour at 1,000 tok/s: 3.6 M tokens an hour, 1 USD per M; twice the tokens, half the price
    assert usd_per_million_tokens(1000, 3.6) == pytest.approx(1.0) and usd_per_million_tokens(2000, 3.6) == pytest.approx(0.5)
    assert usd_per_million_tokens(0, 3.6) == float("inf")
    table = pd.DataFrame({"config": list("ABC"), "TPOT p50": [100.0, 50.0, 200.0], "tok/s": [100.0, 50.0, 80.0]})
    points = pareto_table(table, usd_per_device_hour=3.6).set_index("config")
    assert points["USD per M tokens"].idxmin() == "A" and points.loc["A", "on_front"]  # the busiest device's tokens
    assert points.loc["B", "USD per M tokens"] == pytest.approx(20.0)
    assert "USD per M tokens" not in pareto_table(table)
    table["concurrency"] = [4, 1, 2]
    line = cheapest_token_line(pareto_table(table, usd_per_device_hour=3.6), 3.6, "as given")
    assert (
        line
        == "at $3.60 per device-hour (as given): cheapest $10.00 per M output tokens, A at concurrency 4, 10.0 tok/s per user"
    )
    assert cheapest_token_line(pareto_table(table), None, "no GPU") == "no cost column: no GPU"
    # the catalogue's sourced range, by provider tier (data/gpus.json "prices")
    h100 = gpu_price("H100-SXM")
    assert h100 is not None and 0 < h100.low_usd < h100.mid_usd < h100.high_usd and h100.source.startswith("https://")
    hyperscaler = gpu_price("h100", tier="hyperscaler")  # the catalogue's alias for the SXM card
    assert hyperscaler is not None and hyperscaler.low_usd >= h100.low_usd
    assert gpu_price("T4") is None  # a card the survey does not list
    if not read_gpus()[0]:  # a CPU: no price unless one is given (on a GPU: tests/test_gpu_branches.py)
        price, why = device_hour_price(None)
        assert price is None and "give usd_per_device_hour" in why, why


@pytest.mark.engine
def test_a_real_sweeps_front_dominates_every_other_point(tmp_path):
    from labs_lib.energy import read_energy
    from labs_lib.sweep_views import energy_note, load_table, pareto_table

    grid = load_grid({**TINY, "axes": {"parallel": [1, 2]}})
    rows = run_blocking(run_sweep(grid, tmp_path / "p.jsonl", progress=False))
    points = pareto_table(load_table(rows))
    assert len(points) == 4 and points["on_front"].any()
    # each point's joules from this machine's energy counter, or why there is none (one line, every point)
    counter, why = read_energy()
    if counter is None:
        assert set(rows["energy.source"]) == {why} and rows["energy.joules"].isna().all()
        assert energy_note({"p": rows}) == f"no tokens per joule: {why}" and "tok/J" not in points
    else:
        assert (rows["energy.joules"] > 0).all() and (points["tok/J"] > 0).all(), rows["energy.joules"]
    front = points[points["on_front"]]
    for _, p in points[~points["on_front"]].iterrows():
        beaten = (front["tok/s per user"] >= p["tok/s per user"]) & (front["tok/s per device"] >= p["tok/s per device"])
        assert beaten.any(), p.to_dict()


def test_planned_concurrency_beside_vllms_pool_matches_its_start_up_line():
    """vLLM-cpu 0.32.0, gemma-3-270m, 1 GiB of KV, max_model_len 2048 logged 'Maximum concurrency for 2,048 tokens per
    request: 27.03x' (tests/test_vllm_live.py checks that line on every CI run); the planner beside the pool says so."""
    import pandas as pd

    from labs_lib.sweep_views import with_planned_concurrency

    pool = pd.DataFrame({"max_model_len": [2048], "KV pool GiB (asked)": [1.0], "available KV GiB (logged)": [None]})
    planned, why_not = with_planned_concurrency(pool, "gemma-3-270m", on_cpu=True)
    assert why_not is None and round(planned["planned max concurrency"][0], 2) == 27.03
    assert "planned max concurrency" not in pool  # the caller's table is left as it was
    unknown, why_not = with_planned_concurrency(pool, "no-such-model", on_cpu=True)
    assert why_not and "no-such-model" in why_not and "planned max concurrency" not in unknown


def test_prefix_groups_give_n_distinct_system_prompts_taken_in_turn():
    from labs_lib.prompts import PromptFactory

    prompts = PromptFactory(None, seed=0).prompts(7, 16, shared_prefix_tokens=40, prefix_groups=3)
    heads = [p.split("\n\n")[0] for p in prompts]
    assert len(set(heads)) == 3 and all(heads[i] == heads[i % 3] for i in range(7))  # request i: prefix i mod 3
    assert len(set(prompts)) == 7  # every suffix its own
    one = PromptFactory(None, seed=0).prompts(4, 16, shared_prefix_tokens=40)
    assert len({p.split("\n\n")[0] for p in one}) == 1
    assert "\n\n" not in PromptFactory(None, seed=0).prompts(2, 16, prefix_groups=3)[0]  # no prefix asked: none
    grid = load_grid({**TINY, "workloads": [{"name": "w", "shared_prefix_tokens": 40, "prefix_groups": 3}]})
    assert grid.workloads[0].prefix_groups == 3
    with pytest.raises(BadInput, match="prefix_groups"):
        load_grid({**TINY, "workloads": [{"name": "w", "prefix_groups": 0}]})


def test_cache_hit_table_names_the_workload_when_a_grid_has_several():
    import pandas as pd

    from labs_lib.sweep_views import cache_hit_table, hit_rate_by_workload

    rows = pd.DataFrame(
        {
            "status": ["ok"] * 2,
            "config.prompt_cache": [True, True],
            "workload.name": ["shared_system_prompt", "three_system_prompts"],
            "metrics.vllm:prompt_tokens_total": [100.0, 100.0],
            "metrics.vllm:prompt_tokens_cached_total": [90.0, 60.0],
            "summary.p50_ttft_ms": [50.0, 80.0],
        }
    )
    table = cache_hit_table(rows, "vllm")
    assert list(table["workload"]) == ["shared_system_prompt", "three_system_prompts"]
    assert list(table["hit rate"]) == [0.9, 0.6]
    rates, best, drop = hit_rate_by_workload(table)  # lab 04 section 3's takeaway: one prompt against three in turn
    assert rates.shape == (1, 2) and best == table.config.iloc[0] and drop == pytest.approx(0.3)


def test_the_articles_prefix_saving_reads_the_caching_on_row_whatever_order_the_sweep_ran():
    """A kept engine runs vLLM's "on" point first: the article check must still read the hit rate with caching on."""
    import pandas as pd

    from labs_lib.sweep_views import article_checks

    batching = pd.DataFrame(
        {
            "status": ["ok"] * 2,
            "config.parallel": [1, 4],
            "level.concurrency": [4, 4],
            "summary.output_throughput": [10.0, 30.0],
            "summary.p99_ttft_ms": [900.0, 300.0],
        }
    )
    hits = pd.DataFrame({"config": ["prompt_cache=True", "prompt_cache=False"], "hit rate": [0.7, 0.0]})
    table = article_checks(None, batching, 0.5, hits, "vllm", "vllm_cpu")
    saving = table[table["claim"].str.contains("prefix", case=False) & table["computed"].astype(str).str.contains("served")]
    assert list(saving["computed"]) == ["70% of prompt tokens served from the cache"], table[["claim", "computed"]]
    v = table.set_index("id")["verdict"]
    assert v["s002-prefix-saving"] == "depends"  # more than the article's 30-50%: the workload's shared share sets it
    assert v["s002-conc32-throughput"] == "depends"  # 3x, not the article's 4x: batching helps, by a machine's factor
    batching.loc[1, "summary.output_throughput"] = 40.0
    hits.loc[0, "hit rate"] = 0.4
    v = article_checks(None, batching, 0.5, hits, "vllm", "vllm_cpu").set_index("id")["verdict"]
    assert v["s002-prefix-saving"] == "holds" and v["s002-conc32-throughput"] == "holds"
    batching.loc[1, "summary.output_throughput"] = 10.0
    assert (
        article_checks(None, batching, 0.5, hits, "vllm", "vllm_cpu").set_index("id").loc["s002-conc32-throughput", "verdict"]
        == "does not hold"
    )


def test_a_multi_turn_workload_is_validated_and_keeps_older_point_ids():
    from labs_lib.sweep import Point, Workload

    grid = load_grid({**TINY, "workloads": [{"name": "talk", "concurrency": [2], "requests": 2, "turns": 3}]})
    assert grid.workloads[0].turns == 3
    for clash in ({"rate": [1.0]}, {"shared_prefix_tokens": 40}):
        with pytest.raises(BadInput, match="turns"):
            load_grid({**TINY, "workloads": [{"name": "talk", "turns": 2, **clash}]})
    # a point measured before `turns` existed (one turn) keeps its id; a conversation is another point
    import dataclasses
    import hashlib
    import json

    one = Point({"ctx": 1024}, Workload(), {"concurrency": 1})
    later = ("turns", "lengths", "length_scale", "length_cap")  # fields added after sweeps were first written
    before_turns = {k: v for k, v in dataclasses.asdict(Workload()).items() if k not in later}  # the key as it was
    key = {"engine": "llamacpp", "config": {"ctx": 1024}, "workload": before_turns, "level": {"concurrency": 1}}
    old_id = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert one.point_id("llamacpp") == old_id
    assert Point({"ctx": 1024}, Workload(turns=2), {"concurrency": 1}).point_id("llamacpp") != one.point_id("llamacpp")


@pytest.mark.engine
def test_a_multi_turn_sweep_point_records_every_turn(tmp_path):
    grid = load_grid(
        {
            **TINY,
            "workloads": [{"name": "talk", "concurrency": [2], "requests": 2, "prompt_tokens": 16, "max_tokens": 4, "turns": 3}],
        }
    )
    df = run_blocking(run_sweep(grid, tmp_path / "talk.jsonl", progress=False))
    assert (df["status"] == "ok").all() and int(df["summary.completed"].iloc[0]) == 6  # 2 conversations x 3 turns


def test_one_point_turns_a_grid_to_one_configuration_at_one_load_in_its_own_file():
    grid = load_grid(DATA_DIR / "grids" / "vllm_cpu_batching.yaml", quick=True)
    turned = grid.one_point({"parallel": 4}, 8)
    assert turned.name == "batching-parallel4-c8" and grid.name == "batching"  # the grid itself is unchanged
    [config] = turned.configs()
    assert config == {**grid.base, "parallel": 4}
    [point] = turned.points()
    assert point.level == {"concurrency": 8} and point.workload.requests == grid.workloads[0].requests
    assert point.point_id("vllm") not in {p.point_id("vllm") for p in grid.points()}
    with pytest.raises(BadInput, match=r"config field.*'slots'"):
        grid.one_point({"slots": 4}, 8)
    with pytest.raises(BadInput, match="concurrency"):
        grid.one_point({"parallel": 4}, 0)


@pytest.mark.engine
def test_a_rerun_retries_the_points_that_failed_and_keeps_the_newest_row(tmp_path):
    """A participant whose engines could not start (another lab held the card) frees the card and runs the sweep
    again: the failed points are measured this time, and the results hold one row per point, the newest."""
    from labs_lib.errors import EngineError
    from labs_lib.sweep import load_results

    async def card_taken(configs, start, measure, stop):  # every start refused, as on a card another lab holds
        for config in configs:
            await measure(config, None, str(EngineError("Free memory on device cuda:0 (1.20/79.65 GiB) on startup …")))

    out, grid = tmp_path / "retry.jsonl", load_grid(TINY)
    refused = run_blocking(run_sweep(grid, out, progress=False, loop=card_taken))
    assert (refused["status"] == "failed").all() and len(refused) == 2
    again = run_blocking(run_sweep(grid, out, progress=False))
    assert len(again) == 2 and (again["status"] == "ok").all(), again[["status", "error"]]
    assert len(read_rows(out)) == 4 and len(load_results(out)) == 2  # the failed rows stay in the file, superseded
    before = read_rows(out)
    run_blocking(run_sweep(grid, out, progress=False))
    assert read_rows(out) == before  # what succeeded is not measured again


def test_two_runs_never_write_one_results_file(tmp_path):
    """Lab 04 open in two notebooks (or a notebook and `labs sweep`) on the same results file: the second run is
    refused in one line naming the process that writes it, and the file gets no row from it."""
    from labs_lib.errors import LabsError

    out = tmp_path / "shared.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from labs_lib.sweep import writing\n"
            "with writing(Path(sys.argv[1])):\n    print('holding', flush=True); sys.stdin.read()",
            str(out),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"  # the other run holds the file now
        with pytest.raises(LabsError, match=rf"being written by another run \(PID {holder.pid}\).*kill {holder.pid}") as refused:
            run_blocking(run_sweep(load_grid(TINY), out, progress=False))
        assert "\n" not in str(refused.value) and not out.exists()
    finally:
        holder.communicate("")  # it lets go, and ends
    assert holder.returncode == 0
    from labs_lib.sweep import writing

    with writing(out):  # free again: this process may write it
        assert (tmp_path / "shared.jsonl.lock").read_text() == str(os.getpid())


def test_a_participants_experiment_replaces_the_grids_knob_load_and_slo():
    """Lab 04 §4: the participant's knob, values, load levels, long prompt and SLO over the experiment's grid; each
    experiment its own results file; "show" runs the grid's own experiment the same way (a grid of variants as it
    is); every bad value refused in one line before anything starts."""
    lab_slo = SLO(ttft_ms=2000, tpot_ms=100)
    for prefix, engine in (("cpu", "llamacpp"), ("vllm_cpu", "vllm")):
        own = load_grid(DATA_DIR / "grids" / f"{prefix}_chunked_prefill.yaml", quick=True, engine=engine)
        mine = {"knob": "batch_tokens", "values": [1024, 256, 64], "concurrency": [2, 4], "long_prompt_tokens": 400}
        grid, slo = own.yours({**mine, "slo_ttft_ms": 900}, lab_slo)
        assert grid.axes == {"batch_tokens": [1024, 256, 64]} and grid.base == own.base and not grid.skipped
        (workload,) = grid.workloads
        assert workload.concurrency == (2, 4) and workload.long_prompt_tokens == 400
        assert workload.prompt_tokens == own.workloads[0].prompt_tokens  # the rest of the load is the grid's
        assert len(grid.points()) == 3 * 2 and slo == SLO(ttft_ms=900, tpot_ms=100)  # the lab's TPOT limit kept
        assert grid.name != own.yours(mine, lab_slo)[0].name != own.name  # another experiment, another results file
        shown, shown_slo = own.yours("show", lab_slo)  # the grid's own experiment, through the same path
        assert shown.points() == own.points() and shown.skipped == own.skipped and shown_slo == lab_slo
    gpu = load_grid(DATA_DIR / "grids" / "gpu_chunked_prefill.yaml", engine="vllm")
    assert gpu.experiment() is None and gpu.yours("show", lab_slo) == (gpu, lab_slo)
    bad = [
        ({**mine, "knob": "batch"}, "knob: 'batch' is not allowed"),
        ({**mine, "values": [1, 2, 3, 4, 5]}, "a list of 1 to 4 values"),
        ({**mine, "values": [0]}, "batch_tokens: 0 is not allowed"),
        ({**mine, "concurrency": [0]}, "experiment.concurrency: 0 is not allowed"),
        ({**mine, "slo_ttft_ms": "fast"}, "slo_ttft_ms: 'fast' is not allowed"),
        ({**mine, "seed": 1}, "experiment key: 'seed' is not allowed"),
        ({"values": [1], "concurrency": [1]}, "'(no knob)' is not allowed"),
        ("fast", "experiment: 'fast' is not allowed"),
    ]
    for experiment, needle in bad:
        with pytest.raises(BadInput, match=re.escape(needle)):
            own.yours(experiment, lab_slo)


def test_the_kv_dtype_share_reads_what_each_engine_allocated():
    """Lab 04 section 5's takeaway: the smallest KV dtype's bytes per token over the 16-bit cache's, from llama.cpp's
    logged MiB (same context) or from the tokens vLLM's same pool held."""
    import pandas as pd

    from labs_lib.sweep_views import kv_bytes_share

    llama = pd.DataFrame(
        {"status": ["ok"] * 3, "config.kv_cache_dtype": ["f16", "q8_0", "q4_0"], "allocation.kv_mib": [36.0, 19.1, 10.1]}
    )
    dtype, share = kv_bytes_share(llama)
    assert dtype == "q4_0" and share == pytest.approx(10.1 / 36.0)
    vllm = pd.DataFrame(
        {"status": ["ok"] * 2, "config.kv_cache_dtype": ["auto", "fp8"], "allocation.kv_cache_tokens": [4096, 8192]}
    )
    assert kv_bytes_share(vllm) == ("fp8", 0.5)
    assert kv_bytes_share(vllm.iloc[:1]) is None and kv_bytes_share(None) is None


def test_with_goodput_computes_each_points_goodput_again_from_its_requests_by_the_function_given():
    """Lab 04 section 8: the batching sweep's goodput again, by the participant's function, from each point's kept
    requests; a point saved without them keeps its figure, and a failed point stays as it was."""
    import pandas as pd

    from labs_lib.cores.lab04 import goodput
    from labs_lib.load import SLO
    from labs_lib.sweep_views import best_by_goodput, with_goodput

    fast = {"ttft_ms": 100.0, "tpot_ms": 20.0, "e2e_ms": 240.0, "output_tokens": 8, "error": None}
    slow = {**fast, "ttft_ms": 900.0}
    df = pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "failed"],
            "config.parallel": [1, 4, 8, 16],
            "level.concurrency": [4, 4, 4, 4],
            "summary.duration_s": [2.0, 2.0, 2.0, None],
            "summary.goodput": [9.0, 9.0, 7.0, None],
            "summary.output_throughput": [10.0, 20.0, 30.0, None],
            "requests": [[fast, fast, slow, fast], [fast, slow, slow, slow], float("nan"), float("nan")],
        }
    )
    seen = []

    def counting(records, slo, duration_s):
        seen.append((len(records), duration_s))
        return goodput(records, slo, duration_s)

    again = with_goodput(df, counting, SLO(ttft_ms=200))
    assert seen == [(4, 2.0), (4, 2.0)]  # the points that kept requests, and only those
    assert again["summary.goodput"].tolist()[:3] == [1.5, 0.5, 7.0] and pd.isna(again["summary.goodput"][3])
    assert df["summary.goodput"].tolist()[:3] == [9.0, 9.0, 7.0]  # the sweep's own table is left as it was
    assert best_by_goodput(again)["config"] == "parallel=8"  # kept its recorded 7.0, the most
    assert with_goodput(df.drop(columns="requests"), counting, SLO()) is not None and len(seen) == 2


def test_batching_beside_article_sets_the_measured_ratios_beside_seed_002s():
    """Lab 04 section 2: B/A throughput (most slots over fewest) and A/B TTFT p99, per concurrency, beside the
    article's; with one configuration measured there is nothing to compare."""
    import pandas as pd

    from labs_lib.sweep_views import batching_beside_article

    measured = pd.DataFrame(
        {
            "config": ["parallel=1", "parallel=1", "parallel=4", "parallel=4"],
            "concurrency": [1, 4, 1, 4],
            "tok/s": [10.0, 10.0, 11.0, 30.0],
            "TTFT p99": [100.0, 900.0, 100.0, 300.0],
        }
    )
    article = pd.DataFrame(
        {
            "concurrency": [4, 32],
            "a_tok_s": [60.0, 61.0],
            "b_tok_s": [120.0, 245.0],
            "a_ttft_p99_ms": [800.0, 4000.0],
            "b_ttft_p99_ms": [400.0, 500.0],
        }
    )
    compared = batching_beside_article(measured, article).set_index("concurrency")
    assert compared.attrs["configs"] == ("parallel=1", "parallel=4")
    assert compared.loc[4, "B/A throughput (measured)"] == 3.0 and compared.loc[4, "A/B TTFT p99 (measured)"] == 3.0
    assert compared.loc[32, "B/A throughput (article)"] == 245.0 / 61.0 and pd.isna(compared.loc[32, "B/A throughput (measured)"])
    assert compared.loc[1, "B/A throughput (measured)"] == 1.1 and pd.isna(compared.loc[1, "B/A throughput (article)"])
    assert batching_beside_article(measured[measured.config == "parallel=1"], article) is None
    published = batching_beside_article(measured).set_index("concurrency")  # no table given: seed 002's own
    assert published.loc[32, "B/A throughput (article)"] == 245 / 61 and published.loc[4, "B/A throughput (measured)"] == 3.0


def test_lab04s_experiments_say_in_one_line_why_a_grid_does_not_run(tmp_path, capsys):
    """GridSweeps (lab 04's `experiment`): an engine with no such grid, and a quick run that leaves the knob to the
    full size, each print one line and start nothing."""
    from labs_lib.grid_sweeps import GridSweeps
    from labs_lib.sweep import KeptEngine

    def sweeps(prefix: str) -> GridSweeps:
        return GridSweeps(prefix, "vllm", None, SLO(ttft_ms=2000, tpot_ms=100), tmp_path, KeptEngine(), loop=None)

    assert run_blocking(sweeps("cpu")("no_such_knob")) is None
    assert (
        capsys.readouterr().out == "no_such_knob: no cpu grid; see the cell's text for why this engine has nothing to turn here\n"
    )
    assert run_blocking(sweeps("vllm_cpu")("kv_dtype")) is None
    said = capsys.readouterr().out
    assert said.startswith("kv_dtype: not turned now: ") and said.count("\n") == 1, said
    assert not list(tmp_path.iterdir())  # no results file: nothing ran
