"""Lab 04's sweeps by name: each experiment's grid (data/grids/<prefix>_<name>.yaml) read for this engine, run by
the participant's loop, one results file per grid, resumed when a cell runs again in the same kernel."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .load import SLO
from .paths import DATA_DIR
from .sweep import KeptEngine, SweepLoop, defaults_note, load_grid, run_sweep
from .sweep_views import failures


@dataclass
class GridSweeps:
    prefix: str  # cpu (llama.cpp), vllm_cpu (vLLM on this CPU) or gpu (vLLM on a GPU): which grids
    engine: str
    model: str | None
    slo: SLO
    results_dir: Path
    keep: KeptEngine  # the last engine of one grid serves the next grid's points of the same configuration
    loop: SweepLoop  # the loop that runs each grid: the participant's, once its check passed
    quick: bool = True
    resume: bool = False  # keep finished points from an earlier run (a file this kernel has not begun)
    started: set[Path] = field(default_factory=set)  # the sweeps begun in this kernel: run again, they resume

    async def __call__(
        self, name: str, turned: dict | None = None, concurrency: int = 0, yours: dict | str | None = None
    ) -> pd.DataFrame | None:
        """The grid `name` run (or its one point with the knobs `turned`, at `concurrency`; or the participant's
        experiment `yours` in place of the grid's own); None, with one line why, where this engine has no such grid
        or cannot turn it now. A configuration that could not start is a row with its reason, shown."""
        path = DATA_DIR / "grids" / f"{self.prefix}_{name}.yaml"
        if not path.exists():
            print(f"{name}: no {self.prefix} grid; see the cell's text for why this engine has nothing to turn here")
            return None
        grid, judged_by = load_grid(path, quick=self.quick, engine=self.engine, model=self.model), self.slo
        if yours is not None:  # the participant's experiment in place of the grid's own ("show": the grid's own)
            grid, judged_by = grid.yours(yours, self.slo)
            print(f"{name}: the experiment: {grid.experiment() or 'the grid as it is'}; the SLO: {judged_by}")
        grid = grid.one_point(turned, concurrency) if turned else grid  # a knob turned: one point, its own file
        if grid.skipped:
            print(f"{name}: not turned now: {grid.skipped}")
            return None
        if note := defaults_note(grid):  # what the grid changes from the engine's own defaults
            print(f"{name}: {note}")
        out = self.results_dir / f"{grid.name}-{self.engine}{'-quick' if self.quick else ''}.jsonl"
        fresh = not self.resume and out not in self.started
        self.started.add(out)  # after an interrupt, the same cell again resumes and retries what failed
        df = await run_sweep(grid, out, slo=judged_by, progress=True, keep=self.keep, loop=self.loop, fresh=fresh)
        if (df["status"] != "ok").any():
            _show(failures(df))
        return df


def _show(table: pd.DataFrame) -> None:
    try:
        from IPython.display import display
    except ImportError:  # a script, not a kernel
        print(table.to_string())
    else:
        display(table)
