"""Is the harness true? Its TPOT and TTFT against the embedded engine's own per-request timings, and
its token counts against the engine's /metrics counters, for the same requests.

llama.cpp reports per request (the `timings` object of the last streamed chunk) `prompt_ms` (prompt
processing, up to the first sampled token) and `predicted_ms` over `predicted_n` generated tokens,
measured from the first token to the last: `predicted_ms / (predicted_n - 1)` is the server's TPOT.
Goals: median harness TPOT / server TPOT within 5% of 1 at each concurrency; TTFT overhead (client
TTFT - server prompt_ms) reported in ms; prompt and output tokens equal to the /metrics deltas.

    .venv/bin/python bench/harness_fidelity.py [--requests 8] [--max-tokens 64] [--prompt-tokens 128]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig, make_engine
from labs_lib.engines.metrics import delta, scrape, token_counts
from labs_lib.load import run_blocking, run_load, warm_up
from labs_lib.prompts import PromptFactory, engine_tokenizer
from labs_lib.timing import RequestSpec

from _common import header, verdict

TPOT_TOLERANCE = 0.05


def spread(values: list[float]) -> str:
    return f"median {np.median(values):.3f} (p10 {np.percentile(values, 10):.3f}, p90 {np.percentile(values, 90):.3f}, n={len(values)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8, help="requests per concurrency level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--levels", default="1,4", help="concurrency levels (the engine gets as many slots as the largest)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    header("Harness fidelity: client timings and counts against the engine's own")
    checks: dict[str, bool] = {}
    config = EngineConfig(parallel=max(levels), ctx=max(levels) * (args.prompt_tokens + args.max_tokens + 64))
    with make_engine("llamacpp", config).start() as engine:
        endpoint = endpoint_for(engine)
        factory = PromptFactory(engine_tokenizer(engine.root_url), seed=7)
        run_blocking(warm_up(endpoint, 2))
        print(f"engine: {engine!r}")
        for level in levels:
            # cache_prompt off: every request's prompt is processed, so prompt_ms is a real prefill
            specs = [
                RequestSpec(p, args.max_tokens, ignore_eos=True, extra={"cache_prompt": False})
                for p in factory.prompts(args.requests, args.prompt_tokens)
            ]
            before = scrape(engine.root_url)
            run = run_blocking(run_load(endpoint, specs, concurrency=level, progress=False))
            counted = token_counts(delta(before, scrape(engine.root_url)), "llamacpp")
            ok = [r for r in run.records if r.ok]
            timed = [r for r in ok if r.tpot_ms and r.server_decode_ms and (r.server_decode_tokens or 0) > 1]
            ratios = [r.tpot_ms / (r.server_decode_ms / (r.server_decode_tokens - 1)) for r in timed]
            overhead_ms = [r.ttft_ms - r.server_prompt_ms for r in timed if r.server_prompt_ms is not None]
            harness_prompt = sum(r.prompt_tokens or 0 for r in ok)
            harness_output = sum(r.output_tokens or 0 for r in ok)
            print(
                f"\nconcurrency {level}: {len(ok)}/{len(run.records)} ok, {args.prompt_tokens}-token prompts, "
                f"{args.max_tokens} output tokens each"
            )
            if not ratios:
                print("  no request carried the server's timings")
                checks[f"c={level}: server timings present"] = False
                continue
            print(
                f"  TPOT harness / server: {spread(ratios)}; harness median TPOT {np.median([r.tpot_ms for r in timed]):.2f} ms"
            )
            print(
                f"  TTFT overhead (client TTFT - server prompt_ms), ms: {spread(overhead_ms)}; "
                f"median server prompt_ms {np.median([r.server_prompt_ms for r in timed]):.1f}"
            )
            print(
                f"  tokens, harness vs /metrics: prompt {harness_prompt} vs {counted['prompt_tokens']}, "
                f"output {harness_output} vs {counted['output_tokens']}"
            )
            checks[f"c={level}: median TPOT ratio within {TPOT_TOLERANCE:.0%} of 1"] = (
                abs(np.median(ratios) - 1) <= TPOT_TOLERANCE
            )
            checks[f"c={level}: token counts equal /metrics"] = (harness_prompt, harness_output) == (
                counted["prompt_tokens"],
                counted["output_tokens"],
            )
            checks[f"c={level}: every request succeeded"] = len(ok) == len(run.records)
    print()
    return verdict(checks)


if __name__ == "__main__":
    sys.exit(main())
