"""Figures the labs draw. Each returns a matplotlib Figure; widgets call the same functions."""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.pyplot as plt
import numpy as np

from .kv_math import GIB, allocation_utilization, dtype, kv_cache, plan_capacity
from .load import percentile_ms
from .models import ModelSpec, load_model
from .sse import chunk_kind


def kv_memory_figure(
    model: str,
    seq_len: int,
    batch: int,
    kv_dtype: str = "fp16",
    *,
    compare: list[str] | None = None,
    budget_gib: float | None = None,
):
    """KV cache (GiB) against context length and against batch size, at one operating point.

    Left: one sequence up to 4 x seq_len for `model` (and `compare` models); right: the batch at seq_len."""
    spec = load_model(model)
    fig, (ax_len, ax_batch) = plt.subplots(1, 2, figsize=(11, 3.8))
    lengths = np.unique(np.linspace(1, 4 * seq_len, 200).astype(int))
    for name in [model, *(compare or [])]:
        s = load_model(name)
        ys = [kv_cache(s, int(n), batch, kv_dtype).kv_bytes / GIB for n in lengths]
        ax_len.plot(lengths, ys, label=f"{s.name} ({s.attention})", lw=2.2 if name == model else 1.2)
    here = kv_cache(spec, seq_len, batch, kv_dtype)
    ax_len.scatter([seq_len], [here.kv_bytes / GIB], color="black", zorder=5)
    ax_len.annotate(f"{here.kv_bytes / GIB:.2f} GiB", (seq_len, here.kv_bytes / GIB), textcoords="offset points", xytext=(6, -12))
    ax_len.set(xlabel="context length (tokens)", ylabel=f"KV cache, batch {batch} (GiB)", title=f"{kv_dtype} KV cache vs length")
    batches = np.arange(1, max(2 * batch, 8) + 1)
    ax_batch.plot(batches, [kv_cache(spec, seq_len, int(b), kv_dtype).kv_bytes / GIB for b in batches], color="C0")
    ax_batch.scatter([batch], [here.kv_bytes / GIB], color="black", zorder=5)
    ax_batch.set(xlabel="concurrent sequences", ylabel="KV cache (GiB)", title=f"{spec.name} at {seq_len:,} tokens")
    for ax in (ax_len, ax_batch):
        if budget_gib is not None:  # a pool of 0 GiB is drawn too: nothing fits
            ax.axhline(budget_gib, color="red", ls="--", lw=1)
            ax.text(ax.get_xlim()[0], budget_gib, f" KV budget {budget_gib:.1f} GiB", color="red", va="bottom", fontsize=8)
        ax.grid(alpha=0.3)
    ax_len.legend(fontsize=8)
    fig.tight_layout()
    return fig


KVBytes = Callable[[ModelSpec, int, float], float]  # (model, seq_len, bytes per value) -> KV bytes of one sequence


def _sequence_bytes(spec: ModelSpec, seq_len: int, kv_dtype: str, kv_bytes: KVBytes | None) -> float:
    """One sequence's KV bytes: by `kv_bytes` (lab 01's participant's formula) when given, else kv_cache's."""
    if kv_bytes is not None:
        return kv_bytes(spec, seq_len, dtype(kv_dtype).bits_per_value / 8)
    return kv_cache(spec, seq_len, 1, kv_dtype).kv_bytes


def attention_kinds_figure(models: list[str], kv_dtype: str = "bf16", kv_bytes: KVBytes | None = None):
    """Bytes per token of context (all layers) for models of different attention designs; `kv_bytes` computes
    them when given."""
    specs = [load_model(m) for m in models]
    per_token = [_sequence_bytes(s, 1, kv_dtype, kv_bytes) / 1024 for s in specs]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    colors = {"MHA": "C3", "GQA": "C0", "MQA": "C2", "MLA": "C4"}
    ax.barh([f"{s.name} ({s.attention})" for s in specs], per_token, color=[colors[s.attention] for s in specs])
    for y, v in enumerate(per_token):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.set(xlabel=f"KV cache per token, {kv_dtype} (KiB)", title="Attention design sets the cost of every token of context")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def dtype_figure(model: str, seq_len: int, dtypes: list[str]):
    """KV bytes of one sequence across dtypes, with bits per value."""

    spec = load_model(model)
    sizes = [kv_cache(spec, seq_len, 1, d).kv_bytes / 2**20 for d in dtypes]
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.bar(dtypes, sizes, color="C0")
    for x, (d, v) in enumerate(zip(dtypes, sizes, strict=True)):
        ax.text(x, v, f"{v:,.0f} MiB\n{dtype(d).bits_per_value:g} bit", ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="MiB", title=f"{spec.name}, one {seq_len:,}-token sequence, by KV dtype")
    ax.set_ylim(0, max(sizes) * 1.25)
    fig.tight_layout()
    return fig


