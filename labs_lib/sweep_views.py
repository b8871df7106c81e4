"""Tables over sweep results (load_results DataFrames), for either engine."""

from __future__ import annotations

import pandas as pd

from .engines import engine_class
from .engines.metrics import cache_hit_rate

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


def kv_pool_table(df: pd.DataFrame, engine: str) -> pd.DataFrame:
    """What the engine allocated for each configuration (beside the lab-01 math where the engine's layout is modelled)."""
    ok = df[df["status"] == "ok"]
    return pd.DataFrame([engine_class(engine).kv_pool_row(r.to_dict()) for _, r in ok.iterrows()])


def cache_hit_table(df: pd.DataFrame, engine: str) -> pd.DataFrame:
    """Prompt tokens served from the cache, per configuration, from the engine's own counters."""
    names = engine_class(engine).counters
    ok = df[df["status"] == "ok"]
    hits = ok.get(f"metrics.{names.cached}", pd.Series(0.0, index=ok.index)).fillna(0.0)
    prompt = ok.get(f"metrics.{names.prompt}", pd.Series(0.0, index=ok.index)).fillna(0.0)
    out = pd.DataFrame({"config": label(ok)})
    if "level.concurrency" in ok and ok["level.concurrency"].nunique() > 1:  # compare configurations at the same load
        out["concurrency"] = ok["level.concurrency"]
    out["prompt tokens (cache hits included)" if names.prompt_includes_cached else "prompt tokens computed"] = prompt
    out["prompt tokens from cache"] = hits
    out["hit rate"] = [cache_hit_rate(h, q, names.prompt_includes_cached) for h, q in zip(hits, prompt, strict=True)]
    out["TTFT p50"] = ok["summary.p50_ttft_ms"]
    return out.reset_index(drop=True)


def best_by_goodput(df: pd.DataFrame) -> pd.Series | None:
    """The point with the highest goodput (requests/s meeting every SLO)."""
    ok = df[(df["status"] == "ok") & df.get("summary.goodput", pd.Series(dtype=float)).notna()]
    if ok.empty:
        return None
    return load_table(ok).sort_values(["goodput req/s", "tok/s"], ascending=False).iloc[0]


def pareto_table(table: pd.DataFrame) -> pd.DataFrame:
    """Every measured point (load_table rows, an `experiment` column beside) at tokens/s per user against tokens/s
    per device, the axes of `vllm bench sweep plot_pareto` and of InferenceMAX's charts: per user = 1000 / TPOT p50
    (the decode speed one stream sees), per device = output tokens/s of the whole run (one engine, one device).
    `on_front` marks the points no other point beats on both axes: the configurations worth choosing among."""
    out = table.dropna(subset=["TPOT p50", "tok/s"]).copy()
    out = out[out["TPOT p50"] > 0]
    out["tok/s per user"] = 1000 / out["TPOT p50"]
    out["tok/s per device"] = out["tok/s"]
    users, device = out["tok/s per user"].to_numpy(), out["tok/s per device"].to_numpy()
    out["on_front"] = [
        not ((users >= u) & (device >= d) & ((users > u) | (device > d))).any() for u, d in zip(users, device, strict=True)
    ]
    return out.sort_values("tok/s per user").reset_index(drop=True)
