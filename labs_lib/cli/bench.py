"""`bench`: TTFT, TPOT, ITL and throughput of an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import add_target_arguments, chosen_target


def run(args: argparse.Namespace) -> int:
    from ..bench import bench, discover_model, int_list, repeat_intervals, result_row
    from ..endpoints import Endpoint, open_endpoint
    from ..errors import BadInput, positive_int, positive_number, writable_path
    from ..keys import read_key
    from ..load import run_blocking

    if args.import_vllm_result:
        return _show_vllm_result(args)
    target = chosen_target(args)
    concurrency = int_list("--concurrency", args.concurrency) if args.concurrency else None
    rate = positive_number("--rate", args.rate) if args.rate is not None else None
    if concurrency is None and rate is None:
        concurrency = [1]
    w = _workload(args, rate)  # requests, prompt_tokens, max_tokens, shared_prefix_tokens, prefix_groups, turns
    requests, prompt_tokens, max_tokens = w["requests"], w["prompt_tokens"], w["max_tokens"]
    repeats = positive_int("--repeats", args.repeats, maximum=100)
    out_path = writable_path("--out", args.out) if args.out else None
    if args.slo_capacity and "lengths" in w:
        raise BadInput("--lengths", w["lengths"], "allowed without --slo-capacity (its search sends fixed lengths)")
    capacity_settings = _capacity_settings(args, requests) if args.slo_capacity else None
    parallel = max(concurrency or [4])
    if target == "taotoken" and not args.api_key_env:
        read_key("TAOTOKEN_API_KEY", required=True)
    longest = prompt_tokens + max_tokens
    if "lengths" in w:  # the longest request the trace can give, scaled
        from ..lengths import length_distribution

        trace = length_distribution(w["lengths"])
        longest = int((max(trace.context_tokens) + max(trace.generated_tokens)) * w["length_scale"]) + 2
    ctx = parallel * (w["shared_prefix_tokens"] + w["turns"] * (longest + 16) + 64)  # conversations grow
    with open_endpoint(
        target, model=args.model, api_key_env=args.api_key_env, engine=args.engine, parallel=min(parallel, 16), ctx=ctx
    ) as (endpoint, _engine):
        if endpoint.model is None:
            endpoint = Endpoint(endpoint.name, endpoint.base_url, discover_model(endpoint), endpoint.api_key_env)
        print(f"benchmarking {endpoint.base_url} model {endpoint.model} (key {endpoint.masked_key})", file=sys.stderr)
        if capacity_settings:
            return _capacity(args, endpoint, capacity_settings, requests, prompt_tokens, max_tokens)
        results = run_blocking(bench(endpoint, concurrency=concurrency, rate=rate, progress=not args.json, repeats=repeats, **w))
    rows = [result_row(r) for r in results]
    levels = [results[i : i + repeats] for i in range(0, len(results), repeats)]
    intervals = [{"level": _level(runs[0]), **repeat_intervals(runs)} for runs in levels] if repeats > 1 else []
    out = {
        "endpoint": endpoint.describe(),
        "settings": {
            **w,
            "concurrency": concurrency,
            "request_rate": rate,
            "repeats": repeats,
        },
        "results": rows,
        "intervals": intervals,  # with --repeats: per level, each metric as (all runs, 95% low, high)
    }
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        _print_table(rows)
        _print_intervals(intervals, repeats)
    if out_path:  # after the results are shown: a disk that says no loses the file, not the measurement
        _save(out_path, out, results)
    completed = sum(r["completed"] for r in rows)
    if completed == 0:
        first = next((e for r in rows for e in (r["errors"] or {})), "unknown")
        print(f"error: no request completed; first error: {first}", file=sys.stderr)
        return 1
    return 0


def _capacity_settings(args: argparse.Namespace, requests: int) -> dict:
    """--slo-capacity's settings, checked before any engine starts (one line on a bad one)."""
    from ..errors import positive_number
    from ..load import SLO
    from ..slo_capacity import check_search

    slo = SLO(
        ttft_ms=positive_number("--slo-ttft-ms", args.slo_ttft_ms) if args.slo_ttft_ms is not None else None,
        tpot_ms=positive_number("--slo-tpot-ms", args.slo_tpot_ms) if args.slo_tpot_ms is not None else None,
    )
    settings = {
        "percentile": positive_number("--percentile", args.percentile),
        "start_rps": positive_number("--start-rate", args.start_rate),
        "max_rps": positive_number("--max-rate", args.max_rate),
    }
    check_search(slo, settings["percentile"], requests, settings["start_rps"], settings["max_rps"])
    return {"slo": slo, **settings}


