"""How long the whole series takes headlessly (quick parameters), cold and warm, on the embedded engine or vLLM.

Cold: a fresh, empty labs cache (LABS_CACHE_DIR), so the model is assembled from its wheel and every
weight variant is built, as on a first `make run` after `make setup`. Warm: the same again with that
cache filled, as on every later run. The install itself is excluded. Goals on the 2-core CPU
machine: <= 5 minutes warm, <= 10 minutes cold. Where the time goes: each notebook, and the slowest
cells of the warm run (papermill records every cell's duration).

With --engine vllm (vLLM on CPU from `make setup-vllm`; the labs with an engine parameter run on it,
the others as they are) the goal is <= 10 minutes warm; warm means the Hugging Face copy of the model
and the flag cache exist, as after one `make run ARGS="--engine vllm"`.

With --full the notebooks run at their defaults (quick=False), the sizes a participant gets in JupyterLab:
a warm run, timed per notebook, with no goal (docs/performance.md records the times per engine).

    .venv/bin/python bench/series_runtime.py [--runs cold,warm] [--top 8] [--engine vllm --runs warm] [--full]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from labs_lib.runner import discover, run_series

from _common import header, verdict

GOAL_S = {"llamacpp": {"warm": 300.0, "cold": 600.0}, "vllm": {"warm": 600.0}}


def slowest_cells(results, top: int) -> list[tuple[float, str, str]]:
    cells = []
    for result in results:
        nb = json.loads(Path(result.output).read_text())
        for cell in nb["cells"]:
            duration = (cell.get("metadata", {}).get("papermill") or {}).get("duration")
            if cell["cell_type"] == "code" and duration:
                first = next(
                    (line for line in "".join(cell["source"]).splitlines() if line.strip() and not line.startswith("#")), ""
                )
                cells.append((float(duration), result.name, first.strip()[:70]))
    return sorted(cells, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="cold,warm", help="which runs, in order (cold fills the cache warm then uses)")
    parser.add_argument("--top", type=int, default=8, help="slowest cells to list")
    parser.add_argument("--engine", choices=sorted(GOAL_S), default="llamacpp")
    parser.add_argument("--full", action="store_true", help="the notebooks' defaults (quick=False), warm, no goal")
    args = parser.parse_args()
    runs = ["warm"] if args.full else [r.strip() for r in args.runs.split(",")]
    goals = {"warm": float("inf")} if args.full else GOAL_S[args.engine]
    if not set(runs) <= set(goals):
        raise SystemExit(f"--runs {args.runs!r}: allowed with --engine {args.engine}: {', '.join(goals)}")
    sizes = "full sizes (quick=False)" if args.full else "quick parameters"
    header(f"Series runtime: every notebook headlessly, {sizes}, engine {args.engine}")
    notebooks = discover()
    checks: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="labs-cache-") as cache, tempfile.TemporaryDirectory(prefix="labs-runs-") as out:
        if "cold" in runs:
            os.environ["LABS_CACHE_DIR"] = cache  # the kernels inherit it: nothing assembled or built yet
        # "warm" alone uses the cache the labs already have (run `make run` once first)
        for run in runs:
            results = run_series(notebooks, engine=args.engine, quick=not args.full, out_dir=Path(out) / run, progress=False)
            total = sum(r.wall_s for r in results)
            failed = [r.name for r in results if r.status != "ok"]
            budget = "" if args.full else f", goal <= {goals[run]:.0f} s -> {total / goals[run]:.2f} of the budget"
            print(
                f"{run}: {total:.0f} s in all ({total / 60:.1f} min){budget}"
                + (f"; FAILED: {', '.join(failed)}" if failed else "")
            )
            for r in results:
                print(f"  {r.name:<28} {r.wall_s:6.1f} s  {r.wall_s / total:5.1%}")
            if run == runs[-1]:
                print(f"slowest cells ({run}):")
                for seconds, name, first in slowest_cells(results, args.top):
                    print(f"  {seconds:6.1f} s  {name}: {first}")
            checks[f"{run} series completes" if args.full else f"{run} series <= {goals[run]:.0f} s"] = (
                total <= goals[run] and not failed
            )
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
