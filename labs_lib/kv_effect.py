"""What the KV cache buys, measured: the same tokens generated with the cache, and one request
per token with prompt caching off (every step recomputes K and V for the whole context).

Uses llama.cpp's native /completion API (token ids in, token ids out), so it runs on the
embedded engine.
"""

from __future__ import annotations

import json
import time
from itertools import pairwise

import httpx
import pandas as pd
from tqdm.auto import tqdm

from .prompts import token_ids


def _stream_tokens(client: httpx.Client, root_url: str, prompt_ids: list[int], n_tokens: int, headers: dict) -> tuple[list[int], list[float]]:
    """Greedy tokens and the time (s after sending) each arrived, with the KV cache."""
    body = {"prompt": prompt_ids, "n_predict": n_tokens, "temperature": 0, "stream": True, "return_tokens": True,
            "cache_prompt": False, "ignore_eos": True}
    tokens, times = [], []
    start = time.perf_counter()
    with client.stream("POST", f"{root_url}/completion", json=body, headers=headers) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data:"):
                chunk = json.loads(line[5:])
                if chunk.get("tokens"):
                    tokens.extend(chunk["tokens"])
                    times.append(time.perf_counter() - start)
    return tokens, times


def cache_on_off(root_url: str, prompt: str, n_tokens: int, *, headers: dict | None = None, progress: bool = True) -> pd.DataFrame:
    """Per-token cost (ms) at each context length, with and without the KV cache.

    Columns: context_tokens, token, with_cache_ms (the stream's gap before this token; the first is
    the prefill), without_cache_ms (a 1-token request over the whole context, client-side),
    without_cache_server_ms (the server's prompt time for it), same_token."""
    headers = headers or {}
    prompt_ids = token_ids(root_url, prompt, headers)
    with httpx.Client(timeout=600, trust_env=False, headers={"Connection": "close"}) as client:
        generated, times = _stream_tokens(client, root_url, prompt_ids, n_tokens, headers)
        gaps = [times[0]] + [b - a for a, b in pairwise(times)]
        rows = []
        for i in tqdm(range(len(generated)), desc="no cache", unit="tok", disable=not progress, leave=False):
            context = prompt_ids + generated[:i]
            body = {"prompt": context, "n_predict": 1, "temperature": 0, "cache_prompt": False, "return_tokens": True}
            start = time.perf_counter()
            resp = client.post(f"{root_url}/completion", json=body, headers=headers)
            elapsed = time.perf_counter() - start
            resp.raise_for_status()
            out = resp.json()
            rows.append({"context_tokens": len(context), "token": generated[i], "with_cache_ms": gaps[i] * 1000,
                         "without_cache_ms": elapsed * 1000, "without_cache_server_ms": out["timings"]["prompt_ms"],
                         "same_token": (out.get("tokens") or [None])[0] == generated[i]})
    return pd.DataFrame(rows)
