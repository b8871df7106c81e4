"""Tables over sweep results (load_results DataFrames), for either engine."""

from __future__ import annotations

import pandas as pd

from .kv_math import MIB, llamacpp_layout
from .models import load_model

LOAD_COLUMNS = {"summary.output_throughput": "tok/s", "summary.request_throughput": "req/s", "summary.p50_ttft_ms": "TTFT p50",
                "summary.p99_ttft_ms": "TTFT p99", "summary.p50_tpot_ms": "TPOT p50", "summary.p99_tpot_ms": "TPOT p99",
                "summary.goodput": "goodput req/s", "summary.failed": "failed"}


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


def load_table(df: pd.DataFrame) -> pd.DataFrame:
    """Throughput and latency per configuration and load level."""
    ok = df[df["status"] == "ok"].copy()
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
    return out.reset_index(drop=True)


def failures(df: pd.DataFrame) -> pd.DataFrame:
    bad = df[df["status"] != "ok"]
    return pd.DataFrame({"config": label(df).loc[bad.index], "error": bad["error"]}).reset_index(drop=True)


def kv_pool_table(df: pd.DataFrame, engine: str, model_path: str | None = None) -> pd.DataFrame:
    """What the engine allocated for each configuration, beside the lab-01 math."""
    ok = df[df["status"] == "ok"]
    rows = []
    for _, r in ok.iterrows():
        if engine == "llamacpp":
            spec = load_model(model_path) if model_path else load_model("gemma-3-270m")
            ctx, parallel = int(r["config.ctx"]), int(r.get("config.parallel") or 1)
            layout = llamacpp_layout(spec, ctx, parallel, type_k=r.get("config.kv_cache_dtype") or "f16")
            rows.append({"n_ctx asked": ctx, "slots": parallel, "context per request (logged)": int(r["allocation.n_ctx_seq"]),
                         "KV MiB (logged)": r["allocation.kv_mib"], "KV MiB (lab-01 math)": round(layout.kv_bytes / MIB, 2),
                         "match": f"{layout.kv_bytes / MIB:.2f}" == f"{r['allocation.kv_mib']:.2f}",
                         "engine RSS MiB": round((r.get("memory.engine_rss_bytes") or 0) / MIB, 1)})
        else:
            rows.append({"gpu_memory_utilization": r.get("config.gpu_memory_utilization"),
                         "available KV GiB": r.get("allocation.available_kv_gib"), "KV tokens": r.get("allocation.kv_cache_tokens"),
                         "max concurrency": r.get("allocation.max_concurrency"), "max_model_len": r.get("allocation.max_model_len")})
    return pd.DataFrame(rows)


def cache_hit_table(df: pd.DataFrame, engine: str) -> pd.DataFrame:
    """Prompt tokens served from the cache, per configuration, from the engine's own counters."""
    ok = df[df["status"] == "ok"]
    out = pd.DataFrame({"config": label(ok)})
    if engine == "llamacpp":
        cached = ok.get("metrics.llamacpp:prompt_tokens_cached_total", 0)
        computed = ok.get("metrics.llamacpp:prompt_tokens_total", 0)
        out["prompt tokens computed"] = computed
        out["prompt tokens from cache"] = cached
        out["hit rate"] = cached / (cached + computed)
    else:
        hits, queries = ok.get("metrics.vllm:prefix_cache_hits_total", 0), ok.get("metrics.vllm:prefix_cache_queries_total", 0)
        out["prefix cache queries"], out["hits"] = queries, hits
        out["hit rate"] = hits / queries.where(queries > 0)
    out["TTFT p50"] = ok["summary.p50_ttft_ms"]
    return out.reset_index(drop=True)


def best_by_goodput(df: pd.DataFrame) -> pd.Series | None:
    """The point with the highest goodput (requests/s meeting every SLO)."""
    ok = df[(df["status"] == "ok") & df.get("summary.goodput", pd.Series(dtype=float)).notna()]
    if ok.empty:
        return None
    return load_table(ok).sort_values(["goodput req/s", "tok/s"], ascending=False).iloc[0]
