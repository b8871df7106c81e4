"""One causal attention head in numpy, decoded token by token with and without a KV cache: the work the cache
saves, made visible in the kernel before lab 02 measures it on an engine.

A decode step turns the newest token's vector x_t (d_model values) into its attention output. With a cache,
the step projects only x_t's key and value (two d x d products), appends them, and attends x_t's query over
the cached keys: its cost grows with the position only through the attention itself (n x d). Without one,
every step projects the keys and values of the whole prefix again (n x d x d): n steps cost n^2 / 2 of them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Cache = dict  # "k", "v": (max_tokens, d_model) arrays, row i token i's key / value; "length": rows filled
DecodeStep = Callable[[np.ndarray, Cache, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TinyHead:
    """The head's projections, (d_model, d_model) each, float32."""

    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray

    @classmethod
    def random(cls, d_model: int, seed: int = 0) -> TinyHead:
        rng = np.random.default_rng(seed)
        wq, wk, wv = (rng.standard_normal((d_model, d_model), dtype=np.float32) / math.sqrt(d_model) for _ in range(3))
        return cls(wq, wk, wv)


def tokens(n_tokens: int, d_model: int, seed: int = 1, scale: float = 1.0) -> np.ndarray:
    """n_tokens random token vectors (n_tokens, d_model), float32."""
    return (np.random.default_rng(seed).standard_normal((n_tokens, d_model)) * scale).astype(np.float32)


def attention(x: np.ndarray, head: TinyHead, *, causal: bool = True) -> np.ndarray:
    """Every position's output at once: each query attends to its own and earlier keys (causal), or to all of them."""
    q, k, v = x @ head.wq, x @ head.wk, x @ head.wv
    scores = q @ k.T / math.sqrt(x.shape[1])
    if causal:
        scores[np.triu_indices(len(x), 1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v


def causal_attention(x: np.ndarray, head: TinyHead) -> np.ndarray:
    """Causal attention over the whole sequence: what decoding token by token must reproduce."""
    return attention(x, head)


def new_cache(max_tokens: int, d_model: int) -> Cache:
    """An empty KV cache with room for max_tokens tokens, preallocated as an engine's is."""
    return {"k": np.zeros((max_tokens, d_model), np.float32), "v": np.zeros((max_tokens, d_model), np.float32), "length": 0}


def decode_step(x_t: np.ndarray, cache: dict, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray) -> np.ndarray:
    """One decode step with a KV cache: write the new token's key (x_t @ wk) and value (x_t @ wv) in the cache's
    next row, then attend its query (x_t @ wq) over every cached key: softmax(K q / sqrt(d)) @ V, the largest
    score subtracted before exp (the same softmax, without overflow)."""
    n = cache["length"]
    cache["k"][n], cache["v"][n] = x_t @ wk, x_t @ wv
    cache["length"] = n + 1
    keys, values = cache["k"][: n + 1], cache["v"][: n + 1]
    scores = keys @ (x_t @ wq) / math.sqrt(len(x_t))
    weights = np.exp(scores - scores.max())
    return (weights / weights.sum()) @ values


def decode_step_uncached(prefix: np.ndarray, head: TinyHead) -> np.ndarray:
    """One decode step without a cache: the keys and values of the whole prefix projected again."""
    keys, values = prefix @ head.wk, prefix @ head.wv
    scores = keys @ (prefix[-1] @ head.wq) / math.sqrt(prefix.shape[1])
    weights = np.exp(scores - scores.max())
    return (weights / weights.sum()) @ values


def decode(step: DecodeStep, x: np.ndarray, head: TinyHead) -> tuple[np.ndarray, list[int]]:
    """Decode x token by token with `step` from an empty cache: the outputs (n_tokens, d_model), and the keys
    the cache held after each step (its "length")."""
    cache = new_cache(*x.shape)
    outputs, held = [], []
    for x_t in x:
        outputs.append(np.asarray(step(x_t, cache, head.wq, head.wk, head.wv), dtype=np.float32))
        held.append(int(cache["length"]))
    return np.stack(outputs), held


@dataclass(frozen=True)
class DecodeTiming:
    """Milliseconds of each decode step by position (wall clock, this kernel), with and without a cache."""

    cached_ms: list[float]
    uncached_ms: list[float]

    @property
    def total_ratio(self) -> float:
        """All uncached steps' time / all cached steps' time."""
        return sum(self.uncached_ms) / sum(self.cached_ms)


def time_decoding(step: DecodeStep, n_tokens: int, d_model: int, seed: int = 0) -> DecodeTiming:
    """Time every step of decoding n_tokens random tokens, with `step` and its cache, then without a cache."""
    head, x = TinyHead.random(d_model, seed), tokens(n_tokens, d_model, seed + 1)
    cache = new_cache(n_tokens, d_model)
    cached, uncached = [], []
    for i in range(n_tokens):
        start = time.perf_counter()
        step(x[i], cache, head.wq, head.wk, head.wv)
        cached.append((time.perf_counter() - start) * 1000)
    for i in range(n_tokens):
        start = time.perf_counter()
        decode_step_uncached(x[: i + 1], head)
        uncached.append((time.perf_counter() - start) * 1000)
    return DecodeTiming(cached, uncached)
