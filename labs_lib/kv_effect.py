"""What the KV cache buys, measured: the same tokens generated with the cache, and one request
per token with prompt caching off (every step reruns the whole forward pass over the context).

Uses llama.cpp's native /completion API (token ids in, token ids out): an engine that serves token ids
(Engine.serves_token_ids), the lab's own or one started for it (token_id_engine).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from itertools import pairwise

import httpx
import pandas as pd

from .engines import KINDS, Engine, EngineConfig, engine_class, make_engine
from .engines.llamacpp_api import LlamaCppAPI
from .progress import bar as tqdm


def _stream_tokens(api: LlamaCppAPI, client: httpx.Client, prompt_ids: list[int], n_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and the time (s after sending) each arrived, with the KV cache."""
    body = {
        "prompt": prompt_ids,
        "n_predict": n_tokens,
        "temperature": 0,
        "return_tokens": True,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    tokens, times = [], []
    for t, chunk in api.stream_completion(body, client):
        if chunk.get("tokens"):
            tokens.extend(chunk["tokens"])
            times.append(t)
    return tokens, times


def token_id_engine(server: Engine | None, stack: ExitStack, ctx: int = 2048) -> Engine:
    """An engine for cache_on_off: the lab's own when it serves token ids, else the first kind that does, started
    with a `ctx`-token context on `stack` (so it stops with the lab's other engines)."""
    if server is not None and server.serves_token_ids:
        return server
    kind = next(k for k in KINDS if engine_class(k).serves_token_ids)
    return stack.enter_context(make_engine(kind, EngineConfig(ctx=ctx)))


def cache_on_off(
    root_url: str, prompt: str, n_tokens: int, *, headers: dict | None = None, progress: bool = True
) -> pd.DataFrame:
    """Per-token cost (ms) at each context length, with and without the KV cache.

    Columns: context_tokens, token, with_cache_ms (the stream's gap before this token; the first is
    the prefill), without_cache_ms (a 1-token request over the whole context, client-side),
    without_cache_server_ms (the server's prompt time for it), same_token."""
    api = LlamaCppAPI(root_url, headers)
    prompt_ids = api.tokenize(prompt)
    with httpx.Client(timeout=600, trust_env=False, headers={"Connection": "close"}) as client:
        generated, times = _stream_tokens(api, client, prompt_ids, n_tokens)
        gaps = [times[0]] + [b - a for a, b in pairwise(times)]
        rows = []
        for i in tqdm(range(len(generated)), desc="no cache", unit="tok", disable=not progress, leave=False):
            context = prompt_ids + generated[:i]
            start = time.perf_counter()
            out = api.completion(
                {"prompt": context, "n_predict": 1, "temperature": 0, "cache_prompt": False, "return_tokens": True}
            )
            elapsed = time.perf_counter() - start
            rows.append(
                {
                    "context_tokens": len(context),
                    "token": generated[i],
                    "with_cache_ms": gaps[i] * 1000,
                    "without_cache_ms": elapsed * 1000,
                    "without_cache_server_ms": out["timings"]["prompt_ms"],
                    "same_token": (out.get("tokens") or [None])[0] == generated[i],
                }
            )
    return pd.DataFrame(rows)