def paged_vs_contiguous_figure(lengths: list[int], max_len: int, block_sizes: tuple[int, ...] = (1, 8, 16, 32, 128, 512)):
    """Share of KV slots that hold real tokens: preallocating max_len vs whole blocks."""
    fig, (ax_hist, ax_util) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax_hist.hist(lengths, bins=40, color="C0")
    ax_hist.axvline(max_len, color="red", ls="--")
    ax_hist.set(
        xlabel="sequence length (tokens)", ylabel="requests", title=f"{len(lengths)} requests; preallocation = {max_len:,}"
    )
    utils = [allocation_utilization(lengths, max_len=max_len, block_size=b)["paged"] * 100 for b in block_sizes]
    contiguous = allocation_utilization(lengths, max_len=max_len)["contiguous"] * 100
    ax_util.plot([str(b) for b in block_sizes], utils, marker="o", label="paged")
    ax_util.axhline(contiguous, color="red", ls="--", label=f"contiguous to {max_len:,}: {contiguous:.0f}%")
    ax_util.set(
        xlabel="block size (tokens)", ylabel="slots used (%)", ylim=(0, 105), title="Paged allocation wastes at most one block"
    )
    ax_util.legend(fontsize=8)
    fig.tight_layout()
    return fig


def capacity_figure(
    model: str,
    gpus: list[str],
    max_model_lens: list[int],
    *,
    kv_dtype: str = "bf16",
    gpu_memory_utilization: float = 0.9,
    tp: int = 1,
):
    """vLLM's maximum concurrency against max_model_len on several GPUs."""
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for gpu in gpus:
        plans = [
            plan_capacity(model, m, kv_dtype=kv_dtype, gpu=gpu, gpu_memory_utilization=gpu_memory_utilization, tp=tp)
            for m in max_model_lens
        ]
        if all(p.num_blocks == 0 for p in plans):
            ax.plot([], [], label=f"{gpu}: weights do not fit")
            continue
        ax.plot(max_model_lens, [p.max_concurrency for p in plans], marker="o", label=gpu)
    ax.axhline(1, color="grey", lw=0.8)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="max_model_len (tokens)",
        ylabel="max concurrency (requests)",
        title=f"{load_model(model).name}, {kv_dtype} KV, tp={tp}, gpu_memory_utilization={gpu_memory_utilization}",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lab 02: timing


