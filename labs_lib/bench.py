"""Benchmark an OpenAI-compatible endpoint at several load levels (the `bench` command's library side)."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from .endpoints import Endpoint
from .errors import BadInput, LabsError, positive_int
from .lengths import trace_requests
from .load import SLO, LoadResult, run_conversations, run_load, warm_up
from .prompts import PromptFactory, engine_tokenizer
from .slo_capacity import SLOCapacity, slo_capacity
from .timing import RequestSpec

RESULT_KEYS = (
    "concurrency",
    "request_rate",
    "completed",
    "failed",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "total_input_tokens",
    "total_output_tokens",
    "mean_ttft_ms",
    "p50_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p50_tpot_ms",
    "p90_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "mean_e2e_ms",
    "p50_e2e_ms",
    "p99_e2e_ms",
    "tokens_estimated",
    "errors",
)


def result_row(result: LoadResult) -> dict:
    """The columns `bench` reports for one load level."""
    row = {**result.row(), "errors": result.summary.errors}
    return {k: row.get(k) for k in RESULT_KEYS}


def int_list(what: str, text: str) -> list[int]:
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise BadInput(what, text, "allowed: comma-separated integers >= 1, e.g. 1,4,8")
    return [positive_int(what, p, maximum=100_000) for p in parts]


def discover_model(endpoint: Endpoint) -> str:
    """The first model id the endpoint lists (for servers that serve one model)."""
    try:
        resp = httpx.get(
            endpoint.base_url + "/models", headers=endpoint.headers(), timeout=15, trust_env=not endpoint.is_loopback
        )
        resp.raise_for_status()
        return resp.json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise LabsError(
            f"no --model given and {endpoint.base_url}/models did not list one ({type(exc).__name__}); pass --model"
        ) from None


def tokenizer_for(endpoint: Endpoint):
    """The server's tokenizer when it has llama.cpp's /tokenize, else None (word-based prompts)."""
    try:
        tok = engine_tokenizer(endpoint.root_url, endpoint.headers(), timeout_s=5)
        tok("probe")
        return tok
    except (httpx.HTTPError, KeyError, ValueError, TypeError):
        return None


def check_turns(turns: int, rate: float | None, shared_prefix_tokens: int, lengths: str | None = None) -> None:
    """Multi-turn runs are closed loop (each turn waits for its answer) and carry no separate system prompt; lengths
    drawn from a trace replace the fixed prompt and output lengths, with no system prompt and one turn."""
    if turns > 1 and (rate is not None or shared_prefix_tokens):
        what = "--rate" if rate is not None else "--shared-prefix-tokens"
        raise BadInput("--turns", turns, f"allowed with --concurrency alone, not with {what} (each turn waits for its answer)")
    if lengths is not None and (turns > 1 or shared_prefix_tokens):
        what = "--turns" if turns > 1 else "--shared-prefix-tokens"
        raise BadInput("--lengths", lengths, f"allowed without {what} (a trace gives each request's whole prompt)")


async def bench(
    endpoint: Endpoint,
    *,
    concurrency: list[int] | None,
    rate: float | None,
    requests: int,
    prompt_tokens: int,
    max_tokens: int,
    seed: int = 0,
    progress: bool = True,
    ignore_eos: bool = True,
    repeats: int = 1,
    shared_prefix_tokens: int = 0,
    prefix_groups: int = 1,
    turns: int = 1,
    lengths: str | None = None,
    length_scale: float = 1.0,
) -> list[LoadResult]:
    """Each load level run `repeats` times in a row (new prompts, and new arrival times open loop, each time).
    With `shared_prefix_tokens`, each prompt follows one of `prefix_groups` system prompts, taken in turn. With
    `turns` > 1, `requests` conversations of that many questions (closed loop only: load.run_conversations). With
    `lengths` (a trace in data/length_distributions.json), each request's prompt and output lengths are drawn from
    it, scaled by `length_scale`, instead of prompt_tokens and max_tokens."""
    check_turns(turns, rate, shared_prefix_tokens, lengths)
    factory = PromptFactory(tokenizer_for(endpoint), seed=seed)
    await warm_up(endpoint)
    results = []
    levels: list[int | None] = list(concurrency) if concurrency else [None]  # None: one open-loop run at `rate`
    for level in levels:
        for repeat in range(repeats):
            if turns > 1:
                label = f"c={level} ({turns} turns)" + (f" run {repeat + 1}/{repeats}" if repeats > 1 else "")
                talks = [
                    [RequestSpec(p, max_tokens, ignore_eos=ignore_eos) for p in c]
                    for c in factory.conversations(requests, turns, prompt_tokens)
                ]
                settings: dict[str, Any] = {
                    "prompt_tokens": prompt_tokens,
                    "max_tokens": max_tokens,
                    "repeat": repeat,
                    "turns": turns,
                }
                results.append(
                    await run_conversations(
                        endpoint, talks, concurrency=level or 1, progress=progress, desc=label, settings=settings
                    )
                )
                continue
            specs, settings = _one_turn_specs(
                factory,
                requests,
                prompt_tokens,
                max_tokens,
                ignore_eos,
                shared_prefix_tokens,
                prefix_groups,
                lengths,
                length_scale,
                seed + repeat,
            )
            settings["repeat"] = repeat
            label = (f"c={level}" if level else f"rate={rate}/s") + (f" run {repeat + 1}/{repeats}" if repeats > 1 else "")
            results.append(
                await run_load(
                    endpoint,
                    specs,
                    concurrency=level,
                    rate=rate,
                    seed=seed + repeat,
                    progress=progress,
                    desc=label,
                    settings=settings,
                )
            )
    return results


def _one_turn_specs(
    factory: PromptFactory,
    requests: int,
    prompt_tokens: int,
    max_tokens: int,
    ignore_eos: bool,
    shared_prefix_tokens: int,
    prefix_groups: int,
    lengths: str | None,
    length_scale: float,
    seed: int,
) -> tuple[list[RequestSpec], dict[str, Any]]:
    """One load level's requests (fixed lengths after optional system prompts, or lengths drawn from a trace) and
    the settings that describe them."""
    if lengths is not None:
        specs = trace_requests(factory, lengths, requests, seed=seed, scale=length_scale, ignore_eos=ignore_eos)
        return specs, {"prompt_tokens": None, "max_tokens": None, "lengths": lengths, "length_scale": length_scale}
    prompts = factory.prompts(requests, prompt_tokens, shared_prefix_tokens=shared_prefix_tokens, prefix_groups=prefix_groups)
    settings: dict[str, Any] = {"prompt_tokens": prompt_tokens, "max_tokens": max_tokens}
    if shared_prefix_tokens:
        settings |= {"shared_prefix_tokens": shared_prefix_tokens, "prefix_groups": prefix_groups}
    return [RequestSpec(p, max_tokens, ignore_eos=ignore_eos) for p in prompts], settings


INTERVAL_METRICS = ("output_throughput", "request_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms")


def repeat_intervals(
    runs: list[LoadResult], *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict[str, tuple[float | None, float | None, float | None]]:
    """One load level run several times: each metric of INTERVAL_METRICS over all the runs together (throughput:
    tokens or requests of all runs over their summed durations; percentiles: over the requests of all runs pooled),
    with a `confidence` interval from a cluster bootstrap that resamples whole runs, not requests: requests of one
    run share its moment (the machine's load then), so they are not independent draws. (point, low, high); low and
    high are None for a single run, which has no spread to resample."""
    pooled = _pooled(runs).summary.flat()
    if len(runs) < 2:
        return {m: (pooled.get(m), None, None) for m in INTERVAL_METRICS}
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {m: [] for m in INTERVAL_METRICS}
    for _ in range(resamples):
        flat = _pooled([runs[i] for i in rng.integers(0, len(runs), len(runs))]).summary.flat()
        for m in INTERVAL_METRICS:
            if flat.get(m) is not None:
                draws[m].append(flat[m])
    tail = (1 - confidence) / 2 * 100
    out: dict[str, tuple[float | None, float | None, float | None]] = {}
    for m in INTERVAL_METRICS:
        low, high = np.percentile(draws[m], [tail, 100 - tail]) if draws[m] else (None, None)
        out[m] = (pooled.get(m), None if low is None else float(low), None if high is None else float(high))
    return out


def _pooled(runs: list[LoadResult]) -> LoadResult:
    return LoadResult([r for run in runs for r in run.records], sum(run.duration_s for run in runs))


async def capacity(
    endpoint: Endpoint,
    slo: SLO,
    *,
    percentile: float,
    requests: int,
    prompt_tokens: int,
    max_tokens: int,
    max_rps: float,
    start_rps: float = 0.5,
    seed: int = 0,
    progress: bool = True,
) -> SLOCapacity:
    """`bench --slo-capacity`: the SLO capacity search (labs_lib.slo_capacity) with bench's prompts, fresh ones per
    rate (a repeated prompt would be a prefix-cache hit)."""
    factory = PromptFactory(tokenizer_for(endpoint), seed=seed)
    await warm_up(endpoint)

    def make_specs(n: int) -> list[RequestSpec]:
        return [RequestSpec(p, max_tokens, ignore_eos=True) for p in factory.prompts(n, prompt_tokens)]

    return await slo_capacity(
        endpoint,
        make_specs,
        slo,
        percentile=percentile,
        requests=requests,
        start_rps=start_rps,
        max_rps=max_rps,
        seed=seed,
        progress=progress,
    )
