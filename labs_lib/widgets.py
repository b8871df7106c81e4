"""Lab 01's explorer for JupyterLab: the capacity question answered live. Every control recomputes with
the library's own functions (kv_math.kv_cache, kv_math.plan_capacity) and redraws with the function
the headless cells call (plots.kv_memory_figure)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import matplotlib.pyplot as plt

from . import plots
from .kv_math import DTYPES, GIB, kv_cache, plan_capacity

# log-spaced steps: the useful region of a 256 … 1M range is not a few pixels at the left
SEQ_LENS = tuple(2**k for k in range(8, 21))  # 256 … 1,048,576 tokens
BATCHES = tuple(sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}))


@dataclass(frozen=True)
class ExplorerState:
    """What the explorer shows for one setting (bytes; GiB only in the readout text)."""

    model: str
    gpu: str
    kv_dtype: str
    gpu_memory_utilization: float
    seq_len: int
    batch: int
    kv_bytes: int  # batch x seq_len of KV cache (kv_math.kv_cache)
    kv_pool_bytes: int  # what vLLM leaves for KV blocks on this card (plan_capacity.available_kv_bytes)
    weight_bytes: int | None
    overhead_bytes: int | None
    max_concurrency: float  # sequences of seq_len tokens the pool holds, as vLLM logs it
    kv_cache_tokens: int  # vLLM's "KV cache size: … tokens"
    fits: bool  # batch sequences of seq_len fit in the pool
    problem: str | None

    def readout(self) -> str:
        """The numbers in words, with units (HTML)."""
        verdict = (
            f"<b style='color:green'>fits</b>: {self.batch} ≤ {self.max_concurrency:,.2f}"
            if self.fits
            else f"<b style='color:#b00'>does not fit</b>: {self.batch} > {self.max_concurrency:,.2f}"
        )
        weights = f"{self.weight_bytes / GIB:,.2f} GiB" if self.weight_bytes is not None else "-"
        overhead = f"{self.overhead_bytes / GIB:,.2f} GiB" if self.overhead_bytes is not None else "-"
        return (
            f"<div class='kv-readout'>KV cache for {self.batch} × {self.seq_len:,} tokens: <b>{self.kv_bytes / GIB:,.2f} GiB</b>"
            f" · KV pool on {self.gpu} at utilization {self.gpu_memory_utilization:.2f}: <b>{self.kv_pool_bytes / GIB:,.2f} GiB</b>"
            f" (weights {weights}, overhead {overhead})<br>"
            f"vLLM would log: KV cache size <b>{self.kv_cache_tokens:,} tokens</b>, maximum concurrency for "
            f"{self.seq_len:,} tokens per request <b>{self.max_concurrency:,.2f}x</b> · batch {verdict}"
            + (f"<br><span style='color:#b00'>{self.problem}</span>" if self.problem else "")
            + "</div>"
        )


def explorer_state(model: str, gpu: str, kv_dtype: str, gpu_memory_utilization: float, seq_len: int, batch: int) -> ExplorerState:
    """The explorer's numbers for one setting: the library's, nothing of its own."""
    plan = plan_capacity(model, seq_len, kv_dtype=kv_dtype, gpu=gpu, gpu_memory_utilization=gpu_memory_utilization)
    return ExplorerState(
        model=plan.model,
        gpu=plan.gpu or gpu,
        kv_dtype=plan.kv_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        seq_len=seq_len,
        batch=batch,
        kv_bytes=kv_cache(model, seq_len, batch, kv_dtype).kv_bytes,
        kv_pool_bytes=plan.available_kv_bytes,
        weight_bytes=plan.weight_bytes_per_rank,
        overhead_bytes=plan.overhead_bytes,
        max_concurrency=plan.max_concurrency,
        kv_cache_tokens=plan.kv_cache_tokens,
        fits=batch <= plan.max_concurrency,
        problem=plan.problem,
    )


def _png(fig) -> bytes:
    """A figure as PNG bytes for an ipywidgets Image (visible without a kernel's display hook), then closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return buffer.getvalue()


def _nearest(options: tuple[int, ...], value: int) -> int:
    return min(options, key=lambda o: abs(o - value))


class KVExplorer:
    """model, GPU, KV dtype, gpu_memory_utilization, seq_len and batch; each change recomputes the KV bytes,
    the KV pool and vLLM's max concurrency (readout) and redraws the curves with the current point marked.

    `controls` are the ipywidgets; `state` is the last ExplorerState shown; `box` is what to display."""

    def __init__(
        self,
        models: list[str],
        gpus: list[str],
        *,
        model: str,
        gpu: str,
        kv_dtype: str,
        gpu_memory_utilization: float,
        seq_len: int,
        batch: int,
    ):
        import ipywidgets as w

        # dragging a slider fires on release only: each redraw is a matplotlib figure (~0.2 s)
        self.controls = {
            "model": w.Dropdown(options=models, value=model, description="model"),
            "gpu": w.Dropdown(options=gpus, value=gpu, description="GPU"),
            "kv_dtype": w.Dropdown(options=list(DTYPES), value=kv_dtype, description="KV dtype"),
            "gpu_memory_utilization": w.FloatSlider(
                value=gpu_memory_utilization,
                min=0.5,
                max=0.98,
                step=0.01,
                description="utilization",
                continuous_update=False,
                readout_format=".2f",
            ),
            "seq_len": w.SelectionSlider(
                options=[(f"{n:,}", n) for n in SEQ_LENS],
                value=_nearest(SEQ_LENS, seq_len),
                description="seq_len",
                continuous_update=False,
            ),
            "batch": w.SelectionSlider(
                options=[(str(b), b) for b in BATCHES],
                value=_nearest(BATCHES, batch),
                description="batch",
                continuous_update=False,
            ),
        }
        for control in self.controls.values():
            control.style = {"description_width": "80px"}
            control.layout = w.Layout(width="420px")
        self.readout = w.HTML()
        self.figure = w.Image(format="png")  # bytes drawn here, so a redraw is visible without a kernel's display hook
        self.draws = 0
        self.state: ExplorerState | None = None
        for control in self.controls.values():
            control.observe(lambda change: self.update(), names="value")
        self.box = w.VBox(
            [
                w.HBox([w.VBox(list(self.controls.values())[:3]), w.VBox(list(self.controls.values())[3:])]),
                self.readout,
                self.figure,
            ]
        )
        self.box.add_class("kv-explorer")
        self.update()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def update(self) -> ExplorerState:
        """Recompute and redraw for the controls' current values (the controls' observer)."""
        state = explorer_state(**self.values())
        self.state = state
        budget_gib = state.kv_pool_bytes / GIB
        self.figure.value = _png(
            plots.kv_memory_figure(state.model, state.seq_len, state.batch, state.kv_dtype, budget_gib=budget_gib)
        )
        self.readout.value = state.readout()  # last: a page showing the new readout already has the new figure
        self.draws += 1
        return state

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)


