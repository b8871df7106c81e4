"""The labs' explorers for JupyterLab. Each control recomputes with the library's own functions and redraws
with the function the headless cells call: lab 01's capacity question (kv_math, plots.kv_memory_figure),
lab 03's latency percentiles over the measured runs (load, plots.concurrency_figure), lab 04's sweep
trade-offs (plots.tradeoff_figure) and lab 05's quantized configurations (plots.quant_tradeoff_figure)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from html import unescape

import matplotlib.pyplot as plt

from . import plots
from .kv_math import DTYPES, GIB, kv_cache, plan_capacity
from .load import LATENCY_METRICS, LoadResult, latency_table, latency_values_ms

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
    max_concurrency_range: tuple[float, float]  # at the high and the low end of the overhead's estimate
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
        low, high = self.max_concurrency_range
        spread_text = f" ({low:,.2f} to {high:,.2f} over the overhead's estimate)"
        return (
            f"<div class='kv-readout'>KV cache for {self.batch} × {self.seq_len:,} tokens: <b>{self.kv_bytes / GIB:,.2f} GiB</b>"
            f" · KV pool on {self.gpu} at utilization {self.gpu_memory_utilization:.2f}: <b>{self.kv_pool_bytes / GIB:,.2f} GiB</b>"
            f" (weights {weights}, overhead {overhead})<br>"
            f"vLLM would log: KV cache size <b>{self.kv_cache_tokens:,} tokens</b>, maximum concurrency for "
            f"{self.seq_len:,} tokens per request <b>{self.max_concurrency:,.2f}x</b>{spread_text} · batch {verdict}"
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
        max_concurrency_range=(plan.max_concurrency_low, plan.max_concurrency_high),
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


def _number(value) -> float | None:
    """A table cell as a plain float (None where pandas holds NaN/None)."""
    return None if value is None or value != value else float(value)


def _nearest(options: tuple[int, ...], value: int) -> int:
    return min(options, key=lambda o: abs(o - value))


class _Explorer:
    """What every explorer shares: `controls` (ipywidgets by name), a `readout` (HTML) and a `figure` (PNG bytes in an
    Image, so a redraw is visible without a kernel's display hook) in `box`; each control change calls `update`,
    which subclasses define, and counts a draw."""

    controls: dict

    def _build(self, css_class: str, rows) -> None:
        import ipywidgets as w

        self.readout = w.HTML()
        self.figure = w.Image(format="png")
        self.draws = 0
        for control in self.controls.values():
            control.observe(lambda change: self._redraw(), names="value")
        self.box = w.VBox([rows, self.readout, self.figure])
        self.box.add_class(css_class)
        self._redraw()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def tour(self) -> list[dict]:
        """The control changes a run without widgets walks through (each printed): none by default."""
        return [{}]

    def text(self) -> str:
        """The readout as one line of text (its tables left out)."""
        html = re.sub(r"<table.*", "", self.readout.value, flags=re.DOTALL)
        return unescape(re.sub(r"<[^>]+>", "", html.replace("<br>", " · "))).strip()

    def show(self, interactive: bool) -> None:
        """The explorer in JupyterLab; without widgets (interactive=False), each change of `tour` made through its
        control, as a click would make it, and the readout printed when it says something new, then the last figure."""
        from IPython.display import Image, display

        if interactive:
            display(self.box)
            return
        printed = None
        for change in self.tour():
            for name, value in change.items():
                self.controls[name].value = value  # each assignment runs the explorer's own callback
            readout = self.text()
            if readout != printed:  # a step that chose what was already chosen (two rows in all) says nothing new
                print("  " + readout)
                printed = readout
        display(Image(data=self.figure.value))

    def _redraw(self) -> None:
        self.update()
        self.draws += 1

    def update(self):
        raise NotImplementedError

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)


class KVExplorer(_Explorer):
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
        self.state: ExplorerState | None = None
        controls = list(self.controls.values())
        self._build("kv-explorer", w.HBox([w.VBox(controls[:3]), w.VBox(controls[3:])]))

    def tour(self) -> list[dict]:
        """The parameters' point, then fp8 KV on an L40S."""
        return [{}, {"kv_dtype": "fp8", "gpu": "L40S"}]

    def update(self) -> ExplorerState:
        """Recompute and redraw for the controls' current values (the controls' observer)."""
        state = explorer_state(**self.values())
        self.state = state
        budget_gib = state.kv_pool_bytes / GIB
        self.figure.value = _png(
            plots.kv_memory_figure(state.model, state.seq_len, state.batch, state.kv_dtype, budget_gib=budget_gib)
        )
        self.readout.value = state.readout()  # last: a page showing the new readout already has the new figure
        return state


class SweepExplorer(_Explorer):
    """Lab 04's sweep results explored: choose the x and y metrics and what colours the series; each choice
    redraws with plots.tradeoff_figure, the function the headless cell calls. `table` is
    sweep_views.load_table rows (of several sweeps, with an "experiment" column)."""

    def __init__(self, table, *, x: str = "TTFT p99", y: str = "tok/s", colour: str = "experiment"):
        import ipywidgets as w
        import pandas as pd

        self.table = table
        metrics = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c]) and table[c].notna().any()]
        metrics = metrics or [x, y]  # nothing measured (every start refused): the asked axes, no points
        groups = [c for c in ("experiment", "config", "concurrency") if c in table.columns] or [colour]
        self.controls = {
            "x": w.Dropdown(options=metrics, value=x if x in metrics else metrics[0], description="x"),
            "y": w.Dropdown(options=metrics, value=y if y in metrics else metrics[-1], description="y"),
            "colour": w.Dropdown(options=groups, value=colour if colour in groups else groups[0], description="colour by"),
        }
        self.points = 0
        self._build("sweep-explorer", w.HBox(list(self.controls.values())))

    def update(self) -> int:
        """Redraw for the chosen metrics; returns the number of points drawn."""
        v = self.values()
        shown = self.table.dropna(subset=[v["x"], v["y"]])
        self.figure.value = _png(plots.tradeoff_figure(shown, v["x"], v["y"], v["colour"]))
        self.points = len(shown)
        if not self.points:
            self.readout.value = "<div class='sweep-readout'>0 measured points: no configuration started</div>"
            return 0
        self.readout.value = (
            f"<div class='sweep-readout'>{self.points} measured points: {v['y']} against {v['x']}, "
            f"{shown[v['colour']].nunique()} series by {v['colour']}</div>"
        )
        return self.points


