"""Labs 02 and 03's measurements as functions: the naive snippets vs the harness, sweeps over prompt
length, max_tokens and concurrency. Each returns a DataFrame."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pandas as pd

from . import naive
from .endpoints import Endpoint
from .engines.metrics import delta, scrape, token_counts
from .lengths import length_distribution, trace_requests
from .load import Arrivals, ClosedLoop, LoadResult, arrival_times_s, closed_loop, percentile_ms, run_load
from .prompts import PromptFactory
from .sse import split_lines
from .timing import TIMEOUT_S, TRANSPORT_ERRORS, RequestRecord, RequestSpec, StreamTimer, measure


def traced_requests(
    endpoint: Endpoint, prompts: list[str], max_tokens: int, extra: dict | None = None
) -> list[tuple[RequestRecord, StreamTimer]]:
    """Requests sent one after another, keeping every SSE line with its arrival time."""
    return [
        measure(endpoint, RequestSpec(p, max_tokens, ignore_eos=True, extra=extra or {}), request_id=i, keep_trace=True)
        for i, p in enumerate(prompts)
    ]


def unstreamed_requests(
    endpoint: Endpoint, prompts: list[str], max_tokens: int, extra: dict | None = None, timeout_s: float = TIMEOUT_S
) -> list[tuple[list[tuple[float, bytes]], float]]:
    """Seed 003's request: the harness's (same prompt, length and sampling) without "stream" and "stream_options",
    as the seed's body has neither. Each answer's lines as aiohttp yields them, with their arrival (seconds after
    sending), and the total time."""
    replays: list[tuple[list[tuple[float, bytes]], float]] = []
    with httpx.Client(timeout=timeout_s, trust_env=not endpoint.is_loopback) as client:
        for p in prompts:
            body = RequestSpec(p, max_tokens, ignore_eos=True, extra=extra or {}, include_usage=False).body(endpoint.model)
            del body["stream"]
            lines, partial = [], b""
            start = time.perf_counter()
            try:
                with client.stream("POST", endpoint.base_url + "/chat/completions", json=body, headers=endpoint.headers()) as r:
                    if r.status_code != 200:  # a failed request is no answer to time (the seed would count its lines)
                        replays.append(([], time.perf_counter() - start))
                        continue
                    for data in r.iter_bytes():
                        t = time.perf_counter() - start
                        complete, partial = split_lines(partial, data)
                        lines += [(t, line + b"\n") for line in complete]  # as aiohttp yields them: newline kept
            except TRANSPORT_ERRORS:
                replays.append(([], time.perf_counter() - start))
                continue
            end_s = time.perf_counter() - start
            if partial:  # aiohttp yields the last line without its newline at the end of the body
                lines.append((end_s, partial))
            replays.append((lines, end_s))
    return replays


def naive_vs_harness(
    traced: list[tuple[RequestRecord, StreamTimer]], unstreamed: list[tuple[list[tuple[float, bytes]], float]] | None = None
) -> pd.DataFrame:
    """Each article snippet replayed as written (naive.py), with its error against the harness: the streamed ones on
    the harness's own streams as the seed receives them, seed 003 on `unstreamed` (the same prompts, in order)."""
    rows = []
    for i, (rec, timer) in enumerate(traced):
        if not rec.ok:
            continue
        truth = {
            "ttft_ms": rec.ttft_ms,
            "output_tokens": rec.output_tokens,
            "decode_tokens_per_s": 1000 / rec.tpot_ms if rec.tpot_ms else None,
        }
        rows.append({"method": "harness (vllm bench serve definitions)", "request": rec.request_id, **truth})
        seen = naive.as_the_seed_receives(timer.trace)
        end_s = timer.end_s if timer.end_s is not None else (rec.e2e_ms or 0.0) / 1000  # set once the stream closed
        results = {name: fn(seen, end_s) for name, fn in naive.METHODS.items()}
        if unstreamed is not None:
            results["seed 003: unstreamed lines"] = naive.seed003_unstreamed(*unstreamed[i])
        for name, got in results.items():
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