class SweepExplorer:
    """Lab 03's sweep results explored: choose the x and y metrics and what colours the series; each choice
    redraws with plots.tradeoff_figure, the function the headless cell calls. `table` is
    sweep_views.load_table rows (of several sweeps, with an "experiment" column)."""

    def __init__(self, table, *, x: str = "TTFT p99", y: str = "tok/s", colour: str = "experiment"):
        import ipywidgets as w
        import pandas as pd

        self.table = table
        metrics = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c]) and table[c].notna().any()]
        groups = [c for c in ("experiment", "config", "concurrency") if c in table.columns]
        self.controls = {
            "x": w.Dropdown(options=metrics, value=x if x in metrics else metrics[0], description="x"),
            "y": w.Dropdown(options=metrics, value=y if y in metrics else metrics[-1], description="y"),
            "colour": w.Dropdown(options=groups, value=colour if colour in groups else groups[0], description="colour by"),
        }
        self.readout = w.HTML()
        self.figure = w.Image(format="png")
        self.draws = 0
        self.points = 0
        for control in self.controls.values():
            control.observe(lambda change: self.update(), names="value")
        self.box = w.VBox([w.HBox(list(self.controls.values())), self.readout, self.figure])
        self.box.add_class("sweep-explorer")
        self.update()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def update(self) -> int:
        """Redraw for the chosen metrics; returns the number of points drawn."""
        v = self.values()
        shown = self.table.dropna(subset=[v["x"], v["y"]])
        self.figure.value = _png(plots.tradeoff_figure(self.table, v["x"], v["y"], v["colour"]))
        self.points = len(shown)
        groups = shown[v["colour"]].nunique()
        self.readout.value = (
            f"<div class='sweep-readout'>{self.points} measured points: {v['y']} against {v['x']}, "
            f"{groups} series by {v['colour']}</div>"
        )
        self.draws += 1
        return self.points

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)
