"""The decode roofline: one decode step reads every weight and the whole KV cache once, so
tokens/s per sequence <= memory bandwidth / bytes read per step."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bandwidth:
    bytes_per_s: float  # best of the repeats
    median_bytes_per_s: float
    buffer_bytes: int
    repeats: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9


def measure_bandwidth(buffer_mib: int = 256, repeats: int = 7) -> Bandwidth:
    """Copy bandwidth of this machine: bytes read + bytes written per second (numpy copy, one core
    or more as numpy uses them). Buffers far larger than the caches, so this is DRAM speed."""
    n = buffer_mib * 2**20 // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        rates.append(2 * src.nbytes / (time.perf_counter() - t))
    return Bandwidth(max(rates), float(np.median(rates)), src.nbytes, repeats)


def decode_bytes_per_step(weight_bytes: int, kv_bytes_per_token: int, context_tokens: int, batch: int = 1) -> int:
    """Bytes one decode step must read: every weight once, plus each sequence's KV cache so far."""
    return weight_bytes + batch * kv_bytes_per_token * context_tokens


def bound_tokens_per_s(bandwidth_bytes_per_s: float, bytes_per_step: int, batch: int = 1) -> float:
    """Upper bound on output tokens/s (all sequences together) when decode is bandwidth-bound."""
    return bandwidth_bytes_per_s / bytes_per_step * batch