def slo_capacity_figure(found):
    """TTFT and TPOT at the search's percentile against the offered rate, the SLO's limits, and the bracket
    where capacity lies (labs_lib.slo_capacity.SLOCapacity): the knee of the latency-rate curve."""
    points = sorted(found.points, key=lambda p: p.rate_rps)
    rates = [p.rate_rps for p in points]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, metric, limit in ((axes[0], "ttft_ms", found.slo.ttft_ms), (axes[1], "tpot_ms", found.slo.tpot_ms)):
        values = [getattr(p, metric) for p in points]
        ax.plot(rates, values, marker="o", color="C0")
        for p, v in zip(points, values, strict=True):
            ax.plot([p.rate_rps], [v], marker="o", color="C2" if p.meets else "C3")
        if limit:
            ax.axhline(limit, color="C3", lw=0.8, ls="--", label="SLO")
        if found.max_rps is not None and found.first_miss_rps is not None:
            ax.axvspan(found.max_rps, found.first_miss_rps, color="C1", alpha=0.2, label="capacity lies here")
        name = metric.split("_")[0].upper()
        ax.set(xlabel="offered rate (req/s)", ylabel=f"{name} p{found.percentile:g} (ms)", yscale="log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    axes[0].set_title("TTFT from the scheduled send: green met, red missed", fontsize=9)
    fig.tight_layout()
    return fig


def stream_anatomy_figure(trace: list[tuple[float, str]], ttft_ms: float | None = None):
    """Every SSE line of one response on a time axis, by kind (role, content, finish, usage, [DONE])."""
    kinds = ["role", "content", "finish", "usage", "[DONE]", "other"]
    fig, ax = plt.subplots(figsize=(10, 2.6))
    for y, kind in enumerate(kinds):
        xs = [t * 1000 for t, line in trace if chunk_kind(line) == kind]
        ax.scatter(xs, [y] * len(xs), s=18, label=kind)
    if ttft_ms is not None:
        ax.axvline(ttft_ms, color="red", ls="--", lw=1)
        ax.text(ttft_ms, len(kinds) - 0.6, f" TTFT {ttft_ms:.0f} ms", color="red", fontsize=8)
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set(xlabel="ms after the request was sent", title="Anatomy of one streamed response")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def prefill_decode_figure(prompt_df, max_tokens_df):
    """TTFT against prompt length (prefill) and TPOT against max_tokens (decode)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    a.plot(prompt_df["prompt_tokens"], prompt_df["ttft_ms"], marker="o")
    a.set(xlabel="prompt tokens", ylabel="TTFT p50 (ms)", title="Prefill: TTFT grows with the prompt")
    b.plot(max_tokens_df["output_tokens"], max_tokens_df["tpot_ms"], marker="o", label="TPOT")
    b.set(xlabel="output tokens", ylabel="TPOT p50 (ms)", title="Decode: cost per token stays flat", ylim=(0, None))
    b2 = b.twinx()
    b2.plot(max_tokens_df["output_tokens"], max_tokens_df["e2e_ms"] / 1000, marker="s", color="C1", label="E2E")
    b2.set_ylabel("E2E p50 (s)", color="C1")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def kv_on_off_figure(df):
    """Per-token cost and its running total, with and without the KV cache."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    a.plot(df["context_tokens"], df["without_cache_ms"], label="no cache: recompute the whole context")
    a.plot(df["context_tokens"], df["with_cache_ms"], label="KV cache: one new token")
    a.set(xlabel="context length (tokens)", ylabel="ms for this token", title="Per-token cost", ylim=(0, None))
    a.legend(fontsize=8)
    b.plot(range(1, len(df) + 1), df["without_cache_ms"].cumsum() / 1000, label="no cache (quadratic)")
    b.plot(range(1, len(df) + 1), df["with_cache_ms"].cumsum() / 1000, label="KV cache (linear)")
    b.set(xlabel="tokens generated", ylabel="total seconds", title="Cumulative cost")
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def concurrency_figure(
    table,
    slots: int | None = None,
    metric: str = "ttft",
    percentile: float = 99,
    at: int | None = None,
    values_at: list[float] | None = None,
):
    """Throughput and a latency metric's p50 and p`percentile` (ms) against concurrency; with `at` that level is
    marked, and with `values_at` (its values, ms) a third panel shows their distribution with both percentiles.
    `table` has columns concurrency, output_throughput, p50_<metric>_ms and p<percentile>_<metric>_ms."""
    name, p50, pp = metric.upper(), f"p50_{metric}_ms", f"p{percentile:g}_{metric}_ms"
    fig, axes = plt.subplots(1, 3 if values_at else 2, figsize=(15 if values_at else 11, 3.6))
    a, b = axes[0], axes[1]
    a.plot(table["concurrency"], table["output_throughput"], marker="o")
    a.set(xlabel="concurrent requests", ylabel="output tokens/s", title="Throughput", ylim=(0, None))
    b.plot(table["concurrency"], table[p50], marker="o", label=f"{name} p50")
    b.plot(table["concurrency"], table[pp], marker="s", label=f"{name} p{percentile:g}")
    b.set(xlabel="concurrent requests", ylabel="ms", title=f"{name} p50 and p{percentile:g}", ylim=(0, None))
    for ax in (a, b):
        if slots:
            ax.axvline(slots, color="grey", ls="--", lw=1)
            ax.text(slots, ax.get_ylim()[1] * 0.95, " slots", color="grey", fontsize=8, va="top")
        ax.grid(alpha=0.3)
    if at is not None:
        row = table[table["concurrency"] == at]
        a.plot(row["concurrency"], row["output_throughput"], "o", ms=12, mfc="none", mec="red", label=f"c={at}")
        b.plot(row["concurrency"], row[pp], "o", ms=12, mfc="none", mec="red", label=f"c={at}")
        a.legend(fontsize=8)
    b.legend(fontsize=8)
    if values_at:
        c = axes[2]
        values = np.sort(np.asarray(values_at, dtype=float))
        c.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=f"{len(values)} values")
        for q, style in ((50, ":"), (percentile, "--")):
            c.axvline(percentile_ms(values_at, q), color="red", ls=style, lw=1, label=f"p{q:g}")
        c.set(xlabel=f"{name} (ms)", ylabel="fraction of values ≤ x", title=f"{name} at c={at}", ylim=(0, 1.02))
        c.grid(alpha=0.3)
        c.legend(fontsize=8)
    fig.tight_layout()
    return fig