PERCENTILE_STEPS = (50, 75, 90, 95, 99, 99.9)


@dataclass(frozen=True)
class LatencyState:
    """What lab 03's explorer shows: one metric's p50 and p`percentile` at one measured concurrency (ms)."""

    metric: str
    percentile: float
    concurrency: int
    completed: int
    values: int  # how many values the percentile is taken over (ITL: every gap of every request)
    p50_ms: float | None
    percentile_ms: float | None
    max_ms: float | None
    output_throughput: float | None  # tokens/s

    def readout(self) -> str:
        name, p = self.metric.upper(), f"p{self.percentile:g}"
        if not self.values:
            return f"<div class='latency-readout'>c={self.concurrency}: no {name} values (no request completed)</div>"
        tail = (
            f"<br>{self.values} values: {p} lies between the two largest, so it is set by the two slowest, not by a tail"
            if self.percentile > 100 - 100 / max(self.values - 1, 1)
            else ""
        )
        chosen = "" if self.percentile == 50 else f" · {p} <b>{self.percentile_ms:,.1f} ms</b>"  # p50 is shown anyway
        return (
            f"<div class='latency-readout'>c={self.concurrency}: {self.completed} requests, {self.values} {name} values · "
            f"p50 <b>{self.p50_ms:,.1f} ms</b>{chosen} · max {self.max_ms:,.1f} ms · "
            f"{self.output_throughput or 0:,.1f} output tokens/s{tail}</div>"
        )