def _capacity(args: argparse.Namespace, endpoint, settings: dict, requests: int, prompt_tokens: int, max_tokens: int) -> int:
    """`--slo-capacity`: the highest open-loop rate meeting the SLO at the percentile, one line per rate tried."""
    from dataclasses import asdict

    from ..bench import capacity
    from ..load import run_blocking

    slo, percentile = settings["slo"], settings["percentile"]
    found = run_blocking(
        capacity(
            endpoint,
            slo,
            percentile=percentile,
            requests=requests,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            max_rps=settings["max_rps"],
            start_rps=settings["start_rps"],
            progress=not args.json,
        )
    )
    if args.json:
        print(
            json.dumps(
                {
                    "endpoint": endpoint.describe(),
                    "slo": asdict(slo),
                    "percentile": percentile,
                    "verdict": found.describe(),
                    "max_rps": found.max_rps,
                    "first_miss_rps": found.first_miss_rps,
                    "points": found.rows(),
                },
                indent=2,
                default=str,
            )
        )
    else:
        for p in found.points:
            ttft = f"{p.ttft_ms:,.0f}" if p.ttft_ms is not None else "-"
            tpot = f"{p.tpot_ms:,.1f}" if p.tpot_ms is not None else "-"
            print(
                f"{p.rate_rps:>7g} req/s  done {p.achieved_rps:>6.2f}/s  TTFT p{percentile:g} {ttft:>7} ms  TPOT {tpot:>6} ms  {p.why}"
            )
        print(found.describe())
    return 0 if found.max_rps is not None else 1


def _workload(args: argparse.Namespace, rate: float | None) -> dict:
    """The requests to send, checked (one line naming a bad value): bench()'s workload arguments."""
    from ..bench import check_turns
    from ..errors import positive_int, positive_number

    w: dict[str, Any] = {
        "requests": positive_int("--requests", args.requests, maximum=1_000_000),
        "prompt_tokens": positive_int("--prompt-tokens", args.prompt_tokens, maximum=1_000_000),
        "max_tokens": positive_int("--max-tokens", args.max_tokens, maximum=1_000_000),
        "shared_prefix_tokens": positive_int("--shared-prefix-tokens", args.shared_prefix_tokens, minimum=0, maximum=1_000_000),
        "prefix_groups": positive_int("--prefix-groups", args.prefix_groups, maximum=1_000),
        "turns": positive_int("--turns", args.turns, maximum=1_000),
    }
    if args.lengths is not None:  # checked before any engine starts: the name, the scale
        from ..lengths import length_distribution

        length_distribution(args.lengths)
        w |= {"lengths": args.lengths, "length_scale": positive_number("--length-scale", args.length_scale)}
    check_turns(w["turns"], rate, w["shared_prefix_tokens"], w.get("lengths"))
    return w


def _show_vllm_result(args: argparse.Namespace) -> int:
    """A `vllm bench serve --save-result` file in this command's own table (or JSON): vLLM's client beside the labs'."""
    from ..vllm_interop import read_bench_result

    row = read_bench_result(args.import_vllm_result)
    client, model = row.pop("client"), row.pop("model")
    out = {"endpoint": f"{client} ({model})", "settings": {"file": args.import_vllm_result}, "results": [row]}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(f"{out['endpoint']}: {args.import_vllm_result}")
        _print_table([row])
    return 0


def _print_table(rows: list[dict]) -> None:
    """One line per load point: completions, throughput (tokens/s) and the latency percentiles in ms."""
    print(
        f"{'conc':>5} {'rate':>6} {'ok':>4} {'fail':>4} {'tok/s':>8} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>7} {'ITL p50':>8}"
    )

    def f(v, w=8):
        return f"{v:>{w}.1f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>{w}}"

    for r in rows:
        print(
            f"{r['concurrency'] or '-'!s:>5} {r['request_rate'] or '-'!s:>6} {r['completed']:>4} {r['failed']:>4} "
            f"{f(r['output_throughput'])} {f(r['p50_ttft_ms'], 9)} {f(r['p99_ttft_ms'])} {f(r['p50_tpot_ms'], 9)} "
            f"{f(r['p99_tpot_ms'], 7)} {f(r['p50_itl_ms'])}"
        )
    for r in rows:
        for error, count in (r["errors"] or {}).items():
            print(f"  {count} failed: {error}")


