"""Multi-turn conversations (load.run_conversations) on one engine, its prefix cache on and off: per turn, the
prompt the server reads (it grows: every earlier question and answer) and the mean TTFT; in all, the prompt tokens
the engine served from its cache (its own counters). llama.cpp turns caching off per request (cache_prompt false,
the same engine); vLLM by a second start (--no-enable-prefix-caching).

    .venv/bin/python bench/multi_turn.py llamacpp      # or vllm (make setup-vllm); ~1 min, ~3 min
"""

from __future__ import annotations

import statistics
import sys

from labs_lib.endpoints import endpoint_for
from labs_lib.engines import EngineConfig, make_engine
from labs_lib.engines.metrics import delta, scrape, token_counts
from labs_lib.load import run_blocking, run_conversations, warm_up
from labs_lib.prompts import PromptFactory
from labs_lib.timing import RequestSpec

CONVERSATIONS, TURNS, QUESTION_TOKENS, ANSWER_TOKENS, CONCURRENCY = 4, 4, 64, 32, 2


def measure(engine, label: str, extra: dict | None = None, seed: int = 0) -> None:
    endpoint = endpoint_for(engine)
    run_blocking(warm_up(endpoint))
    asked = PromptFactory(engine.prompt_tokenizer(), seed=seed).conversations(CONVERSATIONS, TURNS, QUESTION_TOKENS)
    talks = [[RequestSpec(q, ANSWER_TOKENS, ignore_eos=True, extra=extra or {}) for q in c] for c in asked]
    before = scrape(engine.root_url, endpoint.headers())
    result = run_blocking(run_conversations(endpoint, talks, concurrency=CONCURRENCY, progress=False))
    counts = token_counts(delta(before, scrape(engine.root_url, endpoint.headers())), engine)
    turns = []
    for t in range(TURNS):
        done = [r for r in result.records if r.turn == t and r.ok]
        prompt = statistics.mean(r.prompt_tokens or 0 for r in done)
        turns.append(f"turn {t + 1}: {prompt:.0f} tok, TTFT {statistics.mean(r.ttft_ms or 0 for r in done):.0f} ms")
    print(
        f"{engine.kind}, {label}: {result.summary.completed}/{CONVERSATIONS * TURNS} turns; "
        f"{counts['prompt_tokens_cached']:,} of {counts['prompt_tokens']:,} prompt tokens from the cache; " + "; ".join(turns),
        flush=True,
    )


def main(kind: str) -> None:
    if kind == "llamacpp":
        with make_engine("llamacpp", EngineConfig(ctx=4096, parallel=CONCURRENCY)) as engine:
            measure(engine, "caching on")
            measure(engine, "cache_prompt false", engine.uncached_body, seed=1)
    elif kind == "vllm":
        for on in (True, False):
            config = EngineConfig(max_model_len=2048, parallel=CONCURRENCY, kv_cache_gib=0.25, prompt_cache=on)
            with make_engine("vllm", config) as engine:
                measure(engine, "caching on" if on else "--no-enable-prefix-caching")
    else:
        print(f"error: engine {kind!r} is not allowed; allowed: llamacpp, vllm", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "llamacpp")