class LatencyExplorer(_Explorer):
    """Lab 03's concurrency runs explored: pick the metric (TTFT, TPOT, ITL, E2E), the percentile and a measured
    concurrency; the readout gives that level's numbers and the figure (plots.concurrency_figure, as the headless
    cell draws it) the curves with the level marked and its distribution. `runs` are concurrency_sweep's."""

    def __init__(self, runs: list[LoadResult], *, slots: int | None = None, metric: str = "ttft", percentile: float = 99):
        import ipywidgets as w

        self.runs = {run.settings["concurrency"]: run for run in runs}
        self.slots = slots
        levels = list(self.runs)
        self.controls = {
            "metric": w.Dropdown(options=[(m.upper(), m) for m in LATENCY_METRICS], value=metric, description="metric"),
            "percentile": w.SelectionSlider(
                options=[(f"p{p:g}", p) for p in PERCENTILE_STEPS],
                value=min(PERCENTILE_STEPS, key=lambda p: abs(p - percentile)),
                description="percentile",
                continuous_update=False,
            ),
            "concurrency": w.SelectionSlider(
                options=[(str(c), c) for c in levels], value=levels[-1], description="concurrency", continuous_update=False
            ),
        }
        self.state: LatencyState | None = None
        self._build("latency-explorer", w.HBox(list(self.controls.values())))

    def tour(self) -> list[dict]:
        """The last concurrency measured, then TPOT, then p50."""
        return [{}, {"metric": "tpot"}, {"percentile": 50}]

    def update(self) -> LatencyState:
        """Recompute and redraw for the controls' current values (the controls' observer)."""
        v = self.values()
        table = latency_table(list(self.runs.values()), v["metric"], v["percentile"])
        run = self.runs[v["concurrency"]]
        values = latency_values_ms(run.records, v["metric"])
        row = table[table.concurrency == v["concurrency"]].iloc[0]
        self.state = LatencyState(
            metric=v["metric"],
            percentile=v["percentile"],
            concurrency=v["concurrency"],
            completed=int(row.completed),
            values=len(values),
            p50_ms=_number(row[f"p50_{v['metric']}_ms"]),
            percentile_ms=_number(row[f"p{v['percentile']:g}_{v['metric']}_ms"]),
            max_ms=max(values) if values else None,
            output_throughput=_number(row.output_throughput),
        )
        self.figure.value = _png(
            plots.concurrency_figure(table, self.slots, v["metric"], v["percentile"], at=v["concurrency"], values_at=values)
        )
        self.readout.value = self.state.readout()
        return self.state


class QuantExplorer(_Explorer):
    """Lab 05's configurations compared: pick which (variant/KV dtype rows of compare_variants or compare_models)
    and the quality measure; the figure is plots.quant_tradeoff_figure, as the headless cell draws it, and the
    readout the chosen rows' numbers with the best of them."""

    def __init__(self, results, *, chosen: list[str] | None = None, quality: str = "perplexity"):
        import ipywidgets as w

        from .quant_compare import QUALITY, config_labels

        self.results = results.set_index(config_labels(results))
        measures = [q for q in QUALITY if q in results and results[q].notna().any()]
        default = list(self.results[self.results.kv_dtype.isin(["f16", "auto"])].index)  # the weight variants
        default = default if len(default) > 1 else list(self.results.index)  # one (the reference): nothing to set beside it
        self.controls = {
            "chosen": w.SelectMultiple(
                options=list(self.results.index),
                value=[c for c in (chosen or default or list(self.results.index)) if c in self.results.index],
                description="compare",
                rows=min(len(self.results), 10),
            ),
            "quality": w.Dropdown(options=measures, value=quality if quality in measures else measures[0], description="quality"),
        }
        self.best: str | None = None
        self._build("quant-explorer", w.HBox(list(self.controls.values())))

    def tour(self) -> list[dict]:
        """The weight variants, then the first and last two configurations, then by top-1 agreement."""
        labels = list(self.results.index)
        quality = [{"quality": "top1_agreement"}] if "top1_agreement" in self.controls["quality"].options else []
        return [{}, {"chosen": list(dict.fromkeys(labels[:1] + labels[-2:]))}, *quality]

    def update(self) -> str | None:
        """Redraw for the chosen rows; returns the best of them by the chosen quality measure (None if none)."""
        from .quant_compare import QUALITY, rank

        v = self.values()
        rows = self.results.loc[list(v["chosen"])]
        quality = v["quality"]
        ranked = rank(rows, quality)
        self.best = ranked[0] if ranked else None
        unranked = [label for label in rows.index if label not in ranked]
        why = f" ({', '.join(unranked)}: the reference, {quality} is measured against it)" if unranked else ""
        self.figure.value = _png(plots.quant_tradeoff_figure(rows, quality))
        shown = ("file_MiB", "rss_MiB", "kv_MiB", "tpot_p50_ms", quality, f"{quality}_ci_low", f"{quality}_ci_high", "reference")
        columns = [c for c in shown if c in rows]
        table = rows[columns].round(3).to_html(classes="quant-table", border=0) if len(rows) else ""
        self.readout.value = (
            f"<div class='quant-readout'>{len(rows)} configuration{'' if len(rows) == 1 else 's'}; best by {quality} "
            f"({QUALITY[quality]} is better): "
            f"<b>{self.best or '-'}</b>{why}{table}</div>"
        )
        return self.best
