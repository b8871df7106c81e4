"""Lab 04's build-its: perplexity from log-probabilities, and a lower bound of the KL divergence from top-k
log-probabilities."""

from __future__ import annotations

import math

import numpy as np

from ..quality import Scores, kl_lower_bound
from .base import Case, Core


def perplexity(logprobs: list[float]) -> float:
    """exp of the mean negative log-likelihood per token; logprobs are natural-log probabilities of each token."""
    return math.exp(-sum(logprobs) / len(logprobs))


def _perplexity_reference(logprobs: list[float]) -> float:
    """quality.Scores.perplexity, the figure lab 04 reports for each variant."""
    ids = list(range(len(logprobs)))
    return Scores(token_ids=ids, logprobs=np.asarray(logprobs, dtype=float), top1_ids=ids).perplexity


def _perplexity_cases() -> list[Case]:
    ln = math.log
    return [
        Case(([ln(0.5)],), "one token at p = 0.5", "perplexity = exp(-log p) for one token, natural logs: p = 0.5 is a fair coin's 2"),
        Case(([ln(0.5)] * 4,), "four tokens at p = 0.5", "the mean over tokens, not the sum: the text's length must not change the figure (still 2)"),
        Case(([ln(0.25), 0.0],), "p = 0.25, then a certain token", "a geometric mean: exp of the mean NLL (2), not the mean of 1/p (2.5)"),
        Case(([ln(0.9)] * 3,), "a confident model (p = 0.9)", "a model sure of every token tends to 1; no model goes below it"),
        Case(([ln(1e-9), 0.0],), "one very unlikely token among two", "one token the model thought nearly impossible dominates: exp(20.7 / 2)"),
    ]  # fmt: skip


def _kl_cases() -> list[Case]:
    ln = math.log
    return [
        Case(({0: ln(0.7), 1: ln(0.2)}, {0: ln(0.7), 1: ln(0.2)}), "the same distribution twice", "KL(P || P) = 0"),
        Case(({0: ln(0.9), 1: ln(0.1)}, {0: ln(0.5), 1: ln(0.5)}), "the whole distribution reported, P sure and Q unsure", "KL(P || Q) = sum p (log p - log q): weighted by the reference P, not by Q"),
        Case(({0: ln(0.7), 1: ln(0.2)}, {0: ln(0.5), 1: ln(0.3)}), "two tokens reported by both", "the inputs are log-probabilities; what neither reported is one 'rest' bucket, 1 - sum p against 1 - sum q"),
        Case(({0: ln(0.9)}, {0: ln(0.6), 2: ln(0.3)}), "a token only Q reported", "only tokens both reported keep their own terms; token 2 goes in the rest bucket"),
        Case(({0: 0.0}, {0: ln(0.8)}), "P puts all its mass on one token", "a rest of 0 adds nothing (0 log 0 = 0)"),
    ]  # fmt: skip


CORES: dict[str, Core] = {
    "perplexity": Core(_perplexity_reference, _perplexity_cases, perplexity, "import math"),
    "kl_lower_bound": Core(kl_lower_bound, _kl_cases, kl_lower_bound, "import math\n\nimport numpy as np"),
}