def chars_per_token(
    endpoint: Endpoint, prompts: dict[str, str], texts: dict[str, str], count_tokens=None, max_tokens: int = 128
) -> pd.DataFrame:
    """Characters per token by language, two ways: each prompt's reply (greedy, stopping where the model stops)
    against usage.completion_tokens, and a fixed paragraph per language counted by the engine's own tokenizer
    (`count_tokens(text) -> int`; left out without one, e.g. for a remote endpoint). Each with seed 000's len(text) / 1.5 estimate and its error."""
    rows = []

    def row(language: str, what: str, text: str, tokens: int | None) -> dict:
        chars = len(text)
        return {
            "language": language,
            "text": what,
            "tokens": tokens,
            "characters": chars,
            "chars_per_token": chars / tokens if tokens else None,
            "len/1.5 error_%": 100 * (chars / 1.5 - tokens) / tokens if tokens else None,
            # the share of CJK ideographs: a small model's reply may mix in Latin
            "cjk_share": sum("\u4e00" <= ch <= "\u9fff" for ch in text) / chars if chars else None,
            "sample": text[:40],
        }

    for language, prompt in prompts.items():
        rec, _ = measure(endpoint, RequestSpec(prompt, max_tokens))
        rows.append(
            row(language, "the model's reply", rec.text, rec.output_tokens if rec.ok and not rec.tokens_estimated else None)
        )
    for language, text in texts.items() if count_tokens else ():
        rows.append(row(language, "a fixed paragraph", text, count_tokens(text)))
    return pd.DataFrame(rows)


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
                "max_tokens": max_tokens,
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


