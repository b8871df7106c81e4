"""Lab 02's measurements as functions: the naive snippets vs the harness, sweeps over prompt
length, max_tokens and concurrency. Each returns a DataFrame."""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import naive
from .endpoints import Endpoint
from .engines.metrics import delta, scrape, token_counts
from .load import LoadResult, run_load
from .prompts import PromptFactory
from .timing import RequestRecord, RequestSpec, StreamTimer, measure


def traced_requests(
    endpoint: Endpoint, prompts: list[str], max_tokens: int, extra: dict | None = None
) -> list[tuple[RequestRecord, StreamTimer]]:
    """Requests sent one after another, keeping every SSE line with its arrival time."""
    return [
        measure(endpoint, RequestSpec(p, max_tokens, ignore_eos=True, extra=extra or {}), request_id=i, keep_trace=True)
        for i, p in enumerate(prompts)
    ]


def naive_vs_harness(traced: list[tuple[RequestRecord, StreamTimer]]) -> pd.DataFrame:
    """Each article snippet applied to the same streams as the harness, with its error."""
    rows = []
    for rec, timer in traced:
        if not rec.ok:
            continue
        truth = {
            "ttft_ms": rec.ttft_ms,
            "output_tokens": rec.output_tokens,
            "decode_tokens_per_s": 1000 / rec.tpot_ms if rec.tpot_ms else None,
        }
        rows.append({"method": "harness (vllm bench serve definitions)", "request": rec.request_id, **truth})
        for name, fn in naive.METHODS.items():
            got = fn(timer.trace, timer.end_s)
            rows.append(
                {
                    "method": name,
                    "request": rec.request_id,
                    **got,
                    **{
                        f"{k}_error_%": (100 * (got[k] - truth[k]) / truth[k]) if got[k] is not None and truth[k] else None
                        for k in truth
                    },
                }
            )
    df = pd.DataFrame(rows)
    return df.groupby("method", sort=False).median(numeric_only=True).drop(columns="request").reset_index()


def _one_by_one(endpoint: Endpoint, specs: list[RequestSpec]) -> list[RequestRecord]:
    return [measure(endpoint, s, request_id=i)[0] for i, s in enumerate(specs)]


def prompt_length_sweep(
    endpoint: Endpoint,
    factory: PromptFactory,
    lengths: list[int],
    *,
    repeats: int = 3,
    max_tokens: int = 8,
    extra: dict | None = None,
) -> pd.DataFrame:
    """Median TTFT (prefill) and TPOT (decode with that much context) against prompt length, one request at a time."""
    rows = []
    for n in lengths:
        recs = _one_by_one(
            endpoint, [RequestSpec(p, max_tokens, ignore_eos=True, extra=extra or {}) for p in factory.prompts(repeats, n)]
        )
        ok = [r for r in recs if r.ok]
        rows.append(
            {
                "prompt_tokens_target": n,
                "prompt_tokens": int(np.median([r.prompt_tokens for r in ok])) if ok else None,
                "ttft_ms": float(np.median([r.ttft_ms for r in ok])) if ok else None,
                # every decode step reads the whole cache: TPOT grows with the context, not only with the output
                "tpot_ms": float(np.median([r.tpot_ms for r in ok if r.tpot_ms is not None]))
                if any(r.tpot_ms is not None for r in ok)
                else None,
                "server_prompt_ms": float(np.median([r.server_prompt_ms for r in ok if r.server_prompt_ms is not None]))
                if any(r.server_prompt_ms is not None for r in ok)
                else None,
                "failed": len(recs) - len(ok),
            }
        )
    return pd.DataFrame(rows)


def max_tokens_sweep(
    endpoint: Endpoint,
    factory: PromptFactory,
    max_tokens_list: list[int],
    *,
    prompt_tokens: int = 64,
    repeats: int = 3,
    extra: dict | None = None,
) -> pd.DataFrame:
    """Median TPOT and E2E against max_tokens: decode cost per token stays flat, E2E grows."""
    rows = []
    for m in max_tokens_list:
        recs = _one_by_one(
            endpoint, [RequestSpec(p, m, ignore_eos=True, extra=extra or {}) for p in factory.prompts(repeats, prompt_tokens)]
        )
        ok = [r for r in recs if r.ok and r.tpot_ms is not None]
        rows.append(
            {
                "max_tokens": m,
                "output_tokens": int(np.median([r.output_tokens for r in ok])) if ok else None,
                "tpot_ms": float(np.median([r.tpot_ms for r in ok])) if ok else None,
                "e2e_ms": float(np.median([r.e2e_ms for r in ok])) if ok else None,
                "failed": len(recs) - len(ok),
            }
        )
    return pd.DataFrame(rows)


async def concurrency_sweep(
    endpoint: Endpoint,
    factory: PromptFactory,
    levels: list[int],
    *,
    requests: int,
    prompt_tokens: int,
    max_tokens: int,
    engine=None,
    progress: bool = True,
) -> tuple[pd.DataFrame, list[LoadResult], pd.DataFrame]:
    """Closed-loop runs at each concurrency. Returns (summary per level, the runs, token check).

    With `engine` (the Engine serving the endpoint, or its kind), /metrics is scraped around each run and
    the engine's token counters are set beside the harness's counts."""
    runs, checks = [], []
    for level in levels:
        specs = [RequestSpec(p, max_tokens, ignore_eos=True) for p in factory.prompts(requests, prompt_tokens)]
        before = scrape(endpoint.root_url, endpoint.headers()) if engine else None
        run = await run_load(
            endpoint,
            specs,
            concurrency=level,
            progress=progress,
            desc=f"c={level}",
            settings={"prompt_tokens": prompt_tokens, "max_tokens": max_tokens},
        )
        runs.append(run)
        if engine:
            counted = token_counts(delta(before, scrape(endpoint.root_url, endpoint.headers())), engine)
            ok = [r for r in run.records if r.ok]
            checks.append(
                {
                    "concurrency": level,
                    "harness_prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
                    "engine_prompt_tokens": counted["prompt_tokens"],
                    "harness_output_tokens": sum(r.output_tokens or 0 for r in ok),
                    "engine_output_tokens": counted["output_tokens"],
                    "failed": len(run.records) - len(ok),
                }
            )
    table = pd.DataFrame(
        [
            {
                k: r.row()[k]
                for k in (
                    "concurrency",
                    "completed",
                    "failed",
                    "output_throughput",
                    "request_throughput",
                    "p50_ttft_ms",
                    "p99_ttft_ms",
                    "p50_tpot_ms",
                    "p99_tpot_ms",
                    "p50_itl_ms",
                    "p50_e2e_ms",
                )
            }
            for r in runs
        ]
    )
    return table, runs, pd.DataFrame(checks)
