"""Quality of a model variant, measured: exact teacher-forced log-probabilities of a fixed text.

Each engine produces Scores its own way (Engine.score: llama.cpp forces the tokens with a grammar,
vLLM reports prompt_logprobs). From them: mean NLL (nats/token), perplexity = exp(NLL), and agreement
with a reference variant: top-1 agreement, mean |Δ log-prob|, and the length of the identical greedy prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Scores:
    token_ids: list[int]  # the scored text's tokens (BOS excluded)
    logprobs: np.ndarray  # log p(token_i | BOS, tokens_<i), natural log
    top1_ids: list[int]  # the model's own most likely token at each position

    @property
    def nll(self) -> float:
        return float(-self.logprobs.mean())

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    @property
    def top1_accuracy(self) -> float:
        return float(np.mean([a == b for a, b in zip(self.top1_ids, self.token_ids, strict=True)]))


def identical_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def agreement(reference: Scores, other: Scores) -> dict[str, float]:
    """How closely `other` follows `reference` on the same text."""
    return {
        "delta_nll": other.nll - reference.nll,
        "top1_agreement": float(np.mean([a == b for a, b in zip(reference.top1_ids, other.top1_ids, strict=True)])),
        "mean_abs_delta_logprob": float(np.mean(np.abs(reference.logprobs - other.logprobs))),
    }
