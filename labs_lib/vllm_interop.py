"""Interoperability with vLLM's own benchmark tools, for participants who leave the workshop with them.

- `read_bench_result`: a `vllm bench serve --save-result` file as one row of the labs' `bench` table (the same
  columns as `labs_lib.bench.result_row`), so the labs' tables and plots take vLLM's client's results.
- `sweep_params`: a lab grid as `vllm bench sweep serve`'s inputs: a base `--serve-cmd`, the `--serve-params` list
  (one entry per engine configuration) and the `--bench-params` list (one per workload and load level). Their
  cartesian product, which that tool runs, is the grid's points.

Formats as vLLM 0.32/0.33 read and write them: vllm/benchmarks/serve.py (the result file's keys; its "median" is
the labs' p50, both the 50th percentile), vllm/benchmarks/sweep/param_sweep.py (`ParameterSweep.read_json`: a list
of dicts, `_benchmark_name` naming each; `apply_to_cmd`: a key replaces or adds `--key value`, True/False become
`--key`/`--no-key`).
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from .bench import RESULT_KEYS
from .engines import EngineConfig, engine_class
from .errors import BadInput
from .sweep import Grid

# the labs' column -> vllm bench serve's key (None: vLLM's client does not report it by default)
_FROM_VLLM = {
    "concurrency": "max_concurrency",
    "request_rate": "request_rate",
    "completed": "completed",
    "failed": "failed",
    "duration_s": "duration",
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    **{f"mean_{m}_ms": f"mean_{m}_ms" for m in ("ttft", "tpot", "itl")},
    **{f"p50_{m}_ms": f"median_{m}_ms" for m in ("ttft", "tpot", "itl")},
    **{f"p{q}_{m}_ms": f"p{q}_{m}_ms" for m in ("ttft", "tpot", "itl") for q in (90, 99)},
    # vLLM names end-to-end latency e2el and reports it with --percentile-metrics ...,e2el
    "mean_e2e_ms": "mean_e2el_ms",
    "p50_e2e_ms": "median_e2el_ms",
    "p99_e2e_ms": "p99_e2el_ms",
}
_REQUIRED = ("completed", "duration", "output_throughput", "median_ttft_ms", "median_tpot_ms")


def read_bench_result(path: str | Path) -> dict[str, Any]:
    """One `vllm bench serve --save-result` file as a labs `bench` row (RESULT_KEYS), plus `client` and `model`.

    An infinite request rate (all requests at once, vLLM's default) is None, as in the labs' closed-loop rows."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(
            "vllm bench result",
            str(path),
            f"it cannot be read as JSON ({type(exc).__name__}); allowed: a file written by vllm bench serve --save-result",
        ) from None
    missing = [k for k in _REQUIRED if not isinstance(data, dict) or k not in data]
    if missing:
        raise BadInput(
            "vllm bench result", str(path), f"it lacks {missing[0]}; allowed: a file written by vllm bench serve --save-result"
        )
    row: dict[str, Any] = {key: data.get(theirs) for key, theirs in _FROM_VLLM.items()}
    rate = row["request_rate"]
    row["request_rate"] = None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    row["tokens_estimated"] = False  # vLLM's client counts output tokens with the model's tokenizer
    row["errors"] = {}
    return {**{k: row.get(k) for k in RESULT_KEYS}, "client": "vllm bench serve", "model": data.get("model_id")}


def _flags(command: str) -> tuple[list[str], dict[str, Any]]:
    """(the program and its positional words, {flag: value}) of a shell command: `--x v` -> x: v, `--x` -> x: True,
    `--no-x` -> x: False (as vLLM's sweep writes them back)."""
    words = shlex.split(command)
    head: list[str] = []
    flags: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            if flags:  # a positional word after the flags would be lost in a flag dict
                raise BadInput("serve command", command, "allowed: positional words before the flags")
            head.append(word)
            i += 1
            continue
        name = word[2:]
        if "=" in name:
            name, value = name.split("=", 1)
            flags[name] = value
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[name] = words[i + 1]
            i += 1
        elif name.startswith("no-"):
            flags[name[3:]] = False
        else:
            flags[name] = True
        i += 1
    return head, flags


