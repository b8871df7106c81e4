"""vLLM's own benchmark tools and the labs: their result files read into the labs' rows, a grid written as their
sweep's inputs and read back by vLLM's own ParameterSweep code."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess

import pytest
from conftest import FIXTURES, assert_one_line_error, run_cli

from labs_lib.bench import RESULT_KEYS
from labs_lib.engines import EngineConfig, engine_class
from labs_lib.errors import BadInput
from labs_lib.paths import DATA_DIR
from labs_lib.sweep import load_grid
from labs_lib.vllm_interop import read_bench_result, sweep_params, write_sweep_params

RESULT = FIXTURES / "vllm" / "bench_serve_result_0.32.0_c4.json"


def test_a_vllm_bench_serve_result_becomes_a_labs_bench_row():
    raw = json.loads(RESULT.read_text())
    row = read_bench_result(RESULT)
    assert set(RESULT_KEYS) <= set(row) and row["client"] == "vllm bench serve" and row["model"] == "gemma-3-270m"
    assert row["concurrency"] == 4 and row["request_rate"] is None  # vLLM writes "inf": all requests at once
    assert row["p50_ttft_ms"] == raw["median_ttft_ms"] and row["p99_tpot_ms"] == raw["p99_tpot_ms"]
    assert row["completed"] == 8 and row["output_throughput"] == raw["output_throughput"]
    assert row["duration_s"] == raw["duration"] and row["p50_e2e_ms"] is None  # e2el only with --percentile-metrics


def test_a_file_that_is_not_a_vllm_result_is_one_line(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"completed": 3}))
    with pytest.raises(BadInput, match="lacks duration"):
        read_bench_result(other)
    assert_one_line_error(run_cli("bench", "--import-vllm-result", str(other)), "other.json", "vllm bench serve")


def test_bench_cli_shows_a_vllm_result_in_its_own_table():
    proc = run_cli("bench", "--import-vllm-result", str(RESULT), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["results"][0]["p50_tpot_ms"] == json.loads(RESULT.read_text())["median_tpot_ms"]
    assert out["endpoint"] == "vllm bench serve (gemma-3-270m)"


def _vllm_param_sweep(vllm_python_site):
    """vLLM's own ParameterSweep (vllm/benchmarks/sweep/param_sweep.py imports only json and os)."""
    path = vllm_python_site / "vllm" / "benchmarks" / "sweep" / "param_sweep.py"
    spec = importlib.util.spec_from_file_location("vllm_param_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ParameterSweep


@pytest.mark.parametrize("name", ["vllm_cpu_prefix_cache", "vllm_cpu_batching"])
def test_vllms_sweep_reads_the_export_back_into_each_configurations_own_command(name, tmp_path, vllm_installed):
    site = vllm_installed.parent
    ParameterSweep = _vllm_param_sweep(site)
    grid = load_grid(DATA_DIR / "grids" / f"{name}.yaml", quick=True, engine="vllm")
    command = write_sweep_params(grid, tmp_path / "export")
    serve_cmd = shlex.split(command[command.index("--serve-cmd") + 1])
    serve = ParameterSweep.read_json(tmp_path / "export" / "serve_params.json")
    bench = ParameterSweep.read_json(tmp_path / "export" / "bench_params.json")
    configs = list({json.dumps(p.config, sort_keys=True): p.config for p in grid.points()}.values())
    assert len(serve) == len(configs) and len(serve) * len(bench) == len(
        {(json.dumps(p.config), json.dumps(p.level), p.workload.name) for p in grid.points()}
    )
    # N system prompts x M suffixes: vLLM's prefix_repetition dataset with the grid's number of prefixes
    groups = [b.get("prefix_repetition_num_prefixes") for b in bench]
    assert groups == [w.prefix_groups if w.shared_prefix_tokens else None for w in grid.workloads for _ in w.levels()]
    for item, config in zip(serve, configs, strict=True):
        mine = shlex.split(engine_class("vllm").command_for(EngineConfig(**config))[0])
        theirs = item.apply_to_cmd(serve_cmd)
        # vLLM's argparse keeps the last of --x / --no-x: compare what each command finally asks for
        assert _last_wins(theirs) == _last_wins(mine), (theirs, mine)
    bench_cmd = bench[0].apply_to_cmd(shlex.split(command[command.index("--bench-cmd") + 1]))
    workload = grid.workloads[0]
    assert "--ignore-eos" in bench_cmd and str(workload.requests) == bench_cmd[bench_cmd.index("--num-prompts") + 1]
    # greedy, as the labs' requests are: vLLM's client sends no temperature otherwise, and the server samples
    assert bench_cmd[bench_cmd.index("--temperature") + 1] == "0"
    assert "--tokenizer" in bench_cmd  # the local model folder: no hub


def _last_wins(cmd: list[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    i = 2
    while i < len(cmd):
        word = cmd[i]
        if word.startswith("--"):
            value = cmd[i + 1] if i + 1 < len(cmd) and not cmd[i + 1].startswith("--") else "true"
            key = word[5:] if word.startswith("--no-") else word[2:]
            flags[key] = "false" if word.startswith("--no-") else value
            i += 2 if value != "true" else 1
        else:
            flags.setdefault("_positional", word)
            i += 1
    return flags


def test_a_grid_vllms_datasets_cannot_express_is_refused_in_one_line():
    grid = load_grid(DATA_DIR / "grids" / "vllm_cpu_chunked_prefill.yaml", quick=False, engine="vllm")
    with pytest.raises(BadInput, match="long_every"):
        sweep_params(grid)
    talk = load_grid(
        {
            "name": "talk",
            "engine": "vllm",
            "base": {"max_model_len": 1024},
            "axes": {"parallel": [2]},
            "workloads": [{"name": "talk", "concurrency": [2], "requests": 2, "turns": 3}],
        }
    )
    with pytest.raises(BadInput, match="replay no conversation"):
        sweep_params(talk)


# vLLM's get_request (benchmarks/serve.py) with its gamma draws given and its clock and sleep replaced: the send
# time of each request it yields, printed as JSON
VLLM_ARRIVALS = """
import asyncio, json, sys, time
import numpy as np
import vllm.benchmarks.serve as serve
draws, n, rate, burstiness = json.loads(sys.argv[1])
given = iter(draws)
np.random.gamma = lambda shape, scale: next(given)
clock = [0.0]
time.time = lambda: clock[0]
async def advance(seconds):
    clock[0] += seconds
asyncio.sleep = advance
async def sends():
    return [clock[0] async for _request, _rate in serve.get_request(list(range(n)), rate, burstiness)]
print(json.dumps(asyncio.run(sends())))
"""


def test_the_open_loops_send_times_are_vllm_bench_serves_for_the_same_draws(vllm_installed, monkeypatch):
    """arrival_times_s (the library's, which lab 03's participant writes) and vLLM's own get_request, given the same
    gamma draws, send each request at the same time: the draws summed and scaled so that the last goes at n / rate."""
    import numpy as np

    from labs_lib import load
    from labs_lib.engines.vllm import find_vllm

    draws = np.random.default_rng(5).gamma(0.5, 1.0, 8).tolist()  # any positive draws: both take them as given
    n, rate_rps, burstiness = len(draws), 3.0, 0.5
    proc = subprocess.run(
        [find_vllm().python, "-c", VLLM_ARRIVALS, json.dumps([draws, n, rate_rps, burstiness])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    vllms = json.loads(proc.stdout.strip().splitlines()[-1])

    class GivenDraws:
        def __init__(self, seed):
            pass

        def gamma(self, shape, scale, size):
            return np.asarray(draws[:size])

    monkeypatch.setattr(load.np.random, "default_rng", GivenDraws)
    ours = load.arrival_times_s(n, rate_rps, burstiness, seed=0)
    assert np.allclose(ours, vllms, rtol=1e-12, atol=0), (ours, vllms)
    assert vllms[-1] == pytest.approx(n / rate_rps) and vllms[0] > 0
