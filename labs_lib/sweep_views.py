"""Tables over sweep results (load_results DataFrames), for either engine."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .engines import engine_class
from .engines.metrics import cache_hit_rate
from .errors import BadInput
from .kv_math import MIB, kv_cache
from .load import SLO
from .scheduler import ScheduleStep, StepCost, simulate
from .timing import RequestRecord

LOAD_COLUMNS = {
    "summary.output_throughput": "tok/s",
    "summary.request_throughput": "req/s",
    "summary.p50_ttft_ms": "TTFT p50",
    "summary.p99_ttft_ms": "TTFT p99",
    "summary.p50_tpot_ms": "TPOT p50",
    "summary.p99_tpot_ms": "TPOT p99",
    "summary.goodput": "goodput req/s",
    "summary.failed": "failed",
}


def varying(df: pd.DataFrame) -> list[str]:
    """config.* columns whose value differs between rows."""
    cols = [c for c in df.columns if c.startswith("config.")]
    return [c for c in cols if df[c].astype(str).nunique() > 1]


def label(df: pd.DataFrame) -> pd.Series:
    """A short name per row from the varying config fields, e.g. 'parallel=4'."""
    keys = varying(df)
    if not keys:
        return pd.Series(["default"] * len(df), index=df.index)
    return df[keys].astype(str).apply(lambda r: ", ".join(f"{k.removeprefix('config.')}={v}" for k, v in r.items()), axis=1)


def load_ok(df: pd.DataFrame | None) -> pd.DataFrame:
    """The rows of a sweep's results that were measured (status ok); none when nothing ran or every point failed."""
    if df is None or df.empty or "status" not in df:
        return pd.DataFrame(columns=["status"])
    return df[df["status"] == "ok"]


def load_table(df: pd.DataFrame | None) -> pd.DataFrame:
    """Throughput and latency per configuration and load level (no rows when no point ran: each failure is a row
    of `failures`)."""
    ok = load_ok(df).copy()
    if ok.empty:
        return pd.DataFrame(columns=["config", "concurrency", *LOAD_COLUMNS.values()])
    out = pd.DataFrame({"config": label(ok)})
    for col in ("level.concurrency", "level.request_rate"):
        if col in ok and ok[col].notna().any():
            out[col.removeprefix("level.")] = ok[col]
    for col, name in LOAD_COLUMNS.items():
        if col in ok:
            out[name] = ok[col]
    for col in ("summary.short_p99_ttft_ms", "summary.long_p50_ttft_ms"):
        if col in ok:
            out[col.removeprefix("summary.")] = ok[col]
    if "energy.joules" in ok and ok["energy.joules"].notna().any():  # where the machine's energy counter was read
        out["tok/J"] = (ok["summary.total_output_tokens"] / ok["energy.joules"]).values
    return out.reset_index(drop=True)


def kv_bytes_share(kv_dtype: pd.DataFrame | None) -> tuple[str, float] | None:
    """The smallest KV dtype of a kv_dtype sweep and its bytes per token as a share of the 16-bit cache's, from what
    each configuration allocated: llama.cpp's logged KV MiB for the same context, or the tokens vLLM's same pool
    held. None where the sweep did not run both."""
    ok = load_ok(kv_dtype)
    if ok.empty or "config.kv_cache_dtype" not in ok:
        return None
    by = ok.groupby("config.kv_cache_dtype").first()
    full = next((d for d in ("f16", "bf16", "auto") if d in by.index), None)
    if full is None or len(by) < 2:
        return None
    if "allocation.kv_mib" in by and by["allocation.kv_mib"].notna().all():
        shares = by["allocation.kv_mib"] / by.loc[full, "allocation.kv_mib"]
    elif "allocation.kv_cache_tokens" in by and by["allocation.kv_cache_tokens"].notna().all():
        shares = by.loc[full, "allocation.kv_cache_tokens"] / by["allocation.kv_cache_tokens"]
    else:
        return None
    smallest = shares.drop(index=full).idxmin()
    return str(smallest), float(shares[smallest])