def sweep_params(grid: Grid) -> dict[str, Any]:
    """The grid as `vllm bench sweep serve` inputs: {"serve_cmd", "serve_params", "bench_params"}.

    serve_cmd starts the first configuration; each serve_params entry holds every flag of one configuration (each
    replaces the flag of that name in serve_cmd), named as the labs' results name it."""
    engine = engine_class(grid.engine)
    configs: dict[str, dict] = {}
    for point in grid.points():
        configs.setdefault(json.dumps(point.config, sort_keys=True, default=str), point.config)
    parsed = [_flags(engine.command_for(EngineConfig(**config))[0]) for config in configs.values()]
    heads = [head for head, _ in parsed]
    if any(h != heads[0] for h in heads):
        raise BadInput("grid", grid.name, "allowed: configurations that differ in flags only (one serve command)")
    serve_params = [
        {"_benchmark_name": config_label(config), **flags} for config, (_, flags) in zip(configs.values(), parsed, strict=True)
    ]
    bench_params = []
    for workload in grid.workloads:
        if workload.long_prompt_tokens:
            raise BadInput(
                "grid", grid.name, f"workload {workload.name}: allowed: no long_every prompts (vLLM's datasets have none)"
            )
        if workload.lengths is not None:
            raise BadInput(
                "grid", grid.name, f"workload {workload.name}: allowed: fixed lengths (vLLM's datasets replay no trace's lengths)"
            )
        if workload.turns > 1:
            raise BadInput(
                "grid", grid.name, f"workload {workload.name}: allowed: one turn (vLLM's datasets replay no conversation)"
            )
        if workload.shared_prefix_tokens:  # N system prompts x M suffixes: vLLM's prefix_repetition dataset
            prompts = {
                "dataset_name": "prefix_repetition",
                "prefix_repetition_prefix_len": workload.shared_prefix_tokens,
                "prefix_repetition_suffix_len": workload.prompt_tokens,
                "prefix_repetition_num_prefixes": workload.prefix_groups,
                "prefix_repetition_output_len": workload.max_tokens,
            }
        else:
            prompts = {
                "dataset_name": "random",
                "random_input_len": workload.prompt_tokens,
                "random_output_len": workload.max_tokens,
            }
        for level in workload.levels():
            load = (
                {"max_concurrency": level["concurrency"]} if "concurrency" in level else {"request_rate": level["request_rate"]}
            )
            name = bench_label(workload.name, level)
            # ignore_eos: every request decodes max_tokens, as the labs' load does. temperature 0: the labs' requests
            # are greedy (RequestSpec), and vLLM's client sends no temperature unless told, so the server would sample
            # (random numbers over the whole vocabulary per sequence and step): 1.3x the TPOT of greedy decode at 8
            # sequences on 2 CPU cores (docs/performance.md §13)
            bench_params.append(
                {
                    "_benchmark_name": name,
                    **prompts,
                    "num_prompts": workload.requests,
                    "ignore_eos": True,
                    "temperature": 0,
                    **load,
                }
            )
    first = parsed[0][1]
    return {
        "serve_cmd": shlex.join(heads[0] + _unflag(first)),
        "bench_cmd": shlex.join(_bench_cmd(heads[0], first)),
        "serve_params": serve_params,
        "bench_params": bench_params,
    }


def _bench_cmd(head: list[str], flags: dict[str, Any]) -> list[str]:
    """`vllm bench serve` against the server serve_cmd starts: its address, the served name, and (where the command
    names the model's folder, as `vllm serve FOLDER` does) that folder as the tokenizer: no hub needed."""
    url = f"http://{flags.get('host', '127.0.0.1')}:{flags.get('port', 8000)}"
    cmd = ["vllm", "bench", "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", url]
    folder = head[2] if len(head) > 2 and head[1] == "serve" else None
    name = flags.get("served-model-name") or folder
    if name:
        cmd += ["--model", str(name)]
    if folder:
        cmd += ["--tokenizer", folder]
    return cmd


def _unflag(flags: dict[str, Any]) -> list[str]:
    words: list[str] = []
    for name, value in flags.items():
        if value is True:
            words.append(f"--{name}")
        elif value is False:
            words.append(f"--no-{name}")
        else:
            words += [f"--{name}", str(value)]
    return words


def config_label(config: dict) -> str:
    """A configuration's name in the export (serve_params' `_benchmark_name`), e.g. "max_model_len=1024-parallel=8"."""
    return "-".join(f"{k}={v}" for k, v in sorted(config.items())) or "base"


def bench_label(workload: str, level: dict) -> str:
    """A workload at one load level's name in the export (bench_params' `_benchmark_name`), e.g. "chat-concurrency8"."""
    return f"{workload}-" + "-".join(f"{k}{v}" for k, v in level.items())


def write_sweep_params(grid: Grid, out_dir: str | Path) -> list[str]:
    """serve_params.json and bench_params.json in out_dir; returns the `vllm bench sweep serve` command line."""
    from .errors import writable_path

    folder = writable_path("--export-vllm-sweep", out_dir, folder=True)
    folder.mkdir(parents=True, exist_ok=True)
    params = sweep_params(grid)
    (folder / "serve_params.json").write_text(json.dumps(params["serve_params"], indent=2) + "\n")
    (folder / "bench_params.json").write_text(json.dumps(params["bench_params"], indent=2) + "\n")
    return [
        "vllm",
        "bench",
        "sweep",
        "serve",
        "--serve-cmd",
        params["serve_cmd"],
        "--bench-cmd",
        params["bench_cmd"],
        "--serve-params",
        str(folder / "serve_params.json"),
        "--bench-params",
        str(folder / "bench_params.json"),
        "-o",
        str(folder / "results"),
    ]