def prefill_slope(by_prompt: pd.DataFrame) -> tuple[float | None, str]:
    """(ms of TTFT per prompt token, fitted over prompt_length_sweep's rows; or None) and a line saying what it
    means: the prefill rate 1000 / slope, or why there is none. On a GPU a small model prefills a few hundred
    tokens in about the time the rest of a request takes, so TTFT may not grow measurably over short prompts: a
    slope at or below zero is noise, not a rate, and nothing divides by it."""
    rows = by_prompt.dropna(subset=["prompt_tokens", "ttft_ms"])
    if rows["prompt_tokens"].nunique() < 2:
        return None, "no prefill rate: TTFT was measured at fewer than two prompt lengths"
    slope = float(np.polyfit(rows["prompt_tokens"], rows["ttft_ms"], 1)[0])
    if slope <= 0:
        return None, (
            f"no prefill rate: TTFT did not grow with the prompt ({slope:+.4f} ms per token between "
            f"{rows['prompt_tokens'].min():,} and {rows['prompt_tokens'].max():,} tokens): prefill is too fast here "
            "to show over these lengths; give longer prompt_lengths"
        )
    return slope, f"prefill: about {1000 / slope:,.0f} prompt tokens/s"


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
    load_generator: ClosedLoop = closed_loop,
) -> tuple[pd.DataFrame, list[LoadResult], pd.DataFrame]:
    """Closed-loop runs at each concurrency, sent by `load_generator` (the participant's, or the library's).
    Returns (summary per level, the runs, token check).

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
            load_generator=load_generator,
        )
        runs.append(run)
        if engine and before is not None:
            run.engine_delta = delta(before, scrape(endpoint.root_url, endpoint.headers()))
            counted = token_counts(run.engine_delta, engine)
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
                    "p90_ttft_ms",
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


async def trace_beside_fixed(
    endpoint: Endpoint,
    factory: PromptFactory,
    fixed: LoadResult,
    trace: str,
    *,
    cap_tokens: int,
    progress: bool = True,
    load_generator: ClosedLoop = closed_loop,
) -> tuple[pd.DataFrame, LoadResult]:
    """The closed-loop load of `fixed` (a concurrency_sweep run: its concurrency, its number of requests) again, each
    request's prompt and output lengths drawn from a recorded trace (lengths.trace_requests) scaled so that a request's
    mean prompt + output tokens equal the fixed run's: the same work per request on average, spread as production
    spreads it; each request at most `cap_tokens` in all (the engine's context per sequence), sent by `load_generator`.
    Returns one row per run (the lengths sent, latency p50/p99 in ms, output tokens/s) and the trace's run."""
    scale = (fixed.settings["prompt_tokens"] + fixed.settings["max_tokens"]) / length_distribution(trace).mean_tokens()
    specs = trace_requests(factory, trace, len(fixed.records), scale=scale, cap=cap_tokens)
    level = fixed.settings["concurrency"]
    settings = {"lengths": trace, "length_scale": scale, "length_cap": cap_tokens}
    desc = f"{trace} c={level}"
    run = await run_load(
        endpoint, specs, concurrency=level, progress=progress, desc=desc, settings=settings, load_generator=load_generator
    )
    rows = []
    for name, r in (("fixed", fixed), (trace, run)):
        ok, summary = [x for x in r.records if x.ok], r.summary
        prompt, output = [x.prompt_tokens or 0 for x in ok], [x.output_tokens or 0 for x in ok]
        row: dict = {"lengths": name, "requests": len(r.records), "failed": summary.failed}
        for label, tokens in (("prompt", prompt), ("output", output)):  # no request succeeded: NaN, not an error
            row |= {f"{label} mean": float(np.mean(tokens)) if tokens else np.nan, f"{label} max": max(tokens, default=np.nan)}
        for metric in ("ttft", "tpot", "e2e"):
            stats = getattr(summary, f"{metric}_ms")
            row |= {f"{metric.upper()} p50": stats.p50, f"{metric.upper()} p99": stats.p99}
        rows.append(row | {"output tok/s": summary.output_throughput})
    return pd.DataFrame(rows), run


async def static_vs_continuous(
    endpoint: Endpoint,
    factory: PromptFactory,
    *,
    slots: int,
    requests: int,
    prompt_tokens: int,
    max_tokens_range: tuple[int, int],
    seed: int = 0,
    extra: dict | None = None,
    load_generator: ClosedLoop = closed_loop,
) -> pd.DataFrame:
    """The same requests (output lengths drawn uniformly from max_tokens_range), all waiting at time 0, served
    `slots` at a time two ways. Static batching: a batch is sent and the next waits until its longest request is
    done (what a server without continuous batching does). Continuous: a request starts as soon as any finishes
    (sent by `load_generator`).
    Rows per mode: the time to finish them all (s), output tokens/s, and each request's completion time counted
    from time 0 (p50, p99, ms)."""
    lo, hi = max_tokens_range
    lengths = np.random.default_rng(seed).integers(lo, hi + 1, requests)
    prompts = factory.prompts(requests, prompt_tokens)
    # `extra` (the engine's uncached_body) keeps the second mode from reading the first one's prompts from cache
    specs = [RequestSpec(p, int(m), ignore_eos=True, extra=extra or {}) for p, m in zip(prompts, lengths, strict=True)]
    rows = []
    start = time.perf_counter()
    continuous = await run_load(endpoint, specs, concurrency=slots, progress=False, load_generator=load_generator)
    done = [(r.sent_s * 1000 + (r.e2e_ms or 0.0), r.output_tokens or 0) for r in continuous.records if r.ok]
    rows.append(("continuous", time.perf_counter() - start, done, len(continuous.records)))
    start, done = time.perf_counter(), []
    for i in range(0, requests, slots):
        offset_ms = (time.perf_counter() - start) * 1000
        batch = await run_load(endpoint, specs[i : i + slots], concurrency=slots, progress=False)
        done += [(offset_ms + r.sent_s * 1000 + (r.e2e_ms or 0.0), r.output_tokens or 0) for r in batch.records if r.ok]
    rows.append(("static batches", time.perf_counter() - start, done, requests))

    def summary(mode: str, wall_s: float, done: list[tuple[float, int]], sent: int) -> dict:
        completion_ms = [t for t, _ in done]
        return {
            "mode": mode,
            "requests": sent,
            "completed": len(done),
            "all_done_s": wall_s,
            "output_tok_s": sum(n for _, n in done) / wall_s,
            "p50_completion_ms": percentile_ms(completion_ms, 50),  # the one percentile definition (load.py)
            "p99_completion_ms": percentile_ms(completion_ms, 99),
        }

    return pd.DataFrame([summary(*row) for row in rows])


async def rate_sweep(
    endpoint: Endpoint,
    factory: PromptFactory,
    rates: list[float],
    *,
    requests: int,
    prompt_tokens: int,
    max_tokens: int,
    seed: int = 0,
    extra: dict | None = None,
    arrivals: Arrivals = arrival_times_s,
) -> pd.DataFrame:
    """Open loop: requests arrive at each `rate` (per second, Poisson: exponential gaps, seeded, drawn by
    `arrivals`), whether or not the server keeps up. Below its capacity TTFT stays flat; above it the queue, and TTFT with it, grows for as long as
    the run lasts. (A closed loop cannot show this: it waits for the server before sending more.)"""
    rows = []
    for rate in rates:
        specs = [RequestSpec(p, max_tokens, ignore_eos=True, extra=extra or {}) for p in factory.prompts(requests, prompt_tokens)]
        run = await run_load(endpoint, specs, rate=rate, seed=seed, progress=False, arrivals=arrivals)
        s = run.summary
        rows.append(
            {
                "rate_req_s": rate,
                "achieved_req_s": s.request_throughput,
                "completed": s.completed,
                "failed": s.failed,
                "p50_ttft_ms": s.ttft_ms.p50,
                "p99_ttft_ms": s.ttft_ms.p99,
                "p50_e2e_ms": s.e2e_ms.p50,
            }
        )
    return pd.DataFrame(rows)