def energy_note(runs: dict[str, pd.DataFrame | None]) -> str:
    """One line: where the sweeps' tokens per joule (load_table's "tok/J": output tokens over the joules the machine's
    energy counter counted during the load) come from, or why there are none."""
    # a point that ran a load has both energy.joules and energy.source (None and a reason where nothing was counted)
    frames = [df for df in runs.values() if df is not None and "energy.source" in df]
    if not frames:
        return "no tokens per joule: no point measured a load"
    rows = pd.concat(frames, ignore_index=True)
    measured = rows.loc[rows["energy.joules"].notna(), "energy.source"]
    if len(measured):
        return "tokens per joule (tok/J) from " + ", ".join(sorted(set(measured)))
    return "no tokens per joule: " + ", ".join(sorted(set(rows["energy.source"].dropna())))


def failures(df: pd.DataFrame) -> pd.DataFrame:
    bad = df[df["status"] != "ok"]
    return pd.DataFrame({"config": label(df).loc[bad.index], "error": bad["error"]}).reset_index(drop=True)


def batching_beside_article(table: pd.DataFrame, article: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """An article's batching table (columns concurrency, a_tok_s, b_tok_s, a_ttft_p99_ms, b_ttft_p99_ms; None: seed
    002's, as published) beside the same ratios measured: throughput of the most slots over the fewest (B/A), and
    TTFT p99 the other way (A/B), per concurrency. None when fewer than two configurations were measured;
    attrs["configs"]: (fewest, most)."""
    configs = sorted(table.config.unique())
    if len(configs) < 2:
        return None
    if article is None:
        from .claims import claim

        article = pd.DataFrame(claim("s002-conc32-throughput")["table"])
    one, many = configs[0], configs[-1]
    claimed = pd.DataFrame(
        {
            "concurrency": article.concurrency,
            "B/A throughput (article)": article.b_tok_s / article.a_tok_s,
            "A/B TTFT p99 (article)": article.a_ttft_p99_ms / article.b_ttft_p99_ms,
        }
    )
    measured = table.pivot_table(index="concurrency", columns="config", values=["tok/s", "TTFT p99"])
    ours = pd.DataFrame(
        {
            "B/A throughput (measured)": measured["tok/s"][many] / measured["tok/s"][one],
            "A/B TTFT p99 (measured)": measured["TTFT p99"][one] / measured["TTFT p99"][many],
        }
    ).reset_index()
    compared = claimed.merge(ours, on="concurrency", how="outer")
    compared.attrs["configs"] = (one, many)
    return compared


def kv_pool_table(df: pd.DataFrame, engine: str) -> pd.DataFrame:
    """What the engine allocated for each configuration that started (beside the lab-01 math where the engine's
    layout is modelled); empty when none started (a refused start is a row of `failures`)."""
    ok = load_ok(df)
    return pd.DataFrame([engine_class(engine).kv_pool_row(r.to_dict()) for _, r in ok.iterrows()])


def with_planned_concurrency(pool: pd.DataFrame, model: str, on_cpu: bool) -> tuple[pd.DataFrame, str | None]:
    """vLLM's kv_pool_table with lab 01's planner beside it: 'planned max concurrency' for each point's pool (the
    pool asked for in GiB, else the one logged as available) and max_model_len, in blocks of 128 tokens on CPU, 16
    on a GPU, with the engine's step budget and in-flight batches (the card's defaults, async scheduling on a GPU:
    kv_math.plan_capacity). Returns the table, and why the planner could not be applied (a model the catalogue
    lacks, nothing started), else None."""
    from .kv_math import plan_capacity

    if pool.empty:
        return pool, "no configuration started"
    asked = pool["KV pool GiB (asked)"]
    pool_gib = asked.where(asked.notna(), pool["available KV GiB (logged)"])
    card = None if on_cpu else this_card()
    try:
        planned = [
            plan_capacity(
                model, int(m), available_kv_gib=float(g), block_size=128 if on_cpu else 16, on_cpu=on_cpu, gpu=card
            ).max_concurrency
            for m, g in zip(pool["max_model_len"], pool_gib, strict=True)
        ]
    except (BadInput, TypeError, ValueError) as exc:
        return pool, str(exc)
    return pool.assign(**{"planned max concurrency": planned}), None


def this_card() -> str | None:
    """The catalogue's name for the card a GPU engine started now computes on (gpu.engine_card), or None (no
    NVML, a card the catalogue lacks)."""
    from .gpu import catalogued_card

    return catalogued_card()[1]


def cache_hit_table(df: pd.DataFrame, engine: str) -> pd.DataFrame:
    """Prompt tokens served from the cache, per configuration, from the engine's own counters."""
    names = engine_class(engine).counters
    ok = load_ok(df)
    hits = ok.get(f"metrics.{names.cached}", pd.Series(0.0, index=ok.index)).fillna(0.0)
    prompt = ok.get(f"metrics.{names.prompt}", pd.Series(0.0, index=ok.index)).fillna(0.0)
    out = pd.DataFrame({"config": label(ok)})
    if "workload.name" in ok and ok["workload.name"].nunique() > 1:  # e.g. one system prompt, then several in turn
        out["workload"] = ok["workload.name"].values
    if "level.concurrency" in ok and ok["level.concurrency"].nunique() > 1:  # compare configurations at the same load
        out["concurrency"] = ok["level.concurrency"]
    out["prompt tokens (cache hits included)" if names.prompt_includes_cached else "prompt tokens computed"] = prompt
    out["prompt tokens from cache"] = hits
    out["hit rate"] = [cache_hit_rate(h, q, names.prompt_includes_cached) for h, q in zip(hits, prompt, strict=True)]
    out["TTFT p50"] = ok.get("summary.p50_ttft_ms", pd.Series(dtype=float))
    return out.reset_index(drop=True)


DEFAULT_TOKEN_BUDGET = 2048  # tokens per step when the point records none: llama.cpp's n_batch, vLLM's CPU default


def scheduled_beside_measured(df: pd.DataFrame | None, step: ScheduleStep) -> pd.DataFrame:
    """Each measured point of a batching sweep beside what `step` predicts for it: the same closed-loop load
    simulated with max_num_seqs = the point's `parallel` and its step budget (the engine's n_batch, vLLM's
    max_num_batched_tokens, else DEFAULT_TOKEN_BUDGET), the step time calibrated on the one-sequence,
    one-user point (scheduler.StepCost). No rows when that point is missing."""
    ok = load_ok(df)
    columns = [
        "config",
        "max_num_seqs",
        "concurrency",
        "TTFT p50",
        "predicted TTFT p50",
        "TPOT p50",
        "predicted TPOT p50",
        "tok/s",
        "predicted tok/s",
    ]
    if ok.empty or "config.parallel" not in ok or "level.concurrency" not in ok:
        return pd.DataFrame(columns=columns)
    base = ok[(ok["config.parallel"] == 1) & (ok["level.concurrency"] == 1)]
    if base.empty:
        return pd.DataFrame(columns=columns)
    first = base.iloc[0]
    cost = StepCost.calibrated(first["summary.p50_tpot_ms"], first["summary.p50_ttft_ms"], int(first["workload.prompt_tokens"]))
    rows = []
    for (_, point), name in zip(ok.iterrows(), label(ok), strict=True):
        budget = next(
            (int(point[c]) for c in ("config.max_num_batched_tokens", "allocation.n_batch") if c in point and pd.notna(point[c])),
            DEFAULT_TOKEN_BUDGET,
        )
        predicted = simulate(
            step,
            cost,
            concurrency=int(point["level.concurrency"]),
            requests=int(point["workload.requests"]),
            prompt_tokens=int(point["workload.prompt_tokens"]),
            output_tokens=int(point["workload.max_tokens"]),
            max_num_seqs=int(point["config.parallel"]),
            token_budget=budget,
        )
        rows.append(
            [name, int(point["config.parallel"]), int(point["level.concurrency"]), point["summary.p50_ttft_ms"], predicted.ttft_p50_ms,
             point["summary.p50_tpot_ms"], predicted.tpot_p50_ms, point["summary.output_throughput"], predicted.tok_s]
        )  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def with_goodput(df: pd.DataFrame | None, goodput: Callable, slo: SLO) -> pd.DataFrame | None:
    """`df` (a sweep's results) with each measured point's goodput (summary.goodput, requests/s) computed again by
    `goodput(records, slo, duration_s)` from the requests the point kept; a point saved without them (a results file
    from before they were kept) keeps the figure it recorded."""
    if df is None or "requests" not in df:
        return df
    out = df.copy()
    for i, row in out.iterrows():
        if row.get("status") == "ok" and isinstance(row["requests"], list):
            records = [RequestRecord(**request) for request in row["requests"]]
            out.at[i, "summary.goodput"] = goodput(records, slo, float(row["summary.duration_s"]))
    return out


def best_by_goodput(df: pd.DataFrame) -> pd.Series | None:
    """The point with the highest goodput (requests/s meeting every SLO)."""
    ok = load_ok(df)
    ok = ok[ok.get("summary.goodput", pd.Series(dtype=float, index=ok.index)).notna()]
    if ok.empty:
        return None
    return load_table(ok).sort_values(["goodput req/s", "tok/s"], ascending=False).iloc[0]


def _off_to_on(hits: pd.DataFrame) -> pd.DataFrame:
    """cache_hit_table's rows of its first workload (one system prompt for all) at its lightest load, by hit rate:
    caching off first, the configuration that caches best last."""
    if "workload" in hits:
        hits = hits[hits.workload == hits.workload.iloc[0]]
    if "concurrency" in hits:
        hits = hits[hits.concurrency == hits.concurrency.min()]
    return hits.sort_values("hit rate", kind="stable")


def caching_ttft_cut(hits: pd.DataFrame) -> tuple[pd.DataFrame, float, str]:
    """(cache_hit_table's rows of its first workload — one system prompt for all —, the share by which TTFT p50 falls
    from the lowest hit rate to the highest at the lightest load — NaN with one configuration —, a line saying it)."""
    shared = hits[hits.workload == hits.workload.iloc[0]] if "workload" in hits else hits
    ttft = _off_to_on(shared).set_index("config")["TTFT p50"]
    if len(ttft) < 2:
        return shared, float("nan"), "one configuration measured: no TTFT to set beside it"
    cut = 1 - ttft.iloc[-1] / ttft.iloc[0]
    said = f"TTFT p50 {ttft.iloc[0]:.0f} ms ({ttft.index[0]}) -> {ttft.iloc[-1]:.0f} ms ({ttft.index[-1]}): {cut:.0%} lower"
    return shared, cut, said


def hit_rate_by_workload(hits: pd.DataFrame) -> tuple[pd.DataFrame, str, float]:
    """(cache_hit_table's hit rate per configuration and workload, the configuration that caches the first workload
    best, its hit rate there minus on the second: one shared system prompt against several taken in turn)."""
    rates = hits.pivot_table(index="config", columns="workload", values="hit rate", sort=False)
    single, several = list(dict.fromkeys(hits.workload))[:2]
    best = str(rates[single].idxmax())
    return rates, best, float(rates.loc[best, single] - rates.loc[best, several])


def cache_ttft_means(df: pd.DataFrame, engine: str) -> dict | None:
    """The prefix-cache sweep's first workload at its lightest load: caching off (the lowest hit rate) and the
    configuration with the highest, their mean TTFT over every request (misses included, as the hit rate counts
    them), and what the best one's mean would be if TTFT were only the prompt tokens computed: off's x (1 - hit
    rate). None without two configurations."""
    table = cache_hit_table(df, engine)
    if table.empty:
        return None
    table["mean TTFT"] = load_ok(df)["summary.mean_ttft_ms"].to_numpy()
    table = _off_to_on(table)
    if len(table) < 2:
        return None
    off, on = table.iloc[0], table.iloc[-1]
    return {
        "off": off["config"],
        "on": on["config"],
        "off_mean_ttft_ms": float(off["mean TTFT"]),
        "hit_rate": float(on["hit rate"]),
        "on_mean_ttft_ms": float(on["mean TTFT"]),
        "computed_only_ms": float(off["mean TTFT"]) * (1 - float(on["hit rate"])),
    }


def kv_needed_table(df: pd.DataFrame, model: str) -> tuple[pd.DataFrame | None, str | None]:
    """load_table beside the KV cache each point needs: min(parallel, concurrency) sequences at once, each of its
    prompt (shared prefix included) and output tokens, from lab 01's kv_cache for `model` and the point's KV dtype
    (fp16 unless the grid sets one; exact tokens, no block rounding); and goodput per MiB of it. Returns the table
    and None, or None and why not (a model the catalogue lacks, or no point measured)."""
    ok = load_ok(df)
    if ok.empty:
        return None, "no configuration started and ran its load"
    out = load_table(df)
    slots = ok.get("config.parallel", pd.Series(1, index=ok.index)).fillna(1).astype(int)
    at_once = [min(s, int(c)) for s, c in zip(slots, ok["level.concurrency"], strict=True)]
    tokens = ok["workload.prompt_tokens"] + ok["workload.max_tokens"] + ok.get("workload.shared_prefix_tokens", 0)
    # vLLM's "auto" stores KV in the model's dtype (bf16 here: 2 bytes, as fp16); llama.cpp's names are aliases
    dtypes = ok.get("config.kv_cache_dtype", pd.Series("fp16", index=ok.index)).fillna("fp16").replace("auto", "fp16")
    try:
        kv = [kv_cache(model, int(t), n, d).kv_bytes / MIB for t, n, d in zip(tokens, at_once, dtypes, strict=True)]
    except BadInput as e:
        return None, str(e)
    out["parallel"] = slots.to_list()
    out["sequences at once"] = at_once
    out["KV MiB needed"] = kv
    out["goodput per KV MiB"] = out["goodput req/s"] / out["KV MiB needed"]
    return out, None


def pareto_table(table: pd.DataFrame, usd_per_device_hour: float | None = None) -> pd.DataFrame:
    """Every measured point (load_table rows, an `experiment` column beside) at tokens/s per user against tokens/s
    per device, the axes of `vllm bench sweep plot_pareto` and of InferenceMAX's charts: per user = 1000 / TPOT p50
    (the decode speed one stream sees), per device = output tokens/s of the whole run (one engine, one device).
    `on_front` marks the points no other point beats on both axes: the configurations worth choosing among. With a
    device's hourly price, "USD per M tokens" is what a million output tokens cost at each point's throughput
    (usd_per_million_tokens): on one kind of device the cheapest point is the one with the most tokens/s per device,
    so it is always on the front."""
    out = table.dropna(subset=["TPOT p50", "tok/s"]).copy()
    out = out[out["TPOT p50"] > 0]
    out["tok/s per user"] = 1000 / out["TPOT p50"]
    out["tok/s per device"] = out["tok/s"]
    out["on_front"] = on_front(list(out["tok/s per user"]), list(out["tok/s per device"]))
    if usd_per_device_hour is not None:
        out["USD per M tokens"] = [usd_per_million_tokens(t, usd_per_device_hour) for t in out["tok/s per device"]]
    return out.sort_values("tok/s per user").reset_index(drop=True)


def usd_per_million_tokens(tokens_per_s: float, usd_per_device_hour: float) -> float:
    """USD per million output tokens of a device that makes `tokens_per_s` while it is rented (the hour's price over
    the tokens of that hour; inf at no tokens)."""
    return usd_per_device_hour / (tokens_per_s * 3600) * 1e6 if tokens_per_s > 0 else float("inf")


def device_hour_price(given: float | None) -> tuple[float | None, str]:
    """(USD per device-hour for lab 04's cost column, where it comes from): `given` as it is; else the catalogue's
    sourced range (its midpoint) for the GPU NVML finds; else (None, why)."""
    from .catalogs import gpu_price
    from .gpu import catalogued_card

    if given is not None:
        return float(given), "usd_per_device_hour, as given"
    card, name, why = catalogued_card()  # the card the engines compute on (CUDA_VISIBLE_DEVICES)
    if card is None:
        return None, f"{why}; give usd_per_device_hour, what an hour of this machine costs you"
    price = gpu_price(name) if name else None
    if price is None:
        return None, f"the catalogue lists no price for {card.name}: give usd_per_device_hour"
    return price.mid_usd, f"the midpoint of {name}'s {price}"


def cheapest_token_line(points: pd.DataFrame, usd_per_device_hour: float | None, priced_by: str) -> str:
    """One line: the cheapest million output tokens on pareto_table's front at the device's hourly price, and the
    point that makes them (on one kind of device, the busiest: the front holds it); or why there is no cost."""
    if usd_per_device_hour is None:
        return f"no cost column: {priced_by}"
    front = points[points.on_front]
    cheapest = front.loc[front["USD per M tokens"].idxmin()]
    return (
        f"at ${usd_per_device_hour:.2f} per device-hour ({priced_by}): cheapest ${cheapest['USD per M tokens']:.2f} per M "
        f"output tokens, {cheapest['config']} at concurrency {cheapest['concurrency']}, "
        f"{cheapest['tok/s per user']:.1f} tok/s per user"
    )


def on_front(per_user: list[float], per_device: list[float]) -> list[bool]:
    """For each point (per_user[i], per_device[i]), higher better on both axes: True when no other point is at
    least as good on both and better on one (the Pareto front; equal points do not beat each other)."""
    points = list(zip(per_user, per_device, strict=True))
    return [not any(u2 >= u and d2 >= d and (u2 > u or d2 > d) for u2, d2 in points) for u, d in points]


def article_checks(
    kv_pool: pd.DataFrame | None,
    batching: pd.DataFrame,
    prefix_cut: float,
    hits: pd.DataFrame,
    engine: str,
    grid_prefix: str,
    prefix_cache: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Lab 04's "the articles' numbers beside ours": each tuning claim of the articles against this run's sweeps
    (kv_pool and batching results, the prefix grid's TTFT cut, hit table and results), or why it cannot be measured
    here."""
    from .claims import TOLERANCE, claim, row

    overflow_text, overflow_holds, pool_ttft_text, pool_ttft_holds = _pool_findings(kv_pool, engine)
    # the caching-on configuration's hit rate: the highest (off serves nothing from the cache; rows come in the order
    # the sweep ran them, which a kept engine can change)
    saved = float(hits["hit rate"].dropna().max()) if len(hits) and hits["hit rate"].notna().any() else float("nan")
    low, high = claim("s002-prefix-saving")["value"]
    cut, prefix = prefix_cut, grid_prefix
    bt = load_table(batching)
    configs = sorted(bt.config.unique())
    bt_c = bt.pivot_table(index="concurrency", columns="config", values="tok/s")
    top = bt_c.index.max()
    gain = bt_c.loc[top, configs[-1]] / bt_c.loc[top, configs[0]] if len(configs) > 1 else float("nan")
    said_a, said_b = claim("s002-conc32-throughput")["value"]
    measured = [
        row(
            "s002-conc32-throughput",
            f"B/A = {gain:.2f}x at concurrency {top}"
            if gain == gain
            else f"not measured: {len(configs)} of the two configurations started",
            "throughput ratio",
            (abs(gain / (said_b / said_a) - 1) <= TOLERANCE or (None if gain > 1 + TOLERANCE else False))
            if gain == gain
            else None,
            f"article: {said_b}/{said_a} = {said_b / said_a:.2f}x at 32 on a 4090 with 128 sequences; here, another model "
            "on another machine: batching raises throughput by a factor the card and the slots set",
        ),
        prefix_ttft_row(cut),
        row(
            "s002-prefix-saving",
            f"{saved:.0%} of prompt tokens served from the cache" if saved == saved else "not measured",
            "prefill skipped",
            (low <= 100 * saved <= high or (None if saved > 0 else False)) if saved == saved else None,
            "the saving is the share of each prompt that repeats an earlier one: here the workload shares most of it; "
            "a chat with a short system prompt saves far less, and decode is never saved",
        ),
        row(
            "s001-gpu-mem-util",
            pool_ttft_text,
            "TTFT p50",
            pool_ttft_holds,
            "a larger KV pool (what a higher utilization buys) shortens TTFT only when the load needs more sequences "
            "than the small pool holds: then requests wait or are preempted",
        ),
        row(
            "s002-overflow-swaps",
            overflow_text,
            "what vLLM does when the pool is full",
            overflow_holds,
            "vLLM V1 has no swap space: when the pool cannot hold the running sequences it preempts the newest and "
            "recomputes them later (vllm:num_preemptions); the flag that sized the swap is gone (next row). Judged only "
            "where this run's smallest pool overflowed",
        ),
    ]
    return pd.DataFrame([*measured, one_slot_row(bt), prefix_pool_row(prefix_cache), *_unmeasured_claim_rows(prefix)])


def one_slot_row(bt: pd.DataFrame) -> dict:
    """Seed 002's config A, "--max-num-seqs 1 turns continuous batching off": with one slot, throughput at the
    highest concurrency measured against at one request (load_table of the batching sweep): level means nothing
    was batched."""
    from .claims import TOLERANCE, row

    one = bt[bt.config == "parallel=1"].set_index("concurrency")["tok/s"] if len(bt) else pd.Series(dtype=float)
    if len(one) < 2:
        return row("s002-max-num-seqs-1-off", "not measured", "", None, "needs the one-slot configuration at two loads")
    low, high = one.index.min(), one.index.max()
    ratio = one[high] / one[low]
    return row(
        "s002-max-num-seqs-1-off",
        f"{ratio:.2f}x the tokens/s at concurrency {high} as at {low}",
        "one slot",
        bool(abs(ratio - 1) <= TOLERANCE),
        "one sequence in the batch at a time: every other request waits in the queue (its TTFT climbs), so throughput "
        "stays level however many are sent; with four or eight slots it rises (the same sweep's other configuration)",
    )


# The KV pool an engine sized at start, per engine: vLLM logs it in tokens, llama.cpp in MiB
POOL_COLUMNS = {"allocation.kv_cache_tokens": "KV tokens", "allocation.kv_mib": "KV MiB"}


def prefix_pool_row(prefix_cache: pd.DataFrame | None) -> dict:
    """Seed 001's "prefix caching takes memory of its own", against the KV pool the engine sized at start with
    caching off and on, every other setting equal (the prefix grid's points): a smaller pool with caching on would
    hold."""
    from .claims import row

    ok = load_ok(prefix_cache)
    column = next((c for c in POOL_COLUMNS if c in ok and ok[c].notna().any()), None)
    pools = ok.dropna(subset=[column]) if column else ok.iloc[0:0]
    others = [c for c in pools if c.startswith("config.") and c != "config.prompt_cache"]
    pair = None
    for _, same in pools.groupby(others, dropna=False) if others else [(None, pools)]:
        by_setting = same.groupby("config.prompt_cache")[column].first() if len(same) else pd.Series()
        if {False, True} <= set(by_setting.index):
            pair = float(by_setting[False]), float(by_setting[True])
            break
    if column is None or pair is None:
        return row(
            "s001-prefix-cache-takes-memory", "not measured", "", None, "needs the prefix grid's points with caching off and on"
        )
    off, on = pair
    window = ""  # llama.cpp reuses a prefix on sliding-window layers only from a full-size window cache, which costs
    if "config.swa_full" in pools and pools["config.swa_full"].nunique() > 1:
        by_window = pools.groupby("config.swa_full")[column].first()
        window = (
            f"; a sliding-window model pays elsewhere: llama.cpp reuses a prefix on its window layers only from a "
            f"full-size window cache (swa_full), {by_window[True]:,.0f} MiB against {by_window[False]:,.0f}"
        )
    return row(
        "s001-prefix-cache-takes-memory",
        f"{POOL_COLUMNS[column]}: off {off:,.0f}, on {on:,.0f}",
        "KV pool at start",
        on < off,
        "the engine sizes its KV pool at start, before any request, "
        + (
            "to the same size with caching on and off: a cached prefix is blocks of that pool, kept after their request "
            "ends and reused or evicted as free blocks (vLLM: vllm/v1/core/block_pool.py), so lowering the memory "
            "utilization or max_model_len only shrinks the pool"
            if on == off
            else f"{'smaller' if on < off else 'larger'} with caching on"
        )
        + window
        + (
            "; llama.cpp also copies idle slots' prompt states into host RAM outside the pool (its --cache-ram, up to "
            "8 GiB by default): memory of its own, the host's, not the card's"
            if column == "allocation.kv_mib"
            else ""
        ),
    )


def prefix_ttft_row(cut: float) -> dict:
    """Seed 003's "TTFT falls 40%-60%" with a shared system prompt, against the cut measured (a fraction; NaN: not
    measured): it holds inside the article's range; a cut outside it, above or below, does not hold."""
    from .claims import claim, row

    low, high = (v / 100 for v in claim("s003-prefix-ttft")["value"])
    measured = cut == cut
    side = "" if not measured or low <= cut <= high else " (more than the article says)" if cut > high else " (less)"
    return row(
        "s003-prefix-ttft",
        f"{cut:.0%}{side}" if measured else "not measured",
        "TTFT reduction",
        bool(low <= cut <= high) if measured else None,
        f"the article's range is {low:.0%}-{high:.0%}; the cut depends on how much of each prompt is shared (most of "
        "it here), and on sliding-window models on a full-size window cache",
    )


def _unmeasured_claim_rows(prefix: str) -> list[dict]:
    """Lab 04's claims this run cannot measure, each with why and what would test it."""
    from .claims import row

    return [
        row(
            "s001-ttft-980-200",
            "not measurable here" if prefix != "gpu" else "not measured in this lab's grids",
            "ms",
            None,
            "absolute TTFT depends on GPU, model, prompt and load; data/grids/gpu_tuning.yaml measures the path on a GPU",
        ),
        row(
            "s003-4xa100-table",
            "not measurable here",
            "tokens/s",
            None,
            "its 'PagedAttention' and 'continuous batching' rows cannot be switched off separately in vLLM (both are how it works)",
        ),
        row(
            "s003-block-size",
            "not testable here",
            "throughput",
            None,
            "llama.cpp has no blocks; vLLM's CPU attention takes blocks in multiples of 32 "
            "(cpu_attn.get_supported_kernel_block_sizes: MultipleOf(32); default 128), so 8 vs 16 exists only on a GPU: "
            "data/grids/gpu_flash_attention.yaml turns block_size there",
        ),
        _swap_space_row(),
    ]


def _pool_findings(kv_pool: pd.DataFrame | None, engine: str) -> tuple[str, bool | None, str, bool | None]:
    """(what the smallest pool did under load, False where it overflowed into preemptions (not a swap) and None where
    it never overflowed, TTFT by pool size, whether a bigger pool cut TTFT by 30%)."""
    pool = kv_pool_table(kv_pool, engine) if kv_pool is not None else pd.DataFrame()
    overflow_holds: bool | None = None  # judged only where the pool was seen to overflow
    if "preemptions" in pool:  # vLLM: its own counter, per pool size
        counted = pool["preemptions"].dropna()  # measured only where the grid sends load
        most = int(counted.max()) if len(counted) else 0
        overflow_text = (
            f"preempted {most} times with the smallest pool; no swap"
            if most
            else "the pool never overflowed under this load (0 preemptions)"
            if len(counted)
            else "preemptions not measured (no load sent)"
        )
        overflow_holds = False if most else None
    else:
        overflow_text = "llama.cpp has no shared pool to overflow (a request longer than its slot gets HTTP 400, lab 06)"
    pool_ok = load_ok(kv_pool)
    if pool_ok is not None and "config.kv_cache_gib" in pool_ok and pool_ok["config.kv_cache_gib"].nunique() > 1:
        by_pool = pool_ok.groupby("config.kv_cache_gib")["summary.p50_ttft_ms"].median()
        text = (
            f"{by_pool.iloc[0]:.0f} ms with {by_pool.index[0]} GiB -> {by_pool.iloc[-1]:.0f} ms with {by_pool.index[-1]} GiB "
            "(the engine's own pool, given in GiB)"
        )
        return overflow_text, overflow_holds, text, bool(by_pool.iloc[-1] < 0.7 * by_pool.iloc[0])
    if "preemptions" in pool:  # an engine with a shared pool, fewer than two of whose sizes were measured
        return overflow_text, overflow_holds, "not measured: fewer than two pool sizes started and ran their load", None
    return (
        overflow_text,
        overflow_holds,
        "not testable on this engine: llama.cpp's slots, not its pool, bound how many sequences run",
        None,
    )


def defaults_table(kind: str) -> pd.DataFrame:
    """Each knob a grid may turn with engine `kind`'s own default: as recorded (the engine's DEFAULTS, with where it
    was read) and as the installed engine states it now (installed_defaults); `agrees` where both are known. A
    default that depends on the card is shown as recorded ("by card"): kv_math.vllm_batch_defaults has the table."""
    cls = engine_class(kind)
    installed = cls.installed_defaults()
    read_in = f"installed ({installed['version']})" if installed else "installed (not readable here)"
    rows = []
    for knob, (recorded, where) in cls.DEFAULTS.items():
        now = installed.get(knob, "-") if installed else "-"
        rows.append(
            {"knob": knob, "recorded": recorded, read_in: now, "agrees": now == recorded if now != "-" else None, "where": where}
        )
    return pd.DataFrame(rows)


def _swap_space_row() -> dict:
    """Seed 002's swap_space against the installed vLLM's flags (else vLLM 0.33.0's list)."""
    from .claims import row
    from .engines.vllm import known_flags

    version, flags = known_flags()
    kept = "--swap-space" in flags
    return row(
        "s002-swap-space",
        "a flag" if kept else "flag removed",
        f"vLLM {version}",
        kept,
        f"vLLM {version}'s own --help {'lists' if kept else 'has no'} --swap-space; vLLM 0.33.0 answers `unrecognized "
        "arguments: --swap-space 8` (its real output is in tests/fixtures/vllm/)",
    )