def _level(result) -> str:
    return (
        f"c={result.settings['concurrency']}"
        if result.settings.get("concurrency")
        else f"rate={result.settings.get('request_rate')}/s"
    )


def _print_intervals(intervals: list[dict], repeats: int) -> None:
    """Per level: each metric over all runs, with its 95% interval from resampling whole runs."""
    if intervals:
        print(f"over {repeats} runs per level, 95% intervals from resampling whole runs (a run's requests share its moment):")
    for row in intervals:
        shown = [
            f"{name} {point:,.1f} [{low:,.1f}, {high:,.1f}]"
            for name, (point, low, high) in row.items()
            if name != "level" and point is not None and low is not None
        ]
        print(f"  {row['level']}: " + "; ".join(shown))


def _save(out_path, out: dict, results) -> None:
    """The summary JSON at out_path, and each load point's records beside it (<stem>-c<N> or <stem>-rate)."""
    from ..errors import ResultsNotSaved

    try:
        out_path.write_text(json.dumps(out, indent=2, default=str))
        for r in results:
            point = "c" + str(r.settings["concurrency"]) if r.settings["concurrency"] else "rate"
            point += f"-run{r.settings['repeat'] + 1}" if out["settings"]["repeats"] > 1 else ""
            r.save(out_path.with_name(f"{out_path.stem}-{point}"))
    except OSError as exc:
        raise ResultsNotSaved(f"{out_path}: {exc.strerror or exc}; the results are shown above, not saved") from None


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="TTFT, TPOT, ITL and throughput of an OpenAI-compatible endpoint")
    add_target_arguments(
        p,
        endpoint_help="local (start the embedded engine), taotoken, or vllm (localhost:8000)",
        model_help="model id (default: the endpoint's, or the first it lists)",
    )
    p.add_argument("--concurrency", help="comma-separated levels, closed loop (default 1)")
    p.add_argument("--rate", help="requests per second, open loop (Poisson arrivals)")
    p.add_argument("--requests", default=16, help="requests per level (default 16)")
    p.add_argument("--prompt-tokens", default=128, help="prompt length in tokens (default 128)")
    p.add_argument("--max-tokens", default=64, help="output tokens per request (default 64)")
    p.add_argument("--shared-prefix-tokens", default=0, help="a system prompt of this many tokens before each prompt")
    p.add_argument("--prefix-groups", default=1, help="with --shared-prefix-tokens: that many system prompts, in turn")
    p.add_argument(
        "--lengths", help="draw each request's prompt and output lengths from a recorded trace (azure-conv-2023, azure-code-2023)"
    )
    p.add_argument("--length-scale", default=1.0, help="with --lengths: multiply both lengths (0.25 for a CPU run; default 1)")
    p.add_argument(
        "--turns",
        default=1,
        help="questions per conversation (default 1); 2 or more: --requests conversations, each turn "
        "sent with the conversation so far (closed loop)",
    )
    p.add_argument("--engine", default="auto", help="for --endpoint local: auto, llamacpp or vllm")
    p.add_argument(
        "--repeats", default=1, help="runs per level (default 1); 2 or more add 95%% intervals from resampling whole runs"
    )
    p.add_argument("--out", help="write results: FILE.json plus one CSV of requests per level")
    p.add_argument("--json", action="store_true")
    p.add_argument("--slo-capacity", action="store_true", help="search the highest open-loop rate meeting the SLO below")
    p.add_argument("--slo-ttft-ms", help="with --slo-capacity: TTFT limit (ms, counted from the scheduled send)")
    p.add_argument("--slo-tpot-ms", help="with --slo-capacity: TPOT limit (ms)")
    p.add_argument("--percentile", default=90, help="with --slo-capacity: 50, 90, 95 or 99 (default 90)")
    p.add_argument("--start-rate", default=0.5, help="with --slo-capacity: the first rate tried (req/s, default 0.5)")
    p.add_argument("--max-rate", default=64, help="with --slo-capacity: the highest rate to try (req/s, default 64)")
    p.add_argument(
        "--import-vllm-result",
        metavar="FILE",
        help="show a `vllm bench serve --save-result` file in this table instead of measuring",
    )
    p.set_defaults(func=run)
