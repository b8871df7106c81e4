"""`python -m labs_lib bench`: TTFT, TPOT, ITL and throughput of an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from .endpoints import Endpoint, add_target_arguments, chosen_target, open_endpoint
from .errors import BadInput, LabsError, positive_int, positive_number
from .load import LoadResult, run_blocking, run_load, warm_up
from .prompts import PromptFactory, engine_tokenizer
from .timing import RequestSpec

RESULT_KEYS = ("concurrency", "request_rate", "completed", "failed", "duration_s", "request_throughput", "output_throughput",
               "total_token_throughput", "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "p50_ttft_ms",
               "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
               "p50_itl_ms", "p99_itl_ms", "mean_e2e_ms", "p50_e2e_ms", "p99_e2e_ms", "tokens_estimated", "errors")


def int_list(what: str, text: str) -> list[int]:
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise BadInput(what, text, "allowed: comma-separated integers >= 1, e.g. 1,4,8")
    return [positive_int(what, p, maximum=100_000) for p in parts]


def discover_model(endpoint: Endpoint) -> str:
    """The first model id the endpoint lists (for servers that serve one model)."""
    try:
        resp = httpx.get(endpoint.base_url + "/models", headers=endpoint.headers(), timeout=15, trust_env=not endpoint.is_loopback)
        resp.raise_for_status()
        return resp.json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise LabsError(f"no --model given and {endpoint.base_url}/models did not list one ({type(exc).__name__}); pass --model") from None


def tokenizer_for(endpoint: Endpoint):
    """The server's tokenizer when it has llama.cpp's /tokenize, else None (word-based prompts)."""
    try:
        tok = engine_tokenizer(endpoint.root_url, endpoint.headers(), timeout_s=5)
        tok("probe")
        return tok
    except (httpx.HTTPError, KeyError, ValueError, TypeError):
        return None


async def bench(endpoint: Endpoint, *, concurrency: list[int] | None, rate: float | None, requests: int, prompt_tokens: int,
                max_tokens: int, seed: int = 0, progress: bool = True, ignore_eos: bool = True) -> list[LoadResult]:
    factory = PromptFactory(tokenizer_for(endpoint), seed=seed)
    await warm_up(endpoint)
    results = []
    for level in (concurrency or [None]):
        specs = [RequestSpec(p, max_tokens, ignore_eos=ignore_eos) for p in factory.prompts(requests, prompt_tokens)]
        label = f"c={level}" if level else f"rate={rate}/s"
        results.append(await run_load(endpoint, specs, concurrency=level, rate=rate, seed=seed, progress=progress, desc=label,
                                      settings={"prompt_tokens": prompt_tokens, "max_tokens": max_tokens}))
    return results


def cmd_bench(args: argparse.Namespace) -> int:
    target = chosen_target(args)
    concurrency = int_list("--concurrency", args.concurrency) if args.concurrency else None
    rate = positive_number("--rate", args.rate) if args.rate is not None else None
    if concurrency is None and rate is None:
        concurrency = [1]
    requests = positive_int("--requests", args.requests, maximum=1_000_000)
    prompt_tokens = positive_int("--prompt-tokens", args.prompt_tokens, maximum=1_000_000)
    max_tokens = positive_int("--max-tokens", args.max_tokens, maximum=1_000_000)
    parallel = max(concurrency or [4])
    if target == "taotoken" and not args.api_key_env:
        from .keys import read_key

        read_key("TAOTOKEN_API_KEY", required=True)
    ctx = parallel * (prompt_tokens + max_tokens + 64)
    with open_endpoint(target, model=args.model, api_key_env=args.api_key_env, engine=args.engine,
                       parallel=min(parallel, 16), ctx=ctx) as (endpoint, engine):
        if endpoint.model is None:
            endpoint = Endpoint(endpoint.name, endpoint.base_url, discover_model(endpoint), endpoint.api_key_env)
        print(f"benchmarking {endpoint.base_url} model {endpoint.model} (key {endpoint.masked_key})", file=sys.stderr)
        results = run_blocking(bench(endpoint, concurrency=concurrency, rate=rate, requests=requests, prompt_tokens=prompt_tokens,
                                     max_tokens=max_tokens, progress=not args.json))
    rows = [{k: r.summary.get(k) for k in RESULT_KEYS} for r in results]
    out = {"endpoint": endpoint.describe(), "settings": {"requests": requests, "prompt_tokens": prompt_tokens,
           "max_tokens": max_tokens, "concurrency": concurrency, "request_rate": rate}, "results": rows}
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, default=str))
        for r in results:
            r.save(path.with_name(f"{path.stem}-{'c' + str(r.settings['concurrency']) if r.settings['concurrency'] else 'rate'}"))
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(f"{'conc':>5} {'rate':>6} {'ok':>4} {'fail':>4} {'tok/s':>8} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>7} {'ITL p50':>8}")
        for r in rows:
            def f(v, w=8):
                return f"{v:>{w}.1f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>{w}}"
            print(f"{str(r['concurrency'] or '-'):>5} {str(r['request_rate'] or '-'):>6} {r['completed']:>4} {r['failed']:>4} "
                  f"{f(r['output_throughput'])} {f(r['p50_ttft_ms'], 9)} {f(r['p99_ttft_ms'])} {f(r['p50_tpot_ms'], 9)} "
                  f"{f(r['p99_tpot_ms'], 7)} {f(r['p50_itl_ms'])}")
        for r in rows:
            for error, count in (r["errors"] or {}).items():
                print(f"  {count} failed: {error}")
    completed = sum(r["completed"] for r in rows)
    if completed == 0:
        first = next((e for r in rows for e in (r["errors"] or {})), "unknown")
        print(f"error: no request completed; first error: {first}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="TTFT, TPOT, ITL and throughput of an OpenAI-compatible endpoint")
    add_target_arguments(p, endpoint_help="local (start the embedded engine), taotoken, or vllm (localhost:8000)",
                         model_help="model id (default: the endpoint's, or the first it lists)")
    p.add_argument("--concurrency", help="comma-separated levels, closed loop (default 1)")
    p.add_argument("--rate", help="requests per second, open loop (Poisson arrivals)")
    p.add_argument("--requests", default=16, help="requests per level (default 16)")
    p.add_argument("--prompt-tokens", default=128, help="prompt length in tokens (default 128)")
    p.add_argument("--max-tokens", default=64, help="output tokens per request (default 64)")
    p.add_argument("--engine", default="auto", help="for --endpoint local: auto, llamacpp or vllm")
    p.add_argument("--out", help="write results: FILE.json plus one CSV of requests per level")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