def roofline_figure(rows):
    """Measured tokens/s against the lower of the two roofs (memory, compute), one bar pair per configuration;
    a compute roof, where known, is marked on its bar."""
    labels = [r["what"] + (f" ×{r['batch']}" if r.get("batch", 1) > 1 else "") for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(9, 1.1 * len(rows)), 3.6))
    ax.bar(x - 0.2, [r["bound_tokens_per_s"] for r in rows], width=0.4, label="roof (lower of memory, compute)")
    ax.bar(x + 0.2, [r.get("measured_tokens_per_s") or 0 for r in rows], width=0.4, label="measured")
    for i, r in enumerate(rows):
        if r.get("limited_by") == "compute":
            ax.text(i - 0.2, r["bound_tokens_per_s"], "compute", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, labels, fontsize=7, rotation=20, ha="right")
    ax.set(ylabel="decode tokens/s (all sequences)", yscale="log", title="Decode against the roofline")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tradeoff_figure(table, x: str = "TTFT p99", y: str = "tok/s", colour: str = "experiment"):
    """One metric against another over every measured sweep point (sweep_views.load_table rows), one series per
    value of `colour` (an experiment, a configuration, a load level); points joined in order of x."""
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, g in table.dropna(subset=[x, y]).groupby(colour, sort=True):
        g = g.sort_values(x)
        ax.plot(g[x], g[y], marker="o", lw=1, label=str(name))
    ax.set(xlabel=x, ylabel=y, title=f"{y} against {x}, by {colour}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing measured (every start refused): axes without a legend
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def pareto_figure(points, colour: str = "experiment"):
    """sweep_views.pareto_table points, tokens/s per user against tokens/s per device, the front drawn and its
    configurations named: every point off the front is beaten on both axes by one on it."""
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for name, g in points.groupby(colour, sort=True):
        ax.scatter(g["tok/s per user"], g["tok/s per device"], s=22, alpha=0.7, label=str(name))
    front = points[points["on_front"]].sort_values("tok/s per user")
    ax.step(front["tok/s per user"], front["tok/s per device"], where="post", color="black", lw=1, label="Pareto front")
    for _, r in front.iterrows():
        load = f" c={int(r['concurrency'])}" if "concurrency" in r and r["concurrency"] == r["concurrency"] else ""
        ax.annotate(
            f"{r['config']}{load}",
            (r["tok/s per user"], r["tok/s per device"]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.set(
        xlabel="tokens/s per user (1000 / TPOT p50)",
        ylabel="tokens/s per device (output)",
        title="Interactivity against throughput: the front",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def quant_tradeoff_figure(rows, quality: str = "perplexity"):
    """Memory against quality and speed against quality, one labelled point per configuration (rows indexed by
    quant_compare.config_labels; memory is the weight file's MiB, or resident MiB when there is no file). A
    measure with `<quality>_ci_low/_ci_high` columns gets its 95% interval as an error bar."""
    size = "file_MiB" if "file_MiB" in rows else "rss_MiB"
    has_ci = f"{quality}_ci_low" in rows and f"{quality}_ci_high" in rows
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    for label, r in rows.iterrows():
        for ax, x in ((a, r[size]), (b, r["tpot_p50_ms"])):
            if has_ci:
                err = [[r[quality] - r[f"{quality}_ci_low"]], [r[f"{quality}_ci_high"] - r[quality]]]
                ax.errorbar(x, r[quality], yerr=err, fmt="o", capsize=3)
            else:
                ax.scatter(x, r[quality])
            ax.annotate(str(label), (x, r[quality]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    a.set(xlabel=size.replace("_", " "), ylabel=quality.replace("_", " "), title=f"Memory vs {quality}")
    b.set(xlabel="TPOT p50 (ms)", ylabel=quality.replace("_", " "), title=f"Speed vs {quality}")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def decode_cost_figure(spec, gpu: str, kv_dtype: str, points: int = 48, steps: int = 4096):
    """Left: cumulative decode work (PFLOP) over `steps` generated tokens, without a KV cache (the whole pass over
    all t tokens each step) and with one (one token per step). Right: the memory-bound TPOT floor (ms) by context
    on `gpu`: bf16 weights + `kv_dtype` KV read once per step / the card's bandwidth.
    Returns (figure, work without / with the cache after `steps` tokens, (contexts, floor_ms))."""
    from .catalogs import gpu_spec
    from .kv_math import weight_bytes
    from .roofline import decode_step_flops

    t = np.arange(1, steps + 1)
    with_cache = np.cumsum(decode_step_flops(spec, t))
    without_cache = np.cumsum(decode_step_flops(spec, t, cached=False))
    bandwidth = gpu_spec(gpu)["bandwidth_gb_per_s"] * 1e9
    contexts = np.unique(np.geomspace(1, spec.max_position_embeddings or 131072, points).astype(int))
    weights_b = weight_bytes(spec, "bf16")
    floor_ms = np.array([weights_b + kv_cache(spec, int(n), 1, kv_dtype).kv_bytes for n in contexts]) / bandwidth * 1000
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.6))
    a.plot(t, without_cache / 1e15, label="no cache: the whole pass over all t tokens")
    a.plot(t, with_cache / 1e15, label="KV cache: one token per step")
    a.set(xlabel="tokens generated", ylabel="cumulative decode work (PFLOP)", title=f"{spec.name}: decoding {steps:,} tokens")
    b.plot(contexts, floor_ms, marker=".")
    b.axhline(weights_b / bandwidth * 1000, color="grey", ls=":", label="weights alone")
    title = f"With the cache: bf16 weights + {kv_dtype} KV read per step on {gpu}"
    b.set(xscale="log", xlabel="context (tokens)", ylabel="TPOT floor (ms)", title=title)
    for ax in (a, b):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, float(without_cache[-1] / with_cache[-1]), (contexts, floor_ms)


def sliding_window_figure(models: list[str], lengths, kv_dtype: str = "bf16", kv_bytes: KVBytes | None = None):
    """KV cache of one sequence (GiB) by context length (log-log), one line per model: a sliding layer's cache stops
    growing at its window. `kv_bytes` computes it when given."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for name in models:
        s = load_model(name)
        window = f" (W={s.sliding_window})" if s.sliding_window else ""
        gib = [_sequence_bytes(s, int(n), kv_dtype, kv_bytes) / GIB for n in lengths]
        ax.plot(lengths, gib, label=f"{s.name}: {s.num_sliding_layers}/{s.num_layers} layers slide{window}")
    ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="KV cache, one sequence (GiB)")
    ax.set_title("Windows cap the cache of sliding layers")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def kv_pool_figure(pool):
    """The KV MiB llama.cpp logged at each n_ctx beside lab 01's llamacpp_layout (sweep_views.kv_pool_table's rows)."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(pool["n_ctx asked"], pool["KV MiB (logged)"], marker="o", label="logged by llama.cpp")
    ax.plot(pool["n_ctx asked"], pool["KV MiB (lab-01 math)"], ls="--", label="lab-01 llamacpp_layout")
    ax.set(xscale="log", xlabel="n_ctx (cells for 4 slots)", ylabel="KV cache (MiB)", title="KV pool: engine vs calculator")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def batching_figure(table):
    """Lab 04 section 2: output tokens/s and TTFT (p50, p99) against concurrency, a line per configuration
    (sweep_views.load_table's columns)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    for name, g in table.groupby("config"):
        a.plot(g["concurrency"], g["tok/s"], marker="o", label=name)
        b.plot(g["concurrency"], g["TTFT p99"], marker="s", label=f"{name} p99")
        b.plot(g["concurrency"], g["TTFT p50"], marker="o", ls="--", label=f"{name} p50")
    a.set(xlabel="concurrency", ylabel="output tokens/s", title="Throughput", ylim=(0, None))
    b.set(xlabel="concurrency", ylabel="TTFT (ms)", title="Time to first token", ylim=(0, None))
    for ax in (a, b):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    return fig


def batching_speedup_figure(compared, engine: str):
    """Continuous batching's throughput ratio (B/A) against concurrency, the article's and the one measured
    (sweep_views.batching_beside_article's table; its attrs name the two configurations)."""
    one, many = compared.attrs["configs"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(compared.concurrency, compared["B/A throughput (article)"], marker="o", label="article (4090, 13B, A=1 seq, B=128)")
    ax.plot(
        compared.concurrency, compared["B/A throughput (measured)"], marker="s", label=f"measured ({engine}: {one} vs {many})"
    )
    ax.axhline(1, color="grey", lw=0.8)
    ax.set(xlabel="concurrency", ylabel="throughput B / A", title="Continuous batching: the speed-up, claimed and measured")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
